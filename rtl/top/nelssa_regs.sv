// Register block of a PNM device (CXL.io MMIO): the map of driver/regs.py through the generated
// nelssa_dev_pkg. Reads of unmapped offsets return UNMAPPED_VALUE; writes to read-only or
// unmapped offsets are ignored; both are counted. Reading a *_LO register latches its *_HI
// partner for the next read of that HI. Writing SQ_SIZE or CQ_SIZE empties that ring. A write
// to SQ_TAIL is a doorbell, to CQ_HEAD the host's progress: each is taken only if it names an
// entry of its ring (counted and ignored otherwise). The ring registers (bases, sizes, region)
// take writes only while the device is disabled and idle, and an enable only if they describe
// valid rings inside the region and device memory (driver/regs.ring_problem); otherwise the
// write is refused and counted, so the rings cannot move under the command queue. A request
// with an undefined opcode is answered RSP_OPCODE_ERROR (all-ones data) and counted.
`include "nelssa_assert.svh"

module nelssa_regs
  import nelssa_dev_pkg::*;
#(
  parameter logic [31:0] Caps     = 32'h0,          // CAPS value (driver/regs.pack_caps)
  parameter logic [31:0] BuildId  = 32'h0,          // BUILD_ID value (bitstream build id)
  parameter longint      MemBytes = 64'd1 << 36     // device memory bytes
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  // MMIO requests and read responses
  input  logic        mmio_valid_i,
  output logic        mmio_ready_o,
  input  mmio_req_t   mmio_i,            // an opcode not in mmio_opcode_e is answered an error
  output logic        rsp_valid_o,
  input  logic        rsp_ready_i,
  output mmio_rsp_t   rsp_o,
  // to the command path
  output logic        enable_o,
  output logic [63:0] sq_base_o,
  output logic [31:0] sq_size_o,
  output logic [31:0] sq_tail_o,
  output logic [63:0] cq_base_o,
  output logic [31:0] cq_size_o,
  output logic [31:0] cq_head_o,
  output logic [63:0] region_base_o,
  output logic [63:0] region_limit_o,
  output logic        sq_reset_o,        // SQ_SIZE written: the ring starts over
  output logic        cq_reset_o,        // CQ_SIZE written: the ring starts over
  // from the device
  input  logic [31:0] sq_head_i,
  input  logic [31:0] cq_tail_i,
  input  logic        idle_i,
  input  logic        err_desc_i,        // pulses: one count each
  input  logic        err_mem_i,
  input  logic        err_opcode_i,      // the CXL.mem slave answered an undefined opcode
  input  logic        desc_done_i,
  input  logic        busy_i,            // a descriptor is in flight this cycle
  input  logic [15:0] bytes_read_i       // bytes the engines read this cycle
);
  logic [31:0] control_q, sq_size_q, sq_tail_q, cq_size_q, cq_head_q;
  logic [63:0] sq_base_q, cq_base_q, region_base_q, region_limit_q;
  logic [31:0] err_desc_q, err_ro_q, err_unmapped_q, err_mem_q, err_doorbell_q, desc_done_q;
  logic [31:0] err_ring_q, err_opcode_q;
  logic        ring_err_q;                // STATUS[2]: the last enable was refused
  logic [63:0] cycles_q, busy_q, bytes_q;
  logic        latch_valid_q;
  logic [11:0] latch_off_q;
  logic [31:0] latch_q;
  logic        rsp_valid_q;
  logic [15:0] rsp_tag_q;
  logic [7:0]  rsp_status_q;
  logic [31:0] rsp_data_q;

  // ---- the rings the registers describe (driver/regs.ring_problem) ---------------------------
  // a span inside [lo, hi) with no sum that could wrap 64 bits
  function automatic logic span_inside(logic [63:0] base, logic [63:0] len, logic [63:0] lo,
                                  logic [63:0] hi);
    return base >= lo && base <= hi && len <= hi - base;
  endfunction
  function automatic logic size_ok(logic [31:0] n);
    return n >= 32'd2 && n <= 32'(RING_MAX_ENTRIES) && (n & (n - 32'd1)) == '0;
  endfunction

  logic [63:0] region_hi;
  logic        rings_ok, take, is_read, is_write, bad_opcode;
  assign region_hi = (region_limit_q < 64'(MemBytes)) ? region_limit_q : 64'(MemBytes);
  assign rings_ok = size_ok(sq_size_q) && size_ok(cq_size_q) && sq_base_q[5:0] == '0 &&
                    cq_base_q[5:0] == '0 &&
                    span_inside(sq_base_q, 64'(sq_size_q) * DESC_BYTES, region_base_q,
                                region_hi) &&
                    span_inside(cq_base_q, 64'(cq_size_q) * COMPLETION_BYTES, region_base_q,
                                region_hi);
  assign take = mmio_valid_i && mmio_ready_o;
  assign is_read = mmio_i.opcode == 8'(MMIO_READ);
  assign is_write = mmio_i.opcode == 8'(MMIO_WRITE);
  assign bad_opcode = !is_read && !is_write;

  // ---- decode ----------------------------------------------------------------------------------
  logic        mapped, read_only, is_doorbell, is_ring, doorbell_ok, cq_head_ok, ring_frozen;
  logic        enable_refused;
  logic [31:0] rdata;
  logic        has_hi;
  logic [11:0] hi_off;
  logic [31:0] hi_value;
  logic [11:0] off;

  assign off = mmio_i.offset[11:0];

  always_comb begin
    mapped = mmio_i.offset < 32'(REG_WINDOW_BYTES);
    read_only = 1'b1;
    is_doorbell = 1'b0;
    is_ring = 1'b0;
    has_hi = 1'b0;
    hi_off = '0;
    hi_value = '0;
    rdata = UNMAPPED_VALUE;
    unique case (off)
      REG_MAGIC:              rdata = DEVICE_MAGIC;
      REG_VERSION:            rdata = DEVICE_VERSION;
      REG_CAPS:               rdata = Caps;
      REG_IFACE_HASH:         rdata = IFACE_HASH;
      REG_BUILD_ID:           rdata = BuildId;
      REG_MEM_SIZE_LO: begin
        rdata = MemBytes[31:0];
        {has_hi, hi_off, hi_value} = {1'b1, REG_MEM_SIZE_HI, MemBytes[63:32]};
      end
      REG_MEM_SIZE_HI:        rdata = MemBytes[63:32];
      REG_CONTROL:            {rdata, read_only} = {control_q, 1'b0};
      REG_STATUS:             rdata = {29'b0, ring_err_q, control_q[0], idle_i};
      REG_SQ_BASE_LO: begin
        {rdata, read_only, is_ring} = {sq_base_q[31:0], 2'b01};
        {has_hi, hi_off, hi_value} = {1'b1, REG_SQ_BASE_HI, sq_base_q[63:32]};
      end
      REG_SQ_BASE_HI:         {rdata, read_only, is_ring} = {sq_base_q[63:32], 2'b01};
      REG_SQ_SIZE:            {rdata, read_only, is_ring} = {sq_size_q, 2'b01};
      REG_SQ_TAIL:            {rdata, read_only, is_doorbell} = {sq_tail_q, 1'b0, 1'b1};
      REG_SQ_HEAD:            rdata = sq_head_i;
      REG_CQ_BASE_LO: begin
        {rdata, read_only, is_ring} = {cq_base_q[31:0], 2'b01};
        {has_hi, hi_off, hi_value} = {1'b1, REG_CQ_BASE_HI, cq_base_q[63:32]};
      end
      REG_CQ_BASE_HI:         {rdata, read_only, is_ring} = {cq_base_q[63:32], 2'b01};
      REG_CQ_SIZE:            {rdata, read_only, is_ring} = {cq_size_q, 2'b01};
      REG_CQ_HEAD:            {rdata, read_only} = {cq_head_q, 1'b0};
      REG_CQ_TAIL:            rdata = cq_tail_i;
      REG_REGION_BASE_LO: begin
        {rdata, read_only, is_ring} = {region_base_q[31:0], 2'b01};
        {has_hi, hi_off, hi_value} = {1'b1, REG_REGION_BASE_HI, region_base_q[63:32]};
      end
      REG_REGION_BASE_HI:     {rdata, read_only, is_ring} = {region_base_q[63:32], 2'b01};
      REG_REGION_LIMIT_LO: begin
        {rdata, read_only, is_ring} = {region_limit_q[31:0], 2'b01};
        {has_hi, hi_off, hi_value} = {1'b1, REG_REGION_LIMIT_HI, region_limit_q[63:32]};
      end
      REG_REGION_LIMIT_HI:    {rdata, read_only, is_ring} = {region_limit_q[63:32], 2'b01};
      REG_ERR_DESC:           rdata = err_desc_q;
      REG_ERR_RO_WRITE:       rdata = err_ro_q;
      REG_ERR_UNMAPPED:       rdata = err_unmapped_q;
      REG_ERR_MEM:            rdata = err_mem_q;
      REG_ERR_DOORBELL:       rdata = err_doorbell_q;
      REG_ERR_RING:           rdata = err_ring_q;
      REG_ERR_OPCODE:         rdata = err_opcode_q;
      REG_PERF_CYCLES_LO: begin
        rdata = cycles_q[31:0];
        {has_hi, hi_off, hi_value} = {1'b1, REG_PERF_CYCLES_HI, cycles_q[63:32]};
      end
      REG_PERF_CYCLES_HI:     rdata = cycles_q[63:32];
      REG_PERF_BUSY_LO: begin
        rdata = busy_q[31:0];
        {has_hi, hi_off, hi_value} = {1'b1, REG_PERF_BUSY_HI, busy_q[63:32]};
      end
      REG_PERF_BUSY_HI:       rdata = busy_q[63:32];
      REG_PERF_BYTES_READ_LO: begin
        rdata = bytes_q[31:0];
        {has_hi, hi_off, hi_value} = {1'b1, REG_PERF_BYTES_READ_HI, bytes_q[63:32]};
      end
      REG_PERF_BYTES_READ_HI: rdata = bytes_q[63:32];
      REG_PERF_DESC_DONE:     rdata = desc_done_q;
      default:                mapped = 1'b0;
    endcase
    // an offset beyond the window whose low bits name a register is unmapped: no latch
    if (!mapped) {rdata, has_hi} = {UNMAPPED_VALUE, 1'b0};
    else if (latch_valid_q && latch_off_q == off) rdata = latch_q;
    // a doorbell (and the host's completion head) names an entry of its ring
    doorbell_ok = mmio_i.value < sq_size_q;
    cq_head_ok = mmio_i.value < cq_size_q;
    // the rings hold still while the command queue may use them
    ring_frozen = control_q[0] || !idle_i;
    enable_refused = mmio_i.value[0] && !rings_ok;
  end

  // a read waits until the last read's response has left
  assign mmio_ready_o = !rsp_valid_q || rsp_ready_i;
  assign rsp_valid_o = rsp_valid_q;
  assign rsp_o = '{tag: rsp_tag_q, status: rsp_status_q, value: rsp_data_q};

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      control_q <= '0;
      sq_base_q <= '0;
      sq_size_q <= '0;
      sq_tail_q <= '0;
      cq_base_q <= '0;
      cq_size_q <= '0;
      cq_head_q <= '0;
      region_base_q <= '0;
      region_limit_q <= '0;
      err_desc_q <= '0;
      err_ro_q <= '0;
      err_unmapped_q <= '0;
      err_mem_q <= '0;
      err_doorbell_q <= '0;
      err_ring_q <= '0;
      err_opcode_q <= '0;
      ring_err_q <= 1'b0;
      desc_done_q <= '0;
      cycles_q <= '0;
      busy_q <= '0;
      bytes_q <= '0;
      latch_valid_q <= 1'b0;
      latch_off_q <= '0;
      latch_q <= '0;
      rsp_valid_q <= 1'b0;
      rsp_tag_q <= '0;
      rsp_status_q <= '0;
      rsp_data_q <= '0;
    end else begin
      cycles_q <= cycles_q + 1;
      if (busy_i) busy_q <= busy_q + 1;
      bytes_q <= bytes_q + 64'(bytes_read_i);
      if (err_desc_i) err_desc_q <= err_desc_q + 1;
      if (err_mem_i) err_mem_q <= err_mem_q + 1;
      err_opcode_q <= err_opcode_q + 32'(err_opcode_i) + 32'(take && bad_opcode);
      if (desc_done_i) desc_done_q <= desc_done_q + 1;
      if (rsp_valid_q && rsp_ready_i) rsp_valid_q <= 1'b0;
      if (take && bad_opcode) begin
        rsp_valid_q <= 1'b1;
        rsp_tag_q <= mmio_i.tag;
        rsp_status_q <= 8'(RSP_OPCODE_ERROR);
        rsp_data_q <= UNMAPPED_VALUE;
      end else if (take) begin
        if (is_read) begin
          rsp_valid_q <= 1'b1;
          rsp_tag_q <= mmio_i.tag;
          rsp_status_q <= 8'(RSP_OK);
          rsp_data_q <= rdata;
          if (!mapped) err_unmapped_q <= err_unmapped_q + 1;
          if (has_hi) begin
            latch_valid_q <= 1'b1;
            latch_off_q <= hi_off;
            latch_q <= hi_value;
          end else if (mapped && latch_valid_q && latch_off_q == off) begin
            latch_valid_q <= 1'b0;
          end
        end else if (!mapped) begin
          err_unmapped_q <= err_unmapped_q + 1;
        end else if (read_only) begin
          err_ro_q <= err_ro_q + 1;
        end else if (is_doorbell) begin
          if (doorbell_ok) sq_tail_q <= mmio_i.value;
          else err_doorbell_q <= err_doorbell_q + 1;
        end else if ((is_ring && ring_frozen) || (off == REG_CONTROL && enable_refused)) begin
          err_ring_q <= err_ring_q + 1;
          if (!is_ring) ring_err_q <= 1'b1;
        end else if (off == REG_CQ_HEAD && !cq_head_ok) begin
          err_doorbell_q <= err_doorbell_q + 1;
        end else begin
          unique case (off)
            REG_CONTROL: begin
              control_q <= mmio_i.value;
              ring_err_q <= 1'b0;
            end
            REG_SQ_BASE_LO:      sq_base_q[31:0] <= mmio_i.value;
            REG_SQ_BASE_HI:      sq_base_q[63:32] <= mmio_i.value;
            REG_SQ_SIZE: begin
              sq_size_q <= mmio_i.value;
              sq_tail_q <= '0;
            end
            REG_CQ_BASE_LO:      cq_base_q[31:0] <= mmio_i.value;
            REG_CQ_BASE_HI:      cq_base_q[63:32] <= mmio_i.value;
            REG_CQ_SIZE: begin
              cq_size_q <= mmio_i.value;
              cq_head_q <= '0;
            end
            REG_CQ_HEAD:         cq_head_q <= mmio_i.value;
            REG_REGION_BASE_LO:  region_base_q[31:0] <= mmio_i.value;
            REG_REGION_BASE_HI:  region_base_q[63:32] <= mmio_i.value;
            REG_REGION_LIMIT_LO: region_limit_q[31:0] <= mmio_i.value;
            REG_REGION_LIMIT_HI: region_limit_q[63:32] <= mmio_i.value;
            default: ;
          endcase
        end
      end
    end
  end

  assign enable_o = control_q[0];

  // ---- protocol rules ---------------------------------------------------------------------------
  // the host offers a request until it is taken; a response is held until taken
  `NELSSA_ASSERT_HOLD(MmioHeld, mmio_valid_i, mmio_ready_o, mmio_i)
  `NELSSA_ASSERT_HOLD(RspHeld, rsp_valid_o, rsp_ready_i, rsp_o)
  // enabled rings are valid rings inside the region and hold still
  `NELSSA_ASSERT(EnabledRingsValid, !enable_o || rings_ok)
  `NELSSA_ASSERT(EnabledRingsStill, !(enable_o && $past(enable_o)) ||
                                    $stable({sq_base_o, sq_size_o, cq_base_o, cq_size_o,
                                             region_base_o, region_limit_o}))
  assign sq_base_o = sq_base_q;
  assign sq_size_o = sq_size_q;
  assign sq_tail_o = sq_tail_q;
  assign cq_base_o = cq_base_q;
  assign cq_size_o = cq_size_q;
  assign cq_head_o = cq_head_q;
  assign region_base_o = region_base_q;
  assign region_limit_o = region_limit_q;
  // a ring size write that is taken starts that ring over
  assign sq_reset_o = take && is_write && mapped && off == REG_SQ_SIZE && !ring_frozen;
  assign cq_reset_o = take && is_write && mapped && off == REG_CQ_SIZE && !ring_frozen;
endmodule
