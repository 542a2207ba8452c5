// CXL.mem slave of a PNM device: M2S Req (MemRd) and M2S RwD (MemWr, MemWrPtl) onto one memory
// request port, S2M NDR (Cmp) and S2M DRS (MemData) back. Tags pass through, so completions may
// return in any order. A request outside the HDM window (or not 64-byte aligned) is answered
// with RSP_ADDR_ERROR and never reaches memory. Responses queue in FIFOs; a request is taken
// only when its FIFO has room for its response counting everything in flight, so a host that
// stops taking responses back-pressures requests and nothing is dropped. hold_i pauses new
// requests (the device uses it to keep host traffic from crowding out attention reads).
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
  input  logic [15:0]                         req_tag_i,
  input  logic [63:0]                         req_addr_i,
  // M2S RwD
  input  logic                                rwd_valid_i,
  output logic                                rwd_ready_o,
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
  input  logic                                hold_i             // take no request this cycle
);
  localparam int unsigned CNT_W = $clog2(RspDepth + 1);
  localparam int unsigned PTR_W = $clog2(RspDepth);

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

  drs_t             drs_q [RspDepth];
  ndr_t             ndr_q [RspDepth];
  logic [PTR_W-1:0] drs_rd_q, drs_wr_q, ndr_rd_q, ndr_wr_q;
  logic [CNT_W-1:0] drs_n_q, ndr_n_q;          // FIFO entries
  logic [CNT_W-1:0] reads_q, writes_q;         // requests in memory, their responses owed

  // one request per cycle; RwD first on odd cycles so neither channel starves
  logic prefer_rwd_q;
  logic take_rwd, take_req, bad, fits;
  logic [63:0] addr;

  function automatic logic in_window(logic [63:0] a);
    return a[5:0] == '0 && a < 64'(MemBytes);
  endfunction

  always_comb begin
    take_rwd = !hold_i && rwd_valid_i && (prefer_rwd_q || !req_valid_i);
    take_req = !hold_i && !take_rwd && req_valid_i;
    addr = take_rwd ? rwd_addr_i : req_addr_i;
    bad = !in_window(addr);
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
    err_o       = (take_rwd || take_req) && bad && fits;
  end

  // apart from the block above: the memory's ready depends on what that block drives
  always_comb begin
    rwd_ready_o = take_rwd && fits && (bad || mem_ready_i);
    req_ready_o = take_req && fits && (bad || mem_ready_i);
  end

  // ---- response FIFOs --------------------------------------------------------------------------
  assign ndr_valid_o  = ndr_n_q != '0;
  assign ndr_tag_o    = ndr_q[ndr_rd_q].tag;
  assign ndr_status_o = ndr_q[ndr_rd_q].status;
  assign drs_valid_o  = drs_n_q != '0;
  assign drs_tag_o    = drs_q[drs_rd_q].tag;
  assign drs_status_o = drs_q[drs_rd_q].status;
  assign drs_data_o   = drs_q[drs_rd_q].data;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      drs_rd_q <= '0;
      drs_wr_q <= '0;
      ndr_rd_q <= '0;
      ndr_wr_q <= '0;
      drs_n_q <= '0;
      ndr_n_q <= '0;
      reads_q <= '0;
      writes_q <= '0;
      prefer_rwd_q <= 1'b0;
    end else begin
      automatic logic [PTR_W-1:0] dw = drs_wr_q;
      automatic logic [PTR_W-1:0] nw = ndr_wr_q;
      automatic int dn = int'(drs_n_q);
      automatic int nn = int'(ndr_n_q);
      automatic int rd = int'(reads_q);
      automatic int wr = int'(writes_q);
      prefer_rwd_q <= !prefer_rwd_q;
      // read data from the memory lanes, lowest lane first
      for (int l = 0; l < ReadLanes; l++) begin
        if (mem_rd_valid_i[l]) begin
          drs_q[dw] <= '{tag: mem_rd_tag_i[l], status: 8'(RSP_OK), data: mem_rd_data_i[l]};
          dw = dw + 1'b1;
          dn++;
          rd--;
        end
      end
      if (mem_cpl_valid_i) begin
        ndr_q[nw] <= '{tag: mem_cpl_tag_i, status: 8'(RSP_OK)};
        nw = nw + 1'b1;
        nn++;
        wr--;
      end
      // requests answered here, or sent to memory
      if (req_valid_i && req_ready_o) begin
        if (bad) begin
          drs_q[dw] <= '{tag: req_tag_i, status: 8'(RSP_ADDR_ERROR), data: '0};
          dw = dw + 1'b1;
          dn++;
        end else begin
          rd++;
        end
      end
      if (rwd_valid_i && rwd_ready_o) begin
        if (bad) begin
          ndr_q[nw] <= '{tag: rwd_tag_i, status: 8'(RSP_ADDR_ERROR)};
          nw = nw + 1'b1;
          nn++;
        end else begin
          wr++;
        end
      end
      if (drs_valid_o && drs_ready_i) begin
        drs_rd_q <= drs_rd_q + 1'b1;
        dn--;
      end
      if (ndr_valid_o && ndr_ready_i) begin
        ndr_rd_q <= ndr_rd_q + 1'b1;
        nn--;
      end
      drs_wr_q <= dw;
      ndr_wr_q <= nw;
      drs_n_q <= CNT_W'(dn);
      ndr_n_q <= CNT_W'(nn);
      reads_q <= CNT_W'(rd);
      writes_q <= CNT_W'(wr);
    end
  end
endmodule
