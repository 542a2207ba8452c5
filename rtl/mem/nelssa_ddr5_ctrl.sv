// Memory controller of one 32-bit DDR5 sub-channel, clocked at 800 MHz (4 tCK per cycle).
//
// The policy of hw/model/ddr5_subchannel.py, cycle for cycle: read and write queues in age order,
// FR-FCFS (one READ/WRITE and up to RowCmdsPerCycle ACT/PRE/REF per cycle, each at the earliest
// tCK of the cycle that the JEDEC rules and the CA bus allow), open page with close-after-idle,
// write drain between two watermarks, all-bank refresh every nREFI. Commands leave on three
// slots stamped with their tCK (slot 0: READ/WRITE, slots 1-2: row commands) toward the DRAM or
// its model; the request tag rides along with READ/WRITE. Requests enter one per cycle and may
// be scheduled from the next cycle; a request whose line sits in the other queue waits, so the
// reads and writes of one line complete in request order.
module nelssa_ddr5_ctrl
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T           = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned ReadQueue   = 32,         // read-queue entries
  parameter int unsigned WriteQueue  = 32,         // write-queue entries
  parameter int unsigned WriteHigh   = 24,         // write-queue level that starts a drain
  parameter int unsigned WriteLow    = 8,          // level at which a drain stops
  parameter int unsigned CloseIdle   = 64,         // tCK an unrequested open row stays open
  parameter bit          Refresh     = 1'b1,       // issue all-bank refresh
  parameter int unsigned TagW        = 16          // request tag width
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  // requests (64 bytes each)
  input  logic                req_valid_i,
  output logic                req_ready_o,
  input  logic                req_write_i,
  input  logic [2:0]          req_bg_i,
  input  logic [1:0]          req_bank_i,
  input  logic [15:0]         req_row_i,
  input  logic [5:0]          req_col_i,
  input  logic [TagW-1:0]     req_tag_i,
  // command slots of this cycle
  output logic [2:0]          cmd_valid_o,
  output dram_cmd_e [2:0]     cmd_o,
  output logic [2:0][63:0]    cmd_tck_o,
  output logic [2:0][2:0]     cmd_bg_o,
  output logic [2:0][1:0]     cmd_bank_o,
  output logic [2:0][16:0]    cmd_row_o,
  output logic [5:0]          cmd_col_o,   // slot 0
  output logic [TagW-1:0]     cmd_tag_o,   // slot 0
  output logic                cmd_write_o  // slot 0 is a WRITE
);
  localparam int NB = 32;
  localparam int NG = 8;
  localparam int QMAX = (ReadQueue > WriteQueue) ? ReadQueue : WriteQueue;
  localparam int NO_BANK = 32;  // a bank index that matches no bank
  // timings as 64-bit tCK counts
  localparam longint NCWL = longint'(T.nCWL);
  localparam longint NRCD = longint'(T.nRCD);
  localparam longint NRP = longint'(T.nRP);
  localparam longint NRAS = longint'(T.nRAS);
  localparam longint NRC = longint'(T.nRC);
  localparam longint NRTP = longint'(T.nRTP);
  localparam longint NCCD_S = longint'(T.nCCD_S);
  localparam longint NCCD_L = longint'(T.nCCD_L);
  localparam longint NCCD_L_WR = longint'(T.nCCD_L_WR);
  localparam longint NRRD_S = longint'(T.nRRD_S);
  localparam longint NRRD_L = longint'(T.nRRD_L);
  localparam longint NFAW = longint'(T.nFAW);
  localparam longint NRFC = longint'(T.nRFC);
  localparam longint NREFI = longint'(T.nREFI);
  localparam longint BURST = 64'sd8;  // tCK of a BL16 burst
  localparam longint WTR_S = NCWL + BURST + longint'(T.nWTR_S);  // WR to RD, other group
  localparam longint WTR_L = NCWL + BURST + longint'(T.nWTR_L);  // WR to RD, same group
  localparam longint WTP = NCWL + BURST + longint'(T.nWR);       // WR to PRE
  localparam longint NCL_RTW = longint'(T.nCL) + BURST + 64'sd1 - NCWL;
  localparam longint RTW = (NCL_RTW > NCCD_S) ? NCL_RTW : NCCD_S;  // RD to WR

  if (T.bank_groups != NG || T.banks_per_group != NB / NG) begin : gen_geometry_check
    $error("nelssa_ddr5_ctrl: built for 8 bank groups of 4 banks");
  end
  if (!(WriteLow < WriteHigh && WriteHigh <= WriteQueue)) begin : gen_watermark_check
    $error("nelssa_ddr5_ctrl: need WriteLow < WriteHigh <= WriteQueue");
  end
  // Commands of one cycle never touch the same bank, and a cycle holds at most one ACT and one
  // REF, when these gaps exceed the 4 tCK of a cycle; the state update below relies on it.
  if (T.nRP < 4 || T.nRAS < 4 || T.nRTP < 4 || T.nRRD_S < 4 || T.nRFC < 4 || T.nRCD < 4)
  begin : gen_gap_check
    $error("nelssa_ddr5_ctrl: needs nRP, nRAS, nRTP, nRRD_S, nRFC and nRCD of 4 tCK or more");
  end

  typedef struct packed {
    logic [2:0]      bg;
    logic [1:0]      bank;
    logic [15:0]     row;
    logic [5:0]      col;
    logic [TagW-1:0] tag;
  } entry_t;

  // ---------------------------------------------------------------------------------------------
  // State. Instead of the times of the last commands, each rule is kept as the earliest tCK it
  // allows, raised as commands issue: the earliest tCK of a command is then the maximum of a few
  // registers, not a search over the bank groups (same values as hw/model/ddr5_subchannel.py,
  // whose command times only grow).
  entry_t      rq_q [ReadQueue];
  entry_t      wq_q [WriteQueue];
  int          rq_n_q, wq_n_q;
  logic [NB-1:0] open_q;
  logic [15:0] orow_q [NB];
  longint      row_used_q [NB];  // tCK of the last ACT or column command to the open row
  longint      act_bank_q [NB];  // ACT: tRP, tRC
  longint      col_bank_q [NB];  // READ/WRITE: tRCD
  longint      pre_bank_q [NB];  // PRE: tRAS, tRTP, tWR
  longint      act_grp_q [NG];   // ACT into the group: tRRD_S/L
  longint      rd_grp_q [NG];    // READ to the group: tCCD_S/L, tWTR_S/L
  longint      wr_grp_q [NG];    // WRITE to the group: tCCD_S, tCCD_L_WR, read-to-write
  longint      acts_q [4];       // the last four ACTs (tFAW)
  longint      ref_ready_q;      // REF or ACT after REF: tRFC
  longint      pre_all_q;        // REF after the last PRE: tRP
  longint      next_refresh_q;
  logic        draining_q;
  logic        ca_carry_q;       // tCK 0 of this cycle is taken by a command of the last cycle
  longint      cycle_q;

  function automatic longint lmax(longint a, longint b);
    return (a > b) ? a : b;
  endfunction

  // first k in 0..3 with lo+k >= earliest whose `len` CA slots are free; -1 if none
  function automatic int place(longint earliest, int len, logic [4:0] ca, longint lo);
    for (int k = 0; k < 4; k++) begin
      if (lo + longint'(k) >= earliest && !ca[k] && (len == 1 || !ca[k+1])) return k;
    end
    return -1;
  endfunction

  // ---------------------------------------------------------------------------------------------
  // Scheduling of one cycle: a column command, then up to two row commands, each seeing the
  // commands before it. The decisions go to the command slots and to the state update below.
  logic               write_active, refreshing, draining_d;
  int                 n_active;
  logic               col_valid;
  int                 col_idx;   // queue position of the served request
  longint             col_tck;
  logic [4:0]         col_bank;
  logic [15:0]        col_row;
  logic [5:0]         col_col;
  logic [TagW-1:0]    col_tag;
  logic [1:0]         row_valid;
  dram_cmd_e [1:0]    row_cmd;
  longint             row_tck [2];
  logic [1:0][4:0]    row_bank;
  logic [1:0][15:0]   row_row;
  logic               ca_carry_d;

  always_comb begin
    automatic longint lo = cycle_q * 4;
    automatic logic [4:0] ca = {4'b0, ca_carry_q};
    automatic logic [NB-1:0] hit_wanted = '0;   // an active request wants the open row
    automatic logic [NB-1:0] any_wanted = '0;   // an active request wants the bank
    automatic logic [NB-1:0] open;
    automatic logic stop = 1'b0;
    automatic entry_t e;
    automatic logic [4:0] b;
    automatic int k;
    // what the first row command changed, for the second
    automatic logic ov_act = 1'b0, ov_pre = 1'b0, ov_ref = 1'b0;
    automatic int ov_bank = NO_BANK;
    automatic longint ov_tck = 0;
    automatic logic [15:0] ov_row = '0;

    if (wq_n_q >= WriteHigh || (wq_n_q > 0 && rq_n_q == 0)) draining_d = 1'b1;
    else if (wq_n_q <= WriteLow && rq_n_q > 0) draining_d = 1'b0;
    else draining_d = draining_q;
    write_active = draining_d;
    n_active = write_active ? wq_n_q : rq_n_q;
    refreshing = Refresh && lo >= next_refresh_q;
    open = open_q;

    // column command: the oldest active request whose row is open
    col_valid = 1'b0;
    col_idx = QMAX;
    col_tck = 0;
    col_bank = '0;
    col_row = '0;
    col_col = '0;
    col_tag = '0;
    if (!refreshing || open != '0) begin
      for (int i = 0; i < QMAX; i++) begin
        if (!col_valid && i < n_active) begin
          e = write_active ? wq_q[i] : rq_q[i];
          b = {e.bg, e.bank};
          if (open[b] && orow_q[b] == e.row) begin
            k = place(lmax(col_bank_q[b], write_active ? wr_grp_q[e.bg] : rd_grp_q[e.bg]), 2,
                      ca, lo);
            if (k >= 0) begin
              col_valid = 1'b1;
              col_idx = i;
              col_tck = lo + longint'(k);
              col_bank = b;
              col_row = e.row;
              col_col = e.col;
              col_tag = e.tag;
              ca[k] = 1'b1;
              ca[k+1] = 1'b1;
            end
          end
        end
      end
    end

    // which banks the active requests (less the one just served) want
    if (!refreshing) begin
      for (int i = 0; i < QMAX; i++) begin
        if (i < n_active && i != col_idx) begin
          e = write_active ? wq_q[i] : rq_q[i];
          b = {e.bg, e.bank};
          any_wanted[b] = 1'b1;
          if (open[b] && orow_q[b] == e.row) hit_wanted[b] = 1'b1;
        end
      end
    end

    // row commands
    row_valid = '0;
    for (int r = 0; r < 2; r++) begin
      row_cmd[r] = CMD_ACT;
      row_tck[r] = 0;
      row_bank[r] = '0;
      row_row[r] = '0;
    end
    for (int r = 0; r < 2; r++) begin
      automatic logic issued = 1'b0;
      automatic dram_cmd_e c = CMD_ACT;
      automatic logic [4:0] cb = '0;
      automatic logic [15:0] crow = '0;
      automatic int ck = -1;
      automatic longint best, ep;
      automatic logic found;
      if (!stop) begin
        if (refreshing) begin
          // close the open bank that may close first, then refresh
          found = 1'b0;
          best = 0;
          for (int x = 0; x < NB; x++) begin
            if (open[x]) begin
              ep = pre_bank_q[x];
              if (5'(x) == col_bank && col_valid)
                ep = lmax(ep, col_tck + (write_active ? WTP : NRTP));
              if (!found || ep < best) begin
                best = ep;
                cb = 5'(x);
              end
              found = 1'b1;
            end
          end
          if (found) begin
            c = CMD_PRE;
            ck = place(best, 1, ca, lo);
          end else begin
            c = CMD_REF;
            ck = place(lmax(lmax(pre_all_q, ov_pre ? ov_tck + NRP : pre_all_q),
                            ov_ref ? ov_tck + NRFC : ref_ready_q), 1, ca, lo);
          end
          issued = (ck >= 0);
        end else begin
          for (int i = 0; i < QMAX; i++) begin  // oldest first
            if (!issued && i < n_active && i != col_idx) begin
              e = write_active ? wq_q[i] : rq_q[i];
              b = {e.bg, e.bank};
              if (!open[b]) begin
                ep = lmax(lmax(act_bank_q[b], act_grp_q[e.bg]),
                          lmax(ref_ready_q, (ov_act ? acts_q[1] : acts_q[0]) + NFAW));
                if (ov_act) ep = lmax(ep, ov_tck + ((3'(ov_bank >> 2) == e.bg) ? NRRD_L : NRRD_S));
                if (ov_pre && int'(b) == ov_bank) ep = lmax(ep, ov_tck + NRP);
                ck = place(ep, 2, ca, lo);
                if (ck >= 0) begin
                  issued = 1'b1;
                  c = CMD_ACT;
                  cb = b;
                  crow = e.row;
                end
              end else if (!hit_wanted[b] &&
                           ((ov_act && int'(b) == ov_bank) ? ov_row : orow_q[b]) != e.row) begin
                ep = pre_bank_q[b];
                if (b == col_bank && col_valid) ep = lmax(ep, col_tck + (write_active ? WTP : NRTP));
                ck = place(ep, 1, ca, lo);
                if (ck >= 0) begin
                  issued = 1'b1;
                  c = CMD_PRE;
                  cb = b;
                end
              end
            end
          end
          for (int x = 0; x < NB; x++) begin  // close rows left idle
            if (!issued && open[x] && !any_wanted[x] && !(col_valid && 5'(x) == col_bank) &&
                !(ov_act && x == ov_bank) && lo - row_used_q[x] >= longint'(CloseIdle)) begin
              ck = place(pre_bank_q[x], 1, ca, lo);
              if (ck >= 0) begin
                issued = 1'b1;
                c = CMD_PRE;
                cb = 5'(x);
              end
            end
          end
        end
        if (issued) begin
          ca[ck] = 1'b1;
          if (c == CMD_ACT) ca[ck+1] = 1'b1;
          row_valid[r] = 1'b1;
          row_cmd[r] = c;
          row_tck[r] = lo + longint'(ck);
          row_bank[r] = cb;
          row_row[r] = crow;
          ov_act = (c == CMD_ACT);
          ov_pre = (c == CMD_PRE);
          ov_ref = (c == CMD_REF);
          ov_bank = int'(cb);
          ov_tck = lo + longint'(ck);
          ov_row = crow;
          if (c == CMD_ACT) begin
            open[cb] = 1'b1;
            hit_wanted[cb] = 1'b1;
          end
          if (c == CMD_PRE) open[cb] = 1'b0;
        end else begin
          stop = 1'b1;
        end
      end
    end
    ca_carry_d = ca[4];
  end

  // ---------------------------------------------------------------------------------------------
  // State update: the served request leaves its queue (the younger ones move up), the rules'
  // earliest times rise by the commands of the cycle, and an accepted request joins the end of
  // its queue.
  entry_t req_entry;
  assign req_entry = '{bg: req_bg_i, bank: req_bank_i, row: req_row_i, col: req_col_i,
                       tag: req_tag_i};

  // The queue a request needs must have room at the start of the cycle, and the other queue
  // must not hold its line: reads and writes of one line complete in request order.
  always_comb begin
    automatic logic same_line = 1'b0;
    if (req_write_i) begin
      for (int i = 0; i < ReadQueue; i++) begin
        if (i < rq_n_q && rq_q[i].bg == req_bg_i && rq_q[i].bank == req_bank_i &&
            rq_q[i].row == req_row_i && rq_q[i].col == req_col_i) same_line = 1'b1;
      end
      req_ready_o = (wq_n_q < WriteQueue) && !same_line;
    end else begin
      for (int i = 0; i < WriteQueue; i++) begin
        if (i < wq_n_q && wq_q[i].bg == req_bg_i && wq_q[i].bank == req_bank_i &&
            wq_q[i].row == req_row_i && wq_q[i].col == req_col_i) same_line = 1'b1;
      end
      req_ready_o = (rq_n_q < ReadQueue) && !same_line;
    end
  end

  localparam longint NEVER = -64'sd1099511627776;  // -2^40 tCK

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rq_n_q <= 0;
      wq_n_q <= 0;
      open_q <= '0;
      for (int x = 0; x < NB; x++) begin
        orow_q[x]     <= '0;
        row_used_q[x] <= 0;
        act_bank_q[x] <= 0;
        col_bank_q[x] <= 0;
        pre_bank_q[x] <= 0;
      end
      for (int x = 0; x < NG; x++) begin
        act_grp_q[x] <= 0;
        rd_grp_q[x]  <= 0;
        wr_grp_q[x]  <= 0;
      end
      for (int x = 0; x < 4; x++) acts_q[x] <= NEVER;
      ref_ready_q    <= 0;
      pre_all_q      <= 0;
      next_refresh_q <= NREFI;
      draining_q     <= 1'b0;
      ca_carry_q     <= 1'b0;
      cycle_q        <= 0;
    end else begin
      automatic int rq_n = rq_n_q;
      automatic int wq_n = wq_n_q;
      draining_q <= draining_d;
      ca_carry_q <= ca_carry_d;
      cycle_q    <= cycle_q + 1;

      if (col_valid) begin
        row_used_q[col_bank] <= col_tck;
        if (write_active) begin
          for (int i = 0; i < WriteQueue - 1; i++) if (i >= col_idx) wq_q[i] <= wq_q[i+1];
          wq_n = wq_n - 1;
          pre_bank_q[col_bank] <= lmax(pre_bank_q[col_bank], col_tck + WTP);
          for (int x = 0; x < NG; x++) begin
            wr_grp_q[x] <= lmax(wr_grp_q[x], col_tck +
                                ((3'(x) == col_bank[4:2]) ? NCCD_L_WR : NCCD_S));
            rd_grp_q[x] <= lmax(rd_grp_q[x], col_tck + ((3'(x) == col_bank[4:2]) ? WTR_L : WTR_S));
          end
        end else begin
          for (int i = 0; i < ReadQueue - 1; i++) if (i >= col_idx) rq_q[i] <= rq_q[i+1];
          rq_n = rq_n - 1;
          pre_bank_q[col_bank] <= lmax(pre_bank_q[col_bank], col_tck + NRTP);
          for (int x = 0; x < NG; x++) begin
            rd_grp_q[x] <= lmax(rd_grp_q[x], col_tck + ((3'(x) == col_bank[4:2]) ? NCCD_L : NCCD_S));
            wr_grp_q[x] <= lmax(wr_grp_q[x], col_tck + RTW);
          end
        end
      end

      for (int r = 0; r < 2; r++) begin
        if (row_valid[r]) begin
          unique case (row_cmd[r])
            CMD_ACT: begin
              open_q[row_bank[r]]     <= 1'b1;
              orow_q[row_bank[r]]     <= row_row[r];
              row_used_q[row_bank[r]] <= row_tck[r];
              act_bank_q[row_bank[r]] <= lmax(act_bank_q[row_bank[r]], row_tck[r] + NRC);
              col_bank_q[row_bank[r]] <= row_tck[r] + NRCD;
              pre_bank_q[row_bank[r]] <= lmax(pre_bank_q[row_bank[r]], row_tck[r] + NRAS);
              for (int x = 0; x < NG; x++) begin
                act_grp_q[x] <= lmax(act_grp_q[x], row_tck[r] +
                                     ((3'(x) == row_bank[r][4:2]) ? NRRD_L : NRRD_S));
              end
              acts_q[0] <= acts_q[1];
              acts_q[1] <= acts_q[2];
              acts_q[2] <= acts_q[3];
              acts_q[3] <= row_tck[r];
            end
            CMD_PRE: begin
              open_q[row_bank[r]]     <= 1'b0;
              act_bank_q[row_bank[r]] <= lmax(act_bank_q[row_bank[r]], row_tck[r] + NRP);
            end
            CMD_REF: begin
              ref_ready_q    <= row_tck[r] + NRFC;
              next_refresh_q <= next_refresh_q + NREFI;
            end
            default: ;
          endcase
        end
      end
      // the later of the cycle's PREs (two can issue while refresh closes the banks)
      pre_all_q <= lmax(pre_all_q,
                        lmax((row_valid[0] && row_cmd[0] == CMD_PRE) ? row_tck[0] + NRP : 0,
                             (row_valid[1] && row_cmd[1] == CMD_PRE) ? row_tck[1] + NRP : 0));

      if (req_valid_i && req_ready_o) begin
        if (req_write_i) begin
          wq_q[wq_n] <= req_entry;
          wq_n = wq_n + 1;
        end else begin
          rq_q[rq_n] <= req_entry;
          rq_n = rq_n + 1;
        end
      end
      rq_n_q <= rq_n;
      wq_n_q <= wq_n;
    end
  end

  // command slots: 0 carries the READ/WRITE, 1 and 2 the row commands
  assign cmd_valid_o = {row_valid, col_valid};
  assign cmd_o       = {row_cmd[1], row_cmd[0], write_active ? CMD_WR : CMD_RD};
  assign cmd_tck_o   = {64'(row_tck[1]), 64'(row_tck[0]), 64'(col_tck)};
  assign cmd_bg_o    = {row_bank[1][4:2], row_bank[0][4:2], col_bank[4:2]};
  assign cmd_bank_o  = {row_bank[1][1:0], row_bank[0][1:0], col_bank[1:0]};
  assign cmd_row_o   = {{1'b0, row_row[1]}, {1'b0, row_row[0]}, {1'b0, col_row}};
  assign cmd_col_o   = col_col;
  assign cmd_tag_o   = col_tag;
  assign cmd_write_o = col_valid && write_active;
endmodule
