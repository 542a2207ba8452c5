// The tries form of the DDR5 sub-channel controller's scheduler (nelssa_ddr5_ctrl's
// ParallelSched = 0, what simulation builds use): in one cycle, the column command and up to two
// row commands of the controller's policy, each "the oldest entry of a mask whose bank can take
// the command". The lowest set bit is tried and, if its bank or its whole bank group cannot take
// the command this cycle, all of their entries leave the mask at once. Per-bank counts of live
// entries and of row hits, kept here as entries come and go, let the row choice skip before its
// first try the entries that must wait behind a row hit of their bank ("held"), and find open
// rows no entry wants without a try per bank. Usually the first try wins, so a cycle costs a few
// mask operations. nelssa_ddr5_sched_parallel issues the same commands
// (tests/rtl/test_ddr5_ctrl.py runs both against the cycle model).
`include "nelssa_ddr5_sched.svh"

module nelssa_ddr5_sched_tries
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T    = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned TckW = 20          // width of the controller's wrapping tCK registers
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  // the cycle
  input  logic [TckW-1:0]       lo_i,             // its first tCK
  input  logic                  ca_carry_i,       // its tCK 0 taken by a command of the last one
  input  logic                  write_i,          // the write queue is served (a drain)
  input  logic                  refresh_i,        // a refresh is due
  input  logic [31:0]           aged_i,           // banks unused for CloseIdle tCK
  // the queues (0 reads, 1 writes) at the start of the cycle: entries by slot, free slots, and
  // by position (0 the oldest) the slot and bank bit planes, open banks and row hits; lengths
  input  ddr5_entry_t           ent_i [2][32],
  // (the interface of both forms: the tries find a line through the live positions, not the
  // free slots)
  /* verilator lint_off UNUSEDSIGNAL */
  input  logic [31:0]           free_i [2],
  /* verilator lint_on UNUSEDSIGNAL */
  input  logic [31:0]           slot_i [2][5],
  input  logic [31:0]           bank_i [2][5],
  input  logic [31:0]           qopen_i [2],
  input  logic [31:0]           qhit_i [2],
  input  logic [5:0]            n_i [2],
  // the banks: open, and each JEDEC rule as the earliest tCK it allows
  input  logic [31:0]           open_i,
  input  logic [TckW-1:0]       act_bank_i [32],  // ACT: tRP, tRC
  input  logic [TckW-1:0]       col_bank_i [32],  // READ/WRITE: tRCD
  input  logic [TckW-1:0]       pre_bank_i [32],  // PRE: tRAS, tRTP, tWR
  input  logic [TckW-1:0]       act_grp_i [8],    // ACT into the group: tRRD_L
  input  logic [TckW-1:0]       act_all_i,        // ACT into any group: tRRD_S
  input  logic [TckW-1:0]       rd_grp_i [8],     // READ to the group: tCCD_L, tWTR_L
  input  logic [TckW-1:0]       rd_all_i,         // READ to any group: tCCD_S, tWTR_S
  input  logic [TckW-1:0]       wr_grp_i [8],     // WRITE to the group: tCCD_L_WR
  input  logic [TckW-1:0]       wr_all_i,         // WRITE to any group: tCCD_S, read-to-write
  input  logic [TckW-1:0]       acts_i [4],       // the last four ACTs (tFAW)
  input  logic [TckW-1:0]       ref_ready_i,      // REF or ACT after REF: tRFC
  input  logic [TckW-1:0]       pre_all_i,        // REF after the last PRE: tRP
  // the request at the port, and whether the other queue holds its line
  input  ddr5_entry_t           req_i,
  input  logic                  req_write_i,
  output logic                  req_same_line_o,
  // the row open in each open bank, and whether the request joins its queue this cycle
  input  logic [15:0]           orow_i [32],
  input  logic                  enter_i,
  // the column command: valid, position and slot of its entry, tCK offset in the cycle, entry
  output logic                  col_valid_o,
  output logic [4:0]            col_idx_o,
  output logic [4:0]            col_slot_o,
  output logic [1:0]            col_k_o,
  output ddr5_entry_t           col_entry_o,
  // up to two row commands (ACT, PRE, REF): valid, command, tCK offset, bank, row of an ACT
  output logic [1:0]            row_valid_o,
  output dram_cmd_e [1:0]       row_cmd_o,
  output logic [1:0][1:0]       row_k_o,
  output logic [1:0][4:0]       row_bank_o,
  output logic [1:0][15:0]      row_row_o,
  output logic                  ca_carry_o,       // tCK 0 of the next cycle taken
  // per queue, the positions whose entry wants the row that this cycle's ACT opens
  output logic [31:0]           act_hits_o [2]
);
  localparam int NB = 32;         // banks
  localparam int QW = 32;         // queue mask width
  localparam int HORIZON = 1 << (TckW - 2);
  localparam int HALF_M1 = HORIZON - 1 + HORIZON;  // the largest difference not negative

  typedef logic [TckW-1:0] tck_t;
  typedef logic [QW-1:0] qmask_t;

  // timings in tCK
  localparam tck_t NRP = tck_t'(T.nRP);
  localparam tck_t NRTP = tck_t'(T.nRTP);
  localparam tck_t NRRD_S = tck_t'(T.nRRD_S);
  localparam tck_t NRRD_L = tck_t'(T.nRRD_L);
  localparam tck_t NFAW = tck_t'(T.nFAW);
  localparam tck_t NRFC = tck_t'(T.nRFC);
  localparam tck_t WTP = tck_t'(T.nCWL + 8 + T.nWR);  // WR to PRE (8 tCK: a BL16 burst)

  // ---------------------------------------------------------------------------------------------
  // Scheduling of one cycle: a column command, then up to two row commands, each seeing the
  // commands before it.
  qmask_t     live;       // positions of the active queue that hold entries
  qmask_t     act_hit;
  logic [4:0] col_bank;

  always_comb begin
    automatic logic [4:0] busy = {4'b0, ca_carry_i};
    automatic logic wa;
    automatic logic [5:0] n_active;
    automatic qmask_t cand, others;
    automatic logic stop = 1'b0;
    automatic logic [2:0] pk;
    automatic tck_t d;
    automatic logic [3:0] ok;
    automatic logic [4:0] p;
    automatic tck_t ep;
    automatic logic group_blocked = 1'b0;
    automatic int t;
    automatic qmask_t act_open;
    automatic logic [4:0] b;
    automatic logic [2:0] g;
    automatic ddr5_entry_t e;
    // (the row commands' temporaries: declared here, at the top of the block, Verilator keeps
    // them in the evaluation's locals rather than in the model, a tenth fewer instructions
    // together with the unrolled loop over the two row commands)
    automatic logic found;
    automatic tck_t best, act_any;
    automatic logic [NB-1:0] idle;
    automatic int x;
    // the first row command, for the second
    automatic logic ov_valid = 1'b0, ov_act = 1'b0, ov_ref = 1'b0;
    automatic logic [4:0] ov_bank = '0;
    automatic tck_t ov_tck = '0;

    wa = write_i;
    n_active = n_i[wa];
    live = `NELSSA_LIVE(n_active);
    act_hit = qhit_i[wa] & live;
    act_open = qopen_i[wa] & live;

    // column command: the oldest row hit whose bank and group allow it
    col_valid_o = 1'b0;
    col_idx_o = '0;
    col_slot_o = '0;
    col_k_o = '0;
    col_entry_o = '0;
    // (when the rule over all groups leaves no slot this cycle, none is tried; when a group's
    // rule leaves none, that group's entries leave the mask, otherwise that bank's)
    cand = act_hit;
    `NELSSA_PLACE(wa ? wr_all_i : rd_all_i, 1'b1)
    if (!pk[2]) cand = '0;
    for (t = 0; t < NB; t++) begin
      if (cand == '0 || col_valid_o) break;
      p = `NELSSA_LOWEST_DB(cand);
      e = ent_i[wa][`NELSSA_AT(slot_i[wa], p)];
      g = e.bank[4:2];
      ep = wa ? `NELSSA_TMAX(wr_all_i, wr_grp_i[g]) : `NELSSA_TMAX(rd_all_i, rd_grp_i[g]);
      `NELSSA_PLACE(ep, 1'b1)
      if (!pk[2]) begin
        cand &= ~`NELSSA_HOLDING_GROUP(bank_i[wa], g);
      end else begin
        ep = `NELSSA_TMAX(ep, col_bank_i[e.bank]);
        `NELSSA_PLACE(ep, 1'b1)
        if (pk[2]) begin
          col_valid_o = 1'b1;
          col_idx_o = p;
          col_slot_o = `NELSSA_AT(slot_i[wa], p);
          col_k_o = pk[1:0];
          col_entry_o = e;
        end else begin
          cand &= ~`NELSSA_HOLDING(bank_i[wa], e.bank);
        end
      end
    end
    if (col_valid_o) begin
      busy[3'(col_k_o)] = 1'b1;
      busy[3'(col_k_o) + 3'd1] = 1'b1;
    end
    col_bank = col_entry_o.bank;
    // the entries left to want a bank this cycle
    others = live & ~(col_valid_o ? qmask_t'(1) << col_idx_o : '0);

    // row commands
    row_valid_o = '0;
    row_cmd_o = {CMD_ACT, CMD_ACT};
    row_k_o = '0;
    row_bank_o = '0;
    row_row_o = '0;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      automatic logic issued = 1'b0;
      automatic dram_cmd_e c = CMD_ACT;
      automatic logic [4:0] cb = '0;
      automatic logic [15:0] crow = '0;
      automatic logic [1:0] ck = '0;
      automatic logic [NB-1:0] open_now = open_i;
      if (ov_valid) open_now[ov_bank] = ov_act;
      if (!stop) begin
        if (refresh_i) begin
          // close the open bank that may close first (the lowest on a tie), then refresh
          found = 1'b0;
          best = '0;
          for (x = 0; x < NB; x++) begin
            if (open_now[x]) begin
              ep = pre_bank_i[x];
              if (col_valid_o && 5'(x) == col_bank)
                ep = `NELSSA_TMAX(ep, lo_i + tck_t'(col_k_o) + (wa ? WTP : NRTP));
              if (!found || `NELSSA_AFTER(best, ep)) begin
                best = ep;
                cb = 5'(x);
              end
              found = 1'b1;
            end
          end
          if (found) begin
            c = CMD_PRE;
            `NELSSA_PLACE(best, 1'b0)
          end else begin
            c = CMD_REF;
            ep = `NELSSA_TMAX(pre_all_i, ref_ready_i);
            if (ov_valid) ep = `NELSSA_TMAX(ep, ov_tck + (ov_ref ? NRFC : NRP));
            `NELSSA_PLACE(ep, 1'b0)
          end
          issued = pk[2];
          ck = pk[1:0];
        end else begin
          // the oldest entry that is not a row hit and whose bank can take an ACT or a PRE (a
          // PRE only if no entry left wants the open row); the first slot's bank is done for
          // this cycle (its entries hit, or wait for tRP)
          act_any = `NELSSA_TMAX(ref_ready_i, (ov_act ? acts_i[1] : acts_i[0]) + NFAW);
          act_any = `NELSSA_TMAX(act_any, act_all_i);
          if (ov_act) act_any = `NELSSA_TMAX(act_any, ov_tck + NRRD_S);
          // (a held bank's try would fail: a hit among the entries left, or the served entry was
          // its last hit and its PRE must wait for tRTP or tWR, 4 tCK or more, after this
          // cycle's column command)
          cand = others & ~act_hit & ~qheld_q[wa];
          if (ov_valid) cand &= ~`NELSSA_HOLDING(bank_i[wa], ov_bank);
          `NELSSA_PLACE(act_any, 1'b1)
          if (!pk[2]) cand &= act_open;  // no ACT fits this cycle
          for (t = 0; t < NB; t++) begin
            if (cand == '0 || issued) break;
            p = `NELSSA_LOWEST_DB(cand);  // once: the plane gather below reads it five times
            e = ent_i[wa][`NELSSA_AT(slot_i[wa], p)];
            b = e.bank;
            g = b[4:2];
            if (open_i[b]) begin
              // (no entry left wants its open row: the entries of an open bank with a row hit
              // waiting are held, and left out above)
              ep = pre_bank_i[b];
              if (col_valid_o && b == col_bank)
                ep = `NELSSA_TMAX(ep, lo_i + tck_t'(col_k_o) + (wa ? WTP : NRTP));
              `NELSSA_PLACE(ep, 1'b0)
              if (pk[2]) begin
                issued = 1'b1;
                c = CMD_PRE;
              end
            end else begin
              // the group's rules first: if they leave no slot, no closed bank of the group can
              // take its ACT this cycle
              ep = `NELSSA_TMAX(act_grp_i[b[4:2]], act_any);
              if (ov_act && ov_bank[4:2] == b[4:2]) ep = `NELSSA_TMAX(ep, ov_tck + NRRD_L);
              `NELSSA_PLACE(ep, 1'b1)
              if (!pk[2]) begin
                group_blocked = 1'b1;
              end else begin
                ep = `NELSSA_TMAX(ep, act_bank_i[b]);
                `NELSSA_PLACE(ep, 1'b1)
                if (pk[2]) begin
                  issued = 1'b1;
                  c = CMD_ACT;
                  crow = e.row;
                end
              end
            end
            if (issued) begin
              cb = b;
              ck = pk[1:0];
            end else if (group_blocked) begin
              cand &= ~(`NELSSA_HOLDING_GROUP(bank_i[wa], g) & ~act_open);
              group_blocked = 1'b0;
            end else begin
              cand &= ~`NELSSA_HOLDING(bank_i[wa], b);
            end
          end
          // close a row left idle: open, wanted by no entry left, unused for CloseIdle (for a
          // bank other than the column command's, the entries left are all the live ones)
          if (!issued) begin
            idle = open_now & aged_i & ~wanted_q[wa];
            if (col_valid_o) idle[col_bank] = 1'b0;
            if (ov_valid) idle[ov_bank] = 1'b0;
            for (x = 0; x < NB; x++) begin
              if (idle == '0 || issued) break;
              b = `NELSSA_LOWEST_DB(idle);
              `NELSSA_PLACE(pre_bank_i[b], 1'b0)
              if (pk[2]) begin
                issued = 1'b1;
                c = CMD_PRE;
                cb = b;
                ck = pk[1:0];
              end
              idle[b] = 1'b0;
            end
          end
        end
        if (issued) begin
          busy[3'(ck)] = 1'b1;
          if (c == CMD_ACT) busy[3'(ck) + 3'd1] = 1'b1;
          row_valid_o[r] = 1'b1;
          row_cmd_o[r] = c;
          row_k_o[r] = ck;
          row_bank_o[r] = cb;
          row_row_o[r] = crow;
          ov_valid = 1'b1;
          ov_act = (c == CMD_ACT);
          ov_ref = (c == CMD_REF);
          ov_bank = cb;
          ov_tck = lo_i + tck_t'(ck);
        end else begin
          stop = 1'b1;
        end
      end
    end
    ca_carry_o = busy[4];
  end

  // ---------------------------------------------------------------------------------------------
  // Per queue, the live entries of each bank and the banks that have any (which open rows no
  // entry wants, without gathering each bank's positions from the bank planes); the row hits of
  // each bank, and the positions whose bank is open with a row hit waiting ("held": no ACT or PRE
  // can serve them while the hits wait, so the tries skip them).
  logic [5:0]    bank_n_q [2][NB];
  logic [NB-1:0] wanted_q [2];
  logic [5:0]    hit_n_q [2][NB];
  qmask_t        qheld_q [2];

  // The ACT of the cycle (at most one: nRRD_S is 4 tCK or more) and, per queue, the live entries
  // of its bank that want its row and how many (the masks hold stale bits above the live
  // positions).
  logic [5:0] act_nhit [2];
  always_comb begin
    automatic logic act = 1'b0;
    automatic logic [4:0] b = '0;
    automatic logic [15:0] row = '0;
    automatic qmask_t left;
    automatic logic [4:0] p;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      if (row_valid_o[r] && row_cmd_o[r] == CMD_ACT) begin
        act = 1'b1;
        b = row_bank_o[r];
        row = row_row_o[r];
      end
    end
    // verilator unroll_full
    for (int q = 0; q < 2; q++) begin
      act_hits_o[q] = '0;
      act_nhit[q] = '0;
      left = act ? `NELSSA_HOLDING(bank_i[q], b) & `NELSSA_LIVE(n_i[q]) : '0;
      for (int t = 0; t < QW; t++) begin
        if (left == '0) break;
        p = `NELSSA_LOWEST_DB(left);
        if (ent_i[q][`NELSSA_AT(slot_i[q], p)].row == row) begin
          act_hits_o[q] |= left & ~(left - 1);
          act_nhit[q] = act_nhit[q] + 6'd1;
        end
        left &= left - 1;
      end
    end
  end

  // The request's line in the other queue: a try per live entry of its bank there.
  always_comb begin
    automatic logic other = !req_write_i;
    automatic logic [5:0] n_other = n_i[other];
    automatic qmask_t same = '0;
    automatic logic [4:0] p;
    req_same_line_o = 1'b0;
    if (wanted_q[other][req_i.bank])
      same = `NELSSA_HOLDING(bank_i[other], req_i.bank) & `NELSSA_LIVE(n_other);
    for (int t = 0; t < QW; t++) begin
      if (same == '0 || req_same_line_o) break;
      p = `NELSSA_LOWEST_DB(same);
      req_same_line_o = ent_i[other][`NELSSA_AT(slot_i[other], p)] == req_i;
      same &= same - 1;
    end
  end

  // The counts and held positions follow the cycle's row commands, the served entry (it leaves,
  // the younger ones move down a position) and the entering one, in that order, as the
  // controller's queues do.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    // (whole-array copies: a non-blocking write of one element of a two-dimensional array
    // costs Verilator a flag per element, each checked every cycle)
    automatic qmask_t qheld [2];
    automatic logic [NB-1:0] wanted [2];
    automatic logic [5:0] hit_n [2][NB];
    automatic logic [5:0] bank_n [2][NB];
    automatic qmask_t of_b;
    automatic logic [4:0] b;
    automatic logic wa;
    automatic logic wq;
    automatic logic [4:0] enter_at;   // the entering request's position
    automatic logic enter_open;       // its bank open after this cycle's row commands
    automatic logic [15:0] enter_orow;
    automatic qmask_t of_req;         // its bank's positions after this cycle
    if (!rst_ni) begin
      // verilator unroll_full
      for (int q = 0; q < 2; q++) begin
        wanted_q[q] <= '0;
        qheld_q[q] <= '0;
        // verilator unroll_full
        for (int x = 0; x < NB; x++) begin
          bank_n_q[q][x] <= '0;
          hit_n_q[q][x] <= '0;
        end
      end
    end else begin
      wa = write_i;
      wq = req_write_i;
      qheld = qheld_q;
      hit_n = hit_n_q;
      bank_n = bank_n_q;
      wanted = wanted_q;
      enter_open = open_i[req_i.bank];
      enter_orow = orow_i[req_i.bank];
      // an ACT holds the entries of its bank if any wants its row; a PRE frees them
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid_o[r]) begin
          b = row_bank_o[r];
          unique case (row_cmd_o[r])
            CMD_ACT: begin
              if (b == req_i.bank) begin
                enter_open = 1'b1;
                enter_orow = row_row_o[r];
              end
              // verilator unroll_full
              for (int q = 0; q < 2; q++) begin
                of_b = `NELSSA_HOLDING(bank_i[q], b);
                hit_n[q][b] = act_nhit[q];
                if (act_nhit[q] != '0) qheld[q] |= of_b;
              end
            end
            CMD_PRE: begin
              if (b == req_i.bank) enter_open = 1'b0;
              // verilator unroll_full
              for (int q = 0; q < 2; q++) begin
                of_b = `NELSSA_HOLDING(bank_i[q], b);
                hit_n[q][b] = '0;
                qheld[q] &= ~of_b;
              end
            end
            default: ;
          endcase
        end
      end
      // the served entry was a row hit of its bank; with the last one gone, the bank's other
      // entries are no longer held
      if (col_valid_o) begin
        hit_n[wa][col_bank] = hit_n[wa][col_bank] - 6'd1;
        if (hit_n[wa][col_bank] == '0) qheld[wa] &= ~`NELSSA_HOLDING(bank_i[wa], col_bank);
        qheld[wa] = `NELSSA_DROP(qheld[wa], col_idx_o);
        bank_n[wa][col_bank] = bank_n[wa][col_bank] - 6'd1;
        if (bank_n[wa][col_bank] == '0) wanted[wa][col_bank] = 1'b0;
      end
      // a new hit holds its bank's entries, the new one included; any other new entry is held
      // if its bank already is. (Its bank's positions after this cycle: those before it, moved
      // down past the served entry, and its own; the bits above the live positions differ from
      // the controller's planes there, which nothing reads.)
      if (enter_i) begin
        enter_at = 5'(n_i[wq] - ((col_valid_o && wa == wq) ? 6'd1 : 6'd0));
        if (enter_open && enter_orow == req_i.row) begin
          hit_n[wq][req_i.bank] = hit_n[wq][req_i.bank] + 6'd1;
          if (hit_n[wq][req_i.bank] == 6'd1) begin
            of_req = `NELSSA_HOLDING(bank_i[wq], req_i.bank);
            if (col_valid_o && wa == wq) of_req = `NELSSA_DROP(of_req, col_idx_o);
            of_req[enter_at] = 1'b1;
            qheld[wq] |= of_req;
          end else begin
            qheld[wq][enter_at] = 1'b1;
          end
        end else begin
          qheld[wq][enter_at] = enter_open && hit_n[wq][req_i.bank] != '0;
        end
        bank_n[wq][req_i.bank] = bank_n[wq][req_i.bank] + 6'd1;
        wanted[wq][req_i.bank] = 1'b1;
      end
      qheld_q <= qheld;
      hit_n_q <= hit_n;
      bank_n_q <= bank_n;
      wanted_q <= wanted;
    end
  end
endmodule
