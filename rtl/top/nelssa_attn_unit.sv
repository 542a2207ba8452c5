// One attention unit of the command path: executes an ATTN descriptor on its own memory port.
// The checks run in the order of hw/model/device_exec.py, the first failing one deciding the
// status: the descriptor's fields (its spans inside the region, its output clear of both
// rings); then all selected ids (read from memory); then, from the directory entries of the
// selected clusters, all token counts, then per cluster in order its alignment and region.
// Only then does it stream Q and every cluster's K and V rows into the engine (in address
// order, through the reorder buffer of nelssa_line_reader) and write the result beats (O, then
// LSE) to out_addr. A failed descriptor writes nothing.
// Its buffers (the selected ids, the directory entries) are RAMs with one write and one
// registered read port (block RAM on an FPGA). Each read is made a cycle ahead, at the index
// its reader holds the next cycle, so the stream keeps the cycles of an asynchronous read.
`include "nelssa_assert.svh"

module nelssa_attn_unit
  import nelssa_dev_pkg::*;
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned AddrW            = 40,   // device-memory address width (7..64)
  parameter int unsigned MaxIds           = 4096, // most clusters a descriptor (MAX_IDS): 2..65534
  parameter int unsigned HeadDim          = 128,  // engine: largest head_dim
  parameter int unsigned NumQHeads        = 8,    // engine: largest GQA group
  parameter int unsigned MaxClusterTokens = 64,   // engine: largest cluster
  parameter int unsigned ReadDepth        = 128,  // reads in flight (covers the memory latency)
  parameter int unsigned Lanes            = MEM_LANES, // memory read-data lanes in use
  // the engine's arithmetic units' latencies (nelssa_attn_engine): cycles, 0..15, 0 combinational
  parameter int unsigned Bf16MulLatency   = 0,    // engine: bf16 x bf16 multipliers
  parameter int unsigned AddLatency       = 0,    // engine: fp32 adders
  parameter int unsigned MulLatency       = 0,    // engine: fp32 multipliers
  parameter int unsigned Exp2Latency      = 0,    // engine: exp2
  parameter int unsigned Log2Latency      = 0,    // engine: log2
  parameter int unsigned RecipLatency     = 0,    // engine: reciprocal
  parameter int unsigned ComputeLanes     = 32    // engine: lanes computed a cycle (1..32)
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  // descriptor
  input  logic              start_i,
  input  logic [DESC_BYTES*8-1:0] desc_i,        // the 64-byte descriptor, byte k in bits [8k+7:8k]
  input  logic [63:0]       region_lo_i,   // region base
  input  logic [63:0]       region_hi_i,   // min(region limit, memory size): <= 2^AddrW
  input  logic [1:0][63:0]  ring_lo_i,     // the submission and completion rings' first
  input  logic [1:0][63:0]  ring_hi_i,     // bytes and ends: no output may overlap them
  output logic              busy_o,
  output logic              done_o,
  output logic [7:0]        status_o,
  // memory port
  output logic              mem_valid_o,
  input  logic              mem_ready_i,
  output mem_req_t          mem_o,
  input  logic              mem_cpl_i,
  input  logic [MEM_LANES-1:0]                rd_valid_i,
  input  logic [MEM_LANES-1:0][MEM_TAG_W-1:0] rd_tag_i,
  input  logic [MEM_LANES-1:0][LINE_W-1:0]    rd_data_i,
  output logic              line_read_o     // a read request left this cycle (for counters)
);
  localparam int unsigned IDW = $clog2(MaxIds);

  // Parameter checks: what the unit itself relies on (the engine and the line reader check the
  // parameters passed to them: the head geometry, latencies and compute lanes; ReadDepth, Lanes)
  if (AddrW < 7 || AddrW > 64) begin : gen_check_addr
    $error("nelssa_attn_unit: AddrW must be 7..64 (a K/V line address is AddrW - 6 bits)");
  end
  if (MaxIds < 2 || MaxIds > 65534) begin : gen_check_ids
    $error("nelssa_attn_unit: MaxIds must be 2..65534 (a 16-bit num_ids above it is refused)");
  end
  if (MaxClusterTokens < 1 || MaxClusterTokens > 255) begin : gen_check_tokens
    $error("nelssa_attn_unit: MaxClusterTokens must be in 1..255 (the engine's 8-bit count)");
  end
  if (NumQHeads < 1 || NumQHeads > 15) begin : gen_check_qheads
    $error("nelssa_attn_unit: NumQHeads must be in 1..15 (the engine's 4-bit count)");
  end

  typedef enum logic [3:0] {
    StIdle, StIds, StDir, StRun, StWait, StDrain, StDone
  } state_e;

  // descriptor fields (driver/formats.py DESCRIPTOR)
  function automatic logic [63:0] field(logic [511:0] d, int off, int bytes);
    logic [63:0] v = '0;
    // verilator unroll_full
    for (int b = 0; b < 8; b++) if (b < bytes) v[8*b +: 8] = d[8*(off+b) +: 8];
    return v;
  endfunction

  state_e       state_q, state_d;
  logic [7:0]   status_q;
  logic [7:0]   q_heads_q;
  logic [15:0]  head_dim_q, num_ids_q;
  logic [31:0]  num_clusters_q, scale_q;
  logic [63:0]  q_addr_q, dir_addr_q, ids_addr_q, out_addr_q;
  logic [63:0]  lo_q, hi_q;

  // the selected ids as the lines they arrive in, and the directory entries as they are
  // checked: RAMs (one write a cycle, one registered read each). A read of the entry written
  // on the same edge is never used (no_rw_check: yosys adds no logic to define it)
  localparam int unsigned ID_LINES = (MaxIds + 15) / 16;
  localparam int unsigned ILW = (ID_LINES > 1) ? $clog2(ID_LINES) : 1;
  localparam int unsigned TokW = $clog2(MaxClusterTokens + 1);  // a checked token count
  localparam int unsigned KvW = AddrW - 6;  // a checked K/V address: its line, in AddrW bits
  (* no_rw_check *) logic [511:0] id_lines_q [ID_LINES];  // the ids (the directory reads)
  (* no_rw_check *) logic [31:0] id_lo_q [ID_LINES];  // each id's low 2 bits: its entry's place
  (* no_rw_check *) logic [TokW+KvW-1:0] ent_q [MaxIds];  // per cluster {tokens, K/V line}
  (* no_rw_check *) logic [TokW-1:0] tok_q [MaxIds];  // per cluster, its tokens (the engine's)
  logic [31:0]      kv_sum_q;  // KV lines of the clusters read from the directory so far
  // the registered reads, and id 0 (read the cycle its line is written, when that is the
  // only line)
  logic [511:0]     gen_line_q;             // the ids' line of the generator's next id
  logic [31:0]      use_lo_q;               // the low bits' line of the consumer's next entry
  logic [TokW+KvW-1:0] ent_rd_q;            // the entry of the generator's next cluster
  logic [TokW-1:0]  tok_rd_q;               // the tokens of the engine's next cluster
  logic [31:0]      id0_q;
  logic [31:0]      gen_j_next;
  logic [IDW-1:0]   use_j_next, clu_next;
  logic [IDW-1:0]   ent_raddr;
  logic [63:0]      cur_kv;                 // the generator's cluster's K/V address
  logic [15:0]      cur_tok;                // and its tokens
  logic [5:0]       dir_off;
  logic [79:0]      dir_ent;
  logic             id_bad_q, len_bad_q;
  logic [7:0]       first_fail_q;

  // address generator and consumer counters
  logic [31:0]  gen_i_q, gen_j_q;   // generator: line within item, item index
  logic [31:0]  use_i_q, use_j_q;   // consumer
  logic         gen_done_q;
  logic [31:0]  out_beat_q, writes_q, cpls_q;
  logic         engine_done_q;

  // ---- line reader -----------------------------------------------------------------------------
  logic             wr_pending;  // a result beat waits for the port (writes go first)
  logic             ra_valid, ra_ready, rd_out_valid, rd_out_ready, reader_idle;
  logic [AddrW-1:0] ra_addr;
  logic [511:0]     rd_out_data;
  logic             rmem_valid;
  logic [AddrW-1:0] rmem_addr;
  logic [15:0]      rmem_tag;

  nelssa_line_reader #(
    .AddrW(AddrW),
    .Depth(ReadDepth),
    .Lanes(Lanes)
  ) u_reader (
    .clk_i       (clk_i),
    .rst_ni      (rst_ni),
    .addr_valid_i(ra_valid),
    .addr_ready_o(ra_ready),
    .addr_i      (ra_addr),
    .mem_valid_o (rmem_valid),
    .mem_ready_i (mem_ready_i && !wr_pending),
    .mem_addr_o  (rmem_addr),
    .mem_tag_o   (rmem_tag),
    .rd_valid_i  (rd_valid_i),
    .rd_tag_i    (rd_tag_i),
    .rd_data_i   (rd_data_i),
    .out_valid_o (rd_out_valid),
    .out_ready_i (rd_out_ready),
    .out_data_o  (rd_out_data),
    .idle_o      (reader_idle)
  );

  // ---- engine ------------------------------------------------------------------------------------
  logic        eng_cmd_valid, eng_cmd_ready, clu_valid, clu_ready, kv_valid, kv_ready, kv_last;
  logic        res_valid, res_ready, res_last, eng_done, eng_busy;
  logic [BEAT_W-1:0] res_data;
  status_e     eng_status;
  logic        cmd_sent_q;
  logic [31:0] clu_sent_q;
  logic [31:0] kv_beats_q, kv_total_q;

  nelssa_attn_engine #(
    .HeadDim         (HeadDim),
    .NumQHeads       (NumQHeads),
    .MaxClusterTokens(MaxClusterTokens),
    .Bf16MulLatency  (Bf16MulLatency),
    .AddLatency      (AddLatency),
    .MulLatency      (MulLatency),
    .Exp2Latency     (Exp2Latency),
    .Log2Latency     (Log2Latency),
    .RecipLatency    (RecipLatency),
    .ComputeLanes    (ComputeLanes)
  ) u_engine (
    .clk_i             (clk_i),
    .rst_ni            (rst_ni),
    .cmd_valid_i       (eng_cmd_valid),
    .cmd_ready_o       (eng_cmd_ready),
    .cmd_head_dim_i    (head_dim_q[7:0]),
    .cmd_num_qheads_i  (q_heads_q[3:0]),
    .cmd_num_clusters_i(num_ids_q),
    .cmd_scale_i       (scale_q),
    .clu_valid_i       (clu_valid),
    .clu_ready_o       (clu_ready),
    .clu_tokens_i      (8'(tok_rd_q)),
    .kv_valid_i        (kv_valid),
    .kv_ready_o        (kv_ready),
    .kv_data_i         (rd_out_data),
    .kv_last_i         (kv_last),
    .res_valid_o       (res_valid),
    .res_ready_i       (res_ready),
    .res_data_o        (res_data),
    .res_last_o        (res_last),
    .done_o            (eng_done),
    .status_o          (eng_status),
    .busy_o            (eng_busy)
  );

  // ---- sizes -------------------------------------------------------------------------------------
  logic [31:0] q_lines, id_lines, row_bytes;
  assign row_bytes = 32'(head_dim_q) * 2;
  assign q_lines = (32'(q_heads_q) * row_bytes) >> 6;
  assign id_lines = (32'(num_ids_q) * 4 + 63) >> 6;
  // the descriptor's ids from line use_i_q on (StIds: use_i_q < id_lines <= 4096)
  logic [16:0] ids_left;
  assign ids_left = {1'b0, num_ids_q} - {1'b0, use_i_q[11:0], 4'd0};

  function automatic logic [31:0] kv_lines(logic [15:0] tokens, logic [31:0] row);
    return (32'(tokens) * row * 2) >> 6;
  endfunction

  // ---- static checks of the descriptor ----------------------------------------------------------
  // The checks' arithmetic is SW bits wide: hi <= 2^AddrW < 2^SW (region_hi_i's contract), so
  // a base, length or lo with a bit at or above SW lies beyond hi, and below that every sum
  // and comparison is exact (what 64 bits would give, at two thirds of the logic).
  localparam int unsigned SW = (AddrW < 64) ? AddrW + 1 : 64;
  function automatic logic beyond(logic [63:0] v);  // v >= 2^SW
    return (v >> SW) != '0;
  endfunction

  // a span inside [lo, hi), with no sum that could wrap (an address a few KB below 2^64 would
  // otherwise pass `addr + len > hi`)
  function automatic logic span_inside(logic [63:0] base, logic [63:0] len, logic [63:0] lo,
                                       logic [SW-1:0] h);
    logic [SW-1:0] b;
    b = base[SW-1:0];
    if (beyond(base) || beyond(len) || beyond(lo)) return 1'b0;
    return b >= lo[SW-1:0] && b <= h && len[SW-1:0] <= h - b;
  endfunction

  logic [7:0] static_status;
  logic       out_on_ring;
  logic [SW-1:0] out_end;
  logic [63:0] d_q, d_dir, d_ids, d_out;
  logic [15:0] d_hd, d_nids;
  logic [7:0]  d_qh;
  logic [31:0] d_ncl;

  always_comb begin
    automatic logic [63:0] q_len, dir_len, ids_len, out_len, lo;
    automatic logic [SW-1:0] hi;
    d_hd = field(desc_i, DESC_HEAD_DIM_OFF, DESC_HEAD_DIM_BYTES)[15:0];
    d_qh = field(desc_i, DESC_Q_HEADS_OFF, DESC_Q_HEADS_BYTES)[7:0];
    d_nids = field(desc_i, DESC_NUM_IDS_OFF, DESC_NUM_IDS_BYTES)[15:0];
    d_ncl = field(desc_i, DESC_NUM_CLUSTERS_OFF, DESC_NUM_CLUSTERS_BYTES)[31:0];
    d_q = field(desc_i, DESC_Q_ADDR_OFF, DESC_Q_ADDR_BYTES);
    d_dir = field(desc_i, DESC_DIR_ADDR_OFF, DESC_DIR_ADDR_BYTES);
    d_ids = field(desc_i, DESC_IDS_ADDR_OFF, DESC_IDS_ADDR_BYTES);
    d_out = field(desc_i, DESC_OUT_ADDR_OFF, DESC_OUT_ADDR_BYTES);
    q_len = 64'(d_qh) * 64'(d_hd) * 2;
    dir_len = 64'(d_ncl) * 16;
    ids_len = 64'(d_nids) * 4;
    out_len = 64'(d_qh) * 64'(d_hd) * 4 + ((64'(d_qh) * 4 + 63) & ~64'd63);
    lo = region_lo_i;
    hi = region_hi_i[SW-1:0];
    // (only looked at once the output lies in the region: below hi, its end too)
    out_end = d_out[SW-1:0] + out_len[SW-1:0];
    out_on_ring = 1'b0;
    // verilator unroll_full
    for (int r = 0; r < 2; r++) begin
      if ((beyond(ring_hi_i[r]) || d_out[SW-1:0] < ring_hi_i[r][SW-1:0]) &&
          !beyond(ring_lo_i[r]) && ring_lo_i[r][SW-1:0] < out_end) out_on_ring = 1'b1;
    end
    static_status = 8'(DESC_OK);
    if (field(desc_i, DESC_OPCODE_OFF, DESC_OPCODE_BYTES)[7:0] != 8'(OP_ATTN))
      static_status = 8'(DESC_ERR_OPCODE);
    else if (field(desc_i, DESC_FLAGS_OFF, DESC_FLAGS_BYTES) != 0 ||
             field(desc_i, DESC_RESERVED0_OFF, DESC_RESERVED0_BYTES) != 0 ||
             desc_i[8*DESC_RESERVED1_OFF +: 8*DESC_RESERVED1_BYTES] != '0)
      static_status = 8'(DESC_ERR_RESERVED);
    else if (!((d_hd == 16'd64 && HeadDim >= 64) || (d_hd == 16'd128 && HeadDim >= 128)))
      static_status = 8'(DESC_ERR_HEAD_DIM);
    else if (d_qh == 0 || 32'(d_qh) > NumQHeads) static_status = 8'(DESC_ERR_QHEADS);
    else if (d_nids == 0 || 32'(d_nids) > MaxIds || d_ncl == 0) static_status = 8'(DESC_ERR_COUNT);
    else if (d_q[5:0] != 0 || d_dir[5:0] != 0 || d_ids[5:0] != 0 || d_out[5:0] != 0)
      static_status = 8'(DESC_ERR_ALIGN);
    else if (!span_inside(d_q, q_len, lo, hi) || !span_inside(d_dir, dir_len, lo, hi) ||
             !span_inside(d_ids, ids_len, lo, hi) || !span_inside(d_out, out_len, lo, hi) ||
             out_on_ring)
      static_status = 8'(DESC_ERR_REGION);
  end

  // ---- address generation, per phase -------------------------------------------------------------
  always_comb begin
    ra_valid = 1'b0;
    ra_addr = '0;
    unique case (state_q)
      StIds: begin
        ra_valid = !gen_done_q;
        ra_addr = AddrW'(ids_addr_q + 64'(gen_i_q) * 64);
      end
      StDir: begin
        automatic logic [31:0] id = (gen_j_q == 0) ? id0_q : gen_line_q[32*gen_j_q[3:0] +: 32];
        automatic logic [63:0] a = dir_addr_q + 64'(id) * 16;
        ra_valid = !gen_done_q && !id_bad_q;  // a bad id ends the descriptor: read no more
        ra_addr = AddrW'(a & ~64'd63);
      end
      StRun: begin
        ra_valid = !gen_done_q;
        if (gen_j_q == 0) ra_addr = AddrW'(q_addr_q + 64'(gen_i_q) * 64);
        else ra_addr = AddrW'(cur_kv + 64'(gen_i_q) * 64);
      end
      default: ;
    endcase
  end

  // ---- buffers ---------------------------------------------------------------------------------
  // each reader's index the next cycle: the generator's and the consumer's ids in StDir (both
  // 0 through StIds), the generator's cluster in StRun (its entry is that less one: 0 is Q),
  // the engine's next cluster
  logic gen_adv, run_adv, dir_take;
  assign gen_adv = state_q == StDir && ra_valid && ra_ready;
  assign dir_take = state_q == StDir && !id_bad_q && rd_out_valid;
  assign run_adv = state_q == StRun && ra_valid && ra_ready &&
                   gen_i_q + 1 == ((gen_j_q == 0) ? q_lines : kv_lines(cur_tok, row_bytes));
  assign gen_j_next = gen_j_q + 32'(gen_adv || run_adv);
  assign use_j_next = use_j_q[IDW-1:0] + IDW'(dir_take);
  assign clu_next = clu_sent_q[IDW-1:0] + IDW'(clu_valid && clu_ready);
  assign ent_raddr = IDW'(gen_j_next - 1);
  assign cur_kv = 64'({ent_rd_q[KvW-1:0], 6'd0});
  assign cur_tok = 16'(ent_rd_q[TokW+KvW-1 -: TokW]);
  // the consumer's directory entry: its offset in the line is its id's low bits times 16
  // (dir_addr is line aligned)
  assign dir_off = {(use_j_q == 0) ? id0_q[1:0] : use_lo_q[2*use_j_q[3:0] +: 2], 4'd0};
  assign dir_ent = rd_out_data[8*dir_off +: 80];

  always_ff @(posedge clk_i) begin  // no reset: RAM
    if (state_q == StIds && rd_out_valid) begin
      automatic logic [31:0] lo;
      // verilator unroll_full
      for (int k = 0; k < 16; k++) lo[2*k +: 2] = rd_out_data[32*k +: 2];
      id_lines_q[ILW'(use_i_q)] <= rd_out_data;
      id_lo_q[ILW'(use_i_q)] <= lo;
      if (use_i_q == 0) id0_q <= rd_out_data[31:0];
    end
    if (dir_take) begin
      ent_q[use_j_q[IDW-1:0]] <= {dir_ent[64 +: TokW], dir_ent[6 +: KvW]};
      tok_q[use_j_q[IDW-1:0]] <= dir_ent[64 +: TokW];
    end
    gen_line_q <= id_lines_q[ILW'(gen_j_next[IDW-1:0] >> 4)];
    use_lo_q <= id_lo_q[ILW'(use_j_next >> 4)];
    ent_rd_q <= ent_q[ent_raddr];
    tok_rd_q <= tok_q[clu_next];
  end

  // ---- data consumption --------------------------------------------------------------------------
  assign eng_cmd_valid = state_q == StRun && !cmd_sent_q;
  assign clu_valid = state_q == StRun && cmd_sent_q && clu_sent_q < 32'(num_ids_q);
  assign kv_valid = state_q == StRun && cmd_sent_q && rd_out_valid;
  assign kv_last = kv_beats_q + 1 == kv_total_q;
  assign rd_out_ready = (state_q == StIds || state_q == StDir || state_q == StDrain) ? 1'b1
                                                                                   : (kv_valid && kv_ready);

  // result beats become line writes
  assign wr_pending = res_valid;
  assign res_ready = mem_ready_i;
  assign mem_valid_o = wr_pending ? 1'b1 : rmem_valid;
  assign mem_o = '{write: wr_pending,
                   addr: 64'(wr_pending ? AddrW'(out_addr_q + 64'(out_beat_q) * 64) : rmem_addr),
                   tag: wr_pending ? 16'(out_beat_q) : rmem_tag, wdata: res_data, wstrb: '1};
  assign line_read_o = !wr_pending && rmem_valid && mem_ready_i;

  assign busy_o = state_q != StIdle;
  assign done_o = state_q == StDone;
  assign status_o = status_q;

  // ---- the phase: descriptor checks, ids, directory, the directory's verdict, the stream (or a
  // drain of the reads in flight after a failed check), done --------------------------------------
  always_comb begin
    state_d = state_q;
    unique case (state_q)
      StIdle: if (start_i) state_d = (static_status != 8'(DESC_OK)) ? StDone : StIds;
      StIds: if (rd_out_valid && use_i_q + 1 == id_lines) state_d = StDir;
      StDir: begin
        if (id_bad_q) state_d = StDrain;
        else if (rd_out_valid && use_j_q + 1 == 32'(num_ids_q)) state_d = StWait;
      end
      StWait: state_d = (len_bad_q || first_fail_q != 0) ? StDrain : StRun;
      StRun: if (engine_done_q && !res_valid && cpls_q == writes_q && reader_idle) state_d = StDone;
      StDrain: if (reader_idle) state_d = StDone;  // no read of this descriptor left
      StDone: state_d = StIdle;
      default: state_d = StIdle;
    endcase
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q <= StIdle;
      status_q <= '0;
      q_heads_q <= '0;
      {head_dim_q, num_ids_q, num_clusters_q, scale_q} <= '0;
      {q_addr_q, dir_addr_q, ids_addr_q, out_addr_q, lo_q, hi_q} <= '0;
      {id_bad_q, len_bad_q, first_fail_q} <= '0;
      {gen_i_q, gen_j_q, use_i_q, use_j_q, gen_done_q} <= '0;
      {out_beat_q, writes_q, cpls_q, engine_done_q} <= '0;
      {cmd_sent_q, clu_sent_q, kv_beats_q, kv_total_q, kv_sum_q} <= '0;
    end else begin
      state_q <= state_d;
      if (mem_valid_o && mem_ready_i && wr_pending) begin
        out_beat_q <= out_beat_q + 1;
        writes_q <= writes_q + 1;
      end
      if (mem_cpl_i) cpls_q <= cpls_q + 1;
      unique case (state_q)
        StIdle: if (start_i) begin
          head_dim_q <= d_hd;
          q_heads_q <= d_qh;
          num_ids_q <= d_nids;
          num_clusters_q <= d_ncl;
          scale_q <= field(desc_i, DESC_SCALE_OFF, DESC_SCALE_BYTES)[31:0];
          q_addr_q <= d_q;
          dir_addr_q <= d_dir;
          ids_addr_q <= d_ids;
          out_addr_q <= d_out;
          lo_q <= region_lo_i;
          hi_q <= region_hi_i;
          {id_bad_q, len_bad_q, first_fail_q} <= '0;
          {gen_i_q, gen_j_q, use_i_q, use_j_q, gen_done_q} <= '0;
          {out_beat_q, writes_q, cpls_q, engine_done_q} <= '0;
          {cmd_sent_q, clu_sent_q, kv_beats_q, kv_sum_q} <= '0;
          status_q <= static_status;
        end
        StIds: begin
          if (ra_valid && ra_ready) begin
            gen_i_q <= gen_i_q + 1;
            if (gen_i_q + 1 == id_lines) gen_done_q <= 1'b1;
          end
          if (rd_out_valid) begin
            // (the line is stored by the buffers' block: words past num_ids are never read)
            // verilator unroll_full
            // (id use_i_q * 16 + k is one of the descriptor's while k < ids_left)
            for (int k = 0; k < 16; k++) begin
              if (17'(k) < ids_left && rd_out_data[32*k +: 32] >= num_clusters_q) begin
                id_bad_q <= 1'b1;
              end
            end
            use_i_q <= use_i_q + 1;
            if (use_i_q + 1 == id_lines) begin
              gen_done_q <= 1'b0;
              {gen_i_q, gen_j_q, use_i_q, use_j_q} <= '0;
            end
          end
        end
        StDir: begin
          if (id_bad_q) begin
            status_q <= 8'(DESC_ERR_CLUSTER_ID);
          end else begin
            if (ra_valid && ra_ready) begin
              gen_j_q <= gen_j_q + 1;
              if (gen_j_q + 1 == 32'(num_ids_q)) gen_done_q <= 1'b1;
            end
            if (rd_out_valid) begin
              automatic logic [63:0] kv = dir_ent[63:0];
              automatic logic [15:0] tok = dir_ent[79:64];
              automatic logic [63:0] len = 64'(tok) * 64'(row_bytes) * 2;
              kv_sum_q <= kv_sum_q + kv_lines(tok, row_bytes);
              if (tok == 0 || 32'(tok) > MaxClusterTokens) len_bad_q <= 1'b1;
              if (first_fail_q == 0) begin
                if (kv[5:0] != 0) first_fail_q <= 8'(DESC_ERR_ALIGN);
                else if (!span_inside(kv, len, lo_q, hi_q[SW-1:0])) first_fail_q <= 8'(DESC_ERR_REGION);
              end
              use_j_q <= use_j_q + 1;
              if (use_j_q + 1 == 32'(num_ids_q)) begin
                gen_done_q <= 1'b0;
                {gen_i_q, gen_j_q, use_i_q, use_j_q} <= '0;
              end
            end
          end
        end
        StWait: begin  // the directory's verdict, then the stream's length
          if (len_bad_q) begin
            status_q <= 8'(DESC_ERR_CLUSTER_LEN);
          end else if (first_fail_q != 0) begin
            status_q <= first_fail_q;
          end else begin
            kv_total_q <= q_lines + kv_sum_q;
          end
        end
        StRun: begin
          if (eng_cmd_valid && eng_cmd_ready) cmd_sent_q <= 1'b1;
          if (clu_valid && clu_ready) clu_sent_q <= clu_sent_q + 1;
          if (kv_valid && kv_ready) kv_beats_q <= kv_beats_q + 1;
          if (ra_valid && ra_ready) begin
            if (run_adv) begin
              gen_i_q <= '0;
              gen_j_q <= gen_j_q + 1;
              if (gen_j_q == 32'(num_ids_q)) gen_done_q <= 1'b1;
            end else begin
              gen_i_q <= gen_i_q + 1;
            end
          end
          if (eng_done) begin
            engine_done_q <= 1'b1;
            if (eng_status != STATUS_OK) status_q <= 8'(DESC_ERR_CLUSTER_LEN);
          end
        end
        default: ;
      endcase
    end
  end

  // ---- protocol rules ---------------------------------------------------------------------------
  // the command queue starts only an idle unit; the memory completes only writes made, and
  // the writes go inside the region, clear of both rings
  `NELSSA_ASSERT_NEVER(StartWhileBusy, start_i && busy_o)
  `NELSSA_ASSERT_NEVER(CplUnasked, mem_cpl_i && cpls_q >= writes_q)
  // the checks' width (SW) relies on the region's end within the address space, and the ids'
  // count on the lines of ids a descriptor has
  `NELSSA_ASSERT_NEVER(RegionBeyondAddr, start_i && AddrW < 64 &&
                                         region_hi_i > (64'd1 << (AddrW % 64)))
  `NELSSA_ASSERT_NEVER(IdLinesBeyond, state_q == StIds && use_i_q >= 32'd4096)
  `NELSSA_ASSERT(WriteInRegion, !(mem_valid_o && mem_o.write) ||
                                (mem_o.addr >= lo_q && mem_o.addr + 64'(LINE_BYTES) <= hi_q))

  // the buffers' reads made a cycle ahead: what each reader uses is the RAM's entry at the
  // index it holds now (the generator's ids line and the consumer's low bits in StDir, past id
  // 0, which id0_q gives; the generator's cluster entry in StRun, past Q; the engine's count)
  `NELSSA_ASSERT(IdsLineReadAhead, !(state_q == StDir && ra_valid && gen_j_q != 0) ||
                                   gen_line_q == id_lines_q[ILW'(gen_j_q[IDW-1:0] >> 4)])
  `NELSSA_ASSERT(IdLowBitsReadAhead, !(dir_take && use_j_q != 0) ||
                                     use_lo_q == id_lo_q[ILW'(use_j_q[IDW-1:0] >> 4)])
  `NELSSA_ASSERT(EntryReadAhead, !(state_q == StRun && ra_valid && gen_j_q != 0) ||
                                 ent_rd_q == ent_q[IDW'(gen_j_q - 1)])
  `NELSSA_ASSERT(TokensReadAhead, !clu_valid || tok_rd_q == tok_q[clu_sent_q[IDW-1:0]])

  // the engine's last-beat flag and busy, and the tag bits above the reorder index, are not
  // needed: beats are counted, and units are busy by their own state
  /* verilator lint_off UNUSEDSIGNAL */
  logic unused;
  assign unused = ^{res_last, eng_busy, rd_tag_i};
  /* verilator lint_on UNUSEDSIGNAL */
endmodule
