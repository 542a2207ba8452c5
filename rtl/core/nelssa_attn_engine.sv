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
// docs/numerics.md. Throughput: one beat per cycle inside a K or V phase; each cluster costs
// two stall cycles at its K->V turn (last score, softmax set-up); the first cluster one more.
`include "nelssa_assert.svh"

module nelssa_attn_engine
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned HeadDim          = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned NumQHeads        = 8,    // largest GQA group (query heads), 1..8
  parameter int unsigned MaxClusterTokens = 64    // score-buffer depth in tokens, 1..255
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

  localparam int unsigned HW = (NumQHeads > 1) ? $clog2(NumQHeads) : 1;  // head index width
  localparam int unsigned TW = (MaxClusterTokens > 1) ? $clog2(MaxClusterTokens) : 1;
  localparam int unsigned MAX_BPR = HeadDim / LANES;                     // beats per row
  localparam int unsigned PW = (MAX_BPR > 1) ? $clog2(MAX_BPR) : 1;      // beat-in-row width
  localparam int unsigned OUT_LANES = BEAT_W / 32;                       // fp32 per result beat

  typedef enum logic [3:0] {
    StIdle, StQ, StClu, StK, StKDrain, StSetup, StV, StFinal, StOut, StDrain, StDone
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
  logic [31:0] c_q;            // scale * log2(e)

  // Datapath state. Each query head's registers are in gen_head (each lane's output in
  // gen_head.gen_lane), written at constant indices, so synthesis maps them to flip-flops; what
  // the finalisation and the result beats read by head is gathered here.
  logic [31:0] o_head   [NumQHeads][MAX_BPR][LANES];  // unnormalised output
  logic [31:0] m_head   [NumQHeads];                  // running max (log2 domain)
  logic [31:0] l_head   [NumQHeads];                  // running softmax denominator
  logic [31:0] lse_head [NumQHeads];

  // K pipeline: stage 1 holds the beat sums of the last accepted K beat (gen_head's s1_sum_q)
  logic              s1_valid_q, s1_valid_d, s1_last_row_q;
  logic [TW-1:0]     s1_tok_q;

  // Cluster entry taken ahead of time
  logic              next_valid_q, next_valid_d;
  logic [7:0]        next_ntok_q, next_ntok_d;

  // ---------------------------------------------------------------------------------------------
  // Handshakes and positions
  logic kv_fire, clu_fire, res_fire;
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
  // Arithmetic. Every floating-point operation is an instance of a unit (rtl/core), 1,365 at
  // HeadDim 128 and 8 heads, so synthesis maps each kind of unit once. A unit's en_i is
  // exactly the condition under which the register it feeds loads: a simulation built with
  // NELSSA_FP_GATED computes only the active phase's units, and the engine's tests also run
  // without it, which shows no other unit output is ever read.
  logic first_row;
  assign first_row = (tok_q == 8'd0);

  logic [TW-1:0] ptok;  // score row of the next V row's weight
  assign ptok = (32'(tok_q) + 1 < MaxClusterTokens) ? TW'(tok_q + 8'd1) : '0;

  logic cmd_take, k_beat, v_beat, setup, out_beat, lse_step;
  assign cmd_take = (state_q == StIdle) && cmd_valid_i;
  assign k_beat   = (state_q == StK) && kv_fire;
  assign v_beat   = (state_q == StV) && kv_fire;
  assign setup    = (state_q == StSetup);
  assign out_beat = (state_q == StOut) && (head_q != nq_q);  // an O beat (not the LSE beat)
  assign lse_step = (state_q == StFinal);

  logic [PW-1:0] part;      // beat within the row, as an index
  logic [HW-1:0] out_head;  // head being finalised or output
  assign part     = PW'(part_q);
  assign out_head = HW'(head_q);

  // the softmax scale in the log2 domain, c = scale * log2(e)
  logic [31:0] c_d;
  nelssa_fp32_mul u_scale (
    .en_i  (cmd_take),
    .a_i   (cmd_scale_i),
    .b_i   (FP32_LOG2E),
    .prod_o(c_d)
  );

  logic [31:0] l_log2, lse_log2, lse_val;  // finalisation (below)

  for (genvar h = 0; h < NumQHeads; h++) begin : gen_head
    logic [MAX_BPR-1:0][BEAT_W-1:0] q_q;     // query row, as it arrived
    logic [31:0] score_q [MaxClusterTokens];  // scores of the current cluster
    logic [31:0] m_q;       // running max (log2 domain)
    logic [31:0] mrun_q;    // max including the current cluster
    logic [31:0] l_q;       // running softmax denominator
    logic [31:0] acc_q;     // dot-product accumulator of the current row
    logic [31:0] s1_sum_q;  // K stage 1: sum of the last accepted beat
    logic [31:0] alpha_q;   // rescale of the clusters before: exp2(m - mrun)
    logic [31:0] p_q;       // exp2(t_j - m) of the current V row
    logic [31:0] lse_q;

    logic on;  // the head is in this command
    logic row_score, l_step, p_step;
    logic [31:0] dot_sum, acc_sum, score, score_max, alpha_w, p_w, l_scaled, l_sum;
    assign on        = (4'(h) < nq_q);
    assign row_score = s1_valid_q && s1_last_row_q && on;
    assign l_step    = v_beat && on && (part_q == 2'd0);
    assign p_step    = on && (setup || (v_beat && row_end));

    assign m_head[h]   = m_q;
    assign l_head[h]   = l_q;
    assign lse_head[h] = lse_q;

    // K: stage 1 forms the beat's sum, stage 2 accumulates it; at a row's end the score is
    // scaled into the log2 domain and the running max updated
    nelssa_beat_dot u_dot (
      .en_i (k_beat && on),
      .a_i  (q_q[part]),
      .b_i  (kv_data_i),
      .dot_o(dot_sum)
    );
    nelssa_fp32_add u_acc (
      .en_i (s1_valid_q && on),
      .a_i  (acc_q),
      .b_i  (s1_sum_q),
      .sum_o(acc_sum)
    );
    nelssa_fp32_mul u_score (
      .en_i  (row_score),
      .a_i   (acc_sum),
      .b_i   (c_q),
      .prod_o(score)
    );
    nelssa_fp32_max u_max (
      .en_i (row_score),
      .a_i  (mrun_q),
      .b_i  (score),
      .max_o(score_max)
    );

    // set-up: the rescale of what the clusters before gave, and the first V row's weight;
    // V: the next row's weight at each row's end
    nelssa_softmax_weight u_alpha (
      .en_i(setup && on),
      .t_i (m_q),
      .m_i (mrun_q),
      .w_o (alpha_w)
    );
    nelssa_softmax_weight u_p (
      .en_i(p_step),
      .t_i (setup ? score_q[0] : score_q[ptok]),
      .m_i (mrun_q),
      .w_o (p_w)
    );

    // V: l = l * (first row ? alpha : 1) + p once per row (o alike in gen_lane); x * 1 is x
    // for every value they can hold
    nelssa_fp32_mul u_l_scale (
      .en_i  (l_step && first_row),
      .a_i   (l_q),
      .b_i   (alpha_q),
      .prod_o(l_scaled)
    );
    nelssa_fp32_add u_l (
      .en_i (l_step),
      .a_i  (first_row ? l_scaled : l_q),
      .b_i  (p_q),
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
            acc_q  <= 32'd0;
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
          if (on) begin
            alpha_q <= alpha_w;
            p_q     <= p_w;
            m_q     <= mrun_q;
          end
        end
        StV: begin
          if (kv_fire && on) begin
            if (part_q == 2'd0) l_q <= l_sum;
            if (row_end) p_q <= p_w;
          end
        end
        StFinal: begin
          if (out_head == HW'(h)) lse_q <= lse_val;
        end
        default: ;
      endcase

      if (k_beat && on) s1_sum_q <= dot_sum;
      if (s1_valid_q && on) begin
        if (s1_last_row_q) begin
          acc_q             <= 32'd0;
          score_q[s1_tok_q] <= score;
          mrun_q            <= score_max;
        end else begin
          acc_q <= acc_sum;
        end
      end
    end

    // V, per lane: o = o * (first row ? alpha : 1) + p * v
    for (genvar i = 0; i < LANES; i++) begin : gen_lane
      logic [MAX_BPR-1:0][31:0] o_q;  // this lane of each beat of the output row
      logic [31:0] o_scaled, o_pv, o_sum;

      for (genvar b = 0; b < MAX_BPR; b++) begin : gen_part
        assign o_head[h][b][i] = o_q[b];
      end

      nelssa_fp32_mul u_o_scale (
        .en_i  (v_beat && on && first_row),
        .a_i   (o_q[part]),
        .b_i   (alpha_q),
        .prod_o(o_scaled)
      );
      nelssa_fp32_mul u_pv (
        .en_i  (v_beat && on),
        .a_i   (p_q),
        .b_i   ({kv_data_i[16*i +: 16], 16'h0000}),
        .prod_o(o_pv)
      );
      nelssa_fp32_add u_o (
        .en_i (v_beat && on),
        .a_i  (first_row ? o_scaled : o_q[part]),
        .b_i  (o_pv),
        .sum_o(o_sum)
      );

      always_ff @(posedge clk_i) begin
        if (cmd_take) begin
          o_q <= '0;
        end else if (v_beat && on) begin
          // verilator unroll_full
          for (int b = 0; b < MAX_BPR; b++) begin
            if (part == PW'(b)) o_q[b] <= o_sum;
          end
        end
      end
    end
  end

  // finalisation, one head per cycle: LSE = (m + log2 l) * ln 2

  nelssa_fp32_log2 u_lse_log2 (
    .en_i(lse_step),
    .x_i (l_head[out_head]),
    .y_o (l_log2)
  );
  nelssa_fp32_add u_lse_add (
    .en_i (lse_step),
    .a_i  (m_head[out_head]),
    .b_i  (l_log2),
    .sum_o(lse_log2)
  );
  nelssa_fp32_mul u_lse_ln (
    .en_i  (lse_step),
    .a_i   (lse_log2),
    .b_i   (FP32_LN2),
    .prod_o(lse_val)
  );

  // ---------------------------------------------------------------------------------------------
  // Result beats: O of head head_q scaled by 1/l (one reciprocal, OUT_LANES products), then
  // the LSE beat
  localparam int unsigned OUT_PER_PART = LANES / OUT_LANES;  // result beats per input beat
  logic [PW-1:0] out_part;  // input beat of o_q that holds this result beat
  logic [31:0]   out_inv;   // 1/l of the head being output
  logic [31:0]   out_val [OUT_LANES];
  assign out_part = PW'(obeat_q / 3'(OUT_PER_PART));

  nelssa_fp32_recip u_out_inv (
    .en_i(out_beat),
    .x_i (l_head[out_head]),
    .y_o (out_inv)
  );
  for (genvar k = 0; k < OUT_LANES; k++) begin : gen_out
    nelssa_fp32_mul u_out (
      .en_i  (out_beat),
      .a_i   (o_head[out_head][out_part][(32'(obeat_q) % OUT_PER_PART) * OUT_LANES + k]),
      .b_i   (out_inv),
      .prod_o(out_val[k])
    );
  end

  always_comb begin
    res_data_o = '0;
    if (state_q == StOut) begin
      if (head_q == nq_q) begin
        // verilator unroll_full
        for (int h = 0; h < NumQHeads; h++) begin
          if (h < 32'(nq_q)) res_data_o[32*h +: 32] = lse_head[h];
        end
      end else begin
        // verilator unroll_full
        for (int k = 0; k < OUT_LANES; k++) res_data_o[32*k +: 32] = out_val[k];
      end
    end
  end

  assign res_valid_o = (state_q == StOut);
  assign res_last_o  = res_valid_o && (head_q == nq_q);

  // ---------------------------------------------------------------------------------------------
  // Control: handshakes and the state machine
  always_comb begin
    cmd_ready_o = (state_q == StIdle);
    clu_ready_o = (state_q == StClu && !next_valid_q) || prefetch ||
                  (state_q == StDrain && !all_popped);
    unique case (state_q)
      StQ, StK, StV: kv_ready_o = 1'b1;
      StDrain:       kv_ready_o = !last_seen_q;
      default:       kv_ready_o = 1'b0;
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
      // the last score and the cluster max are written at the end of this cycle
      StKDrain: state_d = StSetup;
      StSetup: state_d = StV;
      StV: begin
        if (kv_fire) begin
          if (cluster_end && final_cluster) begin
            if (kv_last_i) begin
              state_d = StFinal;
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
      StFinal: begin
        if (head_q == nq_q - 4'd1) state_d = StOut;
      end
      StOut: begin
        if (res_fire && res_last_o) state_d = StDone;
      end
      StDrain: begin
        if (all_popped && last_seen_q) state_d = StDone;
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
    s1_valid_d   = (state_q == StK) && kv_fire;
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
        if (state_d == StFinal) head_d = 4'd0;
      end
      StFinal: begin
        head_d  = (head_q == nq_q - 4'd1) ? 4'd0 : head_q + 4'd1;
        obeat_d = 3'd0;
      end
      StOut: begin
        if (res_fire) begin
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
      s1_valid_q   <= 1'b0;
      next_valid_q <= 1'b0;
      next_ntok_q  <= 8'd0;
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
      s1_valid_q   <= s1_valid_d;
      next_valid_q <= next_valid_d;
      next_ntok_q  <= next_ntok_d;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Shared datapath registers (no reset: every command initialises what it reads; the heads'
  // registers are in gen_head)
  always_ff @(posedge clk_i) begin
    s1_tok_q      <= TW'(tok_q);
    s1_last_row_q <= row_end;
    if (cmd_take) c_q <= c_d;
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
  `NELSSA_ASSERT_HOLD(ResHeld, res_valid_o, res_ready_i, {head_q, obeat_q, res_last_o})
  `NELSSA_ASSERT(CluPoppedBounded, state_q == StIdle || clu_popped_q <= nclu_q)
  `NELSSA_ASSERT_NEVER(DoneTwice, done_o && $past(done_o))
endmodule
