// Assertion macros of the NELSSA RTL (the pattern of lowRISC OpenTitan's prim_assert.sv).
//
// Every Verilator build compiles them with --assert (hw/sim/verilator.py ASSERT_ARGS); a failing
// one prints "[ASSERT FAILED] [<instance>] <name>" and $error stops the simulation, so a cocotb
// test or a C++ harness that trips one fails. Synthesis ignores them (yosys read_slang
// --ignore-assertions; with SYNTHESIS defined they expand to nothing).
//
// A Verilated model has two states only: NELSSA_ASSERT_KNOWN cannot fail there; it serves
// four-state simulators.
`ifndef NELSSA_ASSERT_SVH
`define NELSSA_ASSERT_SVH

`define NELSSA_STRINGIFY(x) `"x`"

`ifdef SYNTHESIS

`define NELSSA_ASSERT(name, prop, clk = clk_i, rst_n = rst_ni)
`define NELSSA_ASSERT_NEVER(name, prop, clk = clk_i, rst_n = rst_ni)
`define NELSSA_ASSERT_KNOWN(name, sig, clk = clk_i, rst_n = rst_ni)
`define NELSSA_ASSERT_ONEHOT0(name, sig, clk = clk_i, rst_n = rst_ni)
`define NELSSA_ASSERT_HOLD(name, valid, ready, payload, clk = clk_i, rst_n = rst_ni)
`define NELSSA_ASSERT_INIT(name, prop)

`else

`define NELSSA_ASSERT_ERROR(name) \
  $error("[ASSERT FAILED] [%m] %s (%s:%0d)", `NELSSA_STRINGIFY(name), `__FILE__, `__LINE__);

// prop holds at every rising edge of clk outside reset
`define NELSSA_ASSERT(name, prop, clk = clk_i, rst_n = rst_ni) \
  name: assert property (@(posedge clk) disable iff (!(rst_n)) (prop)) \
    else begin `NELSSA_ASSERT_ERROR(name) end

// prop never holds at a rising edge of clk outside reset
`define NELSSA_ASSERT_NEVER(name, prop, clk = clk_i, rst_n = rst_ni) \
  `NELSSA_ASSERT(name, !(prop), clk, rst_n)

// sig has no X or Z bit (four-state simulators only: see above)
`define NELSSA_ASSERT_KNOWN(name, sig, clk = clk_i, rst_n = rst_ni) \
  `NELSSA_ASSERT(name, !$isunknown(sig), clk, rst_n)

// at most one bit of sig set
`define NELSSA_ASSERT_ONEHOT0(name, sig, clk = clk_i, rst_n = rst_ni) \
  `NELSSA_ASSERT(name, $onehot0(sig), clk, rst_n)

// valid/ready: a valid not taken stays up in the next cycle with the same payload
`define NELSSA_ASSERT_HOLD(name, valid, ready, payload, clk = clk_i, rst_n = rst_ni) \
  name: assert property (@(posedge clk) disable iff (!(rst_n)) \
                         (valid) && !(ready) |=> (valid) && $stable(payload)) \
    else begin `NELSSA_ASSERT_ERROR(name) end

// prop holds at time zero (a check of parameters or constants a generate block cannot state)
`define NELSSA_ASSERT_INIT(name, prop) \
  initial begin : name \
    assert (prop) else begin `NELSSA_ASSERT_ERROR(name) end \
  end

`endif
`endif
