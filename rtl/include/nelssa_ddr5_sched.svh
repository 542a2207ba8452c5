// Helpers of the DDR5 sub-channel controller (rtl/mem/nelssa_ddr5_ctrl.sv) and its two
// schedulers (nelssa_ddr5_sched_tries.sv, nelssa_ddr5_sched_parallel.sv).
//
// Macros, not functions: Verilator lowers each function call to copies through module-level
// temporaries, which cost more than these one-line expressions themselves. They name what the
// including module declares: the types tck_t (TckW bits) and qmask_t (QUEUE_W bits) and the
// localparams QUEUE_W and HALF_M1; NELSSA_SCRUB also now, PAST and HORIZON; NELSSA_PLACE the
// temporaries d, ok, pk and busy and the cycle's first tCK bus.lo (nelssa_ddr5_sched_if). (One
// compilation unit holds all the files, so the macros are defined once, here, and stay defined.)
`ifndef NELSSA_DDR5_SCHED_SVH
`define NELSSA_DDR5_SCHED_SVH

// a is after b (wrapping tCK): their difference is 1 to 2^(TckW-1) - 1. Times compare through
// unsigned differences throughout: a signed compare of a narrow value costs Verilator a sign
// extension per operand.
`define NELSSA_AFTER(a, b) (tck_t'((a) - (b) - tck_t'(1)) < tck_t'(HALF_M1))
`define NELSSA_TMAX(a, b) (`NELSSA_AFTER(a, b) ? (a) : (b))

// position of the lowest set bit of a 32-bit mask (not zero): for synthesis a count of the bits
// below it; for simulation a de Bruijn multiply and a table (nelssa_ddr5_pkg::DE_BRUIJN), a few
// instructions in a Verilated model where a population count takes a few dozen
`define NELSSA_LOWEST_POP(m) 5'($countones((m) ^ ((m) - 1)) - 1)
`define NELSSA_LOWEST_DB(m) DE_BRUIJN[5'(32'(((m) & (~(m) + 32'd1)) * 32'h077CB531) >> 27)]

// a mask without position p, the positions above it moved down by one
`define NELSSA_DROP(m, p) \
  (((m) & ((qmask_t'(1) << (p)) - 1)) | (((m) >> 1) & ~((qmask_t'(1) << (p)) - 1)))
// the value that five bit planes pl[0..4] hold at position p
`define NELSSA_AT(pl, p) {pl[4][p], pl[3][p], pl[2][p], pl[1][p], pl[0][p]}
// the positions at which five bit planes hold v
`define NELSSA_HOLDING(pl, v) \
  (~(pl[0] ^ {QUEUE_W{v[0]}}) & ~(pl[1] ^ {QUEUE_W{v[1]}}) & ~(pl[2] ^ {QUEUE_W{v[2]}}) & \
   ~(pl[3] ^ {QUEUE_W{v[3]}}) & ~(pl[4] ^ {QUEUE_W{v[4]}}))
// the positions at which bank planes 2..4 hold bank group g
`define NELSSA_HOLDING_GROUP(pl, g) \
  (~(pl[2] ^ {QUEUE_W{g[0]}}) & ~(pl[3] ^ {QUEUE_W{g[1]}}) & ~(pl[4] ^ {QUEUE_W{g[2]}}))
// the positions of a queue of n entries
`define NELSSA_LIVE(n) ((n[5]) ? '1 : (qmask_t'(1) << n[4:0]) - 1)
// the first offset set in a mask of fitting offsets 0..3
`define NELSSA_FIRST(ok) (ok[0] ? 2'd0 : ok[1] ? 2'd1 : ok[2] ? 2'd2 : 2'd3)
// a rule register pulled up to now - Horizon when it lies further behind
// (it lies Horizon + 1 to 2^19 - 1 behind)
`define NELSSA_SCRUB(v) \
  ((tck_t'(now - (v) - tck_t'(HORIZON + 1)) < tck_t'(HORIZON - 1)) ? now - PAST : (v))

// {found, k}: the first offset k in 0..3 of this cycle at or after `earliest` whose CA slots
// (two if `two`) are free in `busy`; into pk, through the temporaries d and ok
`define NELSSA_PLACE(earliest, two) \
  begin \
    d = tck_t'((earliest) - bus.lo); \
    ok = ~busy[3:0] & ((two) ? ~busy[4:1] : 4'hf); \
    if (!d[TckW-1]) begin \
      if (d > 3) ok = '0; \
      else if (d != 0) ok &= 4'hf << d[1:0]; \
    end \
    pk = {ok != '0, `NELSSA_FIRST(ok)}; \
  end

`endif
