// Device memory on a board: the device's memory ports (nelssa_device) onto NumChannels AXI4
// masters, one per memory channel, toward the vendor's memory controllers (DDR4/DDR5 MIG, a
// Versal NoC controller, HBM ports, each behind a width converter if its data bus is not 512
// bits). Lines interleave over the channels by address (line i on channel i mod NumChannels);
// each channel sees a dense address space of its own lines.
//
// Every line is one single-beat burst (64 bytes, INCR). The AXI ID is the device port, so
// each port's reads (and writes) on a channel come back in order, and a FIFO per port and
// channel (nelssa_fifo) gives each response its request tag back. A port takes up to Outstanding reads and
// Outstanding writes per channel before it waits. Read data goes out on the lane of its channel
// (the device takes it without back-pressure, so RREADY stays high); a write completes on its
// port when B returns, i.e. when a later read is sure to see it. Several channels completing
// writes of one port in a cycle take turns. An error response sets err_o (the device has
// already checked every address, so one means the memory system failed).
`include "nelssa_assert.svh"

module nelssa_axi_mem
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned NumPorts    = 4,   // device memory ports
  parameter int unsigned NumChannels = 4,   // AXI4 memory channels: 1, 2, 4 or 8
  parameter int unsigned AddrW       = 40,  // device byte-address width
  parameter int unsigned ChanAddrW   = 34,  // byte-address width of each channel's AXI4
  parameter int unsigned Outstanding = 32,  // reads, and writes, per port and channel in flight
  localparam int unsigned PortW = (NumPorts > 1) ? $clog2(NumPorts) : 1,  // AXI ID width
  localparam int unsigned ChanBits = $clog2(NumChannels)  // address bits that pick a channel
) (
  input  logic                                   clk_i,
  input  logic                                   rst_ni,
  // device memory ports
  input  logic [NumPorts-1:0]                    mem_valid_i,
  output logic [NumPorts-1:0]                    mem_ready_o,
  input  logic [NumPorts-1:0][AddrW-1:0]         mem_addr_i,
  input  logic [NumPorts-1:0]                    mem_write_i,
  input  logic [NumPorts-1:0][MEM_TAG_W-1:0]     mem_tag_i,
  input  logic [NumPorts-1:0][LINE_W-1:0]        mem_wdata_i,
  input  logic [NumPorts-1:0][LINE_BYTES-1:0]    mem_wstrb_i,
  output logic [NumPorts-1:0]                    mem_cpl_valid_o,
  output logic [NumPorts-1:0][MEM_TAG_W-1:0]     mem_cpl_tag_o,
  output logic [MEM_LANES-1:0]                   mem_rd_valid_o,
  output logic [MEM_LANES-1:0][PortW-1:0]        mem_rd_port_o,
  output logic [MEM_LANES-1:0][MEM_TAG_W-1:0]    mem_rd_tag_o,
  output logic [MEM_LANES-1:0][LINE_W-1:0]       mem_rd_data_o,
  // AXI4 masters, one per channel
  output logic [NumChannels-1:0]                 m_awvalid_o,
  input  logic [NumChannels-1:0]                 m_awready_i,
  output logic [NumChannels-1:0][PortW-1:0]      m_awid_o,
  output logic [NumChannels-1:0][ChanAddrW-1:0]  m_awaddr_o,
  output logic [NumChannels-1:0][7:0]            m_awlen_o,
  output logic [NumChannels-1:0][2:0]            m_awsize_o,
  output logic [NumChannels-1:0][1:0]            m_awburst_o,
  output logic [NumChannels-1:0]                 m_wvalid_o,
  input  logic [NumChannels-1:0]                 m_wready_i,
  output logic [NumChannels-1:0][511:0]          m_wdata_o,
  output logic [NumChannels-1:0][63:0]           m_wstrb_o,
  output logic [NumChannels-1:0]                 m_wlast_o,
  input  logic [NumChannels-1:0]                 m_bvalid_i,
  output logic [NumChannels-1:0]                 m_bready_o,
  input  logic [NumChannels-1:0][PortW-1:0]      m_bid_i,
  input  logic [NumChannels-1:0][1:0]            m_bresp_i,
  output logic [NumChannels-1:0]                 m_arvalid_o,
  input  logic [NumChannels-1:0]                 m_arready_i,
  output logic [NumChannels-1:0][PortW-1:0]      m_arid_o,
  output logic [NumChannels-1:0][ChanAddrW-1:0]  m_araddr_o,
  output logic [NumChannels-1:0][7:0]            m_arlen_o,
  output logic [NumChannels-1:0][2:0]            m_arsize_o,
  output logic [NumChannels-1:0][1:0]            m_arburst_o,
  input  logic [NumChannels-1:0]                 m_rvalid_i,
  output logic [NumChannels-1:0]                 m_rready_o,
  input  logic [NumChannels-1:0][PortW-1:0]      m_rid_i,
  input  logic [NumChannels-1:0][511:0]          m_rdata_i,
  input  logic [NumChannels-1:0][1:0]            m_rresp_i,
  input  logic [NumChannels-1:0]                 m_rlast_i,
  output logic                                   err_o
);
  if (!(NumChannels inside {1, 2, 4, 8}) || NumChannels > MEM_LANES) begin : gen_channels_check
    $error("nelssa_axi_mem: NumChannels must be 1, 2, 4 or 8, at most the device's MEM_LANES");
  end
  if (NumPorts < 1 || NumPorts > 8) begin : gen_ports_check
    $error("nelssa_axi_mem: NumPorts must be 1..8");
  end
  if (Outstanding < 2 || Outstanding > 256 || (Outstanding & (Outstanding - 1)) != 0)
  begin : gen_outstanding_check
    $error("nelssa_axi_mem: Outstanding must be a power of two in 2..256");
  end
  // the top checks that the channels cover the device's memory; addresses beyond it never come
  if (ChanAddrW < 12 || ChanAddrW > 64) begin : gen_addr_check
    $error("nelssa_axi_mem: ChanAddrW must be 12..64");
  end

  function automatic int unsigned chan_of(logic [AddrW-1:0] a);
    return (NumChannels > 1) ? int'((a >> 6) & AddrW'(NumChannels - 1)) : 0;
  endfunction

  function automatic logic [ChanAddrW-1:0] chan_addr(logic [AddrW-1:0] a);
    return ChanAddrW'((a >> (6 + ChanBits)) << 6);
  endfunction

  // ---------------------------------------------------------------------------------------------
  // request side: per channel, the next port in round-robin order whose request it can take
  logic [NumChannels-1:0]            grant_valid;
  logic [NumChannels-1:0][PortW-1:0] grant_port;
  logic [NumChannels-1:0][PortW-1:0] rr_q;
  logic [NumChannels-1:0]            ar_valid_q, aw_valid_q, w_valid_q;
  logic [NumChannels-1:0][PortW-1:0] ar_id_q, aw_id_q;
  logic [NumChannels-1:0][ChanAddrW-1:0] ar_addr_q, aw_addr_q;
  logic [NumChannels-1:0][511:0]     w_data_q;
  logic [NumChannels-1:0][63:0]      w_strb_q;
  // per channel and port: the tags of the reads and of the writes in flight, oldest first
  logic [NumChannels-1:0][NumPorts-1:0]       r_push, r_pop, r_full, w_push, w_pop, w_full;
  logic [NumChannels-1:0][NumPorts-1:0]       r_empty, w_empty;  // checked only (below)
  logic [NumChannels-1:0][NumPorts-1:0][15:0] r_head, w_head;

  for (genvar c = 0; c < NumChannels; c++) begin : gen_chan_fifos
    for (genvar p = 0; p < NumPorts; p++) begin : gen_port_fifos
      nelssa_fifo #(
        .Width(16),
        .Depth(Outstanding)
      ) u_reads (
        .clk_i (clk_i),
        .rst_ni(rst_ni),
        .push_i(r_push[c][p]),
        .data_i(mem_tag_i[p]),
        .pop_i (r_pop[c][p]),
        .head_o (r_head[c][p]),
        .full_o (r_full[c][p]),
        .empty_o(r_empty[c][p])
      );
      nelssa_fifo #(
        .Width(16),
        .Depth(Outstanding)
      ) u_writes (
        .clk_i (clk_i),
        .rst_ni(rst_ni),
        .push_i(w_push[c][p]),
        .data_i(mem_tag_i[p]),
        .pop_i (w_pop[c][p]),
        .head_o (w_head[c][p]),
        .full_o (w_full[c][p]),
        .empty_o(w_empty[c][p])
      );
      assign r_push[c][p] = grant_valid[c] && int'(grant_port[c]) == p && !mem_write_i[p];
      assign w_push[c][p] = grant_valid[c] && int'(grant_port[c]) == p && mem_write_i[p];
      assign r_pop[c][p] = m_rvalid_i[c] && int'(m_rid_i[c]) == p;
      assign w_pop[c][p] = m_bvalid_i[c] && m_bready_o[c] && int'(m_bid_i[c]) == p;
    end
  end

  always_comb begin
    for (int c = 0; c < NumChannels; c++) begin
      automatic logic can_r = !ar_valid_q[c] || m_arready_i[c];
      automatic logic can_w = (!aw_valid_q[c] || m_awready_i[c])
                              && (!w_valid_q[c] || m_wready_i[c]);
      grant_valid[c] = 1'b0;
      grant_port[c] = '0;
      for (int k = 0; k < NumPorts; k++) begin
        automatic int unsigned p = int'(rr_q[c]) + k;
        if (p >= NumPorts) p = p - NumPorts;
        if (!grant_valid[c] && mem_valid_i[p] && chan_of(mem_addr_i[p]) == c
            && (mem_write_i[p] ? can_w && !w_full[c][p] : can_r && !r_full[c][p])) begin
          grant_valid[c] = 1'b1;
          grant_port[c] = PortW'(p);
        end
      end
    end
    for (int p = 0; p < NumPorts; p++) begin
      mem_ready_o[p] = 1'b0;
      for (int c = 0; c < NumChannels; c++) begin
        if (grant_valid[c] && int'(grant_port[c]) == p) mem_ready_o[p] = 1'b1;
      end
    end
  end

  // ---------------------------------------------------------------------------------------------
  // response side: B takes turns per port (the lowest channel first), R always taken
  always_comb begin
    for (int c = 0; c < NumChannels; c++) begin
      m_bready_o[c] = 1'b1;
      for (int o = 0; o < c; o++) begin
        if (m_bvalid_i[o] && m_bid_i[o] == m_bid_i[c]) m_bready_o[c] = 1'b0;
      end
    end
  end
  assign m_rready_o = '1;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rr_q <= '0;
      ar_valid_q <= '0;
      aw_valid_q <= '0;
      w_valid_q <= '0;
      ar_id_q <= '0;
      aw_id_q <= '0;
      ar_addr_q <= '0;
      aw_addr_q <= '0;
      w_data_q <= '0;
      w_strb_q <= '0;
      mem_cpl_valid_o <= '0;
      mem_cpl_tag_o <= '0;
      mem_rd_valid_o <= '0;
      mem_rd_port_o <= '0;
      mem_rd_tag_o <= '0;
      mem_rd_data_o <= '0;
      err_o <= 1'b0;
    end else begin
      mem_cpl_valid_o <= '0;
      mem_rd_valid_o <= '0;
      for (int c = 0; c < NumChannels; c++) begin
        automatic int unsigned gp = int'(grant_port[c]);
        automatic int unsigned rp = int'(m_rid_i[c]);
        automatic int unsigned bp = int'(m_bid_i[c]);
        automatic logic r_fire = m_rvalid_i[c];
        automatic logic b_fire = m_bvalid_i[c] && m_bready_o[c];
        automatic logic granted = grant_valid[c];
        automatic logic g_write = mem_write_i[gp];
        // the address and data registers
        if (m_arready_i[c]) ar_valid_q[c] <= 1'b0;
        if (m_awready_i[c]) aw_valid_q[c] <= 1'b0;
        if (m_wready_i[c]) w_valid_q[c] <= 1'b0;
        if (granted) begin
          rr_q[c] <= (gp + 1 >= NumPorts) ? '0 : PortW'(gp + 1);
          if (g_write) begin
            aw_valid_q[c] <= 1'b1;
            aw_id_q[c] <= PortW'(gp);
            aw_addr_q[c] <= chan_addr(mem_addr_i[gp]);
            w_valid_q[c] <= 1'b1;
            w_data_q[c] <= mem_wdata_i[gp];
            w_strb_q[c] <= mem_wstrb_i[gp];
          end else begin
            ar_valid_q[c] <= 1'b1;
            ar_id_q[c] <= PortW'(gp);
            ar_addr_q[c] <= chan_addr(mem_addr_i[gp]);
          end
        end
        // read data onto the channel's lane, its tag from the port's FIFO
        if (r_fire) begin
          mem_rd_valid_o[c] <= 1'b1;
          mem_rd_port_o[c] <= m_rid_i[c];
          mem_rd_tag_o[c] <= r_head[c][rp];
          mem_rd_data_o[c] <= m_rdata_i[c];
          if (m_rresp_i[c][1]) err_o <= 1'b1;
        end
        if (b_fire) begin
          mem_cpl_valid_o[bp] <= 1'b1;
          mem_cpl_tag_o[bp] <= w_head[c][bp];
          if (m_bresp_i[c][1]) err_o <= 1'b1;
        end
      end
    end
  end

  for (genvar c = 0; c < NumChannels; c++) begin : gen_axi
    assign m_arvalid_o[c] = ar_valid_q[c];
    assign m_arid_o[c] = ar_id_q[c];
    assign m_araddr_o[c] = ar_addr_q[c];
    assign m_arlen_o[c] = 8'd0;     // one beat ...
    assign m_arsize_o[c] = 3'd6;    // ... of 64 bytes
    assign m_arburst_o[c] = 2'b01;  // INCR
    assign m_awvalid_o[c] = aw_valid_q[c];
    assign m_awid_o[c] = aw_id_q[c];
    assign m_awaddr_o[c] = aw_addr_q[c];
    assign m_awlen_o[c] = 8'd0;
    assign m_awsize_o[c] = 3'd6;
    assign m_awburst_o[c] = 2'b01;
    assign m_wvalid_o[c] = w_valid_q[c];
    assign m_wdata_o[c] = w_data_q[c];
    assign m_wstrb_o[c] = w_strb_q[c];
    assign m_wlast_o[c] = 1'b1;
  end

  // ---- protocol rules ---------------------------------------------------------------------------
  for (genvar c = 0; c < NumChannels; c++) begin : gen_rules
    // AXI: this master holds each channel's valid and payload until ready
    `NELSSA_ASSERT_HOLD(ArHeld, m_arvalid_o[c], m_arready_i[c], {m_arid_o[c], m_araddr_o[c]})
    `NELSSA_ASSERT_HOLD(AwHeld, m_awvalid_o[c], m_awready_i[c], {m_awid_o[c], m_awaddr_o[c]})
    `NELSSA_ASSERT_HOLD(WHeld, m_wvalid_o[c], m_wready_i[c], {m_wdata_o[c], m_wstrb_o[c]})
    // the memory answers only what was asked: an R or a B for an ID (port) with a request in
    // flight on this channel, so a response always has its tag
    `NELSSA_ASSERT_NEVER(RUnasked, m_rvalid_i[c] &&
                         (int'(m_rid_i[c]) >= NumPorts || r_empty[c][m_rid_i[c]]))
    `NELSSA_ASSERT_NEVER(BUnasked, m_bvalid_i[c] &&
                         (int'(m_bid_i[c]) >= NumPorts || w_empty[c][m_bid_i[c]]))
  end

  /* verilator lint_off UNUSEDSIGNAL */
  logic [2*NumChannels-1:0] unused;  // single-beat bursts: RLAST is always set; OKAY vs EXOKAY
  /* verilator lint_on UNUSEDSIGNAL */
  always_comb begin
    for (int c = 0; c < NumChannels; c++) unused[2*c +: 2] = {m_rlast_i[c], m_rresp_i[c][0]};
  end
endmodule
