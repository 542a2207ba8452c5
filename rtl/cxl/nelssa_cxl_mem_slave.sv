// CXL.mem slave of a PNM device: M2S Req (MemRd) and M2S RwD (MemWr, MemWrPtl) onto one memory
// request port, S2M NDR (Cmp) and S2M DRS (MemData) back. Tags pass through, so completions may
// return in any order. A request whose opcode its channel does not define is answered with
// RSP_OPCODE_ERROR, one outside the HDM window (or not 64-byte aligned) with RSP_ADDR_ERROR; neither
// reaches memory. Responses queue in FIFOs (one per source, each
// with a single write port); a request is taken
// only when its FIFO has room for its response counting everything in flight, so a host that
// stops taking responses back-pressures requests and nothing is dropped. hold_i pauses new
// requests (the device uses it to keep host traffic from crowding out attention reads).
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
  input  logic [7:0]                          req_opcode_i,      // m2s_req_opcode_e
  input  logic [15:0]                         req_tag_i,
  input  logic [63:0]                         req_addr_i,
  // M2S RwD
  input  logic                                rwd_valid_i,
  output logic                                rwd_ready_o,
  input  logic [7:0]                          rwd_opcode_i,      // m2s_rwd_opcode_e
  input  logic [15:0]                         rwd_tag_i,
  input  logic [63:0]                         rwd_addr_i,
  input  logic [63:0]                         rwd_be_i,
  input  logic [511:0]                        rwd_data_i,
  // S2M NDR
  output logic                                ndr_valid_o,
  input  logic                                ndr_ready_i,
  output logic [15:0]                         ndr_tag_o,
  output logic [7:0]                          ndr_status_o,
  // S2M DRS
  output logic                                drs_valid_o,
  input  logic                                drs_ready_i,
  output logic [15:0]                         drs_tag_o,
  output logic [7:0]                          drs_status_o,
  output logic [511:0]                        drs_data_o,
  // memory request port (nelssa_ddr5_frontend port)
  output logic                                mem_valid_o,
  input  logic                                mem_ready_i,
  output logic                                mem_write_o,
  output logic [AddrW-1:0]                    mem_addr_o,
  output logic [15:0]                         mem_tag_o,
  output logic [511:0]                        mem_wdata_o,
  output logic [63:0]                         mem_wstrb_o,
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

  logic [CNT_W-1:0] drs_n_q, ndr_n_q;          // responses queued
  logic [CNT_W-1:0] reads_q, writes_q;         // requests in memory, their responses owed

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
    addr = take_rwd ? rwd_addr_i : req_addr_i;
    bad_opcode = take_rwd ? !(rwd_opcode_i == 8'(M2S_RWD_MEM_WR) ||
                              rwd_opcode_i == 8'(M2S_RWD_MEM_WR_PTL))
                          : req_opcode_i != 8'(M2S_REQ_MEM_RD);
    bad = bad_opcode || !in_window(addr);
    err_status = bad_opcode ? 8'(RSP_OPCODE_ERROR) : 8'(RSP_ADDR_ERROR);
    // room for the response: queued plus owed plus this one (read data arriving from memory
    // moves a response from owed to queued, so the sum never grows past the depth)
    if (take_rwd) fits = int'(ndr_n_q) + int'(writes_q) + 1 <= RspDepth;
    else          fits = int'(drs_n_q) + int'(reads_q) + 1 <= RspDepth;
    mem_valid_o = (take_rwd || take_req) && !bad && fits;
    mem_write_o = take_rwd;
    mem_addr_o  = addr[AddrW-1:0];
    mem_tag_o   = take_rwd ? rwd_tag_i : req_tag_i;
    mem_wdata_o = rwd_data_i;
    mem_wstrb_o = rwd_be_i;
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
  localparam int unsigned DS = ReadLanes + 1;  // DRS sources; the last is the slave
  localparam int unsigned DSW = $clog2(DS);

  logic [DS-1:0]       d_push, d_pop, d_empty;
  drs_t [DS-1:0]       d_in, d_head;
  logic [1:0]          n_push, n_pop, n_empty;
  ndr_t [1:0]          n_in, n_head;
  logic [DSW-1:0]      d_sel, d_rr_q, d_sel_q;
  logic                n_sel, n_rr_q, n_sel_q;
  logic                d_stall_q, n_stall_q;  // a response offered, not taken: its source stays
  logic [DS-1:0]       d_full;  // checked only: requests are taken only with room (below)
  logic [1:0]          n_full;

  for (genvar i = 0; i < DS; i++) begin : gen_drs
    nelssa_fifo #(
      .Width($bits(drs_t)),
      .Depth(RspDepth)
    ) u_fifo (
      .clk_i  (clk_i),
      .rst_ni (rst_ni),
      .push_i (d_push[i]),
      .data_i (d_in[i]),
      .pop_i  (d_pop[i]),
      .head_o (d_head[i]),
      .full_o (d_full[i]),
      .empty_o(d_empty[i])
    );
  end
  for (genvar i = 0; i < 2; i++) begin : gen_ndr
    nelssa_fifo #(
      .Width($bits(ndr_t)),
      .Depth(RspDepth)
    ) u_fifo (
      .clk_i  (clk_i),
      .rst_ni (rst_ni),
      .push_i (n_push[i]),
      .data_i (n_in[i]),
      .pop_i  (n_pop[i]),
      .head_o (n_head[i]),
      .full_o (n_full[i]),
      .empty_o(n_empty[i])
    );
  end

  always_comb begin
    for (int l = 0; l < ReadLanes; l++) begin
      d_push[l] = mem_rd_valid_i[l];
      d_in[l] = '{tag: mem_rd_tag_i[l], status: 8'(RSP_OK), data: mem_rd_data_i[l]};
    end
    d_push[DS-1] = req_valid_i && req_ready_o && bad;
    d_in[DS-1] = '{tag: req_tag_i, status: err_status, data: '0};
    n_push[0] = mem_cpl_valid_i;
    n_in[0] = '{tag: mem_cpl_tag_i, status: 8'(RSP_OK)};
    n_push[1] = rwd_valid_i && rwd_ready_o && bad;
    n_in[1] = '{tag: rwd_tag_i, status: err_status};
    // the first non-empty source at or after the one after the last served
    d_sel = d_rr_q;
    for (int k = DS - 1; k >= 0; k--) begin
      automatic int unsigned i = int'(d_rr_q) + k;
      if (i >= DS) i = i - DS;
      if (!d_empty[i]) d_sel = DSW'(i);
    end
    if (d_stall_q) d_sel = d_sel_q;  // valid held until ready, its payload with it
    n_sel = n_empty[n_rr_q] ? !n_rr_q : n_rr_q;
    if (n_stall_q) n_sel = n_sel_q;
    d_pop = '0;
    d_pop[d_sel] = drs_valid_o && drs_ready_i;
    n_pop = '0;
    n_pop[n_sel] = ndr_valid_o && ndr_ready_i;
  end

  assign drs_valid_o  = d_empty != '1;
  assign drs_tag_o    = d_head[d_sel].tag;
  assign drs_status_o = d_head[d_sel].status;
  assign drs_data_o   = d_head[d_sel].data;
  assign ndr_valid_o  = n_empty != '1;
  assign ndr_tag_o    = n_head[n_sel].tag;
  assign ndr_status_o = n_head[n_sel].status;

  // ---- protocol rules ---------------------------------------------------------------------------
  // the host's side: a request offered stays offered, unchanged, until taken
  `NELSSA_ASSERT_HOLD(ReqHeld, req_valid_i, req_ready_o, {req_opcode_i, req_tag_i, req_addr_i})
  `NELSSA_ASSERT_HOLD(RwdHeld, rwd_valid_i, rwd_ready_o,
                      {rwd_opcode_i, rwd_tag_i, rwd_addr_i, rwd_be_i, rwd_data_i})
  // the slave's side: so does a response
  `NELSSA_ASSERT_HOLD(NdrHeld, ndr_valid_o, ndr_ready_i, {ndr_tag_o, ndr_status_o})
  `NELSSA_ASSERT_HOLD(DrsHeld, drs_valid_o, drs_ready_i, {drs_tag_o, drs_status_o, drs_data_o})
  `NELSSA_ASSERT_KNOWN(ValidsKnown, {req_ready_o, rwd_ready_o, ndr_valid_o, drs_valid_o,
                                     mem_valid_o})
  `NELSSA_ASSERT_NEVER(OneRequestPerCycle, req_ready_o && rwd_ready_o)
  // the memory answers only what it was asked: as many responses as requests, never more
  `NELSSA_ASSERT(ReadDataOwed, CNT_W'($countones(mem_rd_valid_i)) <= reads_q)
  `NELSSA_ASSERT(WriteCplOwed, !mem_cpl_valid_i || writes_q != '0)
  // queued plus owed responses fit one FIFO, so no response FIFO is ever pushed when full
  `NELSSA_ASSERT(DrsBudget, int'(drs_n_q) + int'(reads_q) <= RspDepth)
  `NELSSA_ASSERT(NdrBudget, int'(ndr_n_q) + int'(writes_q) <= RspDepth)
  `NELSSA_ASSERT_NEVER(DrsFifoOverrun, |(d_push & d_full))
  `NELSSA_ASSERT_NEVER(NdrFifoOverrun, |(n_push & n_full))

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      d_rr_q <= '0;
      n_rr_q <= 1'b0;
      d_sel_q <= '0;
      n_sel_q <= 1'b0;
      d_stall_q <= 1'b0;
      n_stall_q <= 1'b0;
      drs_n_q <= '0;
      ndr_n_q <= '0;
      reads_q <= '0;
      writes_q <= '0;
      prefer_rwd_q <= 1'b0;
    end else begin
      automatic int dn = int'(drs_n_q);
      automatic int nn = int'(ndr_n_q);
      automatic int rd = int'(reads_q);
      automatic int wr = int'(writes_q);
      prefer_rwd_q <= !prefer_rwd_q;
      d_sel_q <= d_sel;
      n_sel_q <= n_sel;
      d_stall_q <= drs_valid_o && !drs_ready_i;
      n_stall_q <= ndr_valid_o && !ndr_ready_i;
      for (int l = 0; l < ReadLanes; l++) begin
        if (mem_rd_valid_i[l]) begin
          dn++;
          rd--;
        end
      end
      if (mem_cpl_valid_i) begin
        nn++;
        wr--;
      end
      if (req_valid_i && req_ready_o) begin
        if (bad) dn++;
        else rd++;
      end
      if (rwd_valid_i && rwd_ready_o) begin
        if (bad) nn++;
        else wr++;
      end
      if (drs_valid_o && drs_ready_i) begin
        dn--;
        d_rr_q <= (int'(d_sel) + 1 >= DS) ? '0 : d_sel + 1'b1;
      end
      if (ndr_valid_o && ndr_ready_i) begin
        nn--;
        n_rr_q <= !n_sel;
      end
      drs_n_q <= CNT_W'(dn);
      ndr_n_q <= CNT_W'(nn);
      reads_q <= CNT_W'(rd);
      writes_q <= CNT_W'(wr);
    end
  end
endmodule
