// Simulation top for memory-subsystem measurements: NumSub sub-channel controllers, each watched
// by its always-on timing checker, with their request ports and the count of served requests
// brought out for a C++ harness (hw/sim/ddr5_harness.cpp). The address map that spreads device
// addresses over the sub-channels runs in the harness's caller (hw/model/ddr5_addr.py).
module nelssa_ddr5_bench_top
  import nelssa_ddr5_pkg::*;
#(
  parameter int unsigned PresetId = 0,  // index into hw/model/ddr5_timing.PRESETS
  parameter int unsigned NumSub   = 8   // sub-channels
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  input  logic [NumSub-1:0]      req_valid_i,
  output logic [NumSub-1:0]      req_ready_o,
  input  logic [NumSub-1:0]      req_write_i,
  input  logic [NumSub-1:0][2:0] req_bg_i,
  input  logic [NumSub-1:0][1:0] req_bank_i,
  input  logic [NumSub-1:0][15:0] req_row_i,
  input  logic [NumSub-1:0][5:0] req_col_i,
  output logic [NumSub-1:0]      served_o,       // a READ or WRITE issued this cycle
  output logic [NumSub-1:0][63:0] served_tck_o,  // its tCK
  output logic [NumSub-1:0]      served_write_o, // it is a WRITE
  output logic [31:0]            violations_o    // timing violations, all sub-channels
);
  localparam timing_t T = preset_timing(PresetId);

  logic [NumSub-1:0][31:0] violations;

  for (genvar s = 0; s < NumSub; s++) begin : gen_sub
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

    nelssa_ddr5_ctrl #(
      .T   (T),
      .TagW(16)
    ) u_ctrl (
      .clk_i      (clk_i),
      .rst_ni     (rst_ni),
      .req_valid_i(req_valid_i[s]),
      .req_ready_o(req_ready_o[s]),
      .req_write_i(req_write_i[s]),
      .req_bg_i   (req_bg_i[s]),
      .req_bank_i (req_bank_i[s]),
      .req_row_i  (req_row_i[s]),
      .req_col_i  (req_col_i[s]),
      .req_tag_i  (16'd0),
      .cmd_valid_o(cmd_valid),
      .cmd_o      (cmd),
      .cmd_tck_o  (cmd_tck),
      .cmd_bg_o   (cmd_bg),
      .cmd_bank_o (cmd_bank),
      .cmd_row_o  (cmd_row),
      .cmd_col_o  (cmd_col),
      .cmd_tag_o  (cmd_tag),
      .cmd_write_o(served_write_o[s])
    );

    nelssa_ddr5_checker #(
      .T       (T),
      .NumSlots(3),
      .Fatal   (1'b1)
    ) u_checker (
      .clk_i       (clk_i),
      .rst_ni      (rst_ni),
      .cmd_valid_i (cmd_valid),
      .cmd_i       (cmd),
      .tck_i       (cmd_tck),
      .bg_i        (cmd_bg),
      .bank_i      (cmd_bank),
      .row_i       (cmd_row),
      .violation_o (violation),
      .violations_o(violations[s])
    );

    assign served_o[s]     = cmd_valid[0];
    assign served_tck_o[s] = cmd_tck[0];
  end

  always_comb begin
    violations_o = '0;
    for (int s = 0; s < NumSub; s++) violations_o += violations[s];
  end
endmodule
