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
  input  logic              clk_i,
  input  logic              rst_ni,
  nelssa_ddr5_sched_if.sched bus  // the controller's state; this cycle's commands
);
  localparam int HALF_M1 = tck_half_m1(TckW);  // the largest difference not negative

  typedef logic [TckW-1:0] tck_t;

  // timings in tCK
  localparam tck_t NRP = tck_t'(T.nRP);
  localparam tck_t NRTP = tck_t'(T.nRTP);
  localparam tck_t NRRD_S = tck_t'(T.nRRD_S);
  localparam tck_t NRRD_L = tck_t'(T.nRRD_L);
  localparam tck_t NFAW = tck_t'(T.nFAW);
  localparam tck_t NRFC = tck_t'(T.nRFC);
  localparam tck_t WTP = tck_t'(T.nCWL + BURST_TCK + T.nWR);  // WR to PRE

  // ---------------------------------------------------------------------------------------------
  // Scheduling of one cycle: a column command, then up to two row commands, each seeing the
  // commands before it.
  qmask_t     live;       // positions of the active queue that hold entries
  qmask_t     act_hit;
  logic [BANK_W-1:0] col_bank;

  always_comb begin
    automatic logic [4:0] busy = {4'b0, bus.ca_carry};
    automatic logic wa;
    automatic logic [5:0] n_active;
    automatic qmask_t cand, others;
    automatic logic stop = 1'b0;
    automatic logic [2:0] pk;
    automatic tck_t d;
    automatic logic [3:0] ok;
    automatic logic [QIDX_W-1:0] p;
    automatic tck_t ep;
    automatic logic group_blocked = 1'b0;
    automatic int t;
    automatic qmask_t act_open;
    automatic logic [BANK_W-1:0] b;
    automatic logic [2:0] g;
    automatic ddr5_entry_t e;
    // (the row commands' temporaries: declared here, at the top of the block, Verilator keeps
    // them in the evaluation's locals rather than in the model, a tenth fewer instructions
    // together with the unrolled loop over the two row commands)
    automatic logic found;
    automatic tck_t best, act_any;
    automatic logic [NUM_BANKS-1:0] idle;
    automatic int x;
    // the first row command, for the second
    automatic logic ov_valid = 1'b0, ov_act = 1'b0, ov_ref = 1'b0;
    automatic logic [BANK_W-1:0] ov_bank = '0;
    automatic tck_t ov_tck = '0;

    wa = bus.write;
    n_active = bus.n[wa];
    live = `NELSSA_LIVE(n_active);
    act_hit = bus.qhit[wa] & live;
    act_open = bus.qopen[wa] & live;

    // column command: the oldest row hit whose bank and group allow it
    bus.col_valid = 1'b0;
    bus.col_idx = '0;
    bus.col_slot = '0;
    bus.col_k = '0;
    bus.col_entry = '0;
    // (when the rule over all groups leaves no slot this cycle, none is tried; when a group's
    // rule leaves none, that group's entries leave the mask, otherwise that bank's)
    cand = act_hit;
    `NELSSA_PLACE(wa ? bus.wr_all : bus.rd_all, 1'b1)
    if (!pk[2]) cand = '0;
    for (t = 0; t < NUM_BANKS; t++) begin
      if (cand == '0 || bus.col_valid) break;
      p = `NELSSA_LOWEST_DB(cand);
      e = bus.ent[wa][`NELSSA_AT(bus.slot[wa], p)];
      g = e.bank[4:2];
      ep = wa ? `NELSSA_TMAX(bus.wr_all, bus.wr_grp[g]) : `NELSSA_TMAX(bus.rd_all, bus.rd_grp[g]);
      `NELSSA_PLACE(ep, 1'b1)
      if (!pk[2]) begin
        cand &= ~`NELSSA_HOLDING_GROUP(bus.bank[wa], g);
      end else begin
        ep = `NELSSA_TMAX(ep, bus.col_bank[e.bank]);
        `NELSSA_PLACE(ep, 1'b1)
        if (pk[2]) begin
          bus.col_valid = 1'b1;
          bus.col_idx = p;
          bus.col_slot = `NELSSA_AT(bus.slot[wa], p);
          bus.col_k = pk[1:0];
          bus.col_entry = e;
        end else begin
          cand &= ~`NELSSA_HOLDING(bus.bank[wa], e.bank);
        end
      end
    end
    if (bus.col_valid) begin
      busy[3'(bus.col_k)] = 1'b1;
      busy[3'(bus.col_k) + 3'd1] = 1'b1;
    end
    col_bank = bus.col_entry.bank;
    // the entries left to want a bank this cycle
    others = live & ~(bus.col_valid ? qmask_t'(1) << bus.col_idx : '0);

    // row commands
    bus.row_valid = '0;
    bus.row_cmd = {CMD_ACT, CMD_ACT};
    bus.row_k = '0;
    bus.row_bank = '0;
    bus.row_row = '0;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      automatic logic issued = 1'b0;
      automatic dram_cmd_e c = CMD_ACT;
      automatic logic [BANK_W-1:0] cb = '0;
      automatic logic [15:0] crow = '0;
      automatic logic [1:0] ck = '0;
      automatic logic [NUM_BANKS-1:0] open_now = bus.open;
      if (ov_valid) open_now[ov_bank] = ov_act;
      if (!stop) begin
        if (bus.refresh) begin
          // close the open bank that may close first (the lowest on a tie), then refresh
          found = 1'b0;
          best = '0;
          for (x = 0; x < NUM_BANKS; x++) begin
            if (open_now[x]) begin
              ep = bus.pre_bank[x];
              if (bus.col_valid && BANK_W'(x) == col_bank)
                ep = `NELSSA_TMAX(ep, bus.lo + tck_t'(bus.col_k) + (wa ? WTP : NRTP));
              if (!found || `NELSSA_AFTER(best, ep)) begin
                best = ep;
                cb = BANK_W'(x);
              end
              found = 1'b1;
            end
          end
          if (found) begin
            c = CMD_PRE;
            `NELSSA_PLACE(best, 1'b0)
          end else begin
            c = CMD_REF;
            ep = `NELSSA_TMAX(bus.pre_all, bus.ref_ready);
            if (ov_valid) ep = `NELSSA_TMAX(ep, ov_tck + (ov_ref ? NRFC : NRP));
            `NELSSA_PLACE(ep, 1'b0)
          end
          issued = pk[2];
          ck = pk[1:0];
        end else begin
          // the oldest entry that is not a row hit and whose bank can take an ACT or a PRE (a
          // PRE only if no entry left wants the open row); the first slot's bank is done for
          // this cycle (its entries hit, or wait for tRP)
          act_any = `NELSSA_TMAX(bus.ref_ready, (ov_act ? bus.acts[1] : bus.acts[0]) + NFAW);
          act_any = `NELSSA_TMAX(act_any, bus.act_all);
          if (ov_act) act_any = `NELSSA_TMAX(act_any, ov_tck + NRRD_S);
          // (a held bank's try would fail: a hit among the entries left, or the served entry was
          // its last hit and its PRE must wait for tRTP or tWR, 4 tCK or more, after this
          // cycle's column command)
          cand = others & ~act_hit & ~qheld_q[wa];
          if (ov_valid) cand &= ~`NELSSA_HOLDING(bus.bank[wa], ov_bank);
          `NELSSA_PLACE(act_any, 1'b1)
          if (!pk[2]) cand &= act_open;  // no ACT fits this cycle
          for (t = 0; t < NUM_BANKS; t++) begin
            if (cand == '0 || issued) break;
            p = `NELSSA_LOWEST_DB(cand);  // once: the plane gather below reads it five times
            e = bus.ent[wa][`NELSSA_AT(bus.slot[wa], p)];
            b = e.bank;
            g = b[4:2];
            if (bus.open[b]) begin
              // (no entry left wants its open row: the entries of an open bank with a row hit
              // waiting are held, and left out above)
              ep = bus.pre_bank[b];
              if (bus.col_valid && b == col_bank)
                ep = `NELSSA_TMAX(ep, bus.lo + tck_t'(bus.col_k) + (wa ? WTP : NRTP));
              `NELSSA_PLACE(ep, 1'b0)
              if (pk[2]) begin
                issued = 1'b1;
                c = CMD_PRE;
              end
            end else begin
              // the group's rules first: if they leave no slot, no closed bank of the group can
              // take its ACT this cycle
              ep = `NELSSA_TMAX(bus.act_grp[b[4:2]], act_any);
              if (ov_act && ov_bank[4:2] == b[4:2]) ep = `NELSSA_TMAX(ep, ov_tck + NRRD_L);
              `NELSSA_PLACE(ep, 1'b1)
              if (!pk[2]) begin
                group_blocked = 1'b1;
              end else begin
                ep = `NELSSA_TMAX(ep, bus.act_bank[b]);
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
              cand &= ~(`NELSSA_HOLDING_GROUP(bus.bank[wa], g) & ~act_open);
              group_blocked = 1'b0;
            end else begin
              cand &= ~`NELSSA_HOLDING(bus.bank[wa], b);
            end
          end
          // close a row left idle: open, wanted by no entry left, unused for CloseIdle (for a
          // bank other than the column command's, the entries left are all the live ones)
          if (!issued) begin
            idle = open_now & bus.aged & ~wanted_q[wa];
            if (bus.col_valid) idle[col_bank] = 1'b0;
            if (ov_valid) idle[ov_bank] = 1'b0;
            for (x = 0; x < NUM_BANKS; x++) begin
              if (idle == '0 || issued) break;
              b = `NELSSA_LOWEST_DB(idle);
              `NELSSA_PLACE(bus.pre_bank[b], 1'b0)
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
          bus.row_valid[r] = 1'b1;
          bus.row_cmd[r] = c;
          bus.row_k[r] = ck;
          bus.row_bank[r] = cb;
          bus.row_row[r] = crow;
          ov_valid = 1'b1;
          ov_act = (c == CMD_ACT);
          ov_ref = (c == CMD_REF);
          ov_bank = cb;
          ov_tck = bus.lo + tck_t'(ck);
        end else begin
          stop = 1'b1;
        end
      end
    end
    bus.ca_carry_next = busy[4];
  end

  // ---------------------------------------------------------------------------------------------
  // Per queue, the live entries of each bank and the banks that have any (which open rows no
  // entry wants, without gathering each bank's positions from the bank planes); the row hits of
  // each bank, and the positions whose bank is open with a row hit waiting ("held": no ACT or PRE
  // can serve them while the hits wait, so the tries skip them).
  logic [5:0]    bank_n_q [2][NUM_BANKS];
  logic [NUM_BANKS-1:0] wanted_q [2];
  logic [5:0]    hit_n_q [2][NUM_BANKS];
  qmask_t        qheld_q [2];

  // The ACT of the cycle (at most one: nRRD_S is 4 tCK or more) and, per queue, the live entries
  // of its bank that want its row and how many (the masks hold stale bits above the live
  // positions).
  logic [QIDX_W:0] act_nhit [2];
  always_comb begin
    automatic logic act = 1'b0;
    automatic logic [BANK_W-1:0] b = '0;
    automatic logic [15:0] row = '0;
    automatic qmask_t left;
    automatic logic [QIDX_W-1:0] p;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      if (bus.row_valid[r] && bus.row_cmd[r] == CMD_ACT) begin
        act = 1'b1;
        b = bus.row_bank[r];
        row = bus.row_row[r];
      end
    end
    // verilator unroll_full
    for (int q = 0; q < 2; q++) begin
      bus.act_hits[q] = '0;
      act_nhit[q] = '0;
      left = act ? `NELSSA_HOLDING(bus.bank[q], b) & `NELSSA_LIVE(bus.n[q]) : '0;
      for (int t = 0; t < QUEUE_W; t++) begin
        if (left == '0) break;
        p = `NELSSA_LOWEST_DB(left);
        if (bus.ent[q][`NELSSA_AT(bus.slot[q], p)].row == row) begin
          bus.act_hits[q] |= left & ~(left - 1);
          act_nhit[q] = act_nhit[q] + 6'd1;
        end
        left &= left - 1;
      end
    end
  end

  // The request's line in the other queue: a try per live entry of its bank there.
  always_comb begin
    automatic logic other = !bus.req_write;
    automatic logic [5:0] n_other = bus.n[other];
    automatic qmask_t same = '0;
    automatic logic [QIDX_W-1:0] p;
    bus.req_same_line = 1'b0;
    if (wanted_q[other][bus.req.bank])
      same = `NELSSA_HOLDING(bus.bank[other], bus.req.bank) & `NELSSA_LIVE(n_other);
    for (int t = 0; t < QUEUE_W; t++) begin
      if (same == '0 || bus.req_same_line) break;
      p = `NELSSA_LOWEST_DB(same);
      bus.req_same_line = bus.ent[other][`NELSSA_AT(bus.slot[other], p)] == bus.req;
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
    automatic logic [NUM_BANKS-1:0] wanted [2];
    automatic logic [5:0] hit_n [2][NUM_BANKS];
    automatic logic [5:0] bank_n [2][NUM_BANKS];
    automatic qmask_t of_b;
    automatic logic [BANK_W-1:0] b;
    automatic logic wa;
    automatic logic wq;
    automatic logic [QIDX_W-1:0] enter_at;   // the entering request's position
    automatic logic enter_open;       // its bank open after this cycle's row commands
    automatic logic [15:0] enter_orow;
    automatic qmask_t of_req;         // its bank's positions after this cycle
    if (!rst_ni) begin
      // verilator unroll_full
      for (int q = 0; q < 2; q++) begin
        wanted_q[q] <= '0;
        qheld_q[q] <= '0;
        // verilator unroll_full
        for (int x = 0; x < NUM_BANKS; x++) begin
          bank_n_q[q][x] <= '0;
          hit_n_q[q][x] <= '0;
        end
      end
    end else begin
      wa = bus.write;
      wq = bus.req_write;
      qheld = qheld_q;
      hit_n = hit_n_q;
      bank_n = bank_n_q;
      wanted = wanted_q;
      enter_open = bus.open[bus.req.bank];
      enter_orow = bus.orow[bus.req.bank];
      // an ACT holds the entries of its bank if any wants its row; a PRE frees them
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (bus.row_valid[r]) begin
          b = bus.row_bank[r];
          unique case (bus.row_cmd[r])
            CMD_ACT: begin
              if (b == bus.req.bank) begin
                enter_open = 1'b1;
                enter_orow = bus.row_row[r];
              end
              // verilator unroll_full
              for (int q = 0; q < 2; q++) begin
                of_b = `NELSSA_HOLDING(bus.bank[q], b);
                hit_n[q][b] = act_nhit[q];
                if (act_nhit[q] != '0) qheld[q] |= of_b;
              end
            end
            CMD_PRE: begin
              if (b == bus.req.bank) enter_open = 1'b0;
              // verilator unroll_full
              for (int q = 0; q < 2; q++) begin
                of_b = `NELSSA_HOLDING(bus.bank[q], b);
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
      if (bus.col_valid) begin
        hit_n[wa][col_bank] = hit_n[wa][col_bank] - 6'd1;
        if (hit_n[wa][col_bank] == '0) qheld[wa] &= ~`NELSSA_HOLDING(bus.bank[wa], col_bank);
        qheld[wa] = `NELSSA_DROP(qheld[wa], bus.col_idx);
        bank_n[wa][col_bank] = bank_n[wa][col_bank] - 6'd1;
        if (bank_n[wa][col_bank] == '0) wanted[wa][col_bank] = 1'b0;
      end
      // a new hit holds its bank's entries, the new one included; any other new entry is held
      // if its bank already is. (Its bank's positions after this cycle: those before it, moved
      // down past the served entry, and its own; the bits above the live positions differ from
      // the controller's planes there, which nothing reads.)
      if (bus.enter) begin
        enter_at = QIDX_W'(bus.n[wq] - ((bus.col_valid && wa == wq) ? 6'd1 : 6'd0));
        if (enter_open && enter_orow == bus.req.row) begin
          hit_n[wq][bus.req.bank] = hit_n[wq][bus.req.bank] + 6'd1;
          if (hit_n[wq][bus.req.bank] == 6'd1) begin
            of_req = `NELSSA_HOLDING(bus.bank[wq], bus.req.bank);
            if (bus.col_valid && wa == wq) of_req = `NELSSA_DROP(of_req, bus.col_idx);
            of_req[enter_at] = 1'b1;
            qheld[wq] |= of_req;
          end else begin
            qheld[wq][enter_at] = 1'b1;
          end
        end else begin
          qheld[wq][enter_at] = enter_open && hit_n[wq][bus.req.bank] != '0;
        end
        bank_n[wq][bus.req.bank] = bank_n[wq][bus.req.bank] + 6'd1;
        wanted[wq][bus.req.bank] = 1'b1;
      end
      qheld_q <= qheld;
      hit_n_q <= hit_n;
      bank_n_q <= bank_n;
      wanted_q <= wanted;
    end
  end
endmodule
