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
  localparam int ROW_CMDS = 2;
  localparam int QMAX = (ReadQueue > WriteQueue) ? ReadQueue : WriteQueue;
  localparam longint NEVER = -64'sd1099511627776;  // -2^40 tCK
  localparam longint NCL_RTW = longint'(T.nCL) + 64'sd9 - longint'(T.nCWL);  // RD to WR
  // timings as 64-bit tCK counts
  localparam longint NCWL = longint'(T.nCWL);
  localparam longint NRCD = longint'(T.nRCD);
  localparam longint NRP = longint'(T.nRP);
  localparam longint NRAS = longint'(T.nRAS);
  localparam longint NRC = longint'(T.nRC);
  localparam longint NWR = longint'(T.nWR);
  localparam longint NRTP = longint'(T.nRTP);
  localparam longint NCCD_S = longint'(T.nCCD_S);
  localparam longint NCCD_L = longint'(T.nCCD_L);
  localparam longint NCCD_L_WR = longint'(T.nCCD_L_WR);
  localparam longint NRRD_S = longint'(T.nRRD_S);
  localparam longint NRRD_L = longint'(T.nRRD_L);
  localparam longint NFAW = longint'(T.nFAW);
  localparam longint NWTR_S = longint'(T.nWTR_S);
  localparam longint NWTR_L = longint'(T.nWTR_L);
  localparam longint NRFC = longint'(T.nRFC);
  localparam longint NREFI = longint'(T.nREFI);
  localparam longint BURST = 64'sd8;  // tCK of a BL16 burst
  localparam longint RTW = (NCL_RTW > longint'(T.nCCD_S)) ? NCL_RTW : longint'(T.nCCD_S);

  if (T.bank_groups != NG || T.banks_per_group != NB / NG) begin : gen_geometry_check
    $error("nelssa_ddr5_ctrl: built for 8 bank groups of 4 banks");
  end
  if (!(WriteLow < WriteHigh && WriteHigh <= WriteQueue)) begin : gen_watermark_check
    $error("nelssa_ddr5_ctrl: need WriteLow < WriteHigh <= WriteQueue");
  end

  typedef struct packed {
    logic [2:0]      bg;
    logic [1:0]      bank;
    logic [15:0]     row;
    logic [5:0]      col;
    logic [TagW-1:0] tag;
  } entry_t;

  typedef struct {
    entry_t      rq [ReadQueue];
    entry_t      wq [WriteQueue];
    int          rq_n, wq_n;
    logic        open [NB];
    logic [15:0] orow [NB];
    longint      row_used [NB];
    longint      last_act [NB], last_pre [NB], last_rd [NB], last_wr [NB];
    longint      group_act [NG], group_rd [NG], group_wr [NG];
    longint      any_rd;
    longint      acts [4];
    longint      ref_tck, next_refresh;
    logic        draining;
    logic        ca_carry;  // tCK 0 of this cycle is taken by a command of the last cycle
    longint      cycle;
  } state_t;

  state_t q, d;

  // ---------------------------------------------------------------------------------------------
  // Earliest legal tCK of each command (the rules of hw/model/ddr5_checker.py as lower bounds),
  // read from the next-state variable d as the scheduling below updates it command by command
  // (not passed as an argument: copying the whole state per call dominated simulation time)
  function automatic longint lmax(longint a, longint b);
    return (a > b) ? a : b;
  endfunction

  function automatic longint earliest_act(logic [4:0] b, logic [2:0] g);
    longint e = lmax(d.last_pre[b] + NRP, d.last_act[b] + NRC);
    e = lmax(e, d.ref_tck + NRFC);
    e = lmax(e, d.acts[0] + NFAW);
    for (int x = 0; x < NG; x++) begin
      e = lmax(e, d.group_act[x] + ((3'(x) == g) ? NRRD_L : NRRD_S));
    end
    return e;
  endfunction

  function automatic longint earliest_col(logic write, logic [4:0] b,
                                         logic [2:0] g);
    longint e = d.last_act[b] + NRCD;
    for (int x = 0; x < NG; x++) begin
      if (write) begin
        e = lmax(e, d.group_wr[x] + ((3'(x) == g) ? NCCD_L_WR : NCCD_S));
      end else begin
        e = lmax(e, d.group_rd[x] + ((3'(x) == g) ? NCCD_L : NCCD_S));
        e = lmax(e, d.group_wr[x] + NCWL + BURST + ((3'(x) == g) ? NWTR_L : NWTR_S));
      end
    end
    if (write) e = lmax(e, d.any_rd + RTW);
    return e;
  endfunction

  function automatic longint earliest_pre(logic [4:0] b);
    return lmax(lmax(d.last_act[b] + NRAS, d.last_rd[b] + NRTP),
                d.last_wr[b] + NCWL + BURST + NWR);
  endfunction

  // first tCK of [max(earliest, lo), lo+3] whose `len` CA slots are free; -1 if none
  function automatic int place(longint earliest, int len, logic [4:0] ca, longint lo);
    for (int k = 0; k < 4; k++) begin
      if (lo + longint'(k) >= earliest && !ca[k] && (len == 1 || !ca[k+1])) return k;
    end
    return -1;
  endfunction

  // ---------------------------------------------------------------------------------------------
  // One cycle of scheduling: the next state and the command slots
  logic        [2:0]       slot_valid;
  dram_cmd_e   [2:0]       slot_cmd;
  longint                  slot_tck [3];
  logic        [2:0][4:0]  slot_bank;
  logic        [2:0][16:0] slot_row;
  logic        [5:0]       slot_col;
  logic        [TagW-1:0]  slot_tag;
  logic                    slot_write;

  always_comb begin
    automatic longint lo;
    automatic logic [4:0] ca;
    automatic logic refreshing, any_open, stop;
    automatic int k, n_active, pick;
    automatic logic [4:0] b;
    automatic logic [2:0] g;
    automatic entry_t e;
    automatic logic write_active;
    automatic logic hit_wanted [NB];
    automatic logic any_wanted [NB];
    automatic longint best, ep;

    d = q;
    slot_valid = '0;
    for (int x = 0; x < 3; x++) slot_cmd[x] = CMD_ACT;
    slot_tck   = '{default: 0};
    slot_bank  = '0;
    slot_row   = '0;
    slot_col   = '0;
    slot_tag   = '0;
    slot_write = 1'b0;
    lo = q.cycle * 4;
    ca = {4'b0, q.ca_carry};

    if (q.wq_n >= WriteHigh || (q.wq_n > 0 && q.rq_n == 0)) d.draining = 1'b1;
    else if (q.wq_n <= WriteLow && q.rq_n > 0) d.draining = 1'b0;
    write_active = d.draining;
    n_active = write_active ? q.wq_n : q.rq_n;
    refreshing = Refresh && lo >= q.next_refresh;
    any_open = 1'b0;
    for (int x = 0; x < NB; x++) any_open |= q.open[x];

    // column command: the oldest active request whose row is open
    if (!refreshing || any_open) begin
      pick = -1;
      for (int i = 0; i < QMAX; i++) begin
        if (pick < 0 && i < n_active) begin
          e = write_active ? d.wq[i] : d.rq[i];
          b = {e.bg, e.bank};
          if (d.open[b] && d.orow[b] == e.row) begin
            k = place(earliest_col(write_active, b, e.bg), 2, ca, lo);
            if (k >= 0) begin
              pick = i;
              ca[k] = 1'b1;
              ca[k+1] = 1'b1;
              slot_valid[0] = 1'b1;
              slot_cmd[0] = write_active ? CMD_WR : CMD_RD;
              slot_tck[0] = lo + longint'(k);
              slot_bank[0] = b;
              slot_row[0] = {1'b0, e.row};
              slot_col = e.col;
              slot_tag = e.tag;
              slot_write = write_active;
              d.row_used[b] = lo + longint'(k);
              if (write_active) begin
                d.last_wr[b] = lo + longint'(k);
                d.group_wr[e.bg] = lo + longint'(k);
              end else begin
                d.last_rd[b] = lo + longint'(k);
                d.group_rd[e.bg] = lo + longint'(k);
                d.any_rd = lo + longint'(k);
              end
            end
          end
        end
      end
      if (pick >= 0) begin  // remove the served entry, keeping age order
        for (int i = 0; i < QMAX - 1; i++) begin
          if (i >= pick) begin
            if (write_active && i < WriteQueue - 1) d.wq[i] = d.wq[i+1];
            if (!write_active && i < ReadQueue - 1) d.rq[i] = d.rq[i+1];
          end
        end
        if (write_active) d.wq_n = d.wq_n - 1;
        else d.rq_n = d.rq_n - 1;
        n_active = n_active - 1;
      end
    end

    // row commands
    stop = 1'b0;
    for (int r = 1; r <= ROW_CMDS; r++) begin
      automatic logic issued = 1'b0;
      automatic dram_cmd_e c = CMD_ACT;
      automatic logic [4:0] cb = '0;
      automatic int ck = -1;
      automatic logic [15:0] crow = '0;
      if (!stop) begin
        if (refreshing) begin
          any_open = 1'b0;
          best = 0;
          for (int x = 0; x < NB; x++) begin
            if (d.open[x]) begin
              ep = earliest_pre(5'(x));
              if (!any_open || ep < best) begin
                best = ep;
                cb = 5'(x);
              end
              any_open = 1'b1;
            end
          end
          if (any_open) begin
            c = CMD_PRE;
            ck = place(best, 1, ca, lo);
          end else begin
            best = d.ref_tck + NRFC;
            for (int x = 0; x < NB; x++) best = lmax(best, d.last_pre[x] + NRP);
            c = CMD_REF;
            ck = place(best, 1, ca, lo);
          end
          issued = (ck >= 0);
        end else begin
          for (int x = 0; x < NB; x++) begin
            hit_wanted[x] = 1'b0;
            any_wanted[x] = 1'b0;
          end
          for (int i = 0; i < QMAX; i++) begin
            if (i < n_active) begin
              e = write_active ? d.wq[i] : d.rq[i];
              b = {e.bg, e.bank};
              any_wanted[b] = 1'b1;
              if (d.open[b] && d.orow[b] == e.row) hit_wanted[b] = 1'b1;
            end
          end
          for (int i = 0; i < QMAX; i++) begin
            if (!issued && i < n_active) begin
              e = write_active ? d.wq[i] : d.rq[i];
              b = {e.bg, e.bank};
              if (!d.open[b]) begin
                ck = place(earliest_act(b, e.bg), 2, ca, lo);
                if (ck >= 0) begin
                  issued = 1'b1;
                  c = CMD_ACT;
                  cb = b;
                  crow = e.row;
                end
              end else if (d.orow[b] != e.row && !hit_wanted[b]) begin
                ck = place(earliest_pre(b), 1, ca, lo);
                if (ck >= 0) begin
                  issued = 1'b1;
                  c = CMD_PRE;
                  cb = b;
                end
              end
            end
          end
          for (int x = 0; x < NB; x++) begin  // close rows left idle
            if (!issued && d.open[x] && !any_wanted[x] && lo - d.row_used[x] >= longint'(CloseIdle)) begin
              ck = place(earliest_pre(5'(x)), 1, ca, lo);
              if (ck >= 0) begin
                issued = 1'b1;
                c = CMD_PRE;
                cb = 5'(x);
              end
            end
          end
        end
        if (issued) begin
          g = cb[4:2];
          ca[ck] = 1'b1;
          if (c == CMD_ACT) ca[ck+1] = 1'b1;
          slot_valid[r] = 1'b1;
          slot_cmd[r] = c;
          slot_tck[r] = lo + longint'(ck);
          slot_bank[r] = cb;
          slot_row[r] = {1'b0, crow};
          unique case (c)
            CMD_ACT: begin
              d.open[cb] = 1'b1;
              d.orow[cb] = crow;
              d.row_used[cb] = lo + longint'(ck);
              d.last_act[cb] = lo + longint'(ck);
              d.group_act[g] = lo + longint'(ck);
              d.acts[0] = d.acts[1];
              d.acts[1] = d.acts[2];
              d.acts[2] = d.acts[3];
              d.acts[3] = lo + longint'(ck);
            end
            CMD_PRE: begin
              d.open[cb] = 1'b0;
              d.last_pre[cb] = lo + longint'(ck);
            end
            CMD_REF: begin
              d.ref_tck = lo + longint'(ck);
              d.next_refresh = d.next_refresh + NREFI;
            end
            default: ;
          endcase
        end else begin
          stop = 1'b1;
        end
      end
    end

    d.ca_carry = ca[4];
    d.cycle = q.cycle + 1;
  end

  entry_t req_entry;
  assign req_entry = '{bg: req_bg_i, bank: req_bank_i, row: req_row_i, col: req_col_i,
                       tag: req_tag_i};

  // The queue a request needs must have room at the start of the cycle, and the other queue
  // must not hold its line: reads and writes of one line complete in request order.
  always_comb begin
    automatic logic same_line = 1'b0;
    if (req_write_i) begin
      for (int i = 0; i < ReadQueue; i++) begin
        if (i < q.rq_n && q.rq[i].bg == req_bg_i && q.rq[i].bank == req_bank_i &&
            q.rq[i].row == req_row_i && q.rq[i].col == req_col_i) same_line = 1'b1;
      end
      req_ready_o = (q.wq_n < WriteQueue) && !same_line;
    end else begin
      for (int i = 0; i < WriteQueue; i++) begin
        if (i < q.wq_n && q.wq[i].bg == req_bg_i && q.wq[i].bank == req_bank_i &&
            q.wq[i].row == req_row_i && q.wq[i].col == req_col_i) same_line = 1'b1;
      end
      req_ready_o = (q.rq_n < ReadQueue) && !same_line;
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      q.rq_n <= 0;
      q.wq_n <= 0;
      for (int x = 0; x < NB; x++) begin
        q.open[x]     <= 1'b0;
        q.orow[x]     <= '0;
        q.row_used[x] <= 0;
        q.last_act[x] <= NEVER;
        q.last_pre[x] <= NEVER;
        q.last_rd[x]  <= NEVER;
        q.last_wr[x]  <= NEVER;
      end
      for (int x = 0; x < NG; x++) begin
        q.group_act[x] <= NEVER;
        q.group_rd[x]  <= NEVER;
        q.group_wr[x]  <= NEVER;
      end
      for (int x = 0; x < 4; x++) q.acts[x] <= NEVER;
      q.any_rd       <= NEVER;
      q.ref_tck      <= NEVER;
      q.next_refresh <= NREFI;
      q.draining     <= 1'b0;
      q.ca_carry     <= 1'b0;
      q.cycle        <= 0;
    end else begin
      q <= d;
      // a request enters its queue at the end of the cycle, behind what scheduling left; kept
      // out of the scheduling logic so that it depends on the state alone (it is evaluated
      // once per clock in simulation, not again whenever an input changes)
      if (req_valid_i && req_ready_o) begin
        if (req_write_i) begin
          q.wq[d.wq_n] <= req_entry;
          q.wq_n       <= d.wq_n + 1;
        end else begin
          q.rq[d.rq_n] <= req_entry;
          q.rq_n       <= d.rq_n + 1;
        end
      end
    end
  end

  for (genvar s = 0; s < 3; s++) begin : gen_slot
    assign cmd_valid_o[s] = slot_valid[s];
    assign cmd_o[s]       = slot_cmd[s];
    assign cmd_tck_o[s]   = 64'(slot_tck[s]);
    assign cmd_bg_o[s]    = slot_bank[s][4:2];
    assign cmd_bank_o[s]  = slot_bank[s][1:0];
    assign cmd_row_o[s]   = slot_row[s];
  end
  assign cmd_col_o   = slot_col;
  assign cmd_tag_o   = slot_tag;
  assign cmd_write_o = slot_write;
endmodule
