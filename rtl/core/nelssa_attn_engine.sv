// Sparse-attention engine of one PNM device: the query heads of one KV head (a GQA group)
// against the selected clusters of that KV head, with online softmax over clusters.
//
// Stream (kv_*): Q rows of every query head, then for each cluster its K rows then its V rows;
// 64-byte beats, lane i (bf16) in bits [16i+15:16i], head_dim/32 beats per row, kv_last_i on
// the final beat. Cluster lengths arrive on clu_* (one entry per cluster, in order); the entry
// of the next cluster is taken early, during the current one.
// Result (res_*): for each query head head_dim/16 beats of normalised O (fp32, lane k in bits
// [32k+31:32k]), then one beat with LSE (fp32, natural log) of head h in bits [32h+31:32h].
// done_o pulses once per command with status_o (nelssa_engine_pkg::status_e).
// A command rejected at acceptance (bad head_dim or query heads, zero clusters) consumes nothing
// from clu_* or kv_*: its producer must not offer a stream for it. Any other error drains both
// channels (the command's cluster entries, the stream up to kv_last_i) before done_o.
//
// The order of floating-point operations is the contract with hw/model/engine.py; see
// docs/numerics.md. Throughput, with every unit combinational (all latencies 0): one beat per
// cycle inside a K or V phase; each cluster costs two stall cycles at its K->V turn (last
// score, softmax set-up); the first cluster one more. With pipelined units (the *Latency
// parameters) the same operations in the same order take longer: the K->V turn waits for the
// last score and the set-up through their pipelines, a V row takes max(beats per row,
// AddLatency) cycles (o and l are loop-carried once per row), and finalisation and output pay
// their units' latencies. hw/model/engine_cycles.py gives every phase's cycles.
`include "nelssa_assert.svh"

module nelssa_attn_engine
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned HeadDim          = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned NumQHeads        = 8,    // largest GQA group (query heads), 1..8
  parameter int unsigned MaxClusterTokens = 64,   // score-buffer depth in tokens, 1..255
  // Cycles from an arithmetic unit's inputs to its result (0: combinational), 0..15 each; the
  // PNM device preset's fp_latency (emu/latency/hardware.py) holds them
  parameter int unsigned Bf16MulLatency   = 0,    // bf16 x bf16 multiplier
  parameter int unsigned AddLatency       = 0,    // fp32 adder
  parameter int unsigned MulLatency       = 0,    // fp32 multiplier
  parameter int unsigned Exp2Latency      = 0,    // exp2
  parameter int unsigned Log2Latency      = 0,    // log2
  parameter int unsigned RecipLatency     = 0     // reciprocal
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  // command
  input  logic              cmd_valid_i,
  output logic              cmd_ready_o,
  input  logic [7:0]        cmd_head_dim_i,      // 64 or 128
  input  logic [3:0]        cmd_num_qheads_i,    // 1..NumQHeads
  input  logic [15:0]       cmd_num_clusters_i,  // >= 1
  input  logic [31:0]       cmd_scale_i,         // fp32 softmax scale, e.g. 1/sqrt(head_dim)
  // cluster lengths, one per cluster
  input  logic              clu_valid_i,
  output logic              clu_ready_o,
  input  logic [7:0]        clu_tokens_i,
  // data beats
  input  logic              kv_valid_i,
  output logic              kv_ready_o,
  input  logic [BEAT_W-1:0] kv_data_i,
  input  logic              kv_last_i,
  // result beats
  output logic              res_valid_o,
  input  logic              res_ready_i,
  output logic [BEAT_W-1:0] res_data_o,
  output logic              res_last_o,
  // completion
  output logic              done_o,
  output status_e           status_o,
  output logic              busy_o
);
  // ---------------------------------------------------------------------------------------------
  // Parameter checks
  if (HeadDim != 64 && HeadDim != 128) begin : gen_check_head_dim
    $error("nelssa_attn_engine: HeadDim must be 64 or 128");
  end
  if (NumQHeads < 1 || NumQHeads > 8) begin : gen_check_qheads
    $error("nelssa_attn_engine: NumQHeads must be in 1..8");
  end
  if (MaxClusterTokens < 1 || MaxClusterTokens > 255) begin : gen_check_tokens
    $error("nelssa_attn_engine: MaxClusterTokens must be in 1..255");
  end
  if (Bf16MulLatency > 15 || AddLatency > 15 || MulLatency > 15 || Exp2Latency > 15 ||
      Log2Latency > 15 || RecipLatency > 15) begin : gen_check_latency
    $error("nelssa_attn_engine: every unit latency must be in 0..15");
  end

  localparam int unsigned HW = (NumQHeads > 1) ? $clog2(NumQHeads) : 1;  // head index width
  localparam int unsigned TW = (MaxClusterTokens > 1) ? $clog2(MaxClusterTokens) : 1;
  localparam int unsigned MAX_BPR = HeadDim / LANES;                     // beats per row
  localparam int unsigned PW = (MAX_BPR > 1) ? $clog2(MAX_BPR) : 1;      // beat-in-row width
  localparam int unsigned OUT_LANES = BEAT_W / 32;                       // fp32 per result beat

  // Pipeline depths (hw/model/engine_cycles.py computes the same)
  localparam int unsigned DOT_LAT   = Bf16MulLatency + $clog2(LANES) * AddLatency;  // beat sum
  localparam int unsigned FOLD_LAT  = (MAX_BPR - 1) * AddLatency;  // a row's beat sums folded
  localparam int unsigned WEIGHT_LAT = AddLatency + Exp2Latency;   // exp2(t - m)
  localparam int unsigned V_LAT     = MulLatency + AddLatency;     // a V beat into o and l
  localparam int unsigned LSE_LAT   = Log2Latency + AddLatency + MulLatency;
  // cycles after the last K beat until the last score is written; set-up; after the last V
  // beat until o and l are written; after the last finalisation issue
  localparam int unsigned KDRAIN_CYC = 1 + DOT_LAT + FOLD_LAT + MulLatency;
  localparam int unsigned SETUP_CYC  = WEIGHT_LAT + 1;
  localparam int unsigned VDRAIN_CYC = V_LAT;
  localparam int unsigned FWAIT_CYC  = (LSE_LAT > RecipLatency) ? LSE_LAT : RecipLatency;
  // an error's drain waits until nothing of the command is left in a pipeline
  localparam int unsigned FLUSH_CYC  = DOT_LAT + FOLD_LAT + MulLatency + WEIGHT_LAT + V_LAT;
  localparam int unsigned CW = 10;  // width of the wait counters

  typedef enum logic [3:0] {
    StIdle, StQ, StClu, StK, StKDrain, StSetup, StV, StVDrain, StFinal, StFinWait, StOut,
    StDrain, StDone
  } state_e;

  // ---------------------------------------------------------------------------------------------
  // Control registers
  state_e      state_q, state_d;
  status_e     status_q, status_d;
  logic [2:0]  bpr_q, bpr_d;                // beats per row: 2 or 4
  logic [3:0]  nq_q, nq_d;                  // query heads of this command
  logic [15:0] nclu_q, nclu_d;              // clusters of this command
  logic [15:0] clu_popped_q, clu_popped_d;  // cluster entries consumed so far
  logic [7:0]  ntok_q, ntok_d;              // tokens of the current cluster
  logic [7:0]  tok_q, tok_d;                // token within the cluster (K or V phase)
  logic [1:0]  part_q, part_d;              // beat within the row
  logic [3:0]  head_q, head_d;              // query head (Q load, finalisation, output)
  logic [2:0]  obeat_q, obeat_d;            // result beat within a head
  logic        last_seen_q, last_seen_d;    // kv_last_i consumed (drain)
  logic [CW-1:0] wait_q, wait_d;            // cycles left in a waiting state, less one
  logic [CW-1:0] flush_q, flush_d;          // cycles left until the pipelines are empty
  logic [31:0] c_q;            // scale * log2(e)
  logic        c_ready_q;      // c_q holds this command's c

  // Datapath state. Each query head's registers are in gen_head (each lane's output in
  // gen_head.gen_lane), written at constant indices, so synthesis maps them to flip-flops; what
  // the finalisation and the result beats read by head is gathered here.
  logic [31:0] o_head   [NumQHeads][MAX_BPR][LANES];  // unnormalised output
  logic [31:0] m_head   [NumQHeads];                  // running max (log2 domain)
  logic [31:0] l_head   [NumQHeads];                  // running softmax denominator
  logic [31:0] lse_head [NumQHeads];
  logic [31:0] inv_head [NumQHeads];                  // 1/l

  // K pipeline: stage 1 holds the beat sums of a K beat, DOT_LAT + 1 cycles after it was
  // accepted (gen_head's s1_sum_q)
  logic              s1_valid_q, s1_last_row_q;
  logic [TW-1:0]     s1_tok_q;
  logic [PW-1:0]     s1_part_q;

  // Cluster entry taken ahead of time
  logic              next_valid_q, next_valid_d;
  logic [7:0]        next_ntok_q, next_ntok_d;

  // ---------------------------------------------------------------------------------------------
  // Handshakes and positions
  logic kv_fire, clu_fire, res_fire;
  logic v_room;  // a V beat may be taken (the V spacing, below)
  logic row_end, cluster_end, all_popped, final_cluster, prefetch, clu_take, clu_bad;
  logic [7:0] clu_len;

  assign kv_fire       = kv_valid_i && kv_ready_o;
  assign clu_fire      = clu_valid_i && clu_ready_o;
  assign res_fire      = res_valid_o && res_ready_i;
  assign row_end       = (part_q == 2'(bpr_q - 3'd1));
  assign cluster_end   = row_end && (tok_q == ntok_q - 8'd1);
  assign all_popped    = (clu_popped_q == nclu_q);
  assign final_cluster = all_popped && !next_valid_q;  // the current cluster is the last
  // take the next cluster's entry while the current one streams
  assign prefetch      = (state_q == StK || state_q == StKDrain || state_q == StSetup ||
                          state_q == StV) && !next_valid_q && !all_popped;
  // the entry that starts the next cluster: held early, or arriving now in StClu
  assign clu_take      = next_valid_q || clu_fire;
  assign clu_len       = next_valid_q ? next_ntok_q : clu_tokens_i;
  assign clu_bad       = (clu_len == 8'd0) || (32'(clu_len) > MaxClusterTokens);

  // ---------------------------------------------------------------------------------------------
  // Command decode
  logic cmd_hd_ok, cmd_nq_ok;

  assign cmd_hd_ok = (cmd_head_dim_i == 8'd64) || (cmd_head_dim_i == 8'd128 && HeadDim == 128);
  assign cmd_nq_ok = (cmd_num_qheads_i != 4'd0) && (32'(cmd_num_qheads_i) <= NumQHeads);

  // ---------------------------------------------------------------------------------------------
  // Arithmetic. Every floating-point operation is an instance of a unit (rtl/core), 1,381 at
  // HeadDim 128 and 8 heads, so synthesis maps each kind of unit once. A unit's en_i is
  // exactly the condition under which its result is used (Latency cycles later, by a register
  // or a later unit; the enable travels with it): a simulation built with NELSSA_FP_GATED
  // computes only the active phase's units, and the engine's tests also run without it, which
  // shows no other unit output is ever read.
  logic first_row;
  assign first_row = (tok_q == 8'd0);

  logic cmd_take, k_beat, v_beat, setup, setup_go, out_beat, out_issue, out_offer, fin_go;
  assign cmd_take = (state_q == StIdle) && cmd_valid_i;
  assign k_beat   = (state_q == StK) && kv_fire;
  assign v_beat   = (state_q == StV) && kv_fire;
  assign setup    = (state_q == StSetup);
  assign setup_go = setup && (wait_q == CW'(SETUP_CYC - 1));  // the set-up's first cycle
  assign out_beat = out_offer && (head_q != nq_q);  // an O beat (not the LSE beat) computed
  assign fin_go   = (state_q == StFinal);

  logic [PW-1:0] part;      // beat within the row, as an index
  logic [HW-1:0] out_head;  // head being finalised or output
  assign part     = PW'(part_q);
  assign out_head = HW'(head_q);

  // the softmax scale in the log2 domain, c = scale * log2(e)
  logic [31:0] c_d;
  logic        c_load, unused_c;
  nelssa_fp32_mul #(
    .Latency(MulLatency)
  ) u_scale (
    .clk_i,
    .rst_ni,
    .en_i  (cmd_take),
    .a_i   (cmd_scale_i),
    .b_i   (FP32_LOG2E),
    .prod_o(c_d)
  );
  nelssa_pipe #(
    .Width  (1),
    .Latency(MulLatency)
  ) u_c_load (
    .clk_i,
    .rst_ni,
    .en_i(cmd_take),
    .d_i (1'b0),
    .en_o(c_load),
    .q_o (unused_c)
  );

  // K: a beat's position travels beside its dot product; then the row's fold, stage k adding
  // beat k (gen_fold_pos[k].en: the operands of stage k are valid; fold_done: the row folded),
  // then the scale multiplication (sc_*: the score is written)
  logic          dot_en, sc_en;
  logic [TW-1:0] dot_tok, sc_tok;
  logic [PW-1:0] dot_part;
  logic          dot_last;
  logic          fold_go, fold_done;  // a row's fold starts; its folded sum is ready
  logic [TW-1:0] fold_done_tok;

  nelssa_pipe #(
    .Width  (TW + PW + 1),
    .Latency(DOT_LAT)
  ) u_dot_pos (
    .clk_i,
    .rst_ni,
    .en_i(k_beat),
    .d_i ({TW'(tok_q), part, row_end}),
    .en_o(dot_en),
    .q_o ({dot_tok, dot_part, dot_last})
  );
  assign fold_go = s1_valid_q && s1_last_row_q;
  // (each stage's signals in its own scope: one vector driven from several stages reads to
  // the simulator as a loop)
  for (genvar k = 1; k < MAX_BPR; k++) begin : gen_fold_pos
    logic          en, out_en;  // stage k's operands valid; its sum valid
    logic          busy;        // this stage or one before holds a row
    logic [TW-1:0] tok, out_tok;
    if (k == 1) begin : gen_first
      assign en   = fold_go;
      assign tok  = s1_tok_q;
      assign busy = en;
    end else begin : gen_next
      assign en   = gen_fold_pos[k-1].out_en;
      assign tok  = gen_fold_pos[k-1].out_tok;
      assign busy = en || gen_fold_pos[k-1].busy;
    end
    nelssa_pipe #(
      .Width  (TW),
      .Latency(AddLatency)
    ) u_pos (
      .clk_i,
      .rst_ni,
      .en_i(en),
      .d_i (tok),
      .en_o(out_en),
      .q_o (out_tok)
    );
  end
  assign fold_done     = gen_fold_pos[MAX_BPR-1].out_en;
  assign fold_done_tok = gen_fold_pos[MAX_BPR-1].out_tok;
  nelssa_pipe #(
    .Width  (TW),
    .Latency(MulLatency)
  ) u_score_pos (
    .clk_i,
    .rst_ni,
    .en_i(fold_done),
    .d_i (fold_done_tok),
    .en_o(sc_en),
    .q_o (sc_tok)
  );

  // Set-up: alpha (one per head) at the set-up's first cycle; then the cluster's weights
  // p_j = exp2(t_j - m), one token a cycle, each written over its score (the scores are not
  // read again): a V row reads its p there, and V starts when alpha and p_0 are written
  logic          wl_active_q, wl_active_d, wl_go, wout_en, alpha_load, unused_alpha;
  logic [7:0]    wl_tok_q, wl_tok_d, wl_idx;
  logic [TW-1:0] wout_tok;
  logic [7:0]    p_cnt_q, p_cnt_d;  // weights of the current cluster written

  assign wl_go  = (setup_go || wl_active_q) && (state_q == StSetup || state_q == StV);
  assign wl_idx = setup_go ? 8'd0 : wl_tok_q;
  always_comb begin
    wl_active_d = wl_active_q && (state_q == StSetup || state_q == StV);
    wl_tok_d    = wl_tok_q;
    if (wl_go) begin
      wl_active_d = (wl_idx != ntok_q - 8'd1);
      wl_tok_d    = wl_idx + 8'd1;
    end
    p_cnt_d = (setup_go ? 8'd0 : p_cnt_q) + 8'(wout_en);
  end
  nelssa_pipe #(
    .Width  (TW),
    .Latency(WEIGHT_LAT)
  ) u_weight_pos (
    .clk_i,
    .rst_ni,
    .en_i(wl_go),
    .d_i (TW'(wl_idx)),
    .en_o(wout_en),
    .q_o (wout_tok)
  );
  nelssa_pipe #(
    .Width  (1),
    .Latency(WEIGHT_LAT)
  ) u_alpha_load (
    .clk_i,
    .rst_ni,
    .en_i(setup_go),
    .d_i (1'b0),
    .en_o(alpha_load),
    .q_o (unused_alpha)
  );

  // V: a beat's part and whether it is its cluster's first row travel to the issue of its adds
  // (vi_*, MulLatency later: p*v and the rescale are ready) and to their results (vo_*)
  logic          vi_en, vi_first, vo_en;
  logic [PW-1:0] vi_part, vo_part;

  nelssa_pipe #(
    .Width  (PW + 1),
    .Latency(MulLatency)
  ) u_v_issue (
    .clk_i,
    .rst_ni,
    .en_i(v_beat),
    .d_i ({part, first_row}),
    .en_o(vi_en),
    .q_o ({vi_part, vi_first})
  );
  nelssa_pipe #(
    .Width  (PW),
    .Latency(AddLatency)
  ) u_v_out (
    .clk_i,
    .rst_ni,
    .en_i(vi_en),
    .d_i (vi_part),
    .en_o(vo_en),
    .q_o (vo_part)
  );

  logic [31:0] l_log2, lse_log2, lse_val, out_inv;  // finalisation (below)
  logic          lse_en, inv_en;
  logic [HW-1:0] lse_at, inv_at;

  for (genvar h = 0; h < NumQHeads; h++) begin : gen_head
    logic [MAX_BPR-1:0][BEAT_W-1:0] q_q;     // query row, as it arrived
    logic [31:0] score_q [MaxClusterTokens];  // scores of the current cluster, then weights
    logic [31:0] m_q;       // running max (log2 domain)
    logic [31:0] mrun_q;    // max including the current cluster
    logic [31:0] l_q;       // running softmax denominator
    logic [31:0] s1_sum_q;  // K stage 1: sum of a beat
    logic [MAX_BPR-2:0][31:0] row_q;  // the beat sums of the row so far, at its end aligned
    logic [31:0] alpha_q;   // rescale of the clusters before: exp2(m - mrun)
    logic [31:0] lse_q;
    logic [31:0] inv_q;     // 1/l

    logic on;  // the head is in this command
    logic [31:0] dot_sum, score, score_max, alpha_w, p_w, p_cur, p_l, l_scaled, l_src, l_sum;
    logic [MAX_BPR-1:0][31:0] fold_b;  // a row's beat sums, zeros in front of a short row
    logic [31:0] fold_x0;              // 0 + b_0
    logic [PW-1:0] row_slot;           // where beat s1_part_q of a row lies in fold_b
    logic unused_p;
    assign on       = (4'(h) < nq_q);
    assign row_slot = PW'(32'(s1_part_q) + MAX_BPR - 32'(bpr_q));
    assign p_cur    = score_q[TW'(tok_q)];

    assign m_head[h]   = m_q;
    assign l_head[h]   = l_q;
    assign lse_head[h] = lse_q;
    assign inv_head[h] = inv_q;

    // K: each beat's sum; at a row's end the row's sums are folded in beat order, the score
    // scaled into the log2 domain and the running max updated
    nelssa_beat_dot #(
      .Bf16MulLatency(Bf16MulLatency),
      .AddLatency    (AddLatency)
    ) u_dot (
      .clk_i,
      .rst_ni,
      .en_i (k_beat && on),
      .a_i  (q_q[part]),
      .b_i  (kv_data_i),
      .dot_o(dot_sum)
    );
    // the fold (((0 + b_0) + b_1) + ...): 0 + b_0 is b_0 with -0 made +0 (a beat sum is an
    // adder's result: no subnormal, NaN canonical), so the first add needs no adder; a row of
    // head_dim 64 in an engine of HeadDim 128 is folded behind two zeros, which gives the same
    // bits ((0 + 0) + 0 = +0), so every row takes the same stages
    for (genvar k = 0; k < MAX_BPR; k++) begin : gen_fold_b
      if (k < MAX_BPR - 1) begin : gen_held
        assign fold_b[k] = (32'(k) < MAX_BPR - 32'(bpr_q)) ? 32'd0 : row_q[k];
      end else begin : gen_last
        assign fold_b[k] = s1_sum_q;
      end
    end
    assign fold_x0 = (fold_b[0] == 32'h8000_0000) ? 32'd0 : fold_b[0];
    for (genvar k = 1; k < MAX_BPR; k++) begin : gen_fold
      logic [31:0] b_d;  // beat sum k, delayed to its stage
      logic [31:0] a, x;  // (0 + b_0) + ... + b_(k-1), and + b_k
      logic unused_b;
      if (k == 1) begin : gen_first
        assign a = fold_x0;
      end else begin : gen_next
        assign a = gen_fold[k-1].x;
      end
      nelssa_pipe #(
        .Width  (32),
        .Latency((k - 1) * AddLatency)
      ) u_b (
        .clk_i,
        .rst_ni,
        .en_i(fold_go && on),
        .d_i (fold_b[k]),
        .en_o(unused_b),
        .q_o (b_d)
      );
      nelssa_fp32_add #(
        .Latency(AddLatency)
      ) u_add (
        .clk_i,
        .rst_ni,
        .en_i (gen_fold_pos[k].en && on),
        .a_i  (a),
        .b_i  (b_d),
        .sum_o(x)
      );
    end
    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_score (
      .clk_i,
      .rst_ni,
      .en_i  (fold_done && on),
      .a_i   (gen_fold[MAX_BPR-1].x),
      .b_i   (c_q),
      .prod_o(score)
    );
    nelssa_fp32_max u_max (
      .en_i (sc_en && on),
      .a_i  (mrun_q),
      .b_i  (score),
      .max_o(score_max)
    );

    // set-up: the rescale of what the clusters before gave; the cluster's weights in turn
    nelssa_softmax_weight #(
      .AddLatency (AddLatency),
      .Exp2Latency(Exp2Latency)
    ) u_alpha (
      .clk_i,
      .rst_ni,
      .en_i(setup_go && on),
      .t_i (m_q),
      .m_i (mrun_q),
      .w_o (alpha_w)
    );
    nelssa_softmax_weight #(
      .AddLatency (AddLatency),
      .Exp2Latency(Exp2Latency)
    ) u_p (
      .clk_i,
      .rst_ni,
      .en_i(wl_go && on),
      .t_i (score_q[TW'(wl_idx)]),
      .m_i (mrun_q),
      .w_o (p_w)
    );

    // V: l = l * (first row ? alpha : 1) + p once per row (o alike in gen_lane); x * 1 is x
    // for every value they can hold. The add is issued when the row's p and l's rescale have
    // come through the multipliers; the l it reads is the one of the row before, taken from
    // the adder's output when it appears in that very cycle (AddLatency = row spacing).
    nelssa_pipe #(
      .Width  (32),
      .Latency(MulLatency)
    ) u_p_l (
      .clk_i,
      .rst_ni,
      .en_i(v_beat && on && part_q == 2'd0),
      .d_i (p_cur),
      .en_o(unused_p),
      .q_o (p_l)
    );
    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_l_scale (
      .clk_i,
      .rst_ni,
      .en_i  (v_beat && on && part_q == 2'd0 && first_row),
      .a_i   (l_q),
      .b_i   (alpha_q),
      .prod_o(l_scaled)
    );
    if (AddLatency > 0) begin : gen_l_fwd
      assign l_src = (vo_en && vo_part == '0) ? l_sum : l_q;
    end else begin : gen_l_reg
      assign l_src = l_q;
    end
    nelssa_fp32_add #(
      .Latency(AddLatency)
    ) u_l (
      .clk_i,
      .rst_ni,
      .en_i (vi_en && on && vi_part == '0),
      .a_i  (vi_first ? l_scaled : l_src),
      .b_i  (p_l),
      .sum_o(l_sum)
    );

    // This head's registers (no reset: every command initialises what it reads). mrun_q equals
    // m_q outside a K phase (set-up copies it back), so a cluster's running max starts from the
    // max of all clusters before it.
    always_ff @(posedge clk_i) begin
      unique case (state_q)
        StIdle: begin
          if (cmd_take) begin
            m_q    <= FP32_NEG_INF;
            mrun_q <= FP32_NEG_INF;
            l_q    <= 32'd0;
          end
        end
        StQ: begin
          if (kv_fire && HW'(head_q) == HW'(h)) begin
            // verilator unroll_full
            for (int b = 0; b < MAX_BPR; b++) begin
              if (part == PW'(b)) q_q[b] <= kv_data_i;
            end
          end
        end
        StSetup: begin
          if (on) m_q <= mrun_q;
        end
        default: ;
      endcase

      if (alpha_load && on) alpha_q <= alpha_w;
      if (vo_en && on && vo_part == '0) l_q <= l_sum;
      if (dot_en && on) s1_sum_q <= dot_sum;
      if (s1_valid_q && !s1_last_row_q && on) begin
        // verilator unroll_full
        for (int b = 0; b < MAX_BPR - 1; b++) begin
          if (row_slot == PW'(b)) row_q[b] <= s1_sum_q;
        end
      end
      if (wout_en && on) score_q[wout_tok] <= p_w;
      if (sc_en && on) begin
        score_q[sc_tok] <= score;
        mrun_q          <= score_max;
      end
      if (lse_en && lse_at == HW'(h)) lse_q <= lse_val;
      if (inv_en && inv_at == HW'(h)) inv_q <= out_inv;
    end

    // V, per lane: o = o * (first row ? alpha : 1) + p * v
    for (genvar i = 0; i < LANES; i++) begin : gen_lane
      logic [MAX_BPR-1:0][31:0] o_q;  // this lane of each beat of the output row
      logic [31:0] o_scaled, o_pv, o_src, o_sum;

      for (genvar b = 0; b < MAX_BPR; b++) begin : gen_part
        assign o_head[h][b][i] = o_q[b];
      end

      nelssa_fp32_mul #(
        .Latency(MulLatency)
      ) u_o_scale (
        .clk_i,
        .rst_ni,
        .en_i  (v_beat && on && first_row),
        .a_i   (o_q[part]),
        .b_i   (alpha_q),
        .prod_o(o_scaled)
      );
      nelssa_fp32_mul #(
        .Latency(MulLatency)
      ) u_pv (
        .clk_i,
        .rst_ni,
        .en_i  (v_beat && on),
        .a_i   (p_cur),
        .b_i   ({kv_data_i[16*i +: 16], 16'h0000}),
        .prod_o(o_pv)
      );
      if (AddLatency > 0) begin : gen_o_fwd
        assign o_src = (vo_en && vo_part == vi_part) ? o_sum : o_q[vi_part];
      end else begin : gen_o_reg
        assign o_src = o_q[vi_part];
      end
      nelssa_fp32_add #(
        .Latency(AddLatency)
      ) u_o (
        .clk_i,
        .rst_ni,
        .en_i (vi_en && on),
        .a_i  (vi_first ? o_scaled : o_src),
        .b_i  (o_pv),
        .sum_o(o_sum)
      );

      always_ff @(posedge clk_i) begin
        if (cmd_take) begin
          o_q <= '0;
        end else if (vo_en && on) begin
          // verilator unroll_full
          for (int b = 0; b < MAX_BPR; b++) begin
            if (vo_part == PW'(b)) o_q[b] <= o_sum;
          end
        end
      end
    end
  end

  // finalisation, one head issued a cycle: LSE = (m + log2 l) * ln 2 and 1/l, each written
  // into the head's registers when it leaves its pipeline (lse_at, inv_at: which head)
  logic          fin_add_en, fin_mul_en;
  logic [HW-1:0] fin_add_at, fin_mul_at;

  nelssa_fp32_log2 #(
    .Latency(Log2Latency)
  ) u_lse_log2 (
    .clk_i,
    .rst_ni,
    .en_i(fin_go),
    .x_i (l_head[out_head]),
    .y_o (l_log2)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(Log2Latency)
  ) u_fin_add_at (
    .clk_i,
    .rst_ni,
    .en_i(fin_go),
    .d_i (out_head),
    .en_o(fin_add_en),
    .q_o (fin_add_at)
  );
  nelssa_fp32_add #(
    .Latency(AddLatency)
  ) u_lse_add (
    .clk_i,
    .rst_ni,
    .en_i (fin_add_en),
    .a_i  (m_head[fin_add_at]),
    .b_i  (l_log2),
    .sum_o(lse_log2)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(AddLatency)
  ) u_fin_mul_at (
    .clk_i,
    .rst_ni,
    .en_i(fin_add_en),
    .d_i (fin_add_at),
    .en_o(fin_mul_en),
    .q_o (fin_mul_at)
  );
  nelssa_fp32_mul #(
    .Latency(MulLatency)
  ) u_lse_ln (
    .clk_i,
    .rst_ni,
    .en_i  (fin_mul_en),
    .a_i   (lse_log2),
    .b_i   (FP32_LN2),
    .prod_o(lse_val)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(MulLatency)
  ) u_lse_at (
    .clk_i,
    .rst_ni,
    .en_i(fin_mul_en),
    .d_i (fin_mul_at),
    .en_o(lse_en),
    .q_o (lse_at)
  );
  nelssa_fp32_recip #(
    .Latency(RecipLatency)
  ) u_inv (
    .clk_i,
    .rst_ni,
    .en_i(fin_go),
    .x_i (l_head[out_head]),
    .y_o (out_inv)
  );
  nelssa_pipe #(
    .Width  (HW),
    .Latency(RecipLatency)
  ) u_inv_at (
    .clk_i,
    .rst_ni,
    .en_i(fin_go),
    .d_i (out_head),
    .en_o(inv_en),
    .q_o (inv_at)
  );

  // ---------------------------------------------------------------------------------------------
  // Result beats: O of head head_q scaled by its 1/l (OUT_LANES products), then the LSE beat.
  // With combinational multipliers a beat is offered as it is computed; with pipelined ones
  // a beat is issued into the multipliers only when the result FIFO behind them has room for
  // it and everything already on its way (credits), so res_ready_i low stops the issue.
  localparam int unsigned OUT_PER_PART = LANES / OUT_LANES;  // result beats per input beat
  logic [PW-1:0] out_part;  // input beat of o_q that holds this result beat
  logic [31:0]   out_val [OUT_LANES];
  logic [BEAT_W-1:0] lse_beat, out_data;
  assign out_part = PW'(obeat_q / 3'(OUT_PER_PART));

  for (genvar k = 0; k < OUT_LANES; k++) begin : gen_out
    nelssa_fp32_mul #(
      .Latency(MulLatency)
    ) u_out (
      .clk_i,
      .rst_ni,
      .en_i  (out_beat),
      .a_i   (o_head[out_head][out_part][(32'(obeat_q) % OUT_PER_PART) * OUT_LANES + k]),
      .b_i   (inv_head[out_head]),
      .prod_o(out_val[k])
    );
  end

  always_comb begin
    lse_beat = '0;
    // verilator unroll_full
    for (int h = 0; h < NumQHeads; h++) begin
      if (h < 32'(nq_q)) lse_beat[32*h +: 32] = lse_head[h];
    end
    out_data = '0;
    // verilator unroll_full
    for (int k = 0; k < OUT_LANES; k++) out_data[32*k +: 32] = out_val[k];
  end

  if (MulLatency == 0) begin : gen_res_direct
    assign out_issue   = (state_q == StOut) && res_ready_i;
    // the beat is computed while it is offered, taken or not: its multipliers' enable must not
    // read res_ready_i, or a gated simulation's result data would depend on the ready that a
    // consumer may derive from it (a combinational loop in the FPGA top's memory port)
    assign out_offer   = (state_q == StOut);
    assign res_valid_o = (state_q == StOut);
    assign res_last_o  = res_valid_o && (head_q == nq_q);
    assign res_data_o  = !res_valid_o ? '0 : (head_q == nq_q) ? lse_beat : out_data;

    // a result beat not taken stays, the same beat (its head and beat index, which select its
    // data from registers that hold still in StOut: cheaper than keeping the 512 data bits)
    `NELSSA_ASSERT_HOLD(ResHeld, res_valid_o, res_ready_i, {head_q, obeat_q, res_last_o})
  end else begin : gen_res_fifo
    localparam int unsigned Depth = MulLatency + 2;  // full rate: MulLatency on the way, 1 out
    localparam int unsigned AW = $clog2(Depth);
    localparam int unsigned NW = $clog2(Depth + 1);

    logic [Depth-1:0][BEAT_W:0] mem_q;  // {last, data}
    logic [AW-1:0] rd_q, wr_q;
    logic [NW-1:0] cnt_q, fly_q;        // beats held, beats in the multipliers
    logic          issued_last_q, push, push_last;

    assign out_issue = (state_q == StOut) && !issued_last_q &&
                       (32'(cnt_q) + 32'(fly_q) < Depth);
    assign out_offer = out_issue;  // (from registers only: no path from res_ready_i)
    nelssa_pipe #(
      .Width  (1),
      .Latency(MulLatency)
    ) u_res_pos (
      .clk_i,
      .rst_ni,
      .en_i(out_issue),
      .d_i (head_q == nq_q),
      .en_o(push),
      .q_o (push_last)
    );

    assign res_valid_o = (cnt_q != '0);
    assign res_last_o  = res_valid_o && mem_q[rd_q][BEAT_W];
    assign res_data_o  = res_valid_o ? mem_q[rd_q][BEAT_W-1:0] : '0;

    always_ff @(posedge clk_i) begin
      if (push) mem_q[wr_q] <= {push_last, push_last ? lse_beat : out_data};
    end
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        rd_q          <= '0;
        wr_q          <= '0;
        cnt_q         <= '0;
        fly_q         <= '0;
        issued_last_q <= 1'b0;
      end else begin
        if (push) wr_q <= (32'(wr_q) == Depth - 1) ? '0 : wr_q + AW'(1);
        if (res_fire) rd_q <= (32'(rd_q) == Depth - 1) ? '0 : rd_q + AW'(1);
        cnt_q <= cnt_q + NW'(push) - NW'(res_fire);
        fly_q <= fly_q + NW'(out_issue) - NW'(push);
        if (state_q != StOut) issued_last_q <= 1'b0;
        else if (out_issue && head_q == nq_q) issued_last_q <= 1'b1;
      end
    end

    // the FIFO never takes a beat it has no room for, and a beat not taken stays the same
    `NELSSA_ASSERT_NEVER(ResFifoOverflow, push && !res_fire && 32'(cnt_q) == Depth)
    `NELSSA_ASSERT_HOLD(ResHeld, res_valid_o, res_ready_i, {rd_q, res_last_o})
  end

  // ---------------------------------------------------------------------------------------------
  // Control: handshakes and the state machine
  always_comb begin
    cmd_ready_o = (state_q == StIdle);
    clu_ready_o = (state_q == StClu && !next_valid_q) || prefetch ||
                  (state_q == StDrain && !all_popped);
    unique case (state_q)
      StQ, StK: kv_ready_o = 1'b1;
      StV:      kv_ready_o = v_room;
      StDrain:  kv_ready_o = !last_seen_q;
      default:  kv_ready_o = 1'b0;
    endcase

    state_d  = state_q;
    status_d = status_q;
    unique case (state_q)
      StIdle: begin
        if (cmd_valid_i) begin
          status_d = STATUS_OK;
          state_d  = StQ;
          if (!cmd_hd_ok) begin
            status_d = STATUS_ERR_BAD_HEAD_DIM;
            state_d  = StDone;
          end else if (!cmd_nq_ok) begin
            status_d = STATUS_ERR_BAD_QHEADS;
            state_d  = StDone;
          end else if (cmd_num_clusters_i == 16'd0) begin
            status_d = STATUS_ERR_NO_CLUSTERS;
            state_d  = StDone;
          end
        end
      end
      StQ: begin
        if (kv_fire) begin
          if (kv_last_i) begin
            status_d = STATUS_ERR_SHORT_STREAM;
            state_d  = StDrain;
          end else if (row_end && head_q == nq_q - 4'd1) begin
            state_d = StClu;
          end
        end
      end
      StClu: begin
        if (clu_take) begin
          if (clu_bad) begin
            status_d = STATUS_ERR_BAD_CLUSTER_LEN;
            state_d  = StDrain;
          end else begin
            state_d = StK;
          end
        end
      end
      StK: begin
        if (kv_fire) begin
          if (kv_last_i) begin
            status_d = STATUS_ERR_SHORT_STREAM;
            state_d  = StDrain;
          end else if (cluster_end) begin
            state_d = StKDrain;
          end
        end
      end
      // the last score and the cluster max are written at the end of its last cycle
      StKDrain: if (wait_q == '0) state_d = StSetup;
      StSetup:  if (wait_q == '0) state_d = StV;
      StV: begin
        if (kv_fire) begin
          if (cluster_end && final_cluster) begin
            if (kv_last_i) begin
              state_d = (VDRAIN_CYC > 0) ? StVDrain : StFinal;
            end else begin
              status_d = STATUS_ERR_LONG_STREAM;
              state_d  = StDrain;
            end
          end else if (kv_last_i) begin
            status_d = STATUS_ERR_SHORT_STREAM;
            state_d  = StDrain;
          end else if (cluster_end) begin
            if (!next_valid_q) begin
              state_d = StClu;
            end else if (clu_bad) begin
              status_d = STATUS_ERR_BAD_CLUSTER_LEN;
              state_d  = StDrain;
            end else begin
              state_d = StK;
            end
          end
        end
      end
      // o and l are written at the end of its last cycle
      StVDrain: if (wait_q == '0) state_d = StFinal;
      StFinal: begin
        if (head_q == nq_q - 4'd1) state_d = (FWAIT_CYC > 0) ? StFinWait : StOut;
      end
      // the last LSE and 1/l are written at the end of its last cycle
      StFinWait: if (wait_q == '0) state_d = StOut;
      StOut: begin
        if (res_fire && res_last_o) state_d = StDone;
      end
      StDrain: begin
        if (all_popped && last_seen_q && flush_q == '0) state_d = StDone;
      end
      StDone:  state_d = StIdle;
      default: state_d = StIdle;
    endcase
  end

  // Counters and command fields
  always_comb begin
    bpr_d        = bpr_q;
    nq_d         = nq_q;
    nclu_d       = nclu_q;
    clu_popped_d = clu_fire ? clu_popped_q + 16'd1 : clu_popped_q;
    ntok_d       = ntok_q;
    tok_d        = tok_q;
    part_d       = part_q;
    head_d       = head_q;
    obeat_d      = obeat_q;
    last_seen_d  = last_seen_q || (kv_fire && kv_last_i);
    wait_d       = (wait_q == '0) ? '0 : wait_q - CW'(1);
    flush_d      = (flush_q == '0) ? '0 : flush_q - CW'(1);
    next_valid_d = next_valid_q || (clu_fire && prefetch);
    next_ntok_d  = (clu_fire && prefetch) ? clu_tokens_i : next_ntok_q;
    unique case (state_q)
      StIdle: begin
        if (cmd_valid_i) begin
          bpr_d        = (cmd_head_dim_i == 8'd128) ? 3'd4 : 3'd2;
          nq_d         = cmd_num_qheads_i;
          nclu_d       = cmd_num_clusters_i;
          clu_popped_d = 16'd0;
          last_seen_d  = 1'b0;
          part_d       = 2'd0;
          head_d       = 4'd0;
          next_valid_d = 1'b0;
        end
      end
      StQ: begin
        if (kv_fire) begin
          part_d = row_end ? 2'd0 : part_q + 2'd1;
          if (row_end) head_d = head_q + 4'd1;
        end
      end
      StClu: begin
        if (clu_take) begin
          ntok_d       = clu_len;
          next_valid_d = 1'b0;
          tok_d        = 8'd0;
          part_d       = 2'd0;
        end
      end
      StK, StV: begin
        if (kv_fire) begin
          part_d = row_end ? 2'd0 : part_q + 2'd1;
          if (row_end) tok_d = cluster_end ? 8'd0 : tok_q + 8'd1;
        end
        if (state_q == StV && state_d == StK) begin  // next cluster straight from its entry
          ntok_d       = next_ntok_q;
          next_valid_d = 1'b0;
        end
        if (state_d == StFinal || state_d == StVDrain) head_d = 4'd0;
      end
      StFinal: begin
        head_d  = (head_q == nq_q - 4'd1) ? 4'd0 : head_q + 4'd1;
        obeat_d = 3'd0;
      end
      StOut: begin
        if (out_issue) begin
          if (32'(obeat_q) == 32'(bpr_q) * 2 - 1) begin
            obeat_d = 3'd0;
            head_d  = head_q + 4'd1;
          end else begin
            obeat_d = obeat_q + 3'd1;
          end
        end
      end
      default: ;
    endcase
    // a waiting state's length, set as it is entered
    if (state_d != state_q) begin
      unique case (state_d)
        StKDrain:  wait_d = CW'(KDRAIN_CYC - 1);
        StSetup:   wait_d = CW'(SETUP_CYC - 1);
        StVDrain:  wait_d = CW'(VDRAIN_CYC - 1);
        StFinWait: wait_d = CW'(FWAIT_CYC - 1);
        StDrain:   flush_d = CW'(FLUSH_CYC);
        default: ;
      endcase
    end
  end

  // V rows in flight: a beat waits until the one of its part in the row before is AddLatency
  // cycles old, so its add finds that result in o (or at the adder's output); a row then
  // takes max(beats per row, AddLatency) cycles. Only an adder slower than the shortest row
  // (2 beats) needs the wait.
  if (AddLatency > 2) begin : gen_v_spacing
    localparam int unsigned SW = $clog2(AddLatency + 1);
    logic [MAX_BPR-1:0][SW-1:0] age_q;  // cycles since each part's last V beat, saturating

    assign v_room = (32'(age_q[part]) >= AddLatency);
    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni) begin
        age_q <= '0;
      end else begin
        // verilator unroll_full
        for (int b = 0; b < MAX_BPR; b++) begin
          if (setup || (v_beat && part == PW'(b))) begin
            age_q[b] <= setup ? SW'(AddLatency) : SW'(1);
          end else if (32'(age_q[b]) < AddLatency) begin
            age_q[b] <= age_q[b] + SW'(1);
          end
        end
      end
    end
  end else begin : gen_v_full_rate
    assign v_room = 1'b1;
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      state_q      <= StIdle;
      status_q     <= STATUS_OK;
      bpr_q        <= 3'd4;
      nq_q         <= 4'd1;
      nclu_q       <= 16'd0;
      clu_popped_q <= 16'd0;
      ntok_q       <= 8'd0;
      tok_q        <= 8'd0;
      part_q       <= 2'd0;
      head_q       <= 4'd0;
      obeat_q      <= 3'd0;
      last_seen_q  <= 1'b0;
      wait_q       <= '0;
      flush_q      <= '0;
      s1_valid_q   <= 1'b0;
      next_valid_q <= 1'b0;
      next_ntok_q  <= 8'd0;
      wl_active_q  <= 1'b0;
      wl_tok_q     <= 8'd0;
      p_cnt_q      <= 8'd0;
      c_ready_q    <= 1'b0;
    end else begin
      state_q      <= state_d;
      status_q     <= status_d;
      bpr_q        <= bpr_d;
      nq_q         <= nq_d;
      nclu_q       <= nclu_d;
      clu_popped_q <= clu_popped_d;
      ntok_q       <= ntok_d;
      tok_q        <= tok_d;
      part_q       <= part_d;
      head_q       <= head_d;
      obeat_q      <= obeat_d;
      last_seen_q  <= last_seen_d;
      wait_q       <= wait_d;
      flush_q      <= flush_d;
      s1_valid_q   <= dot_en;
      next_valid_q <= next_valid_d;
      next_ntok_q  <= next_ntok_d;
      wl_active_q  <= wl_active_d;
      wl_tok_q     <= wl_tok_d;
      p_cnt_q      <= p_cnt_d;
      c_ready_q    <= c_load || (c_ready_q && !cmd_take);
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Shared datapath registers (no reset: every command initialises what it reads; the heads'
  // registers are in gen_head)
  always_ff @(posedge clk_i) begin
    s1_tok_q      <= dot_tok;
    s1_part_q     <= dot_part;
    s1_last_row_q <= dot_last;
    if (c_load) c_q <= c_d;
  end

  assign done_o   = (state_q == StDone);
  assign status_o = status_q;
  assign busy_o   = (state_q != StIdle);

  // ---------------------------------------------------------------------------------------------
  // Protocol rules. A command offered stays offered, unchanged, until taken. A cluster entry or a
  // beat not taken may be withdrawn (the engine takes what is offered when it is ready: the
  // testbenches' gaps do so), but one still offered in the next cycle is the same one.
  `NELSSA_ASSERT_HOLD(CmdHeld, cmd_valid_i, cmd_ready_o,
                      {cmd_head_dim_i, cmd_num_qheads_i, cmd_num_clusters_i, cmd_scale_i})
  `NELSSA_ASSERT(CluKeptStable, !(clu_valid_i && $past(clu_valid_i && !clu_ready_o)) ||
                                $stable(clu_tokens_i))
  // (a beat's first four lanes stand for it: keeping all 512 bits of the last cycle cost the
  // device's simulation about a percent, four engines each cycle)
  `NELSSA_ASSERT(KvKeptStable, !(kv_valid_i && $past(kv_valid_i && !kv_ready_o)) ||
                               $stable({kv_data_i[63:0], kv_last_i}))
  // The engine's own, which no input can break (checked in every run): a result beat not taken
  // stays, the same beat (its head and beat index, which select its data from registers that
  // hold still in StOut: cheaper than keeping the 512 data bits of the last cycle); the cluster
  // entries consumed never exceed the command's clusters; done_o is a one-cycle pulse.
  `NELSSA_ASSERT(CluPoppedBounded, state_q == StIdle || clu_popped_q <= nclu_q)
  `NELSSA_ASSERT_NEVER(DoneTwice, done_o && $past(done_o))
  logic fold_busy;
  assign fold_busy = fold_done || gen_fold_pos[MAX_BPR-1].busy;
  // The pipelines' own: a score is scaled by this command's c; a V row's weight is written
  // before the row reads it; a score and a weight are never written in one cycle (the weights
  // overwrite the scores they come from); nothing of a command is left in a pipeline when
  // the next is taken.
  `NELSSA_ASSERT(ScaleReady, !fold_done || c_ready_q)
  `NELSSA_ASSERT(WeightReady, !v_beat || tok_q < p_cnt_q)
  `NELSSA_ASSERT_NEVER(ScoreWeightClash, sc_en && wout_en)
  `NELSSA_ASSERT_NEVER(PipeBusyAtTake, cmd_take &&
                       (dot_en || s1_valid_q || fold_busy || sc_en || wl_go || wout_en ||
                        vi_en || vo_en))
endmodule
