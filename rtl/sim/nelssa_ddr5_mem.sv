// One simulated DDR5 sub-channel with data: the synthesizable controller (rtl/mem) in front of
// the data model and timing checker (rtl/sim). Requests carry write data; reads come back with
// their tag. For testbenches and the device's simulation build.
module nelssa_ddr5_mem
  import nelssa_ddr5_pkg::*;
#(
  parameter int unsigned PresetId = 0,   // index into hw/model/ddr5_timing.PRESETS
  parameter int unsigned SubId    = 0,   // sub-channel number
  parameter int unsigned TagW     = 16,  // request tag width
  parameter int unsigned TckW     = 32   // the controller's tCK register width (20 to 32)
) (
  input  logic            clk_i,
  input  logic            rst_ni,
  input  logic            req_valid_i,
  output logic            req_ready_o,
  input  logic            req_write_i,
  input  logic [2:0]      req_bg_i,
  input  logic [1:0]      req_bank_i,
  input  logic [15:0]     req_row_i,
  input  logic [5:0]      req_col_i,
  input  logic [TagW-1:0] req_tag_i,
  input  logic [511:0]    req_wdata_i,
  input  logic [63:0]     req_wstrb_i,
  output logic            rdata_valid_o,
  output logic [TagW-1:0] rdata_tag_o,
  output logic [511:0]    rdata_o,
  output logic            served_o,     // a READ or WRITE issued this cycle
  output logic            wdone_o,      // a WRITE issued this cycle ...
  output logic [TagW-1:0] wdone_tag_o,  // ... for this request
  output logic [31:0]     violations_o,
  output ddr5_perf_t      perf_o        // the controller's performance counters
);
  localparam timing_t T = preset_timing(PresetId);

  logic      [2:0]       cmd_valid;
  dram_cmd_e [2:0]       cmd;
  logic      [2:0][63:0] cmd_tck;
  logic      [2:0][2:0]  cmd_bg;
  logic      [2:0][1:0]  cmd_bank;
  logic      [2:0][16:0] cmd_row;
  logic      [5:0]       cmd_col;
  logic      [TagW-1:0]  cmd_tag;
  logic                  cmd_write;

  nelssa_ddr5_ctrl #(
    .T            (T),
    .TagW         (TagW),
    .TckW         (TckW),
    // the tries: the same commands as the synthesis form, 3.7 times faster in Verilator
    .ParallelSched(1'b0)
  ) u_ctrl (
    .clk_i      (clk_i),
    .rst_ni     (rst_ni),
    .req_valid_i(req_valid_i),
    .req_ready_o(req_ready_o),
    .req_write_i(req_write_i),
    .req_bg_i   (req_bg_i),
    .req_bank_i (req_bank_i),
    .req_row_i  (req_row_i),
    .req_col_i  (req_col_i),
    .req_tag_i  (req_tag_i),
    .cmd_valid_o(cmd_valid),
    .cmd_o      (cmd),
    .cmd_tck_o  (cmd_tck),
    .cmd_bg_o   (cmd_bg),
    .cmd_bank_o (cmd_bank),
    .cmd_row_o  (cmd_row),
    .cmd_col_o  (cmd_col),
    .cmd_tag_o  (cmd_tag),
    .cmd_write_o(cmd_write),
    .perf_o     (perf_o)
  );

  nelssa_ddr5_dram #(
    .T    (T),
    .SubId(SubId),
    .TagW (TagW)
  ) u_dram (
    .clk_i        (clk_i),
    .rst_ni       (rst_ni),
    .cmd_valid_i  (cmd_valid),
    .cmd_i        (cmd),
    .cmd_tck_i    (cmd_tck),
    .cmd_bg_i     (cmd_bg),
    .cmd_bank_i   (cmd_bank),
    .cmd_row_i    (cmd_row),
    .cmd_col_i    (cmd_col),
    .cmd_tag_i    (cmd_tag),
    .wdata_valid_i(req_valid_i && req_ready_o && req_write_i),
    .wdata_tag_i  (req_tag_i),
    .wdata_i      (req_wdata_i),
    .wstrb_i      (req_wstrb_i),
    .rdata_valid_o(rdata_valid_o),
    .rdata_tag_o  (rdata_tag_o),
    .rdata_o      (rdata_o),
    .violations_o (violations_o)
  );

  assign served_o    = cmd_valid[0];
  assign wdone_o     = cmd_valid[0] && cmd_write;
  assign wdone_tag_o = cmd_tag;
endmodule
