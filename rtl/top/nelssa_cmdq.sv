// Command queue of a PNM device: fetches descriptors from the submission ring in device memory,
// hands ATTN descriptors to free attention units (NOPs complete at once), and writes one
// completion record per descriptor to the completion ring, in fetch order, as the model does
// (hw/model/device.py). A descriptor is fetched only while the completion ring has room for it
// beside everything in flight, so completions never overwrite ones the host has not read.
// The ring registers hold still while this unit is enabled or not idle (nelssa_regs), and were
// checked when it was enabled: both rings lie inside the queue's region and device memory.
`include "nelssa_assert.svh"

module nelssa_cmdq
  import nelssa_dev_pkg::*;
#(
  parameter int unsigned AddrW    = 40,           // device-memory address width
  parameter int unsigned NumUnits = 4,            // attention units
  parameter longint      MemBytes = 64'd1 << 36,  // device memory
  parameter int unsigned OrderDepth = 8,          // descriptors in flight, power of two
  localparam int unsigned UW = (NumUnits > 1) ? $clog2(NumUnits) : 1  // unit index width
) (
  input  logic                     clk_i,
  input  logic                     rst_ni,
  // registers
  input  logic                     enable_i,
  input  logic [63:0]              sq_base_i,
  input  logic [31:0]              sq_size_i,
  input  logic [31:0]              sq_tail_i,
  input  logic [63:0]              cq_base_i,
  input  logic [31:0]              cq_size_i,
  input  logic [31:0]              cq_head_i,
  input  logic [63:0]              region_base_i,
  input  logic [63:0]              region_limit_i,
  input  logic                     sq_reset_i,
  input  logic                     cq_reset_i,
  output logic [31:0]              sq_head_o,
  output logic [31:0]              cq_tail_o,
  output logic                     idle_o,
  output logic                     desc_done_o,  // pulses
  output logic                     desc_err_o,
  // attention units
  output logic [NumUnits-1:0]      unit_start_o,
  output logic [511:0]             unit_desc_o,
  output logic [63:0]              unit_lo_o,
  output logic [63:0]              unit_hi_o,
  output logic [1:0][63:0]         unit_ring_lo_o,  // SQ, CQ: where no output may go
  output logic [1:0][63:0]         unit_ring_hi_o,
  input  logic [NumUnits-1:0]      unit_busy_i,
  input  logic [NumUnits-1:0]      unit_done_i,
  input  logic [NumUnits-1:0][7:0] unit_status_i,
  // memory port: descriptor reads, completion writes
  output logic                     mem_valid_o,
  input  logic                     mem_ready_i,
  output mem_req_t                 mem_o,
  input  logic                     mem_cpl_i,
  input  logic                     rd_valid_i,   // the descriptor line (one read in flight)
  input  logic [511:0]             rd_data_i
);
  localparam int unsigned OW = $clog2(OrderDepth);

  if (OrderDepth < NumUnits + 1 || (OrderDepth & (OrderDepth - 1)) != 0) begin : gen_depth_check
    $error("nelssa_cmdq: OrderDepth must be a power of two above NumUnits");
  end

  typedef enum logic [2:0] { StIdle, StRead, StReadWait, StWrite, StWriteWait } state_e;

  typedef struct packed {
    logic        nop;
    logic [UW-1:0] unit;
    logic [31:0] desc_id;
    logic [15:0] sq_head;
  } order_t;

  state_e           state_q, state_d;
  logic [31:0]      sq_head_q, cq_tail_q;
  logic             phase_q;                 // phase of the next completion written
  logic [15:0]      fetched_q;               // entries fetched since SQ_SIZE was written
  order_t           order_q [OrderDepth];
  logic [OW-1:0]    ord_rd_q, ord_wr_q;
  logic [OW:0]      ord_n_q;
  logic [NumUnits-1:0] owed_q;               // unit finished, completion not yet written
  logic [NumUnits-1:0][7:0] status_q;
  logic [NumUnits-1:0] assigned_q;           // unit started, completion not yet written

  // ---- what can happen now ---------------------------------------------------------------------
  logic [31:0] cq_used;
  logic        pending, have_free, can_fetch, head_ready;
  logic [UW-1:0] free_unit;
  order_t      head;
  logic [7:0]  head_status;

  always_comb begin
    have_free = 1'b0;
    free_unit = '0;
    // verilator unroll_full
    for (int u = NumUnits - 1; u >= 0; u--) begin
      if (!assigned_q[u] && !unit_busy_i[u]) begin
        have_free = 1'b1;
        free_unit = UW'(u);
      end
    end
    cq_used = (cq_size_i == 0) ? 32'd0 : ((cq_tail_q - cq_head_i) & (cq_size_i - 1));
    // a descriptor waits and the completion ring has room for it (the model's _pending)
    pending = enable_i && sq_size_i != 0 && cq_size_i != 0 && sq_head_q != sq_tail_i &&
              cq_used + 32'(ord_n_q) + 1 < cq_size_i;
    can_fetch = pending && have_free && int'(ord_n_q) < OrderDepth;
    head = order_q[ord_rd_q];
    head_ready = ord_n_q != 0 && (head.nop || owed_q[head.unit]);
    head_status = head.nop ? 8'(DESC_OK) : status_q[head.unit];
  end

  // ---- memory port -----------------------------------------------------------------------------
  logic [57:0] cq_line;  // the line of the completion record
  logic [8*COMPLETION_BYTES-1:0] cpl_entry;
  assign cq_line = 58'((cq_base_i + 64'(cq_tail_q) * COMPLETION_BYTES) >> 6);
  // the completion record (driver/formats.COMPLETION), field by field at its generated offset
  always_comb begin
    cpl_entry = '0;
    cpl_entry[8*CPL_DESC_ID_OFF +: 8*CPL_DESC_ID_BYTES] = head.desc_id;
    cpl_entry[8*CPL_STATUS_OFF +: 8*CPL_STATUS_BYTES] = head_status;
    cpl_entry[8*CPL_PHASE_OFF +: 8*CPL_PHASE_BYTES] = (8*CPL_PHASE_BYTES)'(phase_q);
    cpl_entry[8*CPL_SQ_HEAD_OFF +: 8*CPL_SQ_HEAD_BYTES] = head.sq_head;
  end
  assign mem_valid_o = state_q == StRead || state_q == StWrite;
  logic [AddrW-1:0] mem_addr;
  assign mem_addr = (state_q == StWrite) ? AddrW'({cq_line, 6'b0})
                                         : AddrW'(sq_base_i + 64'(sq_head_q) * DESC_BYTES);
  // the record's place in its line: the ring is line aligned (RingsAligned), so that is the
  // tail's low bits (a shift among 4 places, not 64)
  logic [5:0] cq_off;
  assign cq_off = 6'(cq_tail_q[1:0]) * 6'(COMPLETION_BYTES);
  assign mem_o = '{write: state_q == StWrite, addr: 64'(mem_addr), tag: '0,
                   wdata: 512'(cpl_entry) << (8 * cq_off),
                   wstrb: 64'({COMPLETION_BYTES{1'b1}}) << cq_off};

  assign unit_desc_o = rd_data_i;
  assign unit_lo_o = region_base_i;
  assign unit_hi_o = (region_limit_i < 64'(MemBytes)) ? region_limit_i : 64'(MemBytes);
  assign unit_ring_lo_o = {cq_base_i, sq_base_i};
  assign unit_ring_hi_o = {cq_base_i + 64'(cq_size_i) * COMPLETION_BYTES,
                           sq_base_i + 64'(sq_size_i) * DESC_BYTES};
  assign sq_head_o = sq_head_q;
  assign cq_tail_o = cq_tail_q;
  // idle also waits for the done pulse, so the counters are current when idle is seen
  assign idle_o = state_q == StIdle && ord_n_q == 0 && unit_busy_i == '0 && !pending &&
                  !desc_done_o;

  logic [8*DESC_OPCODE_BYTES-1:0] desc_opcode;
  assign desc_opcode = rd_data_i[8*DESC_OPCODE_OFF +: 8*DESC_OPCODE_BYTES];

  always_comb begin
    unit_start_o = '0;
    if (state_q == StReadWait && rd_valid_i && desc_opcode != 8'(OP_NOP)) begin
      unit_start_o[free_unit] = 1'b1;
    end
  end

  // ---- protocol rules ---------------------------------------------------------------------------
  logic [63:0] sq_end, cq_end;
  assign sq_end = sq_base_i + 64'(sq_size_i) * DESC_BYTES;
  assign cq_end = cq_base_i + 64'(cq_size_i) * COMPLETION_BYTES;
  // the registers' side: enabled rings lie inside the region and memory and hold still
  `NELSSA_ASSERT(RingsInRegion, !enable_i || (sq_base_i >= region_base_i && sq_end <= unit_hi_o &&
                                              cq_base_i >= region_base_i && cq_end <= unit_hi_o))
  `NELSSA_ASSERT(RingsAligned, !enable_i || (sq_base_i[5:0] == '0 && cq_base_i[5:0] == '0))
  `NELSSA_ASSERT(RingsStill, !(enable_i && $past(enable_i)) ||
                             $stable({sq_base_i, sq_size_i, cq_base_i, cq_size_i, region_base_i,
                                      region_limit_i}))
  // this unit's side: it reads descriptors only from the submission ring and writes
  // completions only into the completion ring, holding each request until taken
  `NELSSA_ASSERT(ReadInSqRing, !(mem_valid_o && !mem_o.write) ||
                               (mem_o.addr >= sq_base_i && mem_o.addr < sq_end))
  `NELSSA_ASSERT(WriteInCqRing, !(mem_valid_o && mem_o.write) ||
                                (mem_o.addr >= {cq_base_i[63:6], 6'b0} && mem_o.addr < cq_end))
  `NELSSA_ASSERT_HOLD(MemHeld, mem_valid_o, mem_ready_i, mem_o)
  // one response per request: data only while a read waits, a completion only while a write
  // waits, a unit done only when it was started
  `NELSSA_ASSERT(ReadDataAsked, !rd_valid_i || state_q == StReadWait)
  `NELSSA_ASSERT(WriteCplAsked, !mem_cpl_i || state_q == StWriteWait)
  `NELSSA_ASSERT_NEVER(UnitDoneUnstarted, |(unit_done_i & ~assigned_q))
  `NELSSA_ASSERT_ONEHOT0(OneUnitStarted, unit_start_o)
  `NELSSA_ASSERT_NEVER(StartBusyUnit, |(unit_start_o & (assigned_q | unit_busy_i)))
  `NELSSA_ASSERT(OrderBounded, int'(ord_n_q) <= OrderDepth)

  always_comb begin
    state_d = state_q;
    unique case (state_q)
      StIdle: begin
        if (head_ready) state_d = StWrite;
        else if (can_fetch) state_d = StRead;
      end
      StRead:      if (mem_ready_i) state_d = StReadWait;
      StReadWait:  if (rd_valid_i) state_d = StIdle;
      StWrite:     if (mem_ready_i) state_d = StWriteWait;
      StWriteWait: if (mem_cpl_i) state_d = StIdle;
      default:     state_d = StIdle;
    endcase
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= StIdle;
      sq_head_q <= '0;
      cq_tail_q <= '0;
      phase_q <= 1'b1;
      fetched_q <= '0;
      ord_rd_q <= '0;
      ord_wr_q <= '0;
      ord_n_q <= '0;
      owed_q <= '0;
      status_q <= '0;
      assigned_q <= '0;
      desc_done_o <= 1'b0;
      desc_err_o <= 1'b0;
    end else begin
      automatic logic [OW:0] n = ord_n_q;
      desc_done_o <= 1'b0;
      desc_err_o <= 1'b0;
      // verilator unroll_full
      for (int u = 0; u < NumUnits; u++) begin
        if (unit_done_i[u]) begin
          owed_q[u] <= 1'b1;
          status_q[u] <= unit_status_i[u];
        end
      end
      state_q <= state_d;
      if (state_q == StReadWait && rd_valid_i) begin
        automatic logic [31:0] next = (sq_head_q + 1) & (sq_size_i - 1);
        // sq_head: the entries fetched so far, this one included (driver/formats.py)
        order_q[ord_wr_q] <= '{nop: desc_opcode == 8'(OP_NOP), unit: free_unit,
                               desc_id: rd_data_i[8*DESC_DESC_ID_OFF +: 8*DESC_DESC_ID_BYTES],
                               sq_head: fetched_q + 16'd1};
        fetched_q <= fetched_q + 16'd1;
        ord_wr_q <= ord_wr_q + 1'b1;
        n = n + 1'b1;
        if (desc_opcode != 8'(OP_NOP)) assigned_q[free_unit] <= 1'b1;
        sq_head_q <= next;
      end
      if (state_q == StWriteWait && mem_cpl_i) begin
        if (!head.nop) begin
          owed_q[head.unit] <= 1'b0;
          assigned_q[head.unit] <= 1'b0;
        end
        ord_rd_q <= ord_rd_q + 1'b1;
        n = n - 1'b1;
        cq_tail_q <= (cq_tail_q + 1) & (cq_size_i - 1);
        if (((cq_tail_q + 1) & (cq_size_i - 1)) == 0) phase_q <= !phase_q;
        desc_done_o <= 1'b1;
        desc_err_o <= head_status != 8'(DESC_OK);
      end
      ord_n_q <= n;
      if (sq_reset_i) begin
        sq_head_q <= '0;
        fetched_q <= '0;
      end
      if (cq_reset_i) begin
        cq_tail_q <= '0;
        phase_q <= 1'b1;
      end
    end
  end
endmodule
