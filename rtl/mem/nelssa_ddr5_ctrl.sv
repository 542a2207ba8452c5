// Memory controller of one 32-bit DDR5 sub-channel, clocked at 800 MHz (4 tCK per cycle).
//
// The policy of hw/model/ddr5_subchannel.py, cycle for cycle: read and write queues in age order,
// FR-FCFS (one READ/WRITE and up to two ACT/PRE/REF per cycle, each at the earliest tCK of the
// cycle that the JEDEC rules and the CA bus allow), open page with close-after-idle, write drain
// between two watermarks, all-bank refresh every nREFI. Commands leave on three slots stamped
// with their tCK (slot 0: READ/WRITE, slots 1-2: row commands) toward the DRAM or its model; the
// request tag rides along with READ/WRITE. Requests enter one per cycle and may be scheduled from
// the next cycle; a request whose line sits in the other queue waits, so the reads and writes of
// one line complete in request order.
//
// Structure. Each queue keeps its entries in fixed slots and its age order (position 0 is the
// oldest) as bit planes over positions: per position, the slot and the bank of the entry there,
// and masks of the positions whose bank is open and whose row is open (row hits). A served
// entry leaves by dropping one bit of each plane; "the entries of bank b" is five mask
// operations. A choice is "the oldest entry of a mask whose bank can take the command", made in
// one of two forms that issue the same commands (tests/rtl/test_ddr5_ctrl.py runs both):
//  - tries (simulation, the default): the lowest set bit is tried and, if its bank or its whole
//    bank group cannot take the command this cycle, all of their entries leave the mask at once.
//    Per-bank counts of live entries and of row hits, kept as entries come and go, let the row
//    choice skip before its first try the entries that must wait behind a row hit of their
//    bank, and find open rows no entry wants without a try per bank. Usually the first try
//    wins, so a cycle costs a few mask operations.
//  - parallel (NELSSA_DDR5_PARALLEL, for synthesis): every bank's readiness at once, gathered
//    per position, and one priority encoder, instead of a chain of up to 32 tries.
// Close-after-idle ages banks through a timing wheel rather than comparing every bank's last use
// each cycle.
//
// Each JEDEC rule is kept as the earliest tCK it allows, raised when a command issues, in
// registers of TckW bits that wrap (20 for synthesis, 32 in simulation): times are compared
// through their difference, and a scrubber pulls any register that lies more than a quarter of
// the range (the horizon) in the past up to it (a bank, a bank group and one of the registers
// shared by all banks every 64th cycle, so each register at least every 2,048 cycles, 8,192
// tCK), so no difference ever reaches half the range.
module nelssa_ddr5_ctrl
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T           = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned ReadQueue   = 32,         // read-queue entries (1 to 32)
  parameter int unsigned WriteQueue  = 32,         // write-queue entries (1 to 32)
  parameter int unsigned WriteHigh   = 24,         // write-queue level that starts a drain
  parameter int unsigned WriteLow    = 8,          // level at which a drain stops
  parameter int unsigned CloseIdle   = 64,         // tCK an unrequested open row stays open
  parameter bit          Refresh     = 1'b1,       // issue all-bank refresh
  parameter int unsigned TagW        = 16,         // request tag width
  // width of the wrapping tCK registers: 20 is the fewest flops the horizon allows; 32, a
  // native word, spares Verilator a mask after every subtraction (3 % of a simulated cycle)
  parameter int unsigned TckW        = 20
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
  localparam int NB = 32;         // banks
  localparam int NG = 8;          // bank groups
  localparam int QW = 32;         // queue mask width
  localparam int HORIZON = 1 << (TckW - 2);  // how far in the past a rule register may lie
  localparam int HALF_M1 = HORIZON - 1 + HORIZON;  // the largest difference not negative
  localparam int WHEEL_W = $clog2((CloseIdle + 3) / 4 + 2);  // close-after-idle timing wheel
  localparam int WHEEL = 1 << WHEEL_W;

  typedef logic [TckW-1:0] tck_t;
  typedef logic [QW-1:0] qmask_t;

`ifndef NELSSA_DDR5_PARALLEL
  // bit position of 2^k from the top five bits of 2^k * 0x077CB531 (a de Bruijn sequence)
  localparam logic [4:0] DE_BRUIJN [32] = '{
    5'd0, 5'd1, 5'd28, 5'd2, 5'd29, 5'd14, 5'd24, 5'd3, 5'd30, 5'd22, 5'd20, 5'd15, 5'd25, 5'd17,
    5'd4, 5'd8, 5'd31, 5'd27, 5'd13, 5'd23, 5'd21, 5'd19, 5'd16, 5'd7, 5'd26, 5'd12, 5'd18, 5'd6,
    5'd11, 5'd5, 5'd10, 5'd9
  };
`endif

  // timings in tCK
  localparam tck_t NRCD = tck_t'(T.nRCD);
  localparam tck_t NRP = tck_t'(T.nRP);
  localparam tck_t NRAS = tck_t'(T.nRAS);
  localparam tck_t NRC = tck_t'(T.nRC);
  localparam tck_t NRTP = tck_t'(T.nRTP);
  localparam tck_t NCCD_S = tck_t'(T.nCCD_S);
  localparam tck_t NCCD_L = tck_t'(T.nCCD_L);
  localparam tck_t NCCD_L_WR = tck_t'(T.nCCD_L_WR);
  localparam tck_t NRRD_S = tck_t'(T.nRRD_S);
  localparam tck_t NRRD_L = tck_t'(T.nRRD_L);
  localparam tck_t NFAW = tck_t'(T.nFAW);
  localparam tck_t NRFC = tck_t'(T.nRFC);
  localparam tck_t NREFI = tck_t'(T.nREFI);
  localparam int BURST = 8;  // tCK of a BL16 burst
  localparam tck_t WTR_S = tck_t'(T.nCWL + BURST + T.nWTR_S);  // WR to RD, other group
  localparam tck_t WTR_L = tck_t'(T.nCWL + BURST + T.nWTR_L);  // WR to RD, same group
  localparam tck_t WTP = tck_t'(T.nCWL + BURST + T.nWR);       // WR to PRE
  localparam int NCL_RTW = T.nCL + BURST + 1 - T.nCWL;
  localparam tck_t RTW = tck_t'((NCL_RTW > T.nCCD_S) ? NCL_RTW : T.nCCD_S);  // RD to WR

  if (T.bank_groups != NG || T.banks_per_group != NB / NG) begin : gen_geometry_check
    $error("nelssa_ddr5_ctrl: built for 8 bank groups of 4 banks");
  end
  if (ReadQueue < 1 || ReadQueue > QW || WriteQueue < 1 || WriteQueue > QW)
  begin : gen_queue_check
    $error("nelssa_ddr5_ctrl: ReadQueue and WriteQueue must be 1 to 32");
  end
  if (!(WriteLow < WriteHigh && WriteHigh <= WriteQueue)) begin : gen_watermark_check
    $error("nelssa_ddr5_ctrl: need WriteLow < WriteHigh <= WriteQueue");
  end
  // Commands of one cycle never touch the same bank, and a cycle holds at most one ACT and one
  // REF, when these gaps exceed the 4 tCK of a cycle; the scheduling below relies on it.
  if (T.nRP < 4 || T.nRAS < 4 || T.nRTP < 4 || T.nRRD_S < 4 || T.nRFC < 4 || T.nRCD < 4)
  begin : gen_gap_check
    $error("nelssa_ddr5_ctrl: needs nRP, nRAS, nRTP, nRRD_S, nRFC and nRCD of 4 tCK or more");
  end
  // Wrapping times stay unambiguous while every register lies within the horizon (plus the
  // scrub period, 8,192 tCK) behind now and within the longest gap ahead of it.
  if (TckW < 20 || TckW > 32 || T.nREFI + T.nRFC + T.nRC + 16384 >= HORIZON || CloseIdle < 1 ||
      CloseIdle >= HORIZON)
  begin : gen_time_check
    $error("nelssa_ddr5_ctrl: TckW must be 20 to 32, nREFI and nRFC short enough for it, %s",
           "and CloseIdle 1 to 2^(TckW-2)");
  end

  typedef struct packed {
    logic [4:0]  bank;  // {bank group, bank}
    logic [15:0] row;
    logic [5:0]  col;
  } entry_t;

  // ---------------------------------------------------------------------------------------------
  // State. Queue 0 holds reads, queue 1 writes. An entry stays in its slot from arrival to
  // service; its age is its position. Per position, bit planes give the slot and the bank of the
  // entry there (plane j holds bit j of every position), so the entries of a bank are five mask
  // operations away and a served entry leaves by dropping one bit of each plane.
  entry_t          ent_q [2][QW];
  logic [TagW-1:0] tag_q [2][QW];
  logic [QW-1:0]   free_q [2];        // free slots
  qmask_t          slot_q [2][5];     // slot planes, by position
  qmask_t          bankp_q [2][5];    // bank planes, by position
  qmask_t          qopen_q [2];       // positions whose bank is open
  qmask_t          qhit_q [2];        // positions whose row is open
`ifndef NELSSA_DDR5_PARALLEL
  // per queue, the live entries of each bank, and the banks that have any: which open rows no
  // entry wants, without gathering each bank's positions from the bank planes
  logic [5:0]      bank_n_q [2][NB];
  logic [NB-1:0]   wanted_q [2];
  // per queue, the row hits of each bank, and the positions whose bank is open with a row hit
  // waiting ("held"): no ACT or PRE can serve them while the hits wait, so the tries skip them
  logic [5:0]      hit_n_q [2][NB];
  qmask_t          qheld_q [2];
`endif
  logic [5:0]      n_q [2];
  logic [NB-1:0]   open_q;
  logic [15:0]     orow_q [NB];
  // Close-after-idle: a bank is aged once CloseIdle tCK have passed since its last ACT or column
  // command. Each such command sets the bank's bit in a timing wheel at the cycle it will age;
  // the wheel slot of the cycle joins the aged mask, so no bank's time is compared per cycle.
  logic [NB-1:0]   aged_q;
  logic [NB-1:0]   wheel_q [WHEEL];
  logic [WHEEL_W-1:0] due_q [NB];     // the wheel slot that holds the bank
  tck_t            act_bank_q [NB];  // ACT: tRP, tRC
  tck_t            col_bank_q [NB];  // READ/WRITE: tRCD
  tck_t            pre_bank_q [NB];  // PRE: tRAS, tRTP, tWR
  tck_t            act_grp_q [NG];   // ACT into the group: tRRD_L
  tck_t            act_all_q;        // ACT into any group: tRRD_S
  tck_t            rd_grp_q [NG];    // READ to the group: tCCD_L, tWTR_L
  tck_t            rd_all_q;         // READ to any group: tCCD_S, tWTR_S
  tck_t            wr_grp_q [NG];    // WRITE to the group: tCCD_L_WR
  tck_t            wr_all_q;         // WRITE to any group: tCCD_S, read-to-write
  tck_t            acts_q [4];       // the last four ACTs (tFAW)
  tck_t            ref_ready_q;      // REF or ACT after REF: tRFC
  tck_t            pre_all_q;        // REF after the last PRE: tRP
  tck_t            next_refresh_q;
  logic            draining_q;
  logic            ca_carry_q;       // tCK 0 of this cycle is taken by a command of the last cycle
  logic [61:0]     cycle_q;

  // Helpers as macros, not functions: Verilator lowers each function call to copies through
  // module-level temporaries, which cost more than these one-line expressions themselves.
  // a is after b (wrapping tCK): their difference is 1 to 2^(TckW-1) - 1. Times compare through
  // unsigned differences throughout: a signed compare of a narrow value costs Verilator a sign
  // extension per operand.
  `define NELSSA_AFTER(a, b) (tck_t'((a) - (b) - tck_t'(1)) < tck_t'(HALF_M1))
  `define NELSSA_TMAX(a, b) (`NELSSA_AFTER(a, b) ? (a) : (b))
  // position of the lowest set bit of a 32-bit mask (not zero): for synthesis a count of the bits
  // below it; for simulation a de Bruijn multiply and a table, which Verilator makes a few
  // instructions where it makes a population count a few dozen
`ifdef NELSSA_DDR5_PARALLEL
  `define NELSSA_LOWEST(m) 5'($countones((m) ^ ((m) - 1)) - 1)
`else
  `define NELSSA_LOWEST(m) DE_BRUIJN[5'(32'(((m) & (~(m) + 32'd1)) * 32'h077CB531) >> 27)]
`endif
  // a mask without position p, the positions above it moved down by one
  `define NELSSA_DROP(m, p) \
    (((m) & ((qmask_t'(1) << (p)) - 1)) | (((m) >> 1) & ~((qmask_t'(1) << (p)) - 1)))
  // the value that five bit planes pl[0..4] hold at position p
  `define NELSSA_AT(pl, p) {pl[4][p], pl[3][p], pl[2][p], pl[1][p], pl[0][p]}
  // the positions at which five bit planes hold v
  `define NELSSA_HOLDING(pl, v) \
    (~(pl[0] ^ {QW{v[0]}}) & ~(pl[1] ^ {QW{v[1]}}) & ~(pl[2] ^ {QW{v[2]}}) & \
     ~(pl[3] ^ {QW{v[3]}}) & ~(pl[4] ^ {QW{v[4]}}))
  // the positions at which bank planes 2..4 hold bank group g
  `define NELSSA_HOLDING_GROUP(pl, g) \
    (~(pl[2] ^ {QW{g[0]}}) & ~(pl[3] ^ {QW{g[1]}}) & ~(pl[4] ^ {QW{g[2]}}))
  // the positions of a queue of n entries
  `define NELSSA_LIVE(n) ((n[5]) ? '1 : (qmask_t'(1) << n[4:0]) - 1)
  // the first offset set in a mask of fitting offsets 0..3
  `define NELSSA_FIRST(ok) (ok[0] ? 2'd0 : ok[1] ? 2'd1 : ok[2] ? 2'd2 : 2'd3)
  // a rule register pulled up to now - Horizon when it lies further behind
  // (it lies Horizon + 1 to 2^19 - 1 behind)
  `define NELSSA_SCRUB(v) \
    ((tck_t'(now - (v) - tck_t'(HORIZON + 1)) < tck_t'(HORIZON - 1)) ? now - PAST : (v))

  // {found, k}: the first offset k in 0..3 of this cycle at or after `earliest` whose CA slots
  // (two if `two`) are free in `busy`; into pk, through the temporaries d and ok
  `define NELSSA_PLACE(earliest, two) \
    begin \
      d = tck_t'((earliest) - lo); \
      ok = ~busy[3:0] & ((two) ? ~busy[4:1] : 4'hf); \
      if (!d[TckW-1]) begin \
        if (d > 3) ok = '0; \
        else if (d != 0) ok &= 4'hf << d[1:0]; \
      end \
      pk = {ok != '0, `NELSSA_FIRST(ok)}; \
    end

  // ---------------------------------------------------------------------------------------------
  // Scheduling of one cycle: a column command, then up to two row commands, each seeing the
  // commands before it.
  tck_t               lo;
  logic               write_active, refreshing, draining_d;
  qmask_t             live;       // positions of the active queue that hold entries
  qmask_t             act_hit;
  logic               col_valid;
  logic [4:0]         col_idx;    // position of the served entry
  logic [4:0]         col_slot;
  logic [1:0]         col_k;
  logic [4:0]         col_bank;
  entry_t             col_e;
  logic [1:0]         row_valid;
  dram_cmd_e [1:0]    row_cmd;
  logic [1:0][1:0]    row_k;
  logic [1:0][4:0]    row_bank;
  logic [1:0][15:0]   row_row;
  logic               ca_carry_d;
  logic [NB-1:0]      aged_now;   // banks unused for CloseIdle tCK

  // The choices come in two forms that issue the same commands: the tries (simulation, the
  // default), and for synthesis (NELSSA_DDR5_PARALLEL) every bank's readiness at once, gathered
  // per queue position through the bank planes, then one priority encoder, instead of a chain
  // of up to 32 tries.
  always_comb begin
    automatic logic [4:0] busy = {4'b0, ca_carry_q};
    automatic logic wa;
    automatic logic [5:0] n_active;
    automatic qmask_t cand, others;
    automatic logic stop = 1'b0;
    automatic logic [2:0] pk;
    automatic tck_t d;
    automatic logic [3:0] ok;
    automatic logic [4:0] p;
    automatic tck_t ep;
`ifdef NELSSA_DDR5_PARALLEL
    automatic qmask_t of_bank [NB];     // positions of each bank's entries
    automatic logic [NB-1:0] hit_wanted, any_wanted, ok_bank;
    automatic logic [3:0] fit [NB];
`else
    automatic logic group_blocked = 1'b0;
    automatic int t;
    automatic qmask_t act_open;
    automatic logic [4:0] b;
    automatic logic [2:0] g;
    automatic entry_t e;
`endif
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

    lo = tck_t'({cycle_q, 2'b00});
    aged_now = aged_q | wheel_q[cycle_q[WHEEL_W-1:0]];
    if (n_q[1] >= 6'(WriteHigh) || (n_q[1] != 0 && n_q[0] == 0)) draining_d = 1'b1;
    else if (n_q[1] <= 6'(WriteLow) && n_q[0] != 0) draining_d = 1'b0;
    else draining_d = draining_q;
    write_active = draining_d;
    wa = draining_d;
    n_active = n_q[wa];
    live = `NELSSA_LIVE(n_active);
    act_hit = qhit_q[wa] & live;
`ifndef NELSSA_DDR5_PARALLEL
    act_open = qopen_q[wa] & live;
`endif
    refreshing = Refresh && !`NELSSA_AFTER(next_refresh_q, lo);

    // column command: the oldest row hit whose bank and group allow it
    col_valid = 1'b0;
    col_idx = '0;
    col_slot = '0;
    col_k = '0;
    col_e = '0;
`ifdef NELSSA_DDR5_PARALLEL
    for (x = 0; x < NB; x++) begin
      automatic logic [4:0] xb = 5'(x);
      of_bank[x] = `NELSSA_HOLDING(bankp_q[wa], xb) & live;
    end
    ok_bank = '0;
    for (x = 0; x < NB; x++) begin
      ep = wa ? `NELSSA_TMAX(`NELSSA_TMAX(wr_all_q, wr_grp_q[x / 4]), col_bank_q[x])
              : `NELSSA_TMAX(`NELSSA_TMAX(rd_all_q, rd_grp_q[x / 4]), col_bank_q[x]);
      `NELSSA_PLACE(ep, 1'b1)
      fit[x] = ok;
      ok_bank[x] = pk[2];
    end
    cand = '0;
    for (x = 0; x < NB; x++) if (ok_bank[x]) cand |= of_bank[x];
    cand &= act_hit;
    if (cand != '0) begin
      col_valid = 1'b1;
      col_idx = `NELSSA_LOWEST(cand);
      col_slot = `NELSSA_AT(slot_q[wa], col_idx);
      col_e = ent_q[wa][col_slot];
      ok = fit[col_e.bank];
      col_k = `NELSSA_FIRST(ok);
    end
`else
    // (when the rule over all groups leaves no slot this cycle, none is tried; when a group's
    // rule leaves none, that group's entries leave the mask, otherwise that bank's)
    cand = act_hit;
    `NELSSA_PLACE(wa ? wr_all_q : rd_all_q, 1'b1)
    if (!pk[2]) cand = '0;
    for (t = 0; t < NB; t++) begin
      if (cand == '0 || col_valid) break;
      p = `NELSSA_LOWEST(cand);
      e = ent_q[wa][`NELSSA_AT(slot_q[wa], p)];
      g = e.bank[4:2];
      ep = wa ? `NELSSA_TMAX(wr_all_q, wr_grp_q[g]) : `NELSSA_TMAX(rd_all_q, rd_grp_q[g]);
      `NELSSA_PLACE(ep, 1'b1)
      if (!pk[2]) begin
        cand &= ~`NELSSA_HOLDING_GROUP(bankp_q[wa], g);
      end else begin
        ep = `NELSSA_TMAX(ep, col_bank_q[e.bank]);
        `NELSSA_PLACE(ep, 1'b1)
        if (pk[2]) begin
          col_valid = 1'b1;
          col_idx = p;
          col_slot = `NELSSA_AT(slot_q[wa], p);
          col_k = pk[1:0];
          col_e = e;
        end else begin
          cand &= ~`NELSSA_HOLDING(bankp_q[wa], e.bank);
        end
      end
    end
`endif
    if (col_valid) begin
      busy[3'(col_k)] = 1'b1;
      busy[3'(col_k) + 3'd1] = 1'b1;
    end
    col_bank = col_e.bank;
    // the entries left to want a bank this cycle
    others = live & ~(col_valid ? qmask_t'(1) << col_idx : '0);
`ifdef NELSSA_DDR5_PARALLEL
    for (x = 0; x < NB; x++) begin
      hit_wanted[x] = (of_bank[x] & act_hit & others) != '0;
      any_wanted[x] = (of_bank[x] & others) != '0;
    end
`endif

    // row commands
    row_valid = '0;
    row_cmd = {CMD_ACT, CMD_ACT};
    row_k = '0;
    row_bank = '0;
    row_row = '0;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      automatic logic issued = 1'b0;
      automatic dram_cmd_e c = CMD_ACT;
      automatic logic [4:0] cb = '0;
      automatic logic [15:0] crow = '0;
      automatic logic [1:0] ck = '0;
      automatic logic [NB-1:0] open_now = open_q;
      if (ov_valid) open_now[ov_bank] = ov_act;
      if (!stop) begin
        if (refreshing) begin
          // close the open bank that may close first (the lowest on a tie), then refresh
          found = 1'b0;
          best = '0;
          for (x = 0; x < NB; x++) begin
            if (open_now[x]) begin
              ep = pre_bank_q[x];
              if (col_valid && 5'(x) == col_bank)
                ep = `NELSSA_TMAX(ep, lo + tck_t'(col_k) + (wa ? WTP : NRTP));
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
            ep = `NELSSA_TMAX(pre_all_q, ref_ready_q);
            if (ov_valid) ep = `NELSSA_TMAX(ep, ov_tck + (ov_ref ? NRFC : NRP));
            `NELSSA_PLACE(ep, 1'b0)
          end
          issued = pk[2];
          ck = pk[1:0];
        end else begin
          // the oldest entry that is not a row hit and whose bank can take an ACT or a PRE (a
          // PRE only if no entry left wants the open row); the first slot's bank is done for
          // this cycle (its entries hit, or wait for tRP)
          act_any = `NELSSA_TMAX(ref_ready_q, (ov_act ? acts_q[1] : acts_q[0]) + NFAW);
          act_any = `NELSSA_TMAX(act_any, act_all_q);
          if (ov_act) act_any = `NELSSA_TMAX(act_any, ov_tck + NRRD_S);
`ifdef NELSSA_DDR5_PARALLEL
          begin
            automatic logic [3:0] pre_fit [NB];
            automatic logic [3:0] act_fit [NB];
            automatic logic [NB-1:0] pre_ok;
            for (x = 0; x < NB; x++) begin
              ep = pre_bank_q[x];
              if (col_valid && 5'(x) == col_bank)
                ep = `NELSSA_TMAX(ep, lo + tck_t'(col_k) + (wa ? WTP : NRTP));
              `NELSSA_PLACE(ep, 1'b0)
              pre_fit[x] = ok;
              pre_ok[x] = pk[2];
              ep = `NELSSA_TMAX(`NELSSA_TMAX(act_bank_q[x], act_grp_q[x / 4]), act_any);
              if (ov_act && 32'(ov_bank[4:2]) == x / 4) ep = `NELSSA_TMAX(ep, ov_tck + NRRD_L);
              `NELSSA_PLACE(ep, 1'b1)
              act_fit[x] = ok;
              ok_bank[x] = open_q[x] ? !hit_wanted[x] && pre_ok[x] : pk[2];
            end
            if (ov_valid) ok_bank[ov_bank] = 1'b0;
            cand = '0;
            for (x = 0; x < NB; x++) if (ok_bank[x]) cand |= of_bank[x];
            cand &= others & ~act_hit;
            if (cand != '0) begin
              p = `NELSSA_LOWEST(cand);
              cb = ent_q[wa][`NELSSA_AT(slot_q[wa], p)].bank;
              issued = 1'b1;
              if (open_q[cb]) begin
                c = CMD_PRE;
                ok = pre_fit[cb];
              end else begin
                c = CMD_ACT;
                crow = ent_q[wa][`NELSSA_AT(slot_q[wa], p)].row;
                ok = act_fit[cb];
              end
            end else begin
              // close a row left idle: open, wanted by no entry left, unused for CloseIdle
              idle = open_now & aged_now & ~any_wanted & pre_ok;
              if (col_valid) idle[col_bank] = 1'b0;
              if (ov_valid) idle[ov_bank] = 1'b0;
              if (idle != '0) begin
                cb = `NELSSA_LOWEST(idle);
                issued = 1'b1;
                c = CMD_PRE;
                ok = pre_fit[cb];
              end
            end
            ck = `NELSSA_FIRST(ok);
          end
`else
          // (a held bank's try would fail: a hit among the entries left, or the served entry was
          // its last hit and its PRE must wait for tRTP or tWR, 4 tCK or more, after this
          // cycle's column command)
          cand = others & ~act_hit & ~qheld_q[wa];
          if (ov_valid) cand &= ~`NELSSA_HOLDING(bankp_q[wa], ov_bank);
          `NELSSA_PLACE(act_any, 1'b1)
          if (!pk[2]) cand &= act_open;  // no ACT fits this cycle
          for (t = 0; t < NB; t++) begin
            if (cand == '0 || issued) break;
            p = `NELSSA_LOWEST(cand);  // once: the plane gather below reads it five times
            e = ent_q[wa][`NELSSA_AT(slot_q[wa], p)];
            b = e.bank;
            g = b[4:2];
            if (open_q[b]) begin
              // (no entry left wants its open row: the entries of an open bank with a row hit
              // waiting are held, and left out above)
              ep = pre_bank_q[b];
              if (col_valid && b == col_bank)
                ep = `NELSSA_TMAX(ep, lo + tck_t'(col_k) + (wa ? WTP : NRTP));
              `NELSSA_PLACE(ep, 1'b0)
              if (pk[2]) begin
                issued = 1'b1;
                c = CMD_PRE;
              end
            end else begin
              // the group's rules first: if they leave no slot, no closed bank of the group can
              // take its ACT this cycle
              ep = `NELSSA_TMAX(act_grp_q[b[4:2]], act_any);
              if (ov_act && ov_bank[4:2] == b[4:2]) ep = `NELSSA_TMAX(ep, ov_tck + NRRD_L);
              `NELSSA_PLACE(ep, 1'b1)
              if (!pk[2]) begin
                group_blocked = 1'b1;
              end else begin
                ep = `NELSSA_TMAX(ep, act_bank_q[b]);
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
              cand &= ~(`NELSSA_HOLDING_GROUP(bankp_q[wa], g) & ~act_open);
              group_blocked = 1'b0;
            end else begin
              cand &= ~`NELSSA_HOLDING(bankp_q[wa], b);
            end
          end
          // close a row left idle: open, wanted by no entry left, unused for CloseIdle (for a
          // bank other than the column command's, the entries left are all the live ones)
          if (!issued) begin
            idle = open_now & aged_now & ~wanted_q[wa];
            if (col_valid) idle[col_bank] = 1'b0;
            if (ov_valid) idle[ov_bank] = 1'b0;
            for (x = 0; x < NB; x++) begin
              if (idle == '0 || issued) break;
              b = `NELSSA_LOWEST(idle);
              `NELSSA_PLACE(pre_bank_q[b], 1'b0)
              if (pk[2]) begin
                issued = 1'b1;
                c = CMD_PRE;
                cb = b;
                ck = pk[1:0];
              end
              idle[b] = 1'b0;
            end
          end
`endif
        end
        if (issued) begin
          busy[3'(ck)] = 1'b1;
          if (c == CMD_ACT) busy[3'(ck) + 3'd1] = 1'b1;
          row_valid[r] = 1'b1;
          row_cmd[r] = c;
          row_k[r] = ck;
          row_bank[r] = cb;
          row_row[r] = crow;
          ov_valid = 1'b1;
          ov_act = (c == CMD_ACT);
          ov_ref = (c == CMD_REF);
          ov_bank = cb;
          ov_tck = lo + tck_t'(ck);
        end else begin
          stop = 1'b1;
        end
      end
    end
    ca_carry_d = busy[4];
  end

  // ---------------------------------------------------------------------------------------------
  // Requests. The queue a request needs must have room at the start of the cycle, and the other
  // queue must not hold its line: reads and writes of one line complete in request order.
  entry_t req_entry;
  assign req_entry = '{bank: {req_bg_i, req_bank_i}, row: req_row_i, col: req_col_i};

`ifdef NELSSA_DDR5_PARALLEL
  always_comb begin
    automatic logic other = !req_write_i;
    automatic logic same_line = 1'b0;
    for (int s = 0; s < QW; s++) same_line |= !free_q[other][s] && ent_q[other][s] == req_entry;
    req_ready_o = !same_line && n_q[req_write_i] < (req_write_i ? 6'(WriteQueue)
                                                                  : 6'(ReadQueue));
  end
`else
  always_comb begin
    automatic logic other = !req_write_i;
    automatic logic [5:0] n_other = n_q[other];
    automatic qmask_t same = '0;
    automatic logic same_line = 1'b0;
    automatic logic [4:0] p;
    if (wanted_q[other][req_entry.bank])
      same = `NELSSA_HOLDING(bankp_q[other], req_entry.bank) & `NELSSA_LIVE(n_other);
    for (int t = 0; t < QW; t++) begin
      if (same == '0 || same_line) break;
      p = `NELSSA_LOWEST(same);
      same_line = ent_q[other][`NELSSA_AT(slot_q[other], p)] == req_entry;
      same &= same - 1;
    end
    req_ready_o = !same_line && n_q[req_write_i] < (req_write_i ? 6'(WriteQueue)
                                                                  : 6'(ReadQueue));
  end
`endif

  // ---------------------------------------------------------------------------------------------
  // State update: the rules' earliest times rise by the commands of the cycle, the masks follow
  // the banks that opened and closed, the served request leaves its queue (the younger ones move
  // down a position) and an accepted request joins the end of its queue.

`ifdef NELSSA_DDR5_PARALLEL
  // positions of queue q, among `m`, whose entry wants `row` (the tries form finds them with a
  // loop over the bank's live entries in the update below, counting them as it goes)
  function automatic qmask_t row_matches(logic q, qmask_t m, logic [15:0] row);
    automatic logic [QW-1:0] slot_match;
    automatic qmask_t hits = '0;
    for (int s = 0; s < QW; s++) slot_match[s] = ent_q[q][s].row == row;
    for (int x = 0; x < QW; x++) begin
      automatic logic [4:0] xp = 5'(x);
      hits[x] = m[x] && slot_match[`NELSSA_AT(slot_q[q], xp)];
    end
    return hits;
  endfunction
`endif

  localparam tck_t PAST = tck_t'(HORIZON);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    // (every temporary of the update declared here, at the top of the block, where Verilator
    // keeps it in the evaluation's locals rather than in the model)
    automatic qmask_t qopen [2];
    automatic qmask_t qhit [2];
    automatic logic [NB-1:0] open;
    automatic logic [1:0] used_valid;
    automatic logic [1:0][4:0] used_bank;
    automatic tck_t used_tck [2];
    automatic logic [15:0] req_orow;
    automatic tck_t now;
    automatic logic scrub;
    automatic logic [4:0] sb;
    automatic logic [2:0] sg;
    automatic tck_t acts [4];
    automatic tck_t pre_all;
    automatic tck_t act_all;
    automatic tck_t rd_all;
    automatic tck_t wr_all;
    automatic tck_t tck;
    automatic logic [4:0] b;
    automatic qmask_t of_b;
    automatic qmask_t hits;
    automatic logic [NB-1:0] wheel [WHEEL];
    automatic logic [NB-1:0] aged;
    automatic logic [WHEEL_W-1:0] slot;
    automatic logic wa;
    automatic logic wq;
    automatic logic enters;
    automatic logic [QW-1:0] free [2];
    automatic logic [5:0] n [2];
    automatic logic [4:0] s;
    automatic logic [4:0] at_n;
    automatic qmask_t slots [2][5];
    automatic qmask_t banks [2][5];
`ifndef NELSSA_DDR5_PARALLEL
    automatic qmask_t qheld [2];
    automatic logic [NB-1:0] wanted [2];
    automatic logic [5:0] hit_n [2][NB];
    automatic logic [5:0] bank_n [2][NB];
    automatic qmask_t left;
    automatic logic [5:0] nhit;
    automatic logic [4:0] p;
    automatic int t;
`endif
    if (!rst_ni) begin
      // verilator unroll_full
      for (int q = 0; q < 2; q++) begin
        n_q[q]     <= '0;
        free_q[q]  <= '1;
        // verilator unroll_full
        for (int j = 0; j < 5; j++) begin
          slot_q[q][j]  <= '0;
          bankp_q[q][j] <= '0;
        end
        qopen_q[q] <= '0;
        qhit_q[q]  <= '0;
`ifndef NELSSA_DDR5_PARALLEL
        wanted_q[q] <= '0;
        qheld_q[q] <= '0;
        // verilator unroll_full
        for (int x = 0; x < NB; x++) begin
          bank_n_q[q][x] <= '0;
          hit_n_q[q][x] <= '0;
        end
`endif
      end
      open_q <= '0;
      // verilator unroll_full
      for (int x = 0; x < NB; x++) begin
        orow_q[x]     <= '0;
        due_q[x]      <= '0;
        act_bank_q[x] <= '0;
        col_bank_q[x] <= '0;
        pre_bank_q[x] <= '0;
      end
      // verilator unroll_full
      for (int x = 0; x < NG; x++) begin
        act_grp_q[x] <= '0;
        rd_grp_q[x]  <= '0;
        wr_grp_q[x]  <= '0;
      end
      act_all_q <= '0;
      rd_all_q <= '0;
      wr_all_q <= '0;
      // verilator unroll_full
      for (int x = 0; x < 4; x++) acts_q[x] <= -PAST;
      ref_ready_q    <= '0;
      pre_all_q      <= '0;
      aged_q         <= '0;
      // verilator unroll_full
      for (int x = 0; x < WHEEL; x++) wheel_q[x] <= '0;
      next_refresh_q <= NREFI;
      draining_q     <= 1'b0;
      ca_carry_q     <= 1'b0;
      cycle_q        <= '0;
    end else begin
      qopen = qopen_q;
      qhit = qhit_q;
`ifndef NELSSA_DDR5_PARALLEL
      qheld = qheld_q;
      hit_n = hit_n_q;
      // (whole-array copies: a non-blocking write of one element of a two-dimensional array
      // costs Verilator a flag per element, each checked every cycle)
      bank_n = bank_n_q;
`endif
      open = open_q;
      // the banks whose row a command used this cycle (a column command and at most one ACT)
      used_valid = '0;
      used_bank = '0;
      used_tck = '{default: '0};
      req_orow = orow_q[req_entry.bank];
      now = lo + tck_t'(4);
      // a scrub step every 64th cycle, visiting a bank, a group and a shared register (every
      // register at least each 2,048 cycles, 8,192 tCK, still far inside the horizon's margin)
      scrub = cycle_q[5:0] == 6'd0;
      sb = cycle_q[10:6];
      sg = cycle_q[8:6];
      acts = acts_q;
      pre_all = pre_all_q;
      act_all = act_all_q;
      rd_all = rd_all_q;
      wr_all = wr_all_q;
      // the registers shared by all banks, each once every 16 steps
      if (scrub) unique case (cycle_q[9:6])
        4'd0: pre_all = `NELSSA_SCRUB(pre_all);
        4'd1: act_all = `NELSSA_SCRUB(act_all);
        4'd2: rd_all = `NELSSA_SCRUB(rd_all);
        4'd3: wr_all = `NELSSA_SCRUB(wr_all);
        4'd4: acts[0] = `NELSSA_SCRUB(acts[0]);
        4'd5: acts[1] = `NELSSA_SCRUB(acts[1]);
        4'd6: acts[2] = `NELSSA_SCRUB(acts[2]);
        4'd7: acts[3] = `NELSSA_SCRUB(acts[3]);
        4'd8: ref_ready_q <= `NELSSA_SCRUB(ref_ready_q);
        default: ;
      endcase
      draining_q <= draining_d;
      ca_carry_q <= ca_carry_d;
      cycle_q    <= cycle_q + 1;

      // a bank and a group (the bank and group of a command write them below)
      if (scrub) begin
        act_bank_q[sb] <= `NELSSA_SCRUB(act_bank_q[sb]);
        col_bank_q[sb] <= `NELSSA_SCRUB(col_bank_q[sb]);
        pre_bank_q[sb] <= `NELSSA_SCRUB(pre_bank_q[sb]);
        act_grp_q[sg]  <= `NELSSA_SCRUB(act_grp_q[sg]);
        rd_grp_q[sg]   <= `NELSSA_SCRUB(rd_grp_q[sg]);
        wr_grp_q[sg]   <= `NELSSA_SCRUB(wr_grp_q[sg]);
      end

      // the column command
      if (col_valid) begin
        tck = lo + tck_t'(col_k);
        used_valid[0] = 1'b1;
        used_bank[0] = col_bank;
        used_tck[0] = tck;
        if (write_active) begin
          pre_bank_q[col_bank] <= `NELSSA_TMAX(pre_bank_q[col_bank], tck + WTP);
          wr_grp_q[col_bank[4:2]] <= `NELSSA_TMAX(wr_grp_q[col_bank[4:2]], tck + NCCD_L_WR);
          wr_all = `NELSSA_TMAX(wr_all, tck + NCCD_S);
          rd_grp_q[col_bank[4:2]] <= `NELSSA_TMAX(rd_grp_q[col_bank[4:2]], tck + WTR_L);
          rd_all = `NELSSA_TMAX(rd_all, tck + WTR_S);
        end else begin
          pre_bank_q[col_bank] <= `NELSSA_TMAX(pre_bank_q[col_bank], tck + NRTP);
          rd_grp_q[col_bank[4:2]] <= `NELSSA_TMAX(rd_grp_q[col_bank[4:2]], tck + NCCD_L);
          rd_all = `NELSSA_TMAX(rd_all, tck + NCCD_S);
          wr_all = `NELSSA_TMAX(wr_all, tck + RTW);
        end
      end

      // the row commands, and what they do to the masks
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid[r]) begin
          tck = lo + tck_t'(row_k[r]);
          b = row_bank[r];
          unique case (row_cmd[r])
            CMD_ACT: begin
              open[b] = 1'b1;
              orow_q[b]     <= row_row[r];
              used_valid[1] = 1'b1;
              used_bank[1] = b;
              used_tck[1] = tck;
              act_bank_q[b] <= `NELSSA_TMAX(act_bank_q[b], tck + NRC);
              col_bank_q[b] <= tck + NRCD;
              pre_bank_q[b] <= `NELSSA_TMAX(pre_bank_q[b], tck + NRAS);
              act_grp_q[b[4:2]] <= `NELSSA_TMAX(act_grp_q[b[4:2]], tck + NRRD_L);
              act_all = `NELSSA_TMAX(act_all, tck + NRRD_S);
              acts[0] = acts[1];
              acts[1] = acts[2];
              acts[2] = acts[3];
              acts[3] = tck;
              // verilator unroll_full
              for (int q = 0; q < 2; q++) begin
                of_b = `NELSSA_HOLDING(bankp_q[q], b);
`ifdef NELSSA_DDR5_PARALLEL
                hits = row_matches(q[0], of_b, row_row[r]);
`else
                // the bank's live entries that want the row, and how many (the masks hold stale
                // bits above the live positions)
                hits = '0;
                nhit = '0;
                left = of_b & `NELSSA_LIVE(n_q[q]);
                for (t = 0; t < QW; t++) begin
                  if (left == '0) break;
                  p = `NELSSA_LOWEST(left);
                  if (ent_q[q][`NELSSA_AT(slot_q[q], p)].row == row_row[r]) begin
                    hits |= left & ~(left - 1);
                    nhit++;
                  end
                  left &= left - 1;
                end
                hit_n[q][b] = nhit;
                if (nhit != '0) qheld[q] |= of_b;
`endif
                qopen[q] |= of_b;
                qhit[q] |= hits;
              end
              if (b == req_entry.bank) req_orow = row_row[r];
            end
            CMD_PRE: begin
              open[b] = 1'b0;
              act_bank_q[b] <= `NELSSA_TMAX(act_bank_q[b], tck + NRP);
              pre_all = `NELSSA_TMAX(pre_all, tck + NRP);
              // verilator unroll_full
              for (int q = 0; q < 2; q++) begin
                of_b = `NELSSA_HOLDING(bankp_q[q], b);
                qopen[q] &= ~of_b;
                qhit[q] &= ~of_b;
`ifndef NELSSA_DDR5_PARALLEL
                hit_n[q][b] = '0;
                qheld[q] &= ~of_b;
`endif
              end
            end
            CMD_REF: begin
              ref_ready_q    <= tck + NRFC;
              next_refresh_q <= next_refresh_q + NREFI;
            end
            default: ;
          endcase
        end
      end
      open_q <= open;

      // the timing wheel: this cycle's slot has joined the aged mask; a used bank ages again
      // CloseIdle tCK after its use, in the cycle ceil((use + CloseIdle) / 4). A bank's bit
      // stays in its slot until the bank is used again (so the wheel changes only then): when
      // the wheel comes round to the slot again, the bank is already aged.
      aged = aged_now;
      if (used_valid != '0) begin
        wheel = wheel_q;
        // verilator unroll_full
        for (int u = 0; u < 2; u++) begin
          if (used_valid[u]) begin
            slot =
                WHEEL_W'((used_tck[u] + tck_t'(CloseIdle + 3)) >> 2);
            wheel[due_q[used_bank[u]]][used_bank[u]] = 1'b0;
            wheel[slot][used_bank[u]] = 1'b1;
            aged[used_bank[u]] = 1'b0;
            due_q[used_bank[u]] <= slot;
          end
        end
        wheel_q <= wheel;
      end
      aged_q <= aged;
      pre_all_q <= pre_all;
      act_all_q <= act_all;
      rd_all_q <= rd_all;
      wr_all_q <= wr_all;
      acts_q <= acts;

      // the served request leaves its queue and an accepted one joins the end of its own
      begin
        wa = write_active;
        wq = req_write_i;
        enters = req_valid_i && req_ready_o;
        slots = slot_q;
        banks = bankp_q;
        free = free_q;
        n = n_q;
        if (col_valid) begin
`ifndef NELSSA_DDR5_PARALLEL
          // the served entry was a row hit of its bank; with the last one gone, the bank's
          // other entries are no longer held
          hit_n[wa][col_bank] = hit_n[wa][col_bank] - 6'd1;
          if (hit_n[wa][col_bank] == '0) qheld[wa] &= ~`NELSSA_HOLDING(bankp_q[wa], col_bank);
          qheld[wa] = `NELSSA_DROP(qheld[wa], col_idx);
`endif
          // verilator unroll_full
          for (int j = 0; j < 5; j++) begin
            slots[wa][j] = `NELSSA_DROP(slots[wa][j], col_idx);
            banks[wa][j] = `NELSSA_DROP(banks[wa][j], col_idx);
          end
          qopen[wa] = `NELSSA_DROP(qopen[wa], col_idx);
          qhit[wa] = `NELSSA_DROP(qhit[wa], col_idx);
          free[wa][col_slot] = 1'b1;
          n[wa] = n[wa] - 1;
        end
        if (enters) begin
          s = `NELSSA_LOWEST(free[wq]);
          at_n = n[wq][4:0];
          ent_q[wq][s] <= req_entry;
          tag_q[wq][s] <= req_tag_i;
          free[wq][s] = 1'b0;
          // verilator unroll_full
          for (int j = 0; j < 5; j++) begin
            slots[wq][j][at_n] = s[j];
            banks[wq][j][at_n] = req_entry.bank[j];
          end
          qopen[wq][at_n] = open[req_entry.bank];
          qhit[wq][at_n] = open[req_entry.bank] && req_orow == req_entry.row;
          n[wq] = n[wq] + 1;
`ifndef NELSSA_DDR5_PARALLEL
          // a new hit holds its bank's entries, the new one included; any other new entry is
          // held if its bank already is
          if (qhit[wq][at_n]) begin
            hit_n[wq][req_entry.bank] = hit_n[wq][req_entry.bank] + 6'd1;
            if (hit_n[wq][req_entry.bank] == 6'd1)
              qheld[wq] |= `NELSSA_HOLDING(banks[wq], req_entry.bank);
            else qheld[wq][at_n] = 1'b1;
          end else begin
            qheld[wq][at_n] = open[req_entry.bank] && hit_n[wq][req_entry.bank] != '0;
          end
`endif
        end
        slot_q <= slots;
        bankp_q <= banks;
        free_q <= free;
        n_q <= n;
`ifndef NELSSA_DDR5_PARALLEL
        begin
          // the live entries per bank
          wanted = wanted_q;
          if (col_valid) begin
            bank_n[wa][col_bank] = bank_n[wa][col_bank] - 6'd1;
            if (bank_n[wa][col_bank] == '0) wanted[wa][col_bank] = 1'b0;
          end
          if (enters) begin
            bank_n[wq][req_entry.bank] = bank_n[wq][req_entry.bank] + 6'd1;
            wanted[wq][req_entry.bank] = 1'b1;
          end
          wanted_q <= wanted;
          bank_n_q <= bank_n;
        end
`endif
      end
      qopen_q <= qopen;
      qhit_q <= qhit;
`ifndef NELSSA_DDR5_PARALLEL
      qheld_q <= qheld;
      hit_n_q <= hit_n;
`endif
    end
  end

  // command slots: 0 carries the READ/WRITE, 1 and 2 the row commands
  logic [63:0] lo64;
  assign lo64        = {cycle_q, 2'b00};
  assign cmd_valid_o = {row_valid, col_valid};
  assign cmd_o       = {row_cmd[1], row_cmd[0], write_active ? CMD_WR : CMD_RD};
  assign cmd_tck_o   = {lo64 + 64'(row_k[1]), lo64 + 64'(row_k[0]), lo64 + 64'(col_k)};
  assign cmd_bg_o    = {row_bank[1][4:2], row_bank[0][4:2], col_bank[4:2]};
  assign cmd_bank_o  = {row_bank[1][1:0], row_bank[0][1:0], col_bank[1:0]};
  assign cmd_row_o   = {{1'b0, row_row[1]}, {1'b0, row_row[0]}, {1'b0, col_e.row}};
  assign cmd_col_o   = col_e.col;
  assign cmd_tag_o   = tag_q[write_active][col_slot];
  assign cmd_write_o = col_valid && write_active;
endmodule

`undef NELSSA_AFTER
`undef NELSSA_TMAX
`undef NELSSA_LOWEST
`undef NELSSA_DROP
`undef NELSSA_AT
`undef NELSSA_HOLDING
`undef NELSSA_HOLDING_GROUP
`undef NELSSA_LIVE
`undef NELSSA_FIRST
`undef NELSSA_SCRUB
`undef NELSSA_PLACE
