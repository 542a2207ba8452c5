// The memory BAR and the DMA engine of a board: an AXI4 slave (512-bit data, as a PCIe IP's
// BAR bridge or DMA master presents it) onto the device's CXL.mem slave. Each data beat becomes
// one 64-byte line request: a write beat a MemWr(Ptl) with the beat's strobes as byte enables,
// a read beat a MemRd whose line comes back as the beat. INCR and FIXED bursts of any size and
// length; a WRAP burst answers SLVERR and touches nothing. One burst at a time, writes before
// waiting reads (PCIe's ordering: a read does not pass a write); within a read burst up to
// ReadWindow lines are in flight and the beats return in order. A line the device refuses (outside
// its memory) makes the burst answer SLVERR.
`include "nelssa_assert.svh"

module nelssa_axi_host
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned IdW        = 4,   // AXI ID width
  parameter int unsigned AddrW      = 64,  // AXI byte-address width
  parameter int unsigned ReadWindow = 8    // lines of one read burst in flight (power of two)
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  // AXI4 slave: write address, data, response
  input  logic              s_awvalid_i,
  output logic              s_awready_o,
  input  logic [IdW-1:0]    s_awid_i,
  input  logic [AddrW-1:0]  s_awaddr_i,
  input  logic [7:0]        s_awlen_i,
  input  logic [2:0]        s_awsize_i,
  input  logic [1:0]        s_awburst_i,
  input  logic              s_wvalid_i,
  output logic              s_wready_o,
  input  logic [511:0]      s_wdata_i,
  input  logic [63:0]       s_wstrb_i,
  input  logic              s_wlast_i,
  output logic              s_bvalid_o,
  input  logic              s_bready_i,
  output logic [IdW-1:0]    s_bid_o,
  output logic [1:0]        s_bresp_o,
  // read address, data
  input  logic              s_arvalid_i,
  output logic              s_arready_o,
  input  logic [IdW-1:0]    s_arid_i,
  input  logic [AddrW-1:0]  s_araddr_i,
  input  logic [7:0]        s_arlen_i,
  input  logic [2:0]        s_arsize_i,
  input  logic [1:0]        s_arburst_i,
  output logic              s_rvalid_o,
  input  logic              s_rready_i,
  output logic [IdW-1:0]    s_rid_o,
  output logic [511:0]      s_rdata_o,
  output logic [1:0]        s_rresp_o,
  output logic              s_rlast_o,
  // the device's CXL.mem slave
  output logic              req_valid_o,
  input  logic              req_ready_i,
  output m2s_req_t          req_o,
  output logic              rwd_valid_o,
  input  logic              rwd_ready_i,
  output m2s_rwd_t          rwd_o,
  input  logic              ndr_valid_i,
  output logic              ndr_ready_o,
  input  s2m_ndr_t          ndr_i,
  input  logic              drs_valid_i,
  output logic              drs_ready_o,
  input  s2m_drs_t          drs_i
);
  localparam int unsigned WinW = $clog2(ReadWindow);
  localparam logic [1:0] BURST_FIXED = 2'b00;
  localparam logic [1:0] BURST_INCR = 2'b01;
  localparam logic [1:0] RESP_OKAY = 2'b00;
  localparam logic [1:0] RESP_SLVERR = 2'b10;

  if (IdW < 1 || IdW > 16) begin : gen_id_check
    $error("nelssa_axi_host: IdW must be 1..16");
  end
  if (AddrW < 12 || AddrW > 64) begin : gen_addr_check
    $error("nelssa_axi_host: AddrW must be 12..64");
  end
  if (ReadWindow < 2 || ReadWindow > 64 || (ReadWindow & (ReadWindow - 1)) != 0)
  begin : gen_window_check
    $error("nelssa_axi_host: ReadWindow must be a power of two in 2..64");
  end

  typedef enum logic [1:0] {
    IDLE,   // waiting for a burst
    WRITE,  // taking W beats and issuing their lines
    WRESP,  // waiting for the last completions, then B
    READ    // issuing line reads and returning beats
  } state_e;

  state_e           state_q, state_d;
  logic [IdW-1:0]   id_q;
  logic [AddrW-1:0] addr_q;     // address of the next beat to issue
  logic [2:0]       size_q;
  logic             fixed_q;    // FIXED burst: every beat at the same address
  logic             bad_q;      // WRAP or reserved burst: answered SLVERR, nothing issued
  logic [8:0]       beats_q;    // beats of the burst
  logic [8:0]       issued_q;   // beats issued (written or asked for)
  logic [8:0]       done_q;     // beats completed (write) or returned (read)
  logic             err_q;      // a line was refused
  logic [ReadWindow-1:0]        slot_valid_q;
  logic [ReadWindow-1:0]        slot_err_q;
  logic [511:0]                 slot_data_q [ReadWindow];  // no reset: distributed RAM

  logic take_aw, take_ar, w_fire, req_fire, r_fire, drs_fire, ndr_fire;
  logic [WinW-1:0] out_slot, drs_slot;
  assign take_aw = state_q == IDLE && s_awvalid_i;
  assign take_ar = state_q == IDLE && s_arvalid_i && !s_awvalid_i;
  assign w_fire = state_q == WRITE && s_wvalid_i && (bad_q || rwd_ready_i);
  assign req_fire = req_valid_o && req_ready_i;
  assign r_fire = s_rvalid_o && s_rready_i;
  assign drs_fire = drs_valid_i;  // every read in flight has its slot: always taken
  assign ndr_fire = ndr_valid_i;
  assign out_slot = done_q[WinW-1:0];
  assign drs_slot = drs_i.tag[WinW-1:0];

  function automatic logic [AddrW-1:0] next_addr(logic [AddrW-1:0] a, logic [2:0] size,
                                                 logic fixed);
    return fixed ? a : a + (AddrW'(1) << size);
  endfunction

  always_comb begin
    state_d = state_q;
    unique case (state_q)
      IDLE:    if (take_aw || take_ar) state_d = take_aw ? WRITE : READ;
      WRITE:   if (w_fire && issued_q + 9'd1 == beats_q) state_d = WRESP;
      WRESP:   if (s_bvalid_o && s_bready_i) state_d = IDLE;
      READ:    if (r_fire && done_q + 9'd1 == beats_q) state_d = IDLE;
      default: state_d = IDLE;
    endcase
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= IDLE;
      id_q <= '0;
      addr_q <= '0;
      size_q <= '0;
      fixed_q <= 1'b0;
      bad_q <= 1'b0;
      beats_q <= '0;
      issued_q <= '0;
      done_q <= '0;
      err_q <= 1'b0;
      slot_valid_q <= '0;
      slot_err_q <= '0;
    end else begin
      state_q <= state_d;
      unique case (state_q)
        IDLE: begin
          if (take_aw || take_ar) begin
            id_q <= take_aw ? s_awid_i : s_arid_i;
            addr_q <= take_aw ? s_awaddr_i : s_araddr_i;
            size_q <= take_aw ? s_awsize_i : s_arsize_i;
            fixed_q <= (take_aw ? s_awburst_i : s_arburst_i) == BURST_FIXED;
            bad_q <= !((take_aw ? s_awburst_i : s_arburst_i) inside {BURST_FIXED, BURST_INCR})
                     || (take_aw ? s_awsize_i : s_arsize_i) > 3'd6;
            beats_q <= {1'b0, take_aw ? s_awlen_i : s_arlen_i} + 9'd1;
            issued_q <= '0;
            done_q <= '0;
            err_q <= 1'b0;
          end
        end
        WRITE: begin
          if (w_fire) begin
            addr_q <= next_addr(addr_q, size_q, fixed_q);
            issued_q <= issued_q + 9'd1;
          end
        end
        READ: begin
          if (req_fire) begin
            addr_q <= next_addr(addr_q, size_q, fixed_q);
            issued_q <= issued_q + 9'd1;
          end else if (bad_q && r_fire) begin
            issued_q <= issued_q + 9'd1;
          end
          if (r_fire) done_q <= done_q + 9'd1;
        end
        default: ;
      endcase
      // write completions (only this burst's lines are in flight)
      if (ndr_fire && state_q != READ) begin
        done_q <= done_q + 9'd1;
        if (ndr_i.status != 8'(RSP_OK)) err_q <= 1'b1;
      end
      // read data into its slot; a returned beat frees its slot
      for (int s = 0; s < ReadWindow; s++) begin
        if (drs_fire && drs_slot == WinW'(s)) begin
          slot_valid_q[s] <= 1'b1;
          slot_err_q[s] <= drs_i.status != 8'(RSP_OK);
        end else if (r_fire && !bad_q && out_slot == WinW'(s)) begin
          slot_valid_q[s] <= 1'b0;
        end
      end
    end
  end

  always_ff @(posedge clk_i) begin
    if (drs_fire) slot_data_q[drs_slot] <= drs_i.data;
  end

  // line requests
  logic [63:0] line_addr;
  assign line_addr = 64'(addr_q) & ~64'h3F;
  assign rwd_valid_o = state_q == WRITE && s_wvalid_i && !bad_q;
  // AXI writes carry strobes, not opcodes: a full or a partial line
  assign rwd_o = '{opcode: (s_wstrb_i == '1) ? 8'(M2S_RWD_MEM_WR) : 8'(M2S_RWD_MEM_WR_PTL),
                   tag: 16'(issued_q), addr: line_addr, byte_enable: s_wstrb_i,
                   data: s_wdata_i};
  assign req_valid_o = state_q == READ && !bad_q && issued_q < beats_q
                       && issued_q - done_q < 9'(ReadWindow);
  assign req_o = '{opcode: 8'(M2S_REQ_MEM_RD), tag: 16'(issued_q), addr: line_addr};
  assign ndr_ready_o = 1'b1;
  assign drs_ready_o = 1'b1;

  // AXI side
  assign s_awready_o = take_aw;
  assign s_arready_o = take_ar;
  assign s_wready_o = state_q == WRITE && (bad_q || rwd_ready_i);
  assign s_bvalid_o = state_q == WRESP && (bad_q || done_q == beats_q);
  assign s_bid_o = id_q;
  assign s_bresp_o = (bad_q || err_q) ? RESP_SLVERR : RESP_OKAY;
  assign s_rvalid_o = state_q == READ && (bad_q || slot_valid_q[out_slot]);
  assign s_rid_o = id_q;
  assign s_rdata_o = bad_q ? '0 : slot_data_q[out_slot];
  assign s_rresp_o = (bad_q || slot_err_q[out_slot]) ? RESP_SLVERR : RESP_OKAY;
  assign s_rlast_o = done_q + 9'd1 == beats_q;

  // ---- protocol rules ---------------------------------------------------------------------------
  // AXI: the master holds each channel's valid and payload until ready; so does this slave,
  // toward the AXI master and toward the CXL.mem slave
  `NELSSA_ASSERT_HOLD(AwHeld, s_awvalid_i, s_awready_o,
                      {s_awid_i, s_awaddr_i, s_awlen_i, s_awsize_i, s_awburst_i})
  `NELSSA_ASSERT_HOLD(WHeld, s_wvalid_i, s_wready_o, {s_wdata_i, s_wstrb_i, s_wlast_i})
  `NELSSA_ASSERT_HOLD(ArHeld, s_arvalid_i, s_arready_o,
                      {s_arid_i, s_araddr_i, s_arlen_i, s_arsize_i, s_arburst_i})
  `NELSSA_ASSERT_HOLD(BHeld, s_bvalid_o, s_bready_i, {s_bid_o, s_bresp_o})
  `NELSSA_ASSERT_HOLD(RHeld, s_rvalid_o, s_rready_i, {s_rid_o, s_rdata_o, s_rresp_o, s_rlast_o})
  `NELSSA_ASSERT_HOLD(ReqHeld, req_valid_o, req_ready_i, req_o)
  `NELSSA_ASSERT_HOLD(RwdHeld, rwd_valid_o, rwd_ready_i, rwd_o)
  // one answer per line: read data only for a line of the burst in flight and not yet
  // answered, a completion only while a write burst runs
  `NELSSA_ASSERT_NEVER(DrsUnasked, drs_valid_i && (state_q != READ || slot_valid_q[drs_slot]))
  `NELSSA_ASSERT_NEVER(NdrUnasked, ndr_valid_i && !(state_q == WRITE || state_q == WRESP))

  /* verilator lint_off UNUSEDSIGNAL */
  logic [33:0] unused;  // the burst length counts beats; tags beyond the window and the
                        // responses' opcodes (one each) are not needed
  /* verilator lint_on UNUSEDSIGNAL */
  assign unused = {s_wlast_i, ndr_i.tag, drs_i.tag[15:WinW] != '0, ndr_i.opcode, drs_i.opcode};
endmodule
