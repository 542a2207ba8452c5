// Simulation top of one PNM device: the synthesizable device (rtl/top) over its simulated
// memory (front end, 8 DDR5 sub-channels with timing checkers and the sparse DPI-C store).
// Driven by the C++ harness hw/sim/device_harness.cpp.
module nelssa_device_sim
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned PresetId = 0,  // DDR5 timing preset (hw/model/ddr5_timing.PRESETS)
  parameter int unsigned NumUnits = 4,  // attention units (nelssa_device)
  // each engine's shape (nelssa_attn_engine): the device's is the default; a test may build
  // smaller engines (hw/sim/device.py, from hw/model/engine.EngineParams)
  parameter int unsigned HeadDim = 128,  // largest head_dim (64, 128)
  parameter int unsigned NumQHeads = 8,  // largest GQA group (1..8)
  parameter int unsigned MaxClusterTokens = 64,  // largest cluster (1..255)
  // each engine's arithmetic units' latencies (nelssa_attn_engine), cycles 0..15, 0: combinational;
  // hw/sim/device.py sets them from the device's description (hw/model/engine.FpLatency)
  parameter int unsigned Bf16MulLatency = 0,  // bf16 x bf16 multipliers
  parameter int unsigned AddLatency     = 0,  // fp32 adders
  parameter int unsigned MulLatency     = 0,  // fp32 multipliers
  parameter int unsigned Exp2Latency    = 0,  // exp2
  parameter int unsigned Log2Latency    = 0,  // log2
  parameter int unsigned RecipLatency   = 0,  // reciprocal
  parameter int unsigned ComputeLanes   = 32  // engine lanes computed a cycle (1..32)
) (
  input  logic         clk_i,
  input  logic         rst_ni,
  input  logic         mmio_valid_i,
  output logic         mmio_ready_o,
  input  logic [7:0]   mmio_opcode_i,
  input  logic [15:0]  mmio_tag_i,
  input  logic [31:0]  mmio_offset_i,
  input  logic [31:0]  mmio_wdata_i,
  output logic         mmio_rsp_valid_o,
  input  logic         mmio_rsp_ready_i,
  output logic [15:0]  mmio_rsp_tag_o,
  output logic [7:0]   mmio_rsp_status_o,
  output logic [31:0]  mmio_rsp_data_o,
  input  logic         req_valid_i,
  output logic         req_ready_o,
  input  logic [7:0]   req_opcode_i,
  input  logic [15:0]  req_tag_i,
  input  logic [63:0]  req_addr_i,
  input  logic         rwd_valid_i,
  output logic         rwd_ready_o,
  input  logic [7:0]   rwd_opcode_i,
  input  logic [15:0]  rwd_tag_i,
  input  logic [63:0]  rwd_addr_i,
  input  logic [63:0]  rwd_be_i,
  input  logic [511:0] rwd_data_i,
  output logic         ndr_valid_o,
  input  logic         ndr_ready_i,
  output logic [7:0]   ndr_opcode_o,
  output logic [15:0]  ndr_tag_o,
  output logic [7:0]   ndr_status_o,
  output logic         drs_valid_o,
  input  logic         drs_ready_i,
  output logic [7:0]   drs_opcode_o,
  output logic [15:0]  drs_tag_o,
  output logic [7:0]   drs_status_o,
  output logic [511:0] drs_data_o,
  output logic         idle_o,
  output logic [31:0]  violations_o,
  output logic         mem_quiet_o,  // no request held in the DRAM controllers
  // each DDR5 sub-channel controller's performance counters (hw/sim/device_harness.cpp)
  output nelssa_ddr5_pkg::ddr5_perf_t [7:0] ddr5_perf_o
);
  localparam int unsigned PORTS = NumUnits + 2;
  localparam int unsigned ADDR_W = 40;

  logic [PORTS-1:0]             mem_valid, mem_ready, mem_write, cpl_valid, cpl_write, cpl_err;
  logic [PORTS-1:0][ADDR_W-1:0] mem_addr;
  logic [PORTS-1:0][MEM_TAG_W-1:0]   mem_tag, cpl_tag;
  logic [PORTS-1:0][LINE_W-1:0]      mem_wdata;
  logic [PORTS-1:0][LINE_BYTES-1:0]  mem_wstrb;
  logic [MEM_LANES-1:0]              rd_valid;
  logic [MEM_LANES-1:0][$clog2(PORTS)-1:0] rd_port;
  logic [MEM_LANES-1:0][MEM_TAG_W-1:0] rd_tag;
  logic [MEM_LANES-1:0][LINE_W-1:0]  rd_data;

  // the device's channels as the harness drives them, field by field
  mmio_req_t mmio;
  mmio_rsp_t mmio_rsp;
  m2s_req_t  req;
  m2s_rwd_t  rwd;
  s2m_ndr_t  ndr;
  s2m_drs_t  drs;
  assign mmio = '{opcode: mmio_opcode_i, tag: mmio_tag_i, offset: mmio_offset_i,
                  value: mmio_wdata_i};
  assign mmio_rsp_tag_o = mmio_rsp.tag;
  assign mmio_rsp_status_o = mmio_rsp.status;
  assign mmio_rsp_data_o = mmio_rsp.value;
  assign req = '{opcode: req_opcode_i, tag: req_tag_i, addr: req_addr_i};
  assign rwd = '{opcode: rwd_opcode_i, tag: rwd_tag_i, addr: rwd_addr_i, byte_enable: rwd_be_i,
                 data: rwd_data_i};
  assign ndr_opcode_o = ndr.opcode;
  assign ndr_tag_o = ndr.tag;
  assign ndr_status_o = ndr.status;
  assign drs_opcode_o = drs.opcode;
  assign drs_tag_o = drs.tag;
  assign drs_status_o = drs.status;
  assign drs_data_o = drs.data;

  nelssa_device_wrap #(
    .NumUnits        (NumUnits),
    .HeadDim         (HeadDim),
    .NumQHeads       (NumQHeads),
    .MaxClusterTokens(MaxClusterTokens),
    .AddrW           (ADDR_W),
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
    .mmio_valid_i    (mmio_valid_i),
    .mmio_ready_o    (mmio_ready_o),
    .mmio_i          (mmio),
    .mmio_rsp_valid_o(mmio_rsp_valid_o),
    .mmio_rsp_ready_i(mmio_rsp_ready_i),
    .mmio_rsp_o      (mmio_rsp),
    .req_valid_i     (req_valid_i),
    .req_ready_o     (req_ready_o),
    .req_i           (req),
    .rwd_valid_i     (rwd_valid_i),
    .rwd_ready_o     (rwd_ready_o),
    .rwd_i           (rwd),
    .ndr_valid_o     (ndr_valid_o),
    .ndr_ready_i     (ndr_ready_i),
    .ndr_o           (ndr),
    .drs_valid_o     (drs_valid_o),
    .drs_ready_i     (drs_ready_i),
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

  // the device checks ranges itself; the memory's own error and write flags add nothing here
  /* verilator lint_off UNUSEDSIGNAL */
  logic [PORTS-1:0] cpl_flags_unused;
  /* verilator lint_on UNUSEDSIGNAL */
  assign cpl_flags_unused = cpl_write ^ cpl_err;

  nelssa_ddr5_system #(
    .PresetId  (PresetId),
    .NumPorts  (PORTS),
    .AddrW     (ADDR_W),
    .TagW      (MEM_TAG_W),
    .LowPriority(8'b1)  // port 0, the host's CXL.mem: attention reads go first
  ) u_memory (
    .clk_i       (clk_i),
    .rst_ni      (rst_ni),
    .req_valid_i (mem_valid),
    .req_ready_o (mem_ready),
    .req_addr_i  (mem_addr),
    .req_write_i (mem_write),
    .req_tag_i   (mem_tag),
    .req_wdata_i (mem_wdata),
    .req_wstrb_i (mem_wstrb),
    .cpl_valid_o (cpl_valid),
    .cpl_tag_o   (cpl_tag),
    .cpl_write_o (cpl_write),
    .cpl_err_o   (cpl_err),
    .rd_valid_o  (rd_valid),
    .rd_port_o   (rd_port),
    .rd_tag_o    (rd_tag),
    .rd_data_o   (rd_data),
    .violations_o(violations_o),
    .perf_o      (ddr5_perf_o),
    .quiet_o     (mem_quiet_o)
  );
endmodule
