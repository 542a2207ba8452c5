// What the DDR5 sub-channel controller (nelssa_ddr5_ctrl) and its scheduler pass each other, in
// one place for both forms of the scheduler (nelssa_ddr5_sched_parallel, nelssa_ddr5_sched_tries):
// the controller's state at the start of the cycle, and the commands the scheduler chooses for
// it. An interface rather than packed structs in nelssa_ddr5_pkg: the rule registers are TckW
// bits wide, a parameter of each controller (20 for synthesis, 32 in simulation).
interface nelssa_ddr5_sched_if
  import nelssa_ddr5_pkg::*;
#(
  parameter int unsigned TckW = 20  // width of the controller's wrapping tCK registers
) ();
  // the cycle
  logic [TckW-1:0]  lo;             // its first tCK
  logic             ca_carry;       // its tCK 0 taken by a command of the last one
  logic             write;          // the write queue is served (a drain)
  logic             refresh;        // a refresh is due
  logic [NUM_BANKS-1:0] aged;      // banks unused for CloseIdle tCK
  // the queues (0 reads, 1 writes) at the start of the cycle: entries by slot, free slots, and
  // by position (0 the oldest) the slot and bank bit planes, open banks and row hits; lengths
  // (each form reads what it needs: the tries find a line through the live positions, not the
  // free slots; the parallel form gathers every bank's state each cycle, so it needs neither
  // the open positions, nor the open rows and the entering request, which only the tries'
  // counts follow)
  ddr5_entry_t      ent [2][QUEUE_W];
  /* verilator lint_off UNUSEDSIGNAL */
  qmask_t           free [2];
  /* verilator lint_on UNUSEDSIGNAL */
  qmask_t           slot [2][QIDX_W];
  qmask_t           bank [2][BANK_W];
  /* verilator lint_off UNUSEDSIGNAL */
  qmask_t           qopen [2];
  /* verilator lint_on UNUSEDSIGNAL */
  qmask_t           qhit [2];
  logic [QIDX_W:0]  n [2];
  // the banks: open, the row open in each, and each JEDEC rule as the earliest tCK it allows
  logic [NUM_BANKS-1:0] open;
  /* verilator lint_off UNUSEDSIGNAL */
  logic [15:0]      orow [NUM_BANKS];
  /* verilator lint_on UNUSEDSIGNAL */
  logic [TckW-1:0]  act_bank [NUM_BANKS];  // ACT: tRP, tRC
  logic [TckW-1:0]  col_bank [NUM_BANKS];  // READ/WRITE: tRCD
  logic [TckW-1:0]  pre_bank [NUM_BANKS];  // PRE: tRAS, tRTP, tWR
  logic [TckW-1:0]  act_grp [NUM_BANK_GROUPS];    // ACT into the group: tRRD_L
  logic [TckW-1:0]  act_all;        // ACT into any group: tRRD_S
  logic [TckW-1:0]  rd_grp [NUM_BANK_GROUPS];     // READ to the group: tCCD_L, tWTR_L
  logic [TckW-1:0]  rd_all;         // READ to any group: tCCD_S, tWTR_S
  logic [TckW-1:0]  wr_grp [NUM_BANK_GROUPS];     // WRITE to the group: tCCD_L_WR
  logic [TckW-1:0]  wr_all;         // WRITE to any group: tCCD_S, read-to-write
  logic [TckW-1:0]  acts [4];       // the last four ACTs (tFAW)
  logic [TckW-1:0]  ref_ready;      // REF or ACT after REF: tRFC
  logic [TckW-1:0]  pre_all;        // REF after the last PRE: tRP
  // the request at the port, whether it joins its queue this cycle, and whether the other queue
  // holds its line (the scheduler's answer)
  ddr5_entry_t      req;
  logic             req_write;
  /* verilator lint_off UNUSEDSIGNAL */
  logic             enter;
  /* verilator lint_on UNUSEDSIGNAL */
  logic             req_same_line;
  // the column command: valid, position and slot of its entry, tCK offset in the cycle, entry
  logic             col_valid;
  logic [QIDX_W-1:0] col_idx;
  logic [QIDX_W-1:0] col_slot;
  logic [1:0]       col_k;
  ddr5_entry_t      col_entry;
  // up to two row commands (ACT, PRE, REF): valid, command, tCK offset, bank, row of an ACT
  logic [1:0]       row_valid;
  dram_cmd_e [1:0]  row_cmd;
  logic [1:0][1:0]  row_k;
  logic [1:0][BANK_W-1:0] row_bank;
  logic [1:0][15:0] row_row;
  logic             ca_carry_next;  // tCK 0 of the next cycle taken
  // per queue, the positions whose entry wants the row that this cycle's ACT opens
  qmask_t           act_hits [2];

  modport ctrl (
    output lo, ca_carry, write, refresh, aged, ent, free, slot, bank, qopen, qhit, n, open, orow,
           act_bank, col_bank, pre_bank, act_grp, act_all, rd_grp, rd_all, wr_grp, wr_all, acts,
           ref_ready, pre_all, req, req_write, enter,
    input  req_same_line, col_valid, col_idx, col_slot, col_k, col_entry, row_valid, row_cmd,
           row_k, row_bank, row_row, ca_carry_next, act_hits
  );
  modport sched (
    input  lo, ca_carry, write, refresh, aged, ent, free, slot, bank, qopen, qhit, n, open, orow,
           act_bank, col_bank, pre_bank, act_grp, act_all, rd_grp, rd_all, wr_grp, wr_all, acts,
           ref_ready, pre_all, req, req_write, enter,
    output req_same_line, col_valid, col_idx, col_slot, col_k, col_entry, row_valid, row_cmd,
           row_k, row_bank, row_row, ca_carry_next, act_hits
  );
endinterface
