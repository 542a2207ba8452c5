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
// operations. A choice is "the oldest entry of a mask whose bank can take the command", made by
// a scheduler in one of two forms behind one interface (nelssa_ddr5_sched_if), chosen by
// ParallelSched; they issue the same commands (tests/rtl/test_ddr5_ctrl.py runs both against the
// cycle model):
//  - nelssa_ddr5_sched_parallel (the default, for synthesis): every bank's readiness at once,
//    gathered per position, and one priority encoder.
//  - nelssa_ddr5_sched_tries (the simulation wrappers in rtl/sim/ choose it): the lowest set bit
//    is tried and, if its bank or group cannot take the command, their entries leave the mask at
//    once; usually the first try wins. Verilator runs it about 3.7 times faster.
// This module holds what both share: the queues, the banks, the rule registers and the
// close-after-idle wheel, and their update from the scheduler's choices, one block each.
// Close-after-idle ages banks through a timing wheel rather than comparing every bank's last use
// each cycle.
//
// Each JEDEC rule is kept as the earliest tCK it allows, raised when a command issues, in
// registers of TckW bits that wrap (20 for synthesis, 32 in simulation): times are compared
// through their difference, and a scrubber pulls any register that lies more than a quarter of
// the range (the horizon) in the past up to it (a bank, a bank group and one of the registers
// shared by all banks every 64th cycle, so each register at least every 2,048 cycles, 8,192
// tCK), so no difference ever reaches half the range.
`include "nelssa_assert.svh"
`include "nelssa_ddr5_sched.svh"

module nelssa_ddr5_ctrl
  import nelssa_ddr5_pkg::*;
#(
  parameter timing_t     T             = DDR5_6400,  // timing preset (nelssa_ddr5_pkg)
  parameter int unsigned ReadQueue     = 32,         // read-queue entries (1 to 32)
  parameter int unsigned WriteQueue    = 32,         // write-queue entries (1 to 32)
  parameter int unsigned WriteHigh     = 24,         // write-queue level that starts a drain
  parameter int unsigned WriteLow      = 8,          // level at which a drain stops
  parameter int unsigned CloseIdle     = 64,         // tCK an unrequested open row stays open
  parameter bit          Refresh       = 1'b1,       // issue all-bank refresh
  parameter int unsigned TagW          = 16,         // request tag width
  // width of the wrapping tCK registers: 20 is the fewest flops the horizon allows; 32, a
  // native word, spares Verilator a mask after every subtraction (3 % of a simulated cycle)
  parameter int unsigned TckW          = 20,
  // the scheduler's form (the same commands either way): 1 nelssa_ddr5_sched_parallel, for
  // synthesis; 0 nelssa_ddr5_sched_tries, which Verilator runs about 3.7 times faster
  parameter bit          ParallelSched = 1'b1
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
  output logic                cmd_write_o, // slot 0 is a WRITE
  // performance counters: commands issued, cycles by bank state (nelssa_ddr5_pkg)
  output ddr5_perf_t          perf_o
);
  localparam int HORIZON = tck_horizon(TckW);  // how far in the past a rule register may lie
  localparam int HALF_M1 = tck_half_m1(TckW);  // the largest difference not negative
  localparam int WHEEL_W = $clog2((CloseIdle + 3) / 4 + 2);  // close-after-idle timing wheel
  localparam int WHEEL = 1 << WHEEL_W;

  typedef logic [TckW-1:0] tck_t;
  typedef ddr5_entry_t entry_t;

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
  localparam tck_t NRFC = tck_t'(T.nRFC);
  localparam tck_t NREFI = tck_t'(T.nREFI);
  localparam tck_t WTR_S = tck_t'(T.nCWL + BURST_TCK + T.nWTR_S);  // WR to RD, other group
  localparam tck_t WTR_L = tck_t'(T.nCWL + BURST_TCK + T.nWTR_L);  // WR to RD, same group
  localparam tck_t WTP = tck_t'(T.nCWL + BURST_TCK + T.nWR);       // WR to PRE
  localparam int NCL_RTW = T.nCL + BURST_TCK + 1 - T.nCWL;
  localparam tck_t RTW = tck_t'((NCL_RTW > T.nCCD_S) ? NCL_RTW : T.nCCD_S);  // RD to WR
  localparam tck_t PAST = tck_t'(HORIZON);

  if (T.bank_groups != NUM_BANK_GROUPS || T.banks_per_group != NUM_BANKS / NUM_BANK_GROUPS)
  begin : gen_geometry_check
    $error("nelssa_ddr5_ctrl: built for 8 bank groups of 4 banks");
  end
  if (ReadQueue < 1 || ReadQueue > QUEUE_W || WriteQueue < 1 || WriteQueue > QUEUE_W)
  begin : gen_queue_check
    $error("nelssa_ddr5_ctrl: ReadQueue and WriteQueue must be 1 to 32");
  end
  if (!(WriteLow < WriteHigh && WriteHigh <= WriteQueue)) begin : gen_watermark_check
    $error("nelssa_ddr5_ctrl: need WriteLow < WriteHigh <= WriteQueue");
  end
  // Commands of one cycle never touch the same bank, and a cycle holds at most one ACT and one
  // REF, when these gaps exceed the 4 tCK of a cycle; the scheduling relies on it.
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

  // position of the lowest set bit: each form's way (nelssa_ddr5_sched.svh)
  `define NELSSA_CTRL_LOWEST(m) (ParallelSched ? `NELSSA_LOWEST_POP(m) : `NELSSA_LOWEST_DB(m))

  // ---------------------------------------------------------------------------------------------
  // State. Queue 0 holds reads, queue 1 writes. An entry stays in its slot from arrival to
  // service; its age is its position. Per position, bit planes give the slot and the bank of the
  // entry there (plane j holds bit j of every position), so the entries of a bank are five mask
  // operations away and a served entry leaves by dropping one bit of each plane.
  entry_t          ent_q [2][QUEUE_W];
  logic [TagW-1:0] tag_q [2][QUEUE_W];
  qmask_t          free_q [2];        // free slots
  qmask_t          slot_q [2][QIDX_W];  // slot planes, by position
  qmask_t          bankp_q [2][BANK_W];  // bank planes, by position
  qmask_t          qopen_q [2];       // positions whose bank is open
  qmask_t          qhit_q [2];        // positions whose row is open
  logic [QIDX_W:0] n_q [2];
  logic [NUM_BANKS-1:0] open_q;
  logic [15:0]     orow_q [NUM_BANKS];
  // Close-after-idle: a bank is aged once CloseIdle tCK have passed since its last ACT or column
  // command. Each such command sets the bank's bit in a timing wheel at the cycle it will age;
  // the wheel slot of the cycle joins the aged mask, so no bank's time is compared per cycle.
  logic [NUM_BANKS-1:0] aged_q;
  logic [NUM_BANKS-1:0] wheel_q [WHEEL];
  logic [WHEEL_W-1:0] due_q [NUM_BANKS];     // the wheel slot that holds the bank
  tck_t            act_bank_q [NUM_BANKS];  // ACT: tRP, tRC
  tck_t            col_bank_q [NUM_BANKS];  // READ/WRITE: tRCD
  tck_t            pre_bank_q [NUM_BANKS];  // PRE: tRAS, tRTP, tWR
  tck_t            act_grp_q [NUM_BANK_GROUPS];   // ACT into the group: tRRD_L
  tck_t            act_all_q;        // ACT into any group: tRRD_S
  tck_t            rd_grp_q [NUM_BANK_GROUPS];    // READ to the group: tCCD_L, tWTR_L
  tck_t            rd_all_q;         // READ to any group: tCCD_S, tWTR_S
  tck_t            wr_grp_q [NUM_BANK_GROUPS];    // WRITE to the group: tCCD_L_WR
  tck_t            wr_all_q;         // WRITE to any group: tCCD_S, read-to-write
  tck_t            acts_q [4];       // the last four ACTs (tFAW)
  tck_t            ref_ready_q;      // REF or ACT after REF: tRFC
  tck_t            pre_all_q;        // REF after the last PRE: tRP
  tck_t            next_refresh_q;
  logic            draining_q;
  logic            ca_carry_q;       // tCK 0 of this cycle is taken by a command of the last cycle
  logic [61:0]     cycle_q;

  // ---------------------------------------------------------------------------------------------
  // The cycle: its first tCK, the queue it serves (a write drain starts at the high watermark or
  // when only writes wait, and stops at the low one), whether a refresh is due, the aged banks.
  tck_t          lo;
  logic          write_active, draining_d, refreshing;
  logic [NUM_BANKS-1:0] aged_now;   // banks unused for CloseIdle tCK
  always_comb begin
    lo = tck_t'({cycle_q, 2'b00});
    aged_now = aged_q | wheel_q[cycle_q[WHEEL_W-1:0]];
    if (n_q[1] >= 6'(WriteHigh) || (n_q[1] != 0 && n_q[0] == 0)) draining_d = 1'b1;
    else if (n_q[1] <= 6'(WriteLow) && n_q[0] != 0) draining_d = 1'b0;
    else draining_d = draining_q;
    write_active = draining_d;
    refreshing = Refresh && !`NELSSA_AFTER(next_refresh_q, lo);
  end

  // ---------------------------------------------------------------------------------------------
  // Requests. The queue a request needs must have room at the start of the cycle, and the other
  // queue must not hold its line: reads and writes of one line complete in request order.
  entry_t req_entry;
  logic   req_same_line, enters;
  assign req_entry = '{bank: {req_bg_i, req_bank_i}, row: req_row_i, col: req_col_i};
  assign req_ready_o = !req_same_line &&
                       n_q[req_write_i] < (req_write_i ? 6'(WriteQueue) : 6'(ReadQueue));
  assign enters = req_valid_i && req_ready_o;

  // ---------------------------------------------------------------------------------------------
  // The scheduler: this cycle's column command and up to two row commands, each seeing the
  // commands before it, and the entries that want the row this cycle's ACT opens.
  logic             col_valid;
  logic [QIDX_W-1:0] col_idx;    // position of the served entry
  logic [QIDX_W-1:0] col_slot;
  logic [1:0]       col_k;
  entry_t           col_e;
  logic [BANK_W-1:0] col_bank;
  logic [1:0]       row_valid;
  dram_cmd_e [1:0]  row_cmd;
  logic [1:0][1:0]  row_k;
  logic [1:0][BANK_W-1:0] row_bank;
  logic [1:0][15:0] row_row;
  logic             ca_carry_d;
  qmask_t           act_hits [2];
  assign col_bank = col_e.bank;

  // the scheduler's view of the state above, and its choices under the names used below
  nelssa_ddr5_sched_if #(.TckW(TckW)) sched ();
  assign sched.lo        = lo;
  assign sched.ca_carry  = ca_carry_q;
  assign sched.write     = write_active;
  assign sched.refresh   = refreshing;
  assign sched.aged      = aged_now;
  assign sched.ent       = ent_q;
  assign sched.free      = free_q;
  assign sched.slot      = slot_q;
  assign sched.bank      = bankp_q;
  assign sched.qopen     = qopen_q;
  assign sched.qhit      = qhit_q;
  assign sched.n         = n_q;
  assign sched.open      = open_q;
  assign sched.orow      = orow_q;
  assign sched.act_bank  = act_bank_q;
  assign sched.col_bank  = col_bank_q;
  assign sched.pre_bank  = pre_bank_q;
  assign sched.act_grp   = act_grp_q;
  assign sched.act_all   = act_all_q;
  assign sched.rd_grp    = rd_grp_q;
  assign sched.rd_all    = rd_all_q;
  assign sched.wr_grp    = wr_grp_q;
  assign sched.wr_all    = wr_all_q;
  assign sched.acts      = acts_q;
  assign sched.ref_ready = ref_ready_q;
  assign sched.pre_all   = pre_all_q;
  assign sched.req       = req_entry;
  assign sched.req_write = req_write_i;
  assign sched.enter     = enters;
  assign req_same_line   = sched.req_same_line;
  assign col_valid       = sched.col_valid;
  assign col_idx         = sched.col_idx;
  assign col_slot        = sched.col_slot;
  assign col_k           = sched.col_k;
  assign col_e           = sched.col_entry;
  assign row_valid       = sched.row_valid;
  assign row_cmd         = sched.row_cmd;
  assign row_k           = sched.row_k;
  assign row_bank        = sched.row_bank;
  assign row_row         = sched.row_row;
  assign ca_carry_d      = sched.ca_carry_next;
  assign act_hits        = sched.act_hits;

  if (ParallelSched) begin : gen_parallel
    nelssa_ddr5_sched_parallel #(
      .T   (T),
      .TckW(TckW)
    ) u_sched (
      .clk_i (clk_i),
      .rst_ni(rst_ni),
      .bus   (sched.sched)
    );
  end else begin : gen_tries
    nelssa_ddr5_sched_tries #(
      .T   (T),
      .TckW(TckW)
    ) u_sched (
      .clk_i (clk_i),
      .rst_ni(rst_ni),
      .bus   (sched.sched)
    );
  end

  // ---------------------------------------------------------------------------------------------
  // The cycle count, the drain mode and the CA slot carried into the next cycle.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      draining_q <= 1'b0;
      ca_carry_q <= 1'b0;
      cycle_q    <= '0;
    end else begin
      draining_q <= draining_d;
      ca_carry_q <= ca_carry_d;
      cycle_q    <= cycle_q + 1;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Banks: an ACT opens its bank with its row, a PRE closes it.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      open_q <= '0;
      // verilator unroll_full
      for (int x = 0; x < NUM_BANKS; x++) orow_q[x] <= '0;
    end else begin
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid[r] && row_cmd[r] == CMD_ACT) begin
          open_q[row_bank[r]] <= 1'b1;
          orow_q[row_bank[r]] <= row_row[r];
        end else if (row_valid[r] && row_cmd[r] == CMD_PRE) begin
          open_q[row_bank[r]] <= 1'b0;
        end
      end
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Rule registers: each rule's earliest tCK rises by the commands of the cycle; a scrub step
  // every 64th cycle pulls a bank's, a group's and one shared register up to the horizon.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    // (every temporary of the update declared here, at the top of the block, where Verilator
    // keeps it in the evaluation's locals rather than in the model)
    automatic tck_t now;
    automatic logic scrub;
    automatic logic [BANK_W-1:0] sb;
    automatic logic [2:0] sg;
    automatic tck_t acts [4];
    automatic tck_t pre_all;
    automatic tck_t act_all;
    automatic tck_t rd_all;
    automatic tck_t wr_all;
    automatic tck_t tck;
    automatic logic [BANK_W-1:0] b;
    if (!rst_ni) begin
      // verilator unroll_full
      for (int x = 0; x < NUM_BANKS; x++) begin
        act_bank_q[x] <= '0;
        col_bank_q[x] <= '0;
        pre_bank_q[x] <= '0;
      end
      // verilator unroll_full
      for (int x = 0; x < NUM_BANK_GROUPS; x++) begin
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
      next_refresh_q <= NREFI;
    end else begin
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

      // the row commands
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid[r]) begin
          tck = lo + tck_t'(row_k[r]);
          b = row_bank[r];
          unique case (row_cmd[r])
            CMD_ACT: begin
              act_bank_q[b] <= `NELSSA_TMAX(act_bank_q[b], tck + NRC);
              col_bank_q[b] <= tck + NRCD;
              pre_bank_q[b] <= `NELSSA_TMAX(pre_bank_q[b], tck + NRAS);
              act_grp_q[b[4:2]] <= `NELSSA_TMAX(act_grp_q[b[4:2]], tck + NRRD_L);
              act_all = `NELSSA_TMAX(act_all, tck + NRRD_S);
              acts[0] = acts[1];
              acts[1] = acts[2];
              acts[2] = acts[3];
              acts[3] = tck;
            end
            CMD_PRE: begin
              act_bank_q[b] <= `NELSSA_TMAX(act_bank_q[b], tck + NRP);
              pre_all = `NELSSA_TMAX(pre_all, tck + NRP);
            end
            CMD_REF: begin
              ref_ready_q    <= tck + NRFC;
              next_refresh_q <= next_refresh_q + NREFI;
            end
            default: ;
          endcase
        end
      end
      pre_all_q <= pre_all;
      act_all_q <= act_all;
      rd_all_q <= rd_all;
      wr_all_q <= wr_all;
      acts_q <= acts;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // The timing wheel: this cycle's slot has joined the aged mask; a bank used by this cycle's
  // column command or ACT ages again CloseIdle tCK after its use, in the cycle
  // ceil((use + CloseIdle) / 4). A bank's bit stays in its slot until the bank is used again (so
  // the wheel changes only then): when the wheel comes round to the slot again, the bank is
  // already aged.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    automatic logic [1:0] used_valid;
    automatic logic [1:0][BANK_W-1:0] used_bank;
    automatic tck_t used_tck [2];
    automatic logic [NUM_BANKS-1:0] wheel [WHEEL];
    automatic logic [NUM_BANKS-1:0] aged;
    automatic logic [WHEEL_W-1:0] slot;
    if (!rst_ni) begin
      aged_q <= '0;
      // verilator unroll_full
      for (int x = 0; x < WHEEL; x++) wheel_q[x] <= '0;
      // verilator unroll_full
      for (int x = 0; x < NUM_BANKS; x++) due_q[x] <= '0;
    end else begin
      // the banks whose row a command used this cycle (a column command and at most one ACT)
      used_valid = '0;
      used_bank = '0;
      used_tck = '{default: '0};
      if (col_valid) begin
        used_valid[0] = 1'b1;
        used_bank[0] = col_bank;
        used_tck[0] = lo + tck_t'(col_k);
      end
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid[r] && row_cmd[r] == CMD_ACT) begin
          used_valid[1] = 1'b1;
          used_bank[1] = row_bank[r];
          used_tck[1] = lo + tck_t'(row_k[r]);
        end
      end
      aged = aged_now;
      if (used_valid != '0) begin
        wheel = wheel_q;
        // verilator unroll_full
        for (int u = 0; u < 2; u++) begin
          if (used_valid[u]) begin
            slot = WHEEL_W'((used_tck[u] + tck_t'(CloseIdle + 3)) >> 2);
            wheel[due_q[used_bank[u]]][used_bank[u]] = 1'b0;
            wheel[slot][used_bank[u]] = 1'b1;
            aged[used_bank[u]] = 1'b0;
            due_q[used_bank[u]] <= slot;
          end
        end
        wheel_q <= wheel;
      end
      aged_q <= aged;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Queues: the masks follow the banks that opened and closed, the served request leaves its
  // queue (the younger ones move down a position) and an accepted request joins the end of its
  // own, in the lowest free slot. (One clocked block with its temporaries at the top, which a
  // Verilated model keeps in the evaluation's locals: as combinational next-state signals they
  // were evaluated again whenever a request input changed: several percent of the device's
  // simulated cycle, by CPU time on a shared machine.)
  always_ff @(posedge clk_i or negedge rst_ni) begin
    automatic logic wa;
    automatic logic wq;
    automatic qmask_t of_b;
    automatic logic [NUM_BANKS-1:0] open;
    automatic logic [15:0] req_orow;
    automatic qmask_t qopen [2];
    automatic qmask_t qhit [2];
    automatic qmask_t slots [2][QIDX_W];
    automatic qmask_t banks [2][BANK_W];
    automatic qmask_t free [2];
    automatic logic [QIDX_W:0] n [2];
    automatic logic [QIDX_W-1:0] s;
    automatic logic [QIDX_W-1:0] at_n;
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
      end
    end else begin
      wa = write_active;
      wq = req_write_i;
      qopen = qopen_q;
      qhit = qhit_q;
      slots = slot_q;
      banks = bankp_q;
      free = free_q;
      n = n_q;
      // the row commands: an ACT opens its bank's positions and makes row hits of those that
      // want its row; a PRE closes them
      open = open_q;
      req_orow = orow_q[req_entry.bank];
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid[r] && (row_cmd[r] == CMD_ACT || row_cmd[r] == CMD_PRE)) begin
          open[row_bank[r]] = row_cmd[r] == CMD_ACT;
          if (row_cmd[r] == CMD_ACT && row_bank[r] == req_entry.bank) req_orow = row_row[r];
          // verilator unroll_full
          for (int q = 0; q < 2; q++) begin
            of_b = `NELSSA_HOLDING(bankp_q[q], row_bank[r]);
            if (row_cmd[r] == CMD_ACT) begin
              qopen[q] |= of_b;
              qhit[q] |= act_hits[q];
            end else begin
              qopen[q] &= ~of_b;
              qhit[q] &= ~of_b;
            end
          end
        end
      end
      // the served entry
      if (col_valid) begin
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
      // the entering request
      if (enters) begin
        s = `NELSSA_CTRL_LOWEST(free[wq]);
        at_n = n[wq][QIDX_W-1:0];
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
      end
      slot_q  <= slots;
      bankp_q <= banks;
      free_q  <= free;
      n_q     <= n;
      qopen_q <= qopen;
      qhit_q  <= qhit;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Performance counters: the commands of each cycle, and the cycle counted by the state its
  // banks start it in (refreshing while a REF's nRFC runs, else active while a row is open, else
  // precharged): what DRAM energy is computed from (hw/model/ddr5_energy.py), counted as the
  // cycle models count them (hw/model/ddr5_subchannel.py, ddr5_sub.hpp).
  ddr5_perf_t perf_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    automatic ddr5_perf_t p;
    if (!rst_ni) begin
      perf_q <= '0;
    end else begin
      p = perf_q;
      if (col_valid && write_active) p.n_wr = p.n_wr + 1;
      if (col_valid && !write_active) p.n_rd = p.n_rd + 1;
      // verilator unroll_full
      for (int r = 0; r < 2; r++) begin
        if (row_valid[r]) begin
          unique case (row_cmd[r])
            CMD_ACT:  p.n_act = p.n_act + 1;
            CMD_PRE:  p.n_pre = p.n_pre + 1;
            CMD_PREA: p.n_prea = p.n_prea + 1;
            CMD_REF:  p.n_ref = p.n_ref + 1;
            default: ;
          endcase
        end
      end
      if (`NELSSA_AFTER(ref_ready_q, lo)) p.cyc_refresh = p.cyc_refresh + 1;
      else if (open_q != '0) p.cyc_active = p.cyc_active + 1;
      else p.cyc_precharged = p.cyc_precharged + 1;
      perf_q <= p;
    end
  end
  assign perf_o = perf_q;

  // ---------------------------------------------------------------------------------------------
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

  // ---------------------------------------------------------------------------------------------
  // Protocol rules. The request port is accept-as-offered (a front end may offer another request
  // in the next cycle: nelssa_ddr5_frontend re-arbitrates every cycle), so no input can break a
  // rule here: these are the controller's own, checked in every run (tests/rtl/test_ddr5_ctrl.py,
  // test_ddr5_system.py and every device build), and each shown firing, alone, on a fault forced
  // into the controller (test_ddr5_ctrl_assertion_fires: tests/rtl/ddr5_ctrl_faults.vlt).
  // the queues never run over or under (no entry into a full one is what req_ready_o says; a
  // check of it beside QueuesBounded raced the C++ harness's input changes at the clock edge
  // in test_ddr5_rtl_memory; a count of the free slots against the length, checked
  // too at first, cost the device's simulation 2 %: eight controllers, two population counts
  // each per cycle)
  `NELSSA_ASSERT(QueuesBounded, n_q[0] <= 6'(ReadQueue) && n_q[1] <= 6'(WriteQueue))
  `NELSSA_ASSERT_NEVER(ServedFromEmpty, col_valid && n_q[write_active] == '0)
  // one column command per cycle (slot 0), on a row hit; the row commands of a cycle on distinct
  // banks and CA slots, at most one ACT and one REF, none on the column command's bank or slot
  // (each of these costs eight controllers' worth of checks per simulated cycle: the set is
  // kept to what the scheduling relies on)
  `NELSSA_ASSERT(ColumnOnOpenRow, !col_valid || (open_q[col_bank] && orow_q[col_bank] == col_e.row))
  `NELSSA_ASSERT_NEVER(RowCommandsClash, row_valid == 2'b11 && (row_bank[0] == row_bank[1] ||
                                         row_k[0] == row_k[1] ||
                                         (row_cmd[0] == row_cmd[1] && row_cmd[0] != CMD_PRE)))
  `NELSSA_ASSERT_NEVER(RowOnColumnSlot, col_valid && ((row_valid[0] && row_k[0] == col_k) ||
                                        (row_valid[1] && row_k[1] == col_k)))
  `NELSSA_ASSERT_NEVER(RowOnColumnBank, col_valid &&
                                        ((row_valid[0] && row_bank[0] == col_bank) ||
                                         (row_valid[1] && row_bank[1] == col_bank)))

  `undef NELSSA_CTRL_LOWEST
endmodule
