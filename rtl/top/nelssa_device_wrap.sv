// The device (nelssa_device) with its memory requests split into the signals a memory's request
// ports take (nelssa_mem_req_split): address, write flag, tag, data and strobes per port. The
// one device-to-memory wiring of both tops: the simulation top puts the simulated DDR5 memory
// behind it (rtl/sim/nelssa_device_sim.sv), the FPGA top the AXI4 memory channels
// (nelssa_fpga_top.sv).
module nelssa_device_wrap
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned NumUnits  = 4,             // attention units (nelssa_device)
  parameter int unsigned HeadDim   = 128,           // each engine's largest head_dim (64, 128)
  parameter int unsigned NumQHeads = 8,             // each engine's largest GQA group (1..8)
  parameter int unsigned MaxClusterTokens = 64,     // each engine's largest cluster (1..255)
  parameter int unsigned AddrW     = 40,            // device-memory address width
  parameter longint      MemBytes  = 64'd1 << 36,   // HDM window (64 GiB)
  parameter logic [31:0] BuildId   = 32'h0,         // BUILD_ID register (bitstream build id)
  parameter int unsigned MemLanes  = MEM_LANES,     // read-data lanes the memory uses
  // each engine's arithmetic units' latencies (nelssa_attn_engine), cycles 0..15, 0: combinational
  parameter int unsigned Bf16MulLatency = 0,        // bf16 x bf16 multipliers
  parameter int unsigned AddLatency  = 0,           // fp32 adders
  parameter int unsigned MulLatency  = 0,           // fp32 multipliers
  parameter int unsigned Exp2Latency = 0,           // exp2
  parameter int unsigned Log2Latency = 0,           // log2
  parameter int unsigned RecipLatency = 0,          // reciprocal
  parameter int unsigned ComputeLanes = 32,         // engine lanes computed a cycle (1..32)
  localparam int unsigned NumPorts = NumUnits + 2,  // memory ports
  localparam int unsigned PortW    = $clog2(NumPorts)  // port id width
) (
  input  logic                                   clk_i,
  input  logic                                   rst_ni,
  // CXL.io register access
  input  logic                                   mmio_valid_i,
  output logic                                   mmio_ready_o,
  input  mmio_req_t                              mmio_i,
  output logic                                   mmio_rsp_valid_o,
  input  logic                                   mmio_rsp_ready_i,
  output mmio_rsp_t                              mmio_rsp_o,
  // CXL.mem
  input  logic                                   req_valid_i,
  output logic                                   req_ready_o,
  input  m2s_req_t                               req_i,
  input  logic                                   rwd_valid_i,
  output logic                                   rwd_ready_o,
  input  m2s_rwd_t                               rwd_i,
  output logic                                   ndr_valid_o,
  input  logic                                   ndr_ready_i,
  output s2m_ndr_t                               ndr_o,
  output logic                                   drs_valid_o,
  input  logic                                   drs_ready_i,
  output s2m_drs_t                               drs_o,
  // the memory's request ports (addresses below 2^AddrW)
  output logic [NumPorts-1:0]                    mem_valid_o,
  input  logic [NumPorts-1:0]                    mem_ready_i,
  output logic [NumPorts-1:0][AddrW-1:0]         mem_addr_o,
  output logic [NumPorts-1:0]                    mem_write_o,
  output logic [NumPorts-1:0][MEM_TAG_W-1:0]     mem_tag_o,
  output logic [NumPorts-1:0][LINE_W-1:0]        mem_wdata_o,
  output logic [NumPorts-1:0][LINE_BYTES-1:0]    mem_wstrb_o,
  // its write completions, per port, and read data, per lane
  input  logic [NumPorts-1:0]                    mem_cpl_valid_i,
  input  logic [NumPorts-1:0][MEM_TAG_W-1:0]     mem_cpl_tag_i,
  input  logic [MEM_LANES-1:0]                   mem_rd_valid_i,
  input  logic [MEM_LANES-1:0][PortW-1:0]        mem_rd_port_i,
  input  logic [MEM_LANES-1:0][MEM_TAG_W-1:0]    mem_rd_tag_i,
  input  logic [MEM_LANES-1:0][LINE_W-1:0]       mem_rd_data_i,
  output logic                                   idle_o
);
  mem_req_t [NumPorts-1:0] mem_req;

  nelssa_device #(
    .NumUnits        (NumUnits),
    .HeadDim         (HeadDim),
    .NumQHeads       (NumQHeads),
    .MaxClusterTokens(MaxClusterTokens),
    .AddrW           (AddrW),
    .MemBytes        (MemBytes),
    .BuildId         (BuildId),
    .MemLanes        (MemLanes),
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
    .mmio_i          (mmio_i),
    .mmio_rsp_valid_o(mmio_rsp_valid_o),
    .mmio_rsp_ready_i(mmio_rsp_ready_i),
    .mmio_rsp_o      (mmio_rsp_o),
    .req_valid_i     (req_valid_i),
    .req_ready_o     (req_ready_o),
    .req_i           (req_i),
    .rwd_valid_i     (rwd_valid_i),
    .rwd_ready_o     (rwd_ready_o),
    .rwd_i           (rwd_i),
    .ndr_valid_o     (ndr_valid_o),
    .ndr_ready_i     (ndr_ready_i),
    .ndr_o           (ndr_o),
    .drs_valid_o     (drs_valid_o),
    .drs_ready_i     (drs_ready_i),
    .drs_o           (drs_o),
    .mem_valid_o     (mem_valid_o),
    .mem_ready_i     (mem_ready_i),
    .mem_o           (mem_req),
    .mem_cpl_valid_i (mem_cpl_valid_i),
    .mem_cpl_tag_i   (mem_cpl_tag_i),
    .mem_rd_valid_i  (mem_rd_valid_i),
    .mem_rd_port_i   (mem_rd_port_i),
    .mem_rd_tag_i    (mem_rd_tag_i),
    .mem_rd_data_i   (mem_rd_data_i),
    .idle_o          (idle_o)
  );

  nelssa_mem_req_split #(
    .NumPorts(NumPorts),
    .AddrW   (AddrW)
  ) u_mem_req_split (
    .req_i  (mem_req),
    .write_o(mem_write_o),
    .addr_o (mem_addr_o),
    .tag_o  (mem_tag_o),
    .wdata_o(mem_wdata_o),
    .wstrb_o(mem_wstrb_o)
  );
endmodule
