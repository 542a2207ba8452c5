// The FPGA top of a PNM device, board-agnostic: the device (nelssa_device) between the board's
// PCIe IP and its memory controllers. A board design instantiates it and connects
//   * s_axil_*: the register BAR (4 KB; AXI4-Lite, 32-bit data), e.g. XDMA's AXI-Lite master
//     of BAR 0 or a QDMA/CPM AXI bridge;
//   * s_axi_*: the memory BAR and the DMA engine (AXI4, 512-bit data, addresses = device
//     addresses), e.g. XDMA's AXI-MM master (H2C/C2H) and its BAR bridge through an
//     interconnect; INCR and FIXED bursts, any size;
//   * m_axi_*: one AXI4 master per memory channel (512-bit data, single 64-byte beats, ID =
//     device port) toward a vendor memory controller; line i of device memory is line
//     i / NumChannels of channel i mod NumChannels, whose AXI address starts at 0;
//   * clk_i, rst_ni: the core clock and its reset (synchronous to clk_i, active low); clock
//     domain crossings to the PCIe and memory clocks belong to the board design's interconnect.
// The contract the memory side must keep: responses of one ID in request order (as AXI4
// requires) and a write's B only once a later read returns its data. PERF_CYCLES counts clk_i;
// the bitstream manifest states its frequency. docs/fpga.md has the whole contract.
module nelssa_fpga_top
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned NumUnits    = 4,             // attention units
  parameter int unsigned HeadDim     = 128,           // each engine's largest head_dim (64, 128)
  parameter int unsigned NumQHeads   = 8,             // each engine's largest GQA group (1..8)
  parameter int unsigned MaxClusterTokens = 64,       // each engine's largest cluster (1..255)
  parameter int unsigned NumChannels = 4,             // memory channels (1, 2, 4 or 8)
  parameter int unsigned ChanAddrW   = 34,            // byte-address width of each channel
  parameter longint      MemBytes    = 64'd1 << 36,   // device memory (MEM_SIZE), all channels
  parameter logic [31:0] BuildId     = 32'h0,         // BUILD_ID register (the manifest's id)
  parameter int unsigned HostIdW     = 4,             // AXI ID width of the host AXI4 slave
  parameter int unsigned HostAddrW   = 64,            // address width of the host AXI4 slave
  parameter int unsigned Outstanding = 32,            // memory reads per port and channel
  // each engine's arithmetic units' latencies (nelssa_attn_engine), cycles 0..15, 0: combinational;
  // a board's profile names those its clock needs (hardware.json, fp_latency)
  parameter int unsigned Bf16MulLatency = 0,          // bf16 x bf16 multipliers
  parameter int unsigned AddLatency  = 0,             // fp32 adders
  parameter int unsigned MulLatency  = 0,             // fp32 multipliers
  parameter int unsigned Exp2Latency = 0,             // exp2
  parameter int unsigned Log2Latency = 0,             // log2
  parameter int unsigned RecipLatency = 0,            // reciprocal
  parameter int unsigned ComputeLanes = 32,           // engine lanes computed a cycle (1..32)
  localparam int unsigned AddrW      = 40,            // device byte-address width
  localparam int unsigned NumPorts   = NumUnits + 2,  // device memory ports
  localparam int unsigned PortW      = $clog2(NumPorts)  // memory AXI ID width
) (
  input  logic                                   clk_i,
  input  logic                                   rst_ni,
  // register BAR: AXI4-Lite slave
  input  logic                                   s_axil_awvalid_i,
  output logic                                   s_axil_awready_o,
  input  logic [11:0]                            s_axil_awaddr_i,
  input  logic                                   s_axil_wvalid_i,
  output logic                                   s_axil_wready_o,
  input  logic [31:0]                            s_axil_wdata_i,
  input  logic [3:0]                             s_axil_wstrb_i,
  output logic                                   s_axil_bvalid_o,
  input  logic                                   s_axil_bready_i,
  output logic [1:0]                             s_axil_bresp_o,
  input  logic                                   s_axil_arvalid_i,
  output logic                                   s_axil_arready_o,
  input  logic [11:0]                            s_axil_araddr_i,
  output logic                                   s_axil_rvalid_o,
  input  logic                                   s_axil_rready_i,
  output logic [31:0]                            s_axil_rdata_o,
  output logic [1:0]                             s_axil_rresp_o,
  // memory BAR and DMA: AXI4 slave
  input  logic                                   s_axi_awvalid_i,
  output logic                                   s_axi_awready_o,
  input  logic [HostIdW-1:0]                     s_axi_awid_i,
  input  logic [HostAddrW-1:0]                   s_axi_awaddr_i,
  input  logic [7:0]                             s_axi_awlen_i,
  input  logic [2:0]                             s_axi_awsize_i,
  input  logic [1:0]                             s_axi_awburst_i,
  input  logic                                   s_axi_wvalid_i,
  output logic                                   s_axi_wready_o,
  input  logic [511:0]                           s_axi_wdata_i,
  input  logic [63:0]                            s_axi_wstrb_i,
  input  logic                                   s_axi_wlast_i,
  output logic                                   s_axi_bvalid_o,
  input  logic                                   s_axi_bready_i,
  output logic [HostIdW-1:0]                     s_axi_bid_o,
  output logic [1:0]                             s_axi_bresp_o,
  input  logic                                   s_axi_arvalid_i,
  output logic                                   s_axi_arready_o,
  input  logic [HostIdW-1:0]                     s_axi_arid_i,
  input  logic [HostAddrW-1:0]                   s_axi_araddr_i,
  input  logic [7:0]                             s_axi_arlen_i,
  input  logic [2:0]                             s_axi_arsize_i,
  input  logic [1:0]                             s_axi_arburst_i,
  output logic                                   s_axi_rvalid_o,
  input  logic                                   s_axi_rready_i,
  output logic [HostIdW-1:0]                     s_axi_rid_o,
  output logic [511:0]                           s_axi_rdata_o,
  output logic [1:0]                             s_axi_rresp_o,
  output logic                                   s_axi_rlast_o,
  // memory channels: AXI4 masters
  output logic [NumChannels-1:0]                 m_axi_awvalid_o,
  input  logic [NumChannels-1:0]                 m_axi_awready_i,
  output logic [NumChannels-1:0][PortW-1:0]      m_axi_awid_o,
  output logic [NumChannels-1:0][ChanAddrW-1:0]  m_axi_awaddr_o,
  output logic [NumChannels-1:0][7:0]            m_axi_awlen_o,
  output logic [NumChannels-1:0][2:0]            m_axi_awsize_o,
  output logic [NumChannels-1:0][1:0]            m_axi_awburst_o,
  output logic [NumChannels-1:0]                 m_axi_wvalid_o,
  input  logic [NumChannels-1:0]                 m_axi_wready_i,
  output logic [NumChannels-1:0][511:0]          m_axi_wdata_o,
  output logic [NumChannels-1:0][63:0]           m_axi_wstrb_o,
  output logic [NumChannels-1:0]                 m_axi_wlast_o,
  input  logic [NumChannels-1:0]                 m_axi_bvalid_i,
  output logic [NumChannels-1:0]                 m_axi_bready_o,
  input  logic [NumChannels-1:0][PortW-1:0]      m_axi_bid_i,
  input  logic [NumChannels-1:0][1:0]            m_axi_bresp_i,
  output logic [NumChannels-1:0]                 m_axi_arvalid_o,
  input  logic [NumChannels-1:0]                 m_axi_arready_i,
  output logic [NumChannels-1:0][PortW-1:0]      m_axi_arid_o,
  output logic [NumChannels-1:0][ChanAddrW-1:0]  m_axi_araddr_o,
  output logic [NumChannels-1:0][7:0]            m_axi_arlen_o,
  output logic [NumChannels-1:0][2:0]            m_axi_arsize_o,
  output logic [NumChannels-1:0][1:0]            m_axi_arburst_o,
  input  logic [NumChannels-1:0]                 m_axi_rvalid_i,
  output logic [NumChannels-1:0]                 m_axi_rready_o,
  input  logic [NumChannels-1:0][PortW-1:0]      m_axi_rid_i,
  input  logic [NumChannels-1:0][511:0]          m_axi_rdata_i,
  input  logic [NumChannels-1:0][1:0]            m_axi_rresp_i,
  input  logic [NumChannels-1:0]                 m_axi_rlast_i,
  // status for the board (LEDs, an interrupt controller)
  output logic                                   idle_o,
  output logic                                   mem_err_o
);
  if (MemBytes > (longint'(NumChannels) << ChanAddrW) || MemBytes > (64'd1 << AddrW))
  begin : gen_mem_check
    $error("nelssa_fpga_top: MemBytes beyond NumChannels << ChanAddrW or the device's 2^40");
  end

  // the device's register port
  logic      mmio_valid, mmio_ready, mmio_rsp_valid, mmio_rsp_ready;
  mmio_req_t mmio;
  mmio_rsp_t mmio_rsp;
  // its CXL.mem slave
  logic      req_valid, req_ready, rwd_valid, rwd_ready, ndr_valid, ndr_ready, drs_valid,
             drs_ready;
  m2s_req_t  req;
  m2s_rwd_t  rwd;
  s2m_ndr_t  ndr;
  s2m_drs_t  drs;
  // its memory ports
  logic [NumPorts-1:0]             mem_valid, mem_ready, mem_write, cpl_valid;
  logic [NumPorts-1:0][AddrW-1:0]  mem_addr;
  logic [NumPorts-1:0][MEM_TAG_W-1:0]  mem_tag, cpl_tag;
  logic [NumPorts-1:0][LINE_W-1:0]     mem_wdata;
  logic [NumPorts-1:0][LINE_BYTES-1:0] mem_wstrb;
  logic [MEM_LANES-1:0]                rd_valid;
  logic [MEM_LANES-1:0][PortW-1:0]     rd_port;
  logic [MEM_LANES-1:0][MEM_TAG_W-1:0] rd_tag;
  logic [MEM_LANES-1:0][LINE_W-1:0]    rd_data;

  nelssa_axil_regs #(
    .AddrW(12)
  ) u_regs_bar (
    .clk_i           (clk_i),
    .rst_ni          (rst_ni),
    .s_awvalid_i     (s_axil_awvalid_i),
    .s_awready_o     (s_axil_awready_o),
    .s_awaddr_i      (s_axil_awaddr_i),
    .s_wvalid_i      (s_axil_wvalid_i),
    .s_wready_o      (s_axil_wready_o),
    .s_wdata_i       (s_axil_wdata_i),
    .s_wstrb_i       (s_axil_wstrb_i),
    .s_bvalid_o      (s_axil_bvalid_o),
    .s_bready_i      (s_axil_bready_i),
    .s_bresp_o       (s_axil_bresp_o),
    .s_arvalid_i     (s_axil_arvalid_i),
    .s_arready_o     (s_axil_arready_o),
    .s_araddr_i      (s_axil_araddr_i),
    .s_rvalid_o      (s_axil_rvalid_o),
    .s_rready_i      (s_axil_rready_i),
    .s_rdata_o       (s_axil_rdata_o),
    .s_rresp_o       (s_axil_rresp_o),
    .mmio_valid_o    (mmio_valid),
    .mmio_ready_i    (mmio_ready),
    .mmio_o          (mmio),
    .mmio_rsp_valid_i(mmio_rsp_valid),
    .mmio_rsp_ready_o(mmio_rsp_ready),
    .mmio_rsp_i      (mmio_rsp)
  );

  nelssa_axi_host #(
    .IdW  (HostIdW),
    .AddrW(HostAddrW)
  ) u_mem_bar (
    .clk_i       (clk_i),
    .rst_ni      (rst_ni),
    .s_awvalid_i (s_axi_awvalid_i),
    .s_awready_o (s_axi_awready_o),
    .s_awid_i    (s_axi_awid_i),
    .s_awaddr_i  (s_axi_awaddr_i),
    .s_awlen_i   (s_axi_awlen_i),
    .s_awsize_i  (s_axi_awsize_i),
    .s_awburst_i (s_axi_awburst_i),
    .s_wvalid_i  (s_axi_wvalid_i),
    .s_wready_o  (s_axi_wready_o),
    .s_wdata_i   (s_axi_wdata_i),
    .s_wstrb_i   (s_axi_wstrb_i),
    .s_wlast_i   (s_axi_wlast_i),
    .s_bvalid_o  (s_axi_bvalid_o),
    .s_bready_i  (s_axi_bready_i),
    .s_bid_o     (s_axi_bid_o),
    .s_bresp_o   (s_axi_bresp_o),
    .s_arvalid_i (s_axi_arvalid_i),
    .s_arready_o (s_axi_arready_o),
    .s_arid_i    (s_axi_arid_i),
    .s_araddr_i  (s_axi_araddr_i),
    .s_arlen_i   (s_axi_arlen_i),
    .s_arsize_i  (s_axi_arsize_i),
    .s_arburst_i (s_axi_arburst_i),
    .s_rvalid_o  (s_axi_rvalid_o),
    .s_rready_i  (s_axi_rready_i),
    .s_rid_o     (s_axi_rid_o),
    .s_rdata_o   (s_axi_rdata_o),
    .s_rresp_o   (s_axi_rresp_o),
    .s_rlast_o   (s_axi_rlast_o),
    .req_valid_o (req_valid),
    .req_ready_i (req_ready),
    .req_o       (req),
    .rwd_valid_o (rwd_valid),
    .rwd_ready_i (rwd_ready),
    .rwd_o       (rwd),
    .ndr_valid_i (ndr_valid),
    .ndr_ready_o (ndr_ready),
    .ndr_i       (ndr),
    .drs_valid_i (drs_valid),
    .drs_ready_o (drs_ready),
    .drs_i       (drs)
  );

  nelssa_device_wrap #(
    .NumUnits        (NumUnits),
    .HeadDim         (HeadDim),
    .NumQHeads       (NumQHeads),
    .MaxClusterTokens(MaxClusterTokens),
    .AddrW           (AddrW),
    .MemBytes        (MemBytes),
    .BuildId         (BuildId),
    .MemLanes        (NumChannels),
    .Bf16MulLatency  (Bf16MulLatency),
    .AddLatency      (AddLatency),
    .MulLatency      (MulLatency),
    .Exp2Latency     (Exp2Latency),
    .Log2Latency     (Log2Latency),
    .RecipLatency    (RecipLatency),
    .ComputeLanes    (ComputeLanes)
  ) u_device (
    .clk_i           (clk_i),
    .rst_ni          (rst_ni),
    .mmio_valid_i    (mmio_valid),
    .mmio_ready_o    (mmio_ready),
    .mmio_i          (mmio),
    .mmio_rsp_valid_o(mmio_rsp_valid),
    .mmio_rsp_ready_i(mmio_rsp_ready),
    .mmio_rsp_o      (mmio_rsp),
    .req_valid_i     (req_valid),
    .req_ready_o     (req_ready),
    .req_i           (req),
    .rwd_valid_i     (rwd_valid),
    .rwd_ready_o     (rwd_ready),
    .rwd_i           (rwd),
    .ndr_valid_o     (ndr_valid),
    .ndr_ready_i     (ndr_ready),
    .ndr_o           (ndr),
    .drs_valid_o     (drs_valid),
    .drs_ready_i     (drs_ready),
    .drs_o           (drs),
    .mem_valid_o     (mem_valid),
    .mem_ready_i     (mem_ready),
    .mem_addr_o      (mem_addr),
    .mem_write_o     (mem_write),
    .mem_tag_o       (mem_tag),
    .mem_wdata_o     (mem_wdata),
    .mem_wstrb_o     (mem_wstrb),
    .mem_cpl_valid_i (cpl_valid),
    .mem_cpl_tag_i   (cpl_tag),
    .mem_rd_valid_i  (rd_valid),
    .mem_rd_port_i   (rd_port),
    .mem_rd_tag_i    (rd_tag),
    .mem_rd_data_i   (rd_data),
    .idle_o          (idle_o)
  );

  nelssa_axi_mem #(
    .NumPorts   (NumPorts),
    .NumChannels(NumChannels),
    .AddrW      (AddrW),
    .ChanAddrW  (ChanAddrW),
    .Outstanding(Outstanding)
  ) u_memory (
    .clk_i          (clk_i),
    .rst_ni         (rst_ni),
    .mem_valid_i    (mem_valid),
    .mem_ready_o    (mem_ready),
    .mem_addr_i     (mem_addr),
    .mem_write_i    (mem_write),
    .mem_tag_i      (mem_tag),
    .mem_wdata_i    (mem_wdata),
    .mem_wstrb_i    (mem_wstrb),
    .mem_cpl_valid_o(cpl_valid),
    .mem_cpl_tag_o  (cpl_tag),
    .mem_rd_valid_o (rd_valid),
    .mem_rd_port_o  (rd_port),
    .mem_rd_tag_o   (rd_tag),
    .mem_rd_data_o  (rd_data),
    .m_awvalid_o    (m_axi_awvalid_o),
    .m_awready_i    (m_axi_awready_i),
    .m_awid_o       (m_axi_awid_o),
    .m_awaddr_o     (m_axi_awaddr_o),
    .m_awlen_o      (m_axi_awlen_o),
    .m_awsize_o     (m_axi_awsize_o),
    .m_awburst_o    (m_axi_awburst_o),
    .m_wvalid_o     (m_axi_wvalid_o),
    .m_wready_i     (m_axi_wready_i),
    .m_wdata_o      (m_axi_wdata_o),
    .m_wstrb_o      (m_axi_wstrb_o),
    .m_wlast_o      (m_axi_wlast_o),
    .m_bvalid_i     (m_axi_bvalid_i),
    .m_bready_o     (m_axi_bready_o),
    .m_bid_i        (m_axi_bid_i),
    .m_bresp_i      (m_axi_bresp_i),
    .m_arvalid_o    (m_axi_arvalid_o),
    .m_arready_i    (m_axi_arready_i),
    .m_arid_o       (m_axi_arid_o),
    .m_araddr_o     (m_axi_araddr_o),
    .m_arlen_o      (m_axi_arlen_o),
    .m_arsize_o     (m_axi_arsize_o),
    .m_arburst_o    (m_axi_arburst_o),
    .m_rvalid_i     (m_axi_rvalid_i),
    .m_rready_o     (m_axi_rready_o),
    .m_rid_i        (m_axi_rid_i),
    .m_rdata_i      (m_axi_rdata_i),
    .m_rresp_i      (m_axi_rresp_i),
    .m_rlast_i      (m_axi_rlast_i),
    .err_o          (mem_err_o)
  );
endmodule
