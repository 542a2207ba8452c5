// A PNM device as software sees it: the register block (CXL.io MMIO), the CXL.mem slave, the
// command queue and NumUnits attention units, all on the device memory's request ports
// (nelssa_ddr5_frontend): port 0 the host's CXL.mem, port 1 the command queue (descriptors,
// completions), ports 2.. one per attention unit. Attention reads and Memory API writes meet
// in the memory front end, whose round robin gives every port its turn at each sub-channel.
module nelssa_device
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned NumUnits    = 4,             // attention units (engines)
  parameter int unsigned HeadDim     = 128,           // each engine's largest head_dim
  parameter int unsigned NumQHeads   = 8,             // each engine's largest GQA group
  parameter int unsigned MaxClusterTokens = 64,       // each engine's largest cluster
  parameter int unsigned AddrW       = 40,            // device-memory address width
  parameter longint      MemBytes    = 64'd1 << 36,   // HDM window (64 GiB)
  parameter logic [31:0] BuildId     = 32'h0,         // BUILD_ID register (bitstream build id)
  parameter int unsigned MemLanes    = MEM_LANES,     // read-data lanes the memory uses
                                                      // (the lowest ones): 8 sub-channels in
                                                      // simulation, a board's channel count
  parameter int unsigned HostShare   = 8,             // while attention runs, the host's
                                                      // CXL.mem may start a request every
                                                      // HostShare cycles
  // each engine's arithmetic units' latencies (nelssa_attn_engine), cycles 0..15, 0: combinational
  parameter int unsigned Bf16MulLatency = 0,          // bf16 x bf16 multipliers
  parameter int unsigned AddLatency  = 0,             // fp32 adders
  parameter int unsigned MulLatency  = 0,             // fp32 multipliers
  parameter int unsigned Exp2Latency = 0,             // exp2
  parameter int unsigned Log2Latency = 0,             // log2
  parameter int unsigned RecipLatency = 0,            // reciprocal
  parameter int unsigned ComputeLanes = 32,           // engine lanes computed a cycle (1..32)
  localparam int unsigned NumMemPorts = NumUnits + 2, // memory ports used
  localparam int unsigned PortW      = $clog2(NumMemPorts)   // port id width
) (
  input  logic                              clk_i,
  input  logic                              rst_ni,
  // CXL.io register access
  input  logic                              mmio_valid_i,
  output logic                              mmio_ready_o,
  input  mmio_req_t                         mmio_i,
  output logic                              mmio_rsp_valid_o,
  input  logic                              mmio_rsp_ready_i,
  output mmio_rsp_t                         mmio_rsp_o,
  // CXL.mem
  input  logic                              req_valid_i,
  output logic                              req_ready_o,
  input  m2s_req_t                          req_i,
  input  logic                              rwd_valid_i,
  output logic                              rwd_ready_o,
  input  m2s_rwd_t                          rwd_i,
  output logic                              ndr_valid_o,
  input  logic                              ndr_ready_i,
  output s2m_ndr_t                          ndr_o,
  output logic                              drs_valid_o,
  input  logic                              drs_ready_i,
  output s2m_drs_t                          drs_o,
  // device memory (nelssa_ddr5_frontend ports)
  output logic [NumMemPorts-1:0]            mem_valid_o,
  input  logic [NumMemPorts-1:0]            mem_ready_i,
  output mem_req_t [NumMemPorts-1:0]        mem_o,          // addresses below 2^AddrW
  input  logic [NumMemPorts-1:0]            mem_cpl_valid_i,
  input  logic [NumMemPorts-1:0][MEM_TAG_W-1:0] mem_cpl_tag_i,
  input  logic [MEM_LANES-1:0]              mem_rd_valid_i,
  input  logic [MEM_LANES-1:0][PortW-1:0]   mem_rd_port_i,
  input  logic [MEM_LANES-1:0][MEM_TAG_W-1:0] mem_rd_tag_i,
  input  logic [MEM_LANES-1:0][LINE_W-1:0]  mem_rd_data_i,
  output logic                              idle_o
);
  if (NumUnits < 1 || NumUnits > 6) begin : gen_units_check
    $error("nelssa_device: NumUnits must be 1..6 (the memory front end has 8 ports)");
  end
  if (MemLanes < 1 || MemLanes > MEM_LANES) begin : gen_lanes_check
    $error("nelssa_device: MemLanes must be 1..MEM_LANES");
  end
  if (HostShare < 1 || HostShare > 256) begin : gen_share_check
    $error("nelssa_device: HostShare must be 1..256");
  end
  if (NumQHeads < 1 || NumQHeads > 16 || MaxClusterTokens > 255) begin : gen_caps_check
    $error("nelssa_device: CAPS holds 1..16 query heads and up to 255 cluster tokens");
  end

  // Isolation of attention from KV ingestion (paper 5.1): the memory front end serves the
  // units' reads before the host's requests, and while a unit runs the host's requests are
  // spaced HostShare cycles apart, so the write drains they cause in the DDR5 controllers stay
  // rare enough not to stall the units' in-order streams.
  localparam int unsigned ShareW = (HostShare > 1) ? $clog2(HostShare) : 1;  // share_q
  logic [ShareW-1:0] share_q;
  logic       host_hold;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) share_q <= '0;
    else share_q <= (int'(share_q) >= HostShare - 1) ? '0 : share_q + 1'b1;
  end

  logic        err_mem, err_opcode, enable, sq_reset, cq_reset, cmdq_idle, desc_done, desc_err;
  logic [63:0] sq_base, cq_base, region_base, region_limit;
  logic [31:0] sq_size, sq_tail, cq_size, cq_head, sq_head, cq_tail;
  logic [NumUnits-1:0] unit_start, unit_busy, unit_done, unit_read;
  logic [NumUnits-1:0][7:0] unit_status;  // desc_status_e
  logic [DESC_BYTES*8-1:0] unit_desc;
  logic [63:0]  unit_lo, unit_hi;
  logic [1:0][63:0] unit_ring_lo, unit_ring_hi;
  // bytes the units read this cycle: a line each at most
  localparam int unsigned BytesW = $clog2(NumUnits * LINE_BYTES + 1);
  logic [BytesW-1:0] bytes_read;

  // read-data lanes by port
  logic [NumMemPorts-1:0][MEM_LANES-1:0] lane_valid;
  for (genvar p = 0; p < NumMemPorts; p++) begin : gen_lanes
    for (genvar l = 0; l < MEM_LANES; l++) begin : gen_lane
      assign lane_valid[p][l] = mem_rd_valid_i[l] && mem_rd_port_i[l] == PortW'(p);
    end
  end

  // the command queue has one read in flight: its line is on whichever lane carries it
  logic         cmdq_rd_valid;
  logic [LINE_W-1:0] cmdq_rd_data;
  always_comb begin
    cmdq_rd_valid = |lane_valid[1];
    cmdq_rd_data = '0;
    // verilator unroll_full
    for (int l = 0; l < MEM_LANES; l++) if (lane_valid[1][l]) cmdq_rd_data = mem_rd_data_i[l];
  end

  always_comb begin
    bytes_read = '0;
    // verilator unroll_full
    for (int u = 0; u < NumUnits; u++) if (unit_read[u]) bytes_read = bytes_read + BytesW'(LINE_BYTES);
  end

  nelssa_regs #(
    .NumEngines      (NumUnits),
    .NumQHeads       (NumQHeads),
    .HeadDim         (HeadDim),
    .MaxClusterTokens(MaxClusterTokens),
    .BuildId         (BuildId),
    .MemBytes        (MemBytes),
    .BytesW          (BytesW)
  ) u_regs (
    .clk_i         (clk_i),
    .rst_ni        (rst_ni),
    .mmio_valid_i  (mmio_valid_i),
    .mmio_ready_o  (mmio_ready_o),
    .mmio_i        (mmio_i),
    .rsp_valid_o   (mmio_rsp_valid_o),
    .rsp_ready_i   (mmio_rsp_ready_i),
    .rsp_o         (mmio_rsp_o),
    .enable_o      (enable),
    .sq_base_o     (sq_base),
    .sq_size_o     (sq_size),
    .sq_tail_o     (sq_tail),
    .cq_base_o     (cq_base),
    .cq_size_o     (cq_size),
    .cq_head_o     (cq_head),
    .region_base_o (region_base),
    .region_limit_o(region_limit),
    .sq_reset_o    (sq_reset),
    .cq_reset_o    (cq_reset),
    .sq_head_i     (sq_head),
    .cq_tail_i     (cq_tail),
    .idle_i        (cmdq_idle),
    .err_desc_i    (desc_err),
    .err_mem_i     (err_mem),
    .err_opcode_i  (err_opcode),
    .desc_done_i   (desc_done),
    .busy_i        (|unit_busy),
    .bytes_read_i  (bytes_read)
  );

  nelssa_cxl_mem_slave #(
    .AddrW    (AddrW),
    .MemBytes (MemBytes),
    .ReadLanes(MemLanes)
  ) u_cxl (
    .clk_i          (clk_i),
    .rst_ni         (rst_ni),
    .req_valid_i    (req_valid_i),
    .req_ready_o    (req_ready_o),
    .req_i          (req_i),
    .rwd_valid_i    (rwd_valid_i),
    .rwd_ready_o    (rwd_ready_o),
    .rwd_i          (rwd_i),
    .ndr_valid_o    (ndr_valid_o),
    .ndr_ready_i    (ndr_ready_i),
    .ndr_o          (ndr_o),
    .drs_valid_o    (drs_valid_o),
    .drs_ready_i    (drs_ready_i),
    .drs_o          (drs_o),
    .mem_valid_o    (mem_valid_o[0]),
    .mem_ready_i    (mem_ready_i[0]),
    .mem_o          (mem_o[0]),
    .mem_cpl_valid_i(mem_cpl_valid_i[0]),
    .mem_cpl_tag_i  (mem_cpl_tag_i[0]),
    .mem_rd_valid_i (lane_valid[0][MemLanes-1:0]),
    .mem_rd_tag_i   (mem_rd_tag_i[MemLanes-1:0]),
    .mem_rd_data_i  (mem_rd_data_i[MemLanes-1:0]),
    .err_o          (err_mem),
    .err_opcode_o   (err_opcode),
    .hold_i         (host_hold)
  );

  nelssa_cmdq #(
    .AddrW   (AddrW),
    .NumUnits(NumUnits),
    .MemBytes(MemBytes)
  ) u_cmdq (
    .clk_i         (clk_i),
    .rst_ni        (rst_ni),
    .enable_i      (enable),
    .sq_base_i     (sq_base),
    .sq_size_i     (sq_size),
    .sq_tail_i     (sq_tail),
    .cq_base_i     (cq_base),
    .cq_size_i     (cq_size),
    .cq_head_i     (cq_head),
    .region_base_i (region_base),
    .region_limit_i(region_limit),
    .sq_reset_i    (sq_reset),
    .cq_reset_i    (cq_reset),
    .sq_head_o     (sq_head),
    .cq_tail_o     (cq_tail),
    .idle_o        (cmdq_idle),
    .desc_done_o   (desc_done),
    .desc_err_o    (desc_err),
    .unit_start_o  (unit_start),
    .unit_desc_o   (unit_desc),
    .unit_lo_o     (unit_lo),
    .unit_hi_o     (unit_hi),
    .unit_ring_lo_o(unit_ring_lo),
    .unit_ring_hi_o(unit_ring_hi),
    .unit_busy_i   (unit_busy),
    .unit_done_i   (unit_done),
    .unit_status_i (unit_status),
    .mem_valid_o   (mem_valid_o[1]),
    .mem_ready_i   (mem_ready_i[1]),
    .mem_o         (mem_o[1]),
    .mem_cpl_i     (mem_cpl_valid_i[1]),
    .rd_valid_i    (cmdq_rd_valid),
    .rd_data_i     (cmdq_rd_data)
  );

  for (genvar u = 0; u < NumUnits; u++) begin : gen_unit
    nelssa_attn_unit #(
      .AddrW           (AddrW),
      .HeadDim         (HeadDim),
      .NumQHeads       (NumQHeads),
      .MaxClusterTokens(MaxClusterTokens),
      .Lanes           (MemLanes),
      .Bf16MulLatency  (Bf16MulLatency),
      .AddLatency      (AddLatency),
      .MulLatency      (MulLatency),
      .Exp2Latency     (Exp2Latency),
      .Log2Latency     (Log2Latency),
      .RecipLatency    (RecipLatency),
      .ComputeLanes    (ComputeLanes)
    ) u_unit (
      .clk_i      (clk_i),
      .rst_ni     (rst_ni),
      .start_i    (unit_start[u]),
      .desc_i     (unit_desc),
      .region_lo_i(unit_lo),
      .region_hi_i(unit_hi),
      .ring_lo_i  (unit_ring_lo),
      .ring_hi_i  (unit_ring_hi),
      .busy_o     (unit_busy[u]),
      .done_o     (unit_done[u]),
      .status_o   (unit_status[u]),
      .mem_valid_o(mem_valid_o[u+2]),
      .mem_ready_i(mem_ready_i[u+2]),
      .mem_o      (mem_o[u+2]),
      .mem_cpl_i  (mem_cpl_valid_i[u+2]),
      .rd_valid_i (lane_valid[u+2]),
      .rd_tag_i   (mem_rd_tag_i),
      .rd_data_i  (mem_rd_data_i),
      .line_read_o(unit_read[u])
    );
  end

  // completion tags of ports 1.. are not needed: each has its writes counted, in order
  /* verilator lint_off UNUSEDSIGNAL */
  logic [NumMemPorts-1:0][MEM_TAG_W-1:0] cpl_tag_unused;
  /* verilator lint_on UNUSEDSIGNAL */
  assign cpl_tag_unused = mem_cpl_tag_i;

  assign host_hold = |unit_busy && share_q != '0;
  assign idle_o = cmdq_idle;
endmodule
