// CXL.mem slave of a PNM device: M2S Req (MemRd) and M2S RwD (MemWr, MemWrPtl) onto one memory
// request port, S2M NDR (Cmp) and S2M DRS (MemData) back. Tags pass through, so completions may
// return in any order. A request whose opcode its channel does not define is answered with
// RSP_OPCODE_ERROR, one outside the HDM window (or not 64-byte aligned) with RSP_ADDR_ERROR;
// neither reaches memory. Responses queue in FIFOs (one per source, each with a single write
// port); a request is taken only when its FIFO has room for its response counting everything in
// flight, so a host that stops taking responses back-pressures requests and nothing is dropped.
// A response offered stays offered, unchanged, until taken. hold_i pauses new requests (the
// device uses it to keep host traffic from crowding out attention reads).
`include "nelssa_assert.svh"

module nelssa_cxl_mem_slave
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned AddrW     = 40,           // device-memory address width
  parameter longint      MemBytes  = 64'd1 << 36,  // HDM window size (64 GiB)
  parameter int unsigned RspDepth  = 64,           // entries of each response FIFO
  parameter int unsigned ReadLanes = 8             // read-data lanes of the memory (per cycle)
) (
  input  logic                                clk_i,
  input  logic                                rst_ni,
  // M2S Req
  input  logic                                req_valid_i,
  output logic                                req_ready_o,
  input  m2s_req_t                            req_i,
  // M2S RwD
  input  logic                                rwd_valid_i,
  output logic                                rwd_ready_o,
  input  m2s_rwd_t                            rwd_i,
  // S2M NDR
  output logic                                ndr_valid_o,
  input  logic                                ndr_ready_i,
  output s2m_ndr_t                            ndr_o,
  // S2M DRS
  output logic                                drs_valid_o,
  input  logic                                drs_ready_i,
  output s2m_drs_t                            drs_o,
  // memory request port (nelssa_ddr5_frontend port)
  output logic                                mem_valid_o,
  input  logic                                mem_ready_i,
  output mem_req_t                            mem_o,
  input  logic                                mem_cpl_valid_i,   // a write of this port done
  input  logic [15:0]                         mem_cpl_tag_i,
  input  logic [ReadLanes-1:0]                mem_rd_valid_i,    // read data for this port
  input  logic [ReadLanes-1:0][15:0]          mem_rd_tag_i,
  input  logic [ReadLanes-1:0][511:0]         mem_rd_data_i,
  output logic                                err_o,             // a request was out of range
  output logic                                err_opcode_o,      // one had an undefined opcode
  input  logic                                hold_i             // take no request this cycle
);
  localparam int unsigned CNT_W = $clog2(RspDepth + 1);

  if (RspDepth < 2 || (RspDepth & (RspDepth - 1)) != 0) begin : gen_depth_check
    $error("nelssa_cxl_mem_slave: RspDepth must be a power of two, at least 2");
  end
  if (AddrW > 64 || MemBytes > (64'd1 << AddrW)) begin : gen_addr_check
    $error("nelssa_cxl_mem_slave: MemBytes must fit AddrW bits");
  end

  typedef struct packed {
    logic [15:0]  tag;
    logic [7:0]   status;
    logic [511:0] data;
  } drs_t;

  typedef struct packed {
    logic [15:0] tag;
    logic [7:0]  status;
  } ndr_t;

  logic [CNT_W-1:0] drs_queued_q, ndr_queued_q;  // responses queued
  logic [CNT_W-1:0] reads_owed_q, writes_owed_q;  // requests in memory, their responses owed

  // one request per cycle; RwD first on odd cycles so neither channel starves
  logic prefer_rwd_q;
  logic take_rwd, take_req, bad, bad_opcode, fits;
  logic [7:0] err_status;
  logic [63:0] addr;

  function automatic logic in_window(logic [63:0] a);
    return a[5:0] == '0 && a < 64'(MemBytes);
  endfunction

  always_comb begin
    take_rwd = !hold_i && rwd_valid_i && (prefer_rwd_q || !req_valid_i);
    take_req = !hold_i && !take_rwd && req_valid_i;
    addr = take_rwd ? rwd_i.addr : req_i.addr;
    bad_opcode = take_rwd ? !(rwd_i.opcode == 8'(M2S_RWD_MEM_WR) ||
                              rwd_i.opcode == 8'(M2S_RWD_MEM_WR_PTL))
                          : req_i.opcode != 8'(M2S_REQ_MEM_RD);
    bad = bad_opcode || !in_window(addr);
    err_status = bad_opcode ? 8'(RSP_OPCODE_ERROR) : 8'(RSP_ADDR_ERROR);
    // room for the response: queued plus owed plus this one (read data arriving from memory
    // moves a response from owed to queued, so the sum never grows past the depth)
    if (take_rwd) fits = int'(ndr_queued_q) + int'(writes_owed_q) + 1 <= RspDepth;
    else          fits = int'(drs_queued_q) + int'(reads_owed_q) + 1 <= RspDepth;
    mem_valid_o = (take_rwd || take_req) && !bad && fits;
    mem_o = '{write: take_rwd, addr: 64'(addr[AddrW-1:0]), tag: take_rwd ? rwd_i.tag : req_i.tag,
              wdata: rwd_i.data, wstrb: rwd_i.byte_enable};
    err_o       = (take_rwd || take_req) && bad && !bad_opcode && fits;
    err_opcode_o = (take_rwd || take_req) && bad_opcode && fits;
  end

  // apart from the block above: the memory's ready depends on what that block drives
  always_comb begin
    rwd_ready_o = take_rwd && fits && (bad || mem_ready_i);
    req_ready_o = take_req && fits && (bad || mem_ready_i);
  end

  // ---- response FIFOs ---------------------------------------------------------------------------
  // One FIFO per source of responses, so that each has a single write port (RAM on an FPGA):
  // DRS from each memory lane and from the slave itself (ADDR_ERROR), NDR from the memory's
  // write completions and from the slave. Sources take turns at the output. Each FIFO is as
  // deep as the whole budget, which the request-side accounting never exceeds.
  localparam int unsigned DRS_SRCS = ReadLanes + 1;  // DRS sources; the last is the slave
  localparam int unsigned DRS_SRC_W = $clog2(DRS_SRCS);

  logic [DRS_SRCS-1:0]  drs_push, drs_pop, drs_empty;
  drs_t [DRS_SRCS-1:0]  drs_in, drs_head;
  logic [1:0]           ndr_push, ndr_pop, ndr_empty;
  ndr_t [1:0]           ndr_in, ndr_head;
  logic [DRS_SRC_W-1:0] drs_sel, drs_rr_q, drs_sel_q;
  logic                 ndr_sel, ndr_rr_q, ndr_sel_q;
  logic                 drs_stall_q, ndr_stall_q;  // offered, not taken: the same source again
  logic [DRS_SRCS-1:0]  drs_full;  // checked only: requests are taken only with room (below)
  logic [1:0]           ndr_full;

  // a memory lane's DRS FIFO holds its lines: block RAM (the slave's own carry no data)
  for (genvar i = 0; i < DRS_SRCS; i++) begin : gen_drs
    nelssa_fifo #(
      .Width   ($bits(drs_t)),
      .Depth   (RspDepth),
      .BlockRam(i < ReadLanes)
    ) u_fifo (
      .clk_i  (clk_i),
      .rst_ni (rst_ni),
      .push_i (drs_push[i]),
      .data_i (drs_in[i]),
      .pop_i  (drs_pop[i]),
      .head_o (drs_head[i]),
      .full_o (drs_full[i]),
      .empty_o(drs_empty[i])
    );
  end
  for (genvar i = 0; i < 2; i++) begin : gen_ndr
    nelssa_fifo #(
      .Width($bits(ndr_t)),
      .Depth(RspDepth)
    ) u_fifo (
      .clk_i  (clk_i),
      .rst_ni (rst_ni),
      .push_i (ndr_push[i]),
      .data_i (ndr_in[i]),
      .pop_i  (ndr_pop[i]),
      .head_o (ndr_head[i]),
      .full_o (ndr_full[i]),
      .empty_o(ndr_empty[i])
    );
  end

  always_comb begin
    // verilator unroll_full
    for (int l = 0; l < ReadLanes; l++) begin
      drs_push[l] = mem_rd_valid_i[l];
      drs_in[l] = '{tag: mem_rd_tag_i[l], status: 8'(RSP_OK), data: mem_rd_data_i[l]};
    end
    drs_push[DRS_SRCS-1] = req_valid_i && req_ready_o && bad;
    drs_in[DRS_SRCS-1] = '{tag: req_i.tag, status: err_status, data: '0};
    ndr_push[0] = mem_cpl_valid_i;
    ndr_in[0] = '{tag: mem_cpl_tag_i, status: 8'(RSP_OK)};
    ndr_push[1] = rwd_valid_i && rwd_ready_o && bad;
    ndr_in[1] = '{tag: rwd_i.tag, status: err_status};
    // the first non-empty source at or after the one after the last served
    drs_sel = drs_rr_q;
    // verilator unroll_full
    for (int k = DRS_SRCS - 1; k >= 0; k--) begin
      automatic int unsigned i = int'(drs_rr_q) + k;
      if (i >= DRS_SRCS) i = i - DRS_SRCS;
      if (!drs_empty[i]) drs_sel = DRS_SRC_W'(i);
    end
    if (drs_stall_q) drs_sel = drs_sel_q;  // valid held until ready, its payload with it
    ndr_sel = ndr_empty[ndr_rr_q] ? !ndr_rr_q : ndr_rr_q;
    if (ndr_stall_q) ndr_sel = ndr_sel_q;
    drs_pop = '0;
    drs_pop[drs_sel] = drs_valid_o && drs_ready_i;
    ndr_pop = '0;
    ndr_pop[ndr_sel] = ndr_valid_o && ndr_ready_i;
  end

  assign drs_valid_o = drs_empty != '1;
  assign drs_o = '{opcode: 8'(S2M_DRS_MEM_DATA), tag: drs_head[drs_sel].tag,
                  status: drs_head[drs_sel].status, data: drs_head[drs_sel].data};
  assign ndr_valid_o = ndr_empty != '1;
  assign ndr_o = '{opcode: 8'(S2M_NDR_CMP), tag: ndr_head[ndr_sel].tag,
                  status: ndr_head[ndr_sel].status};

  // ---- protocol rules ---------------------------------------------------------------------------
  // the host's side: a request offered stays offered, unchanged, until taken
  `NELSSA_ASSERT_HOLD(ReqHeld, req_valid_i, req_ready_o, req_i)
  `NELSSA_ASSERT_HOLD(RwdHeld, rwd_valid_i, rwd_ready_o, rwd_i)
  // the slave's side: so does a response
  `NELSSA_ASSERT_HOLD(NdrHeld, ndr_valid_o, ndr_ready_i, ndr_o)
  `NELSSA_ASSERT_HOLD(DrsHeld, drs_valid_o, drs_ready_i, drs_o)
  `NELSSA_ASSERT_KNOWN(ValidsKnown, {req_ready_o, rwd_ready_o, ndr_valid_o, drs_valid_o,
                                     mem_valid_o})
  `NELSSA_ASSERT_NEVER(OneRequestPerCycle, req_ready_o && rwd_ready_o)
  // the memory answers only what it was asked: as many responses as requests, never more
  `NELSSA_ASSERT(ReadDataOwed, CNT_W'($countones(mem_rd_valid_i)) <= reads_owed_q)
  `NELSSA_ASSERT(WriteCplOwed, !mem_cpl_valid_i || writes_owed_q != '0)
  // queued plus owed responses fit one FIFO, so no response FIFO is ever pushed when full
  `NELSSA_ASSERT(DrsBudget, int'(drs_queued_q) + int'(reads_owed_q) <= RspDepth)
  `NELSSA_ASSERT(NdrBudget, int'(ndr_queued_q) + int'(writes_owed_q) <= RspDepth)
  `NELSSA_ASSERT_NEVER(DrsFifoOverrun, |(drs_push & drs_full))
  `NELSSA_ASSERT_NEVER(NdrFifoOverrun, |(ndr_push & ndr_full))

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      drs_rr_q <= '0;
      ndr_rr_q <= 1'b0;
      drs_sel_q <= '0;
      ndr_sel_q <= 1'b0;
      drs_stall_q <= 1'b0;
      ndr_stall_q <= 1'b0;
      drs_queued_q <= '0;
      ndr_queued_q <= '0;
      reads_owed_q <= '0;
      writes_owed_q <= '0;
      prefer_rwd_q <= 1'b0;
    end else begin
      automatic int drs_queued = int'(drs_queued_q);
      automatic int ndr_queued = int'(ndr_queued_q);
      automatic int reads_owed = int'(reads_owed_q);
      automatic int writes_owed = int'(writes_owed_q);
      prefer_rwd_q <= !prefer_rwd_q;
      drs_sel_q <= drs_sel;
      ndr_sel_q <= ndr_sel;
      drs_stall_q <= drs_valid_o && !drs_ready_i;
      ndr_stall_q <= ndr_valid_o && !ndr_ready_i;
      // verilator unroll_full
      for (int l = 0; l < ReadLanes; l++) begin
        if (mem_rd_valid_i[l]) begin
          drs_queued++;
          reads_owed--;
        end
      end
      if (mem_cpl_valid_i) begin
        ndr_queued++;
        writes_owed--;
      end
      if (req_valid_i && req_ready_o) begin
        if (bad) drs_queued++;
        else reads_owed++;
      end
      if (rwd_valid_i && rwd_ready_o) begin
        if (bad) ndr_queued++;
        else writes_owed++;
      end
      if (drs_valid_o && drs_ready_i) begin
        drs_queued--;
        drs_rr_q <= (int'(drs_sel) + 1 >= DRS_SRCS) ? '0 : drs_sel + 1'b1;
      end
      if (ndr_valid_o && ndr_ready_i) begin
        ndr_queued--;
        ndr_rr_q <= !ndr_sel;
      end
      drs_queued_q <= CNT_W'(drs_queued);
      ndr_queued_q <= CNT_W'(ndr_queued);
      reads_owed_q <= CNT_W'(reads_owed);
      writes_owed_q <= CNT_W'(writes_owed);
    end
  end
endmodule
