// Simulation top for memory-subsystem measurements: one sub-channel controller watched by its
// always-on timing checker, with the request port and the served commands brought out for the
// C++ harness (hw/sim/ddr5_harness.cpp). The harness builds the whole subsystem from one model
// per sub-channel: the sub-channels share no state (the address map that spreads device
// addresses over them runs in the harness's caller, hw/model/ddr5_addr.py), and one model class
// for all eight keeps a single copy of the code hot, where one top with eight instances
// generates eight.
//
// One model evaluation per cycle: the harness toggles clk_i once per cycle, with the cycle's
// request, and every change of clk_i makes a rising edge of the controller's clock (which
// falls again within the same evaluation). With an ordinary clock each cycle would take two
// evaluations, one per level, and an evaluation's fixed cost in Verilator is about a tenth of a
// sub-channel cycle. Whether the request was taken at the edge comes back on req_taken_o.
module nelssa_ddr5_bench_top
  import nelssa_ddr5_pkg::*;
#(
  parameter int unsigned PresetId      = 0,        // index into hw/model/ddr5_timing.PRESETS
  parameter int unsigned CheckPresetId = PresetId, // the preset the checker enforces
  parameter int unsigned TckW          = 32        // the controller's tCK register width (20
                                                   // to 32; 20 makes it wrap within tests)
) (
  input  logic        clk_i,          // toggled once per cycle
  input  logic        rst_ni,
  input  logic        req_valid_i,
  output logic        req_ready_o,
  output logic        req_taken_o,    // the request presented with the last edge was taken
  input  logic        req_write_i,
  input  logic [2:0]  req_bg_i,
  input  logic [1:0]  req_bank_i,
  input  logic [15:0] req_row_i,
  input  logic [5:0]  req_col_i,
  output logic        served_o,       // a READ or WRITE issued this cycle
  output logic [63:0] served_tck_o,   // its tCK
  output logic        served_write_o, // it is a WRITE
  output logic [31:0] violations_o    // timing violations so far
);
  localparam timing_t T = preset_timing(PresetId);

  logic clk_seen_q;  // clk_i at the last edge
  logic clk;         // rises at every change of clk_i
  assign clk = clk_i ^ clk_seen_q;

  always_ff @(posedge clk or negedge rst_ni) begin
    if (!rst_ni) begin
      clk_seen_q  <= clk_i;
      req_taken_o <= 1'b0;
    end else begin
      clk_seen_q  <= clk_i;
      req_taken_o <= req_valid_i && req_ready_o;
    end
  end

  logic      [2:0]       cmd_valid;
  dram_cmd_e [2:0]       cmd;
  logic      [2:0][63:0] cmd_tck;
  logic      [2:0][2:0]  cmd_bg;
  logic      [2:0][1:0]  cmd_bank;
  logic      [2:0][16:0] cmd_row;
  // not needed for timing measurements
  /* verilator lint_off UNUSEDSIGNAL */
  logic [5:0]            cmd_col;
  logic [15:0]           cmd_tag;
  logic [NUM_RULES-1:0]  violation;
  /* verilator lint_on UNUSEDSIGNAL */

  // the controller's performance counters: read by the cocotb test of the controller
  // (tests/rtl/test_ddr5_ctrl.py); not brought out of the simulated memory
  /* verilator lint_off UNUSEDSIGNAL */
  ddr5_perf_t            perf;
  /* verilator lint_on UNUSEDSIGNAL */

  nelssa_ddr5_ctrl #(
    .T            (T),
    .TagW         (16),
    .TckW         (TckW),
    // the tries: the same commands as the synthesis form, 3.7 times faster in Verilator
    .ParallelSched(1'b0)
  ) u_ctrl (
    .clk_i      (clk),
    .rst_ni     (rst_ni),
    .req_valid_i(req_valid_i),
    .req_ready_o(req_ready_o),
    .req_write_i(req_write_i),
    .req_bg_i   (req_bg_i),
    .req_bank_i (req_bank_i),
    .req_row_i  (req_row_i),
    .req_col_i  (req_col_i),
    .req_tag_i  (16'd0),
    .cmd_valid_o(cmd_valid),
    .cmd_o      (cmd),
    .cmd_tck_o  (cmd_tck),
    .cmd_bg_o   (cmd_bg),
    .cmd_bank_o (cmd_bank),
    .cmd_row_o  (cmd_row),
    .cmd_col_o  (cmd_col),
    .cmd_tag_o  (cmd_tag),
    .cmd_write_o(served_write_o),
    .perf_o     (perf)
  );

  nelssa_ddr5_checker #(
    .T       (preset_timing(CheckPresetId)),
    .NumSlots(3),
    .Fatal   (1'b1)
  ) u_checker (
    .clk_i       (clk),
    .rst_ni      (rst_ni),
    .cmd_valid_i (cmd_valid),
    .cmd_i       (cmd),
    .tck_i       (cmd_tck),
    .bg_i        (cmd_bg),
    .bank_i      (cmd_bank),
    .row_i       (cmd_row),
    .violation_o (violation),
    .violations_o(violations_o)
  );

  assign served_o     = cmd_valid[0];
  assign served_tck_o = cmd_tck[0];
endmodule
