// The whole memory of one simulated PNM device: the front end (rtl/mem) over 8 sub-channels,
// each a controller with its data model and timing checker (nelssa_ddr5_mem). Ports as
// nelssa_ddr5_frontend; violations_o sums the checkers of all sub-channels; perf_o holds each
// sub-channel controller's performance counters (read by the device harness).
module nelssa_ddr5_system
  import nelssa_ddr5_pkg::*;
#(
  parameter int unsigned PresetId   = 0,   // index into hw/model/ddr5_timing.PRESETS
  parameter int unsigned NumPorts   = 4,   // request ports
  parameter int unsigned AddrW      = 40,  // byte-address width
  parameter int unsigned AddressMap = 0,   // 0 cacheline, 1 row, 2 mop4
  parameter int unsigned TagW       = 16,  // request tag width
  parameter logic [7:0]  LowPriority = '0,  // ports served last (nelssa_ddr5_frontend)
  localparam int unsigned PortW     = (NumPorts > 1) ? $clog2(NumPorts) : 1  // port-number width
) (
  input  logic                           clk_i,
  input  logic                           rst_ni,
  input  logic [NumPorts-1:0]            req_valid_i,
  output logic [NumPorts-1:0]            req_ready_o,
  input  logic [NumPorts-1:0][AddrW-1:0] req_addr_i,
  input  logic [NumPorts-1:0]            req_write_i,
  input  logic [NumPorts-1:0][TagW-1:0]  req_tag_i,
  input  logic [NumPorts-1:0][511:0]     req_wdata_i,
  input  logic [NumPorts-1:0][63:0]      req_wstrb_i,
  output logic [NumPorts-1:0]            cpl_valid_o,
  output logic [NumPorts-1:0][TagW-1:0]  cpl_tag_o,
  output logic [NumPorts-1:0]            cpl_write_o,
  output logic [NumPorts-1:0]            cpl_err_o,
  output logic [7:0]                     rd_valid_o,
  output logic [7:0][PortW-1:0]          rd_port_o,
  output logic [7:0][TagW-1:0]           rd_tag_o,
  output logic [7:0][511:0]              rd_data_o,
  output logic [31:0]                    violations_o,
  output ddr5_perf_t [7:0]               perf_o,
  // no request held in a sub-channel: every read's data returned, every write issued to the
  // DRAM (a backdoor access to the store waits for it: hw/sim/device.py RtlDevice.dma_write)
  output logic                           quiet_o
);
  localparam int unsigned ID_W = 7;

  logic [7:0]            sub_valid, sub_ready, sub_write, rdata_valid, wdone, served;
  logic [7:0][2:0]       sub_bg;
  logic [7:0][1:0]       sub_bank;
  logic [7:0][15:0]      sub_row;
  logic [7:0][5:0]       sub_col;
  logic [7:0][ID_W-1:0]  sub_id, rdata_id, wdone_id;
  logic [7:0][511:0]     sub_wdata, rdata;
  logic [7:0][63:0]      sub_wstrb;
  logic [7:0][31:0]      violations;

  nelssa_ddr5_frontend #(
    .NumPorts  (NumPorts),
    .AddrW     (AddrW),
    .AddressMap(AddressMap),
    .TagW      (TagW),
    .IdW       (ID_W),
    .LowPriority(LowPriority)
  ) u_frontend (
    .clk_i            (clk_i),
    .rst_ni           (rst_ni),
    .req_valid_i      (req_valid_i),
    .req_ready_o      (req_ready_o),
    .req_addr_i       (req_addr_i),
    .req_write_i      (req_write_i),
    .req_tag_i        (req_tag_i),
    .req_wdata_i      (req_wdata_i),
    .req_wstrb_i      (req_wstrb_i),
    .cpl_valid_o      (cpl_valid_o),
    .cpl_tag_o        (cpl_tag_o),
    .cpl_write_o      (cpl_write_o),
    .cpl_err_o        (cpl_err_o),
    .rd_valid_o       (rd_valid_o),
    .rd_port_o        (rd_port_o),
    .rd_tag_o         (rd_tag_o),
    .rd_data_o        (rd_data_o),
    .sub_valid_o      (sub_valid),
    .sub_ready_i      (sub_ready),
    .sub_write_o      (sub_write),
    .sub_bg_o         (sub_bg),
    .sub_bank_o       (sub_bank),
    .sub_row_o        (sub_row),
    .sub_col_o        (sub_col),
    .sub_id_o         (sub_id),
    .sub_wdata_o      (sub_wdata),
    .sub_wstrb_o      (sub_wstrb),
    .sub_rdata_valid_i(rdata_valid),
    .sub_rdata_id_i   (rdata_id),
    .sub_rdata_i      (rdata),
    .sub_wdone_i      (wdone),
    .sub_wdone_id_i   (wdone_id)
  );

  for (genvar s = 0; s < 8; s++) begin : gen_sub
    nelssa_ddr5_mem #(
      .PresetId(PresetId),
      .SubId   (s),
      .TagW    (ID_W)
    ) u_mem (
      .clk_i        (clk_i),
      .rst_ni       (rst_ni),
      .req_valid_i  (sub_valid[s]),
      .req_ready_o  (sub_ready[s]),
      .req_write_i  (sub_write[s]),
      .req_bg_i     (sub_bg[s]),
      .req_bank_i   (sub_bank[s]),
      .req_row_i    (sub_row[s]),
      .req_col_i    (sub_col[s]),
      .req_tag_i    (sub_id[s]),
      .req_wdata_i  (sub_wdata[s]),
      .req_wstrb_i  (sub_wstrb[s]),
      .rdata_valid_o(rdata_valid[s]),
      .rdata_tag_o  (rdata_id[s]),
      .rdata_o      (rdata[s]),
      .served_o     (served[s]),
      .wdone_o      (wdone[s]),
      .wdone_tag_o  (wdone_id[s]),
      .violations_o (violations[s]),
      .perf_o       (perf_o[s])
    );
  end

  // every READ/WRITE is accounted for by rd_valid_o and cpl_valid_o
  /* verilator lint_off UNUSEDSIGNAL */
  logic [7:0] served_unused;
  /* verilator lint_on UNUSEDSIGNAL */
  assign served_unused = served;

  // requests a controller holds: +1 when it takes one, -1 for read data and for an issued WRITE
  localparam int unsigned HELD_W = ID_W + 4;  // 8 sub-channels of 2^ID_W IDs each
  logic [HELD_W-1:0] held_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      held_q <= '0;
    end else begin
      held_q <= held_q + HELD_W'($countones(sub_valid & sub_ready))
                - HELD_W'($countones(rdata_valid)) - HELD_W'($countones(wdone));
    end
  end

  assign quiet_o = held_q == '0;

  always_comb begin
    violations_o = '0;
    // verilator unroll_full
    for (int s = 0; s < 8; s++) violations_o += violations[s];
  end
endmodule
