// Memory front end of one PNM device: NumPorts request ports onto the 8 sub-channel controllers.
//
// Each port's byte address goes through the address map (nelssa_ddr5_addr_map). A sub-channel
// takes one request per cycle; when several ports want the same one, the port after the last
// winner goes first (round robin), so no port starves; ports marked LowPriority (the host's
// Memory API writes in a device) go only when no other port wants that sub-channel. Requests get a sub-channel-local ID from
// a free list (IdW bits, returned when the read data comes back or the WRITE issues), so the
// ports' own tags may repeat; a port's tag and number come back with its read data.
//
// Completions: a write completes on its port the cycle after acceptance (the controller keeps
// reads and writes of one line in request order, so later reads see it). An address beyond the
// device is accepted at once and completes with err set, touching no memory; other requests are
// not disturbed. Read data returns on the lane of its sub-channel. Neither has backpressure:
// the consumer takes what it asked for.
`include "nelssa_assert.svh"

module nelssa_ddr5_frontend #(
  parameter int unsigned NumPorts   = 4,   // request ports (lines per cycle)
  parameter int unsigned AddrW      = 40,  // byte-address width
  parameter int unsigned AddressMap = 0,   // 0 cacheline, 1 row, 2 mop4 (nelssa_ddr5_addr_map)
  parameter int unsigned TagW       = 16,  // the ports' request tag width
  parameter int unsigned IdW        = 7,   // sub-channel-local request ID width
  parameter logic [7:0]  LowPriority = '0,  // ports served only when no other port waits
  localparam int unsigned PortW     = (NumPorts > 1) ? $clog2(NumPorts) : 1  // port-number width
) (
  input  logic                               clk_i,
  input  logic                               rst_ni,
  // request ports
  input  logic [NumPorts-1:0]                req_valid_i,
  output logic [NumPorts-1:0]                req_ready_o,
  input  logic [NumPorts-1:0][AddrW-1:0]     req_addr_i,
  input  logic [NumPorts-1:0]                req_write_i,
  input  logic [NumPorts-1:0][TagW-1:0]      req_tag_i,
  input  logic [NumPorts-1:0][511:0]         req_wdata_i,
  input  logic [NumPorts-1:0][63:0]          req_wstrb_i,
  // completions of writes and of rejected requests, per port
  output logic [NumPorts-1:0]                cpl_valid_o,
  output logic [NumPorts-1:0][TagW-1:0]      cpl_tag_o,
  output logic [NumPorts-1:0]                cpl_write_o,
  output logic [NumPorts-1:0]                cpl_err_o,    // address outside the device
  // read data, per sub-channel
  output logic [7:0]                         rd_valid_o,
  output logic [7:0][PortW-1:0]              rd_port_o,
  output logic [7:0][TagW-1:0]               rd_tag_o,
  output logic [7:0][511:0]                  rd_data_o,
  // sub-channel controllers (nelssa_ddr5_ctrl request ports) and their data side
  output logic [7:0]                         sub_valid_o,
  input  logic [7:0]                         sub_ready_i,
  output logic [7:0]                         sub_write_o,
  output logic [7:0][2:0]                    sub_bg_o,
  output logic [7:0][1:0]                    sub_bank_o,
  output logic [7:0][15:0]                   sub_row_o,
  output logic [7:0][5:0]                    sub_col_o,
  output logic [7:0][IdW-1:0]                sub_id_o,
  output logic [7:0][511:0]                  sub_wdata_o,
  output logic [7:0][63:0]                   sub_wstrb_o,
  input  logic [7:0]                         sub_rdata_valid_i,
  input  logic [7:0][IdW-1:0]                sub_rdata_id_i,
  input  logic [7:0][511:0]                  sub_rdata_i,
  input  logic [7:0]                         sub_wdone_i,     // a WRITE issued ...
  input  logic [7:0][IdW-1:0]                sub_wdone_id_i   // ... for this ID
);
  localparam int unsigned NUM_SUB = 8;
  localparam int unsigned NUM_IDS = 1 << IdW;

  if (NumPorts < 1 || NumPorts > NUM_SUB) begin : gen_ports_check
    $error("nelssa_ddr5_frontend: NumPorts must be 1 to 8");
  end
  if (IdW < 7) begin : gen_id_check
    // 32 reads + 32 writes queued, plus the reads whose data is still on its way
    $error("nelssa_ddr5_frontend: IdW below 7 would stall a sub-channel before its queues fill");
  end

  // ---- decode -------------------------------------------------------------------------------
  logic [NumPorts-1:0][2:0]  p_sub;
  logic [NumPorts-1:0][2:0]  p_bg;
  logic [NumPorts-1:0][1:0]  p_bank;
  logic [NumPorts-1:0][15:0] p_row;
  logic [NumPorts-1:0][5:0]  p_col;
  logic [NumPorts-1:0]       p_err;

  for (genvar p = 0; p < NumPorts; p++) begin : gen_decode
    nelssa_ddr5_addr_map #(
      .AddrW     (AddrW),
      .AddressMap(AddressMap)
    ) u_map (
      .addr_i(req_addr_i[p]),
      .sub_o (p_sub[p]),
      .bg_o  (p_bg[p]),
      .bank_o(p_bank[p]),
      .row_o (p_row[p]),
      .col_o (p_col[p]),
      .err_o (p_err[p])
    );
  end

  // ---- per sub-channel ID free lists and the table of who asked -----------------------------
  logic [NUM_SUB-1:0]           id_avail;
  logic [NUM_SUB-1:0][IdW-1:0]  id_head;
  logic [IdW:0]                 free_n_q [NUM_SUB];   // IDs on the free list
  logic [IdW-1:0]               free_rd_q [NUM_SUB];  // list read pointer
  logic [IdW-1:0]               free_wr_q [NUM_SUB];  // list write pointer
  logic [IdW-1:0]               free_q [NUM_SUB][NUM_IDS];
  logic [PortW-1:0]             owner_port_q [NUM_SUB][NUM_IDS];
  logic [TagW-1:0]              owner_tag_q [NUM_SUB][NUM_IDS];

  for (genvar s = 0; s < NUM_SUB; s++) begin : gen_avail
    assign id_avail[s] = free_n_q[s] != '0;
    assign id_head[s]  = free_q[s][free_rd_q[s]];
  end

  // ---- arbitration: one port per sub-channel per cycle, round robin --------------------------
  logic [PortW-1:0]        rr_q;
  logic [NUM_SUB-1:0]      grant_valid;
  logic [NUM_SUB-1:0][PortW-1:0] grant_port;

  always_comb begin
    grant_valid = '0;
    grant_port  = '0;
    // ports of LowPriority only get a sub-channel no other port wants this cycle
    // verilator unroll_full
    for (int pass = 0; pass < 2; pass++) begin
      // verilator unroll_full
      for (int s = 0; s < NUM_SUB; s++) begin
        // verilator unroll_full
        for (int n = 0; n < NumPorts; n++) begin
          automatic int p = (int'(rr_q) + n) % NumPorts;
          if (!grant_valid[s] && req_valid_i[p] && !p_err[p] && int'(p_sub[p]) == s &&
              LowPriority[p] == (pass == 1)) begin
            grant_valid[s] = 1'b1;
            grant_port[s]  = PortW'(p);
          end
        end
      end
    end
    // verilator unroll_full
    for (int s = 0; s < NUM_SUB; s++) begin
      automatic int p = int'(grant_port[s]);
      sub_valid_o[s] = grant_valid[s] && id_avail[s];
      sub_write_o[s] = req_write_i[p];
      sub_bg_o[s]    = p_bg[p];
      sub_bank_o[s]  = p_bank[p];
      sub_row_o[s]   = p_row[p];
      sub_col_o[s]   = p_col[p];
      sub_id_o[s]    = id_head[s];
      sub_wdata_o[s] = req_wdata_i[p];
      sub_wstrb_o[s] = req_wstrb_i[p];
    end
  end

  // apart from the block above: the controllers' ready depends on what it drives
  always_comb begin
    // verilator unroll_full
    for (int p = 0; p < NumPorts; p++) begin
      automatic int s = int'(p_sub[p]);
      req_ready_o[p] = p_err[p] ||
                       (grant_valid[s] && int'(grant_port[s]) == p && id_avail[s] &&
                        sub_ready_i[s]);
    end
  end

  // ---- state ---------------------------------------------------------------------------------
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rr_q <= '0;
      // verilator unroll_full
      for (int s = 0; s < NUM_SUB; s++) begin
        free_n_q[s]  <= (IdW + 1)'(NUM_IDS);
        free_rd_q[s] <= '0;
        free_wr_q[s] <= '0;
        // verilator unroll_full
        for (int i = 0; i < NUM_IDS; i++) free_q[s][i] <= IdW'(i);
      end
      cpl_valid_o <= '0;
      cpl_tag_o   <= '0;
      cpl_write_o <= '0;
      cpl_err_o   <= '0;
    end else begin
      rr_q <= (int'(rr_q) == NumPorts - 1) ? '0 : rr_q + 1'b1;
      // verilator unroll_full
      for (int s = 0; s < NUM_SUB; s++) begin
        automatic logic take = sub_valid_o[s] && sub_ready_i[s];
        // IDs come back from read data and from issued WRITEs (both can in one cycle)
        automatic logic [1:0] back = {sub_wdone_i[s], sub_rdata_valid_i[s]};
        automatic logic [IdW-1:0] wr = free_wr_q[s];
        if (take) begin
          owner_port_q[s][id_head[s]] <= grant_port[s];
          owner_tag_q[s][id_head[s]]  <= req_tag_i[grant_port[s]];
          free_rd_q[s] <= free_rd_q[s] + 1'b1;
        end
        if (back[0]) begin
          free_q[s][wr] <= sub_rdata_id_i[s];
          wr = wr + 1'b1;
        end
        if (back[1]) begin
          free_q[s][wr] <= sub_wdone_id_i[s];
          wr = wr + 1'b1;
        end
        free_wr_q[s] <= wr;
        free_n_q[s] <= free_n_q[s] - (IdW + 1)'(take) + (IdW + 1)'(back[0]) +
                       (IdW + 1)'(back[1]);
      end
      // verilator unroll_full
      for (int p = 0; p < NumPorts; p++) begin
        automatic logic acc = req_valid_i[p] && req_ready_o[p];
        cpl_valid_o[p] <= acc && (p_err[p] || req_write_i[p]);
        cpl_tag_o[p]   <= req_tag_i[p];
        cpl_write_o[p] <= req_write_i[p];
        cpl_err_o[p]   <= p_err[p];
      end
    end
  end

  // ---- protocol rules ---------------------------------------------------------------------------
  // a controller gives back only IDs it was handed (read data, an issued WRITE): the free list
  // never holds more than every ID
  for (genvar s = 0; s < NUM_SUB; s++) begin : gen_rules
    `NELSSA_ASSERT(IdsReturnedOnce,
                   int'(free_n_q[s]) + int'(sub_rdata_valid_i[s]) + int'(sub_wdone_i[s]) -
                   int'(sub_valid_o[s] && sub_ready_i[s]) <= NUM_IDS)
  end

  // ---- read data back to its port --------------------------------------------------------------
  for (genvar s = 0; s < NUM_SUB; s++) begin : gen_rd
    assign rd_valid_o[s] = sub_rdata_valid_i[s];
    assign rd_port_o[s]  = owner_port_q[s][sub_rdata_id_i[s]];
    assign rd_tag_o[s]   = owner_tag_q[s][sub_rdata_id_i[s]];
    assign rd_data_o[s]  = sub_rdata_i[s];
  end
endmodule
