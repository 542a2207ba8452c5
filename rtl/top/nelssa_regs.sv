// Register block of a PNM device (CXL.io MMIO): the MMIO channel onto the register block that
// PeakRDL-regblock generates from the map (driver/regs.py -> rtl/top/nelssa_csr.rdl ->
// nelssa_csr_reg, per-field access there), and the device's side of its fields through the
// block's hwif. What the map's access rules ask of the device lives here:
//   * reads of unmapped offsets (the block's address error, or beyond the 4 KB window) return
//     UNMAPPED_VALUE; writes to read-only or unmapped offsets change nothing; both are counted;
//   * reading the low word of a 64-bit register latches its high word for the next read of that
//     high word (one latch);
//   * a write to a stored register may be refused (the field's swwe) and is then counted: ring
//     registers (bases, sizes, region) while the device is enabled or busy, an enable unless they
//     describe valid rings inside the region and device memory (driver/regs.ring_problem), a
//     doorbell (SQ_TAIL) or CQ_HEAD that names no entry of its ring;
//   * writing SQ_SIZE or CQ_SIZE empties that ring;
//   * a request with an undefined opcode is answered RSP_OPCODE_ERROR (all-ones data), counted.
// The block answers a request in its own cycle (passthrough CPU interface); the response is
// registered here, so a read is answered the cycle after it is taken, as before the block was
// generated.
`include "nelssa_assert.svh"

module nelssa_regs
  import nelssa_dev_pkg::*;
  import nelssa_csr_reg_pkg::*;
#(
  parameter int unsigned NumEngines       = 4,              // CAPS.engines
  parameter int unsigned NumQHeads        = 8,              // CAPS: largest GQA group
  parameter int unsigned HeadDim          = 128,            // CAPS: largest head_dim
  parameter int unsigned MaxClusterTokens = 64,             // CAPS.max_cluster_tokens
  parameter logic [31:0] BuildId          = 32'h0,          // BUILD_ID (bitstream build id)
  parameter longint      MemBytes         = 64'd1 << 36,    // MEM_SIZE: device memory bytes
  parameter int unsigned BytesW           = 16              // width of bytes_read_i
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  // MMIO requests and read responses
  input  logic              mmio_valid_i,
  output logic              mmio_ready_o,
  input  mmio_req_t         mmio_i,         // an opcode not in mmio_opcode_e is answered an error
  output logic              rsp_valid_o,
  input  logic              rsp_ready_i,
  output mmio_rsp_t         rsp_o,
  // to the command path
  output logic              enable_o,
  output logic [63:0]       sq_base_o,
  output logic [31:0]       sq_size_o,
  output logic [31:0]       sq_tail_o,
  output logic [63:0]       cq_base_o,
  output logic [31:0]       cq_size_o,
  output logic [31:0]       cq_head_o,
  output logic [63:0]       region_base_o,
  output logic [63:0]       region_limit_o,
  output logic              sq_reset_o,     // SQ_SIZE written: the ring starts over
  output logic              cq_reset_o,     // CQ_SIZE written: the ring starts over
  // from the device
  input  logic [31:0]       sq_head_i,
  input  logic [31:0]       cq_tail_i,
  input  logic              idle_i,
  input  logic              err_desc_i,     // pulses: one count each
  input  logic              err_mem_i,
  input  logic              err_opcode_i,   // the CXL.mem slave answered an undefined opcode
  input  logic              desc_done_i,
  input  logic              busy_i,         // a descriptor is in flight this cycle
  input  logic [BytesW-1:0] bytes_read_i    // bytes the engines read this cycle
);
  if (NumEngines < 1 || NumEngines > 15 || NumQHeads < 1 || NumQHeads > 16 ||
      MaxClusterTokens > 255 || BytesW > 16) begin : gen_caps_check
    $error("nelssa_regs: CAPS holds 1..15 engines, 1..16 query heads, up to 255 cluster tokens;",
           " PERF_BYTES_READ adds up to 16 bits a cycle");
  end

  nelssa_csr__in_t  hwif_in;
  nelssa_csr__out_t hwif_out;

  // ---- the request, onto the block's CPU interface --------------------------------------------
  logic        take, is_read, is_write, bad_opcode, in_window;
  logic [11:0] off;
  assign take = mmio_valid_i && mmio_ready_o;
  assign is_read = mmio_i.opcode == 8'(MMIO_READ);
  assign is_write = mmio_i.opcode == 8'(MMIO_WRITE);
  assign bad_opcode = !is_read && !is_write;
  // an offset beyond the window whose low bits name a register is unmapped: the block never
  // sees it (and nothing is latched)
  assign in_window = mmio_i.offset < 32'(REG_WINDOW_BYTES);
  assign off = mmio_i.offset[11:0];

  logic        cpu_req, rd_ack, rd_err, wr_ack, wr_err, stall_rd, stall_wr;
  logic [31:0] rd_data;
  assign cpu_req = take && !bad_opcode && in_window;

  nelssa_csr_reg u_csr (
    .clk                 (clk_i),
    .arst_n              (rst_ni),
    .s_cpuif_req         (cpu_req),
    .s_cpuif_req_is_wr   (is_write),
    .s_cpuif_addr        (off),
    .s_cpuif_wr_data     (mmio_i.value),
    .s_cpuif_wr_biten    ('1),
    .s_cpuif_req_stall_wr(stall_wr),
    .s_cpuif_req_stall_rd(stall_rd),
    .s_cpuif_rd_ack      (rd_ack),
    .s_cpuif_rd_err      (rd_err),
    .s_cpuif_rd_data     (rd_data),
    .s_cpuif_wr_ack      (wr_ack),
    .s_cpuif_wr_err      (wr_err),
    .hwif_in             (hwif_in),
    .hwif_out            (hwif_out)
  );

  // ---- which writes the device takes ----------------------------------------------------------
  logic [63:0] region_hi;
  logic        rings_ok, ring_frozen, enable_refused, doorbell_ok, cq_head_ok;
  logic        ring_write, control_write, any_write;

  // a span inside [lo, hi) with no sum that could wrap 64 bits
  function automatic logic span_inside(logic [63:0] base, logic [63:0] len, logic [63:0] lo,
                                       logic [63:0] hi);
    return base >= lo && base <= hi && len <= hi - base;
  endfunction
  function automatic logic size_ok(logic [31:0] n);
    return n >= 32'd2 && n <= 32'(RING_MAX_ENTRIES) && (n & (n - 32'd1)) == '0;
  endfunction

  assign region_hi = (region_limit_o < 64'(MemBytes)) ? region_limit_o : 64'(MemBytes);
  assign rings_ok = size_ok(sq_size_o) && size_ok(cq_size_o) && sq_base_o[5:0] == '0 &&
                    cq_base_o[5:0] == '0 &&
                    span_inside(sq_base_o, 64'(sq_size_o) * DESC_BYTES, region_base_o,
                                region_hi) &&
                    span_inside(cq_base_o, 64'(cq_size_o) * COMPLETION_BYTES, region_base_o,
                                region_hi);
  // the rings hold still while the command queue may use them
  assign ring_frozen = enable_o || !idle_i;
  assign enable_refused = mmio_i.value[0] && !rings_ok;
  // a doorbell (and the host's completion head) names an entry of its ring
  assign doorbell_ok = mmio_i.value < sq_size_o;
  assign cq_head_ok = mmio_i.value < cq_size_o;

  // a software write reached a register (the block's swmod: whether or not it is taken)
  assign ring_write = hwif_out.SQ_BASE.lo.swmod || hwif_out.SQ_BASE.hi.swmod ||
                      hwif_out.SQ_SIZE.value.swmod ||
                      hwif_out.CQ_BASE.lo.swmod || hwif_out.CQ_BASE.hi.swmod ||
                      hwif_out.CQ_SIZE.value.swmod ||
                      hwif_out.REGION_BASE.lo.swmod || hwif_out.REGION_BASE.hi.swmod ||
                      hwif_out.REGION_LIMIT.lo.swmod || hwif_out.REGION_LIMIT.hi.swmod;
  assign control_write = hwif_out.CONTROL.enable.swmod;
  assign any_write = ring_write || control_write || hwif_out.SQ_TAIL.value.swmod ||
                     hwif_out.CQ_HEAD.value.swmod;

  always_comb begin
    hwif_in.CONTROL.enable.swwe = !enable_refused;
    hwif_in.CONTROL.unused.swwe = !enable_refused;
    hwif_in.SQ_BASE.lo.swwe = !ring_frozen;
    hwif_in.SQ_BASE.hi.swwe = !ring_frozen;
    hwif_in.SQ_SIZE.value.swwe = !ring_frozen;
    hwif_in.CQ_BASE.lo.swwe = !ring_frozen;
    hwif_in.CQ_BASE.hi.swwe = !ring_frozen;
    hwif_in.CQ_SIZE.value.swwe = !ring_frozen;
    hwif_in.REGION_BASE.lo.swwe = !ring_frozen;
    hwif_in.REGION_BASE.hi.swwe = !ring_frozen;
    hwif_in.REGION_LIMIT.lo.swwe = !ring_frozen;
    hwif_in.REGION_LIMIT.hi.swwe = !ring_frozen;
    hwif_in.SQ_TAIL.value.swwe = doorbell_ok;
    hwif_in.CQ_HEAD.value.swwe = cq_head_ok;
    // a ring size write that is taken starts that ring over
    hwif_in.SQ_TAIL.value.hwclr = sq_reset_o;
    hwif_in.CQ_HEAD.value.hwclr = cq_reset_o;

    // ---- what the device shows --------------------------------------------------------------
    hwif_in.CAPS.engines.next = 4'(NumEngines);
    hwif_in.CAPS.max_qheads_m1.next = 4'(NumQHeads - 1);
    hwif_in.CAPS.head_dim_64.next = HeadDim >= 64;
    hwif_in.CAPS.head_dim_128.next = HeadDim >= 128;
    hwif_in.CAPS.max_cluster_tokens.next = 8'(MaxClusterTokens);
    hwif_in.IFACE_HASH.value.next = IFACE_HASH;
    hwif_in.MEM_SIZE.value.next = 64'(MemBytes);
    hwif_in.BUILD_ID.value.next = BuildId;
    hwif_in.STATUS.idle.next = idle_i;
    hwif_in.STATUS.enabled.next = enable_o;
    hwif_in.STATUS.ring_error.hwset = control_write && enable_refused;
    hwif_in.STATUS.ring_error.hwclr = control_write && !enable_refused;
    hwif_in.SQ_HEAD.value.next = sq_head_i;
    hwif_in.CQ_TAIL.value.next = cq_tail_i;

    // ---- counters ---------------------------------------------------------------------------
    hwif_in.ERR_DESC.value.incr = err_desc_i;
    hwif_in.ERR_MEM.value.incr = err_mem_i;
    hwif_in.ERR_RO_WRITE.value.incr = take && is_write && in_window && !wr_err && !any_write;
    hwif_in.ERR_UNMAPPED.value.incr = take && !bad_opcode &&
                                      (!in_window || (is_write ? wr_err : rd_err));
    hwif_in.ERR_DOORBELL.value.incr = (hwif_out.SQ_TAIL.value.swmod && !doorbell_ok) ||
                                      (hwif_out.CQ_HEAD.value.swmod && !cq_head_ok);
    hwif_in.ERR_RING.value.incr = (ring_write && ring_frozen) ||
                                  (control_write && enable_refused);
    hwif_in.ERR_OPCODE.value.incr = err_opcode_i || (take && bad_opcode);
    hwif_in.ERR_OPCODE.value.incrvalue = 2'(err_opcode_i) + 2'(take && bad_opcode);
    hwif_in.PERF_CYCLES.value.incr = 1'b1;
    hwif_in.PERF_BUSY.value.incr = busy_i;
    hwif_in.PERF_BYTES_READ.value.incr = 1'b1;
    hwif_in.PERF_BYTES_READ.value.incrvalue = 16'(bytes_read_i);
    hwif_in.PERF_DESC_DONE.value.incr = desc_done_i;
  end

  // ---- to the command path ----------------------------------------------------------------------
  assign enable_o = hwif_out.CONTROL.enable.value;
  assign sq_base_o = {hwif_out.SQ_BASE.hi.value, hwif_out.SQ_BASE.lo.value};
  assign sq_size_o = hwif_out.SQ_SIZE.value.value;
  assign sq_tail_o = hwif_out.SQ_TAIL.value.value;
  assign cq_base_o = {hwif_out.CQ_BASE.hi.value, hwif_out.CQ_BASE.lo.value};
  assign cq_size_o = hwif_out.CQ_SIZE.value.value;
  assign cq_head_o = hwif_out.CQ_HEAD.value.value;
  assign region_base_o = {hwif_out.REGION_BASE.hi.value, hwif_out.REGION_BASE.lo.value};
  assign region_limit_o = {hwif_out.REGION_LIMIT.hi.value, hwif_out.REGION_LIMIT.lo.value};
  assign sq_reset_o = hwif_out.SQ_SIZE.value.swmod && !ring_frozen;
  assign cq_reset_o = hwif_out.CQ_SIZE.value.swmod && !ring_frozen;

  // ---- the LO/HI latch ----------------------------------------------------------------------------
  // the high word of each 64-bit register, by the offset of its low word
  logic        has_hi;
  logic [11:0] hi_off;
  logic [31:0] hi_value;
  always_comb begin
    {has_hi, hi_off, hi_value} = '0;
    unique case (off)
      REG_MEM_SIZE_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_MEM_SIZE_HI, MemBytes[63:32]};
      REG_SQ_BASE_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_SQ_BASE_HI, sq_base_o[63:32]};
      REG_CQ_BASE_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_CQ_BASE_HI, cq_base_o[63:32]};
      REG_REGION_BASE_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_REGION_BASE_HI, region_base_o[63:32]};
      REG_REGION_LIMIT_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_REGION_LIMIT_HI, region_limit_o[63:32]};
      REG_PERF_CYCLES_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_PERF_CYCLES_HI,
                                      hwif_out.PERF_CYCLES.value.value[63:32]};
      REG_PERF_BUSY_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_PERF_BUSY_HI,
                                      hwif_out.PERF_BUSY.value.value[63:32]};
      REG_PERF_BYTES_READ_LO:
        {has_hi, hi_off, hi_value} = {1'b1, REG_PERF_BYTES_READ_HI,
                                      hwif_out.PERF_BYTES_READ.value.value[63:32]};
      default: ;
    endcase
  end

  logic        latch_valid_q, mapped_read, latch_hit;
  logic [11:0] latch_off_q;
  logic [31:0] latch_q;
  assign mapped_read = take && is_read && in_window && !rd_err;
  assign latch_hit = latch_valid_q && latch_off_q == off;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      latch_valid_q <= 1'b0;
      latch_off_q <= '0;
      latch_q <= '0;
    end else if (mapped_read && has_hi) begin
      latch_valid_q <= 1'b1;
      latch_off_q <= hi_off;
      latch_q <= hi_value;
    end else if (mapped_read && latch_hit) begin
      latch_valid_q <= 1'b0;
    end
  end

  // ---- the response ---------------------------------------------------------------------------
  logic        rsp_valid_q;
  logic [15:0] rsp_tag_q;
  logic [7:0]  rsp_status_q;
  logic [31:0] rsp_data_q;

  // a read waits until the last read's response has left
  assign mmio_ready_o = !rsp_valid_q || rsp_ready_i;
  assign rsp_valid_o = rsp_valid_q;
  assign rsp_o = '{tag: rsp_tag_q, status: rsp_status_q, value: rsp_data_q};

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rsp_valid_q <= 1'b0;
      rsp_tag_q <= '0;
      rsp_status_q <= '0;
      rsp_data_q <= '0;
    end else begin
      if (rsp_valid_q && rsp_ready_i) rsp_valid_q <= 1'b0;
      if (take && (is_read || bad_opcode)) begin
        rsp_valid_q <= 1'b1;
        rsp_tag_q <= mmio_i.tag;
        rsp_status_q <= bad_opcode ? 8'(RSP_OPCODE_ERROR) : 8'(RSP_OK);
        rsp_data_q <= !mapped_read ? UNMAPPED_VALUE : latch_hit ? latch_q : rd_data;
      end
    end
  end

  // ---- protocol rules ---------------------------------------------------------------------------
  // the host offers a request until it is taken; a response is held until taken
  `NELSSA_ASSERT_HOLD(MmioHeld, mmio_valid_i, mmio_ready_o, mmio_i)
  `NELSSA_ASSERT_HOLD(RspHeld, rsp_valid_o, rsp_ready_i, rsp_o)
  // the block answers every request in its cycle and never stalls
  `NELSSA_ASSERT(CsrAnswers, !cpu_req || (is_write ? wr_ack : rd_ack))
  `NELSSA_ASSERT(CsrNoStall, !stall_rd && !stall_wr)
  // enabled rings are valid rings inside the region and hold still
  `NELSSA_ASSERT(EnabledRingsValid, !enable_o || rings_ok)
  `NELSSA_ASSERT(EnabledRingsStill, !(enable_o && $past(enable_o)) ||
                                    $stable({sq_base_o, sq_size_o, cq_base_o, cq_size_o,
                                             region_base_o, region_limit_o}))
endmodule
