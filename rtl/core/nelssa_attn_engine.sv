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
module nelssa_attn_engine
  import nelssa_engine_pkg::*;
  import nelssa_fp_pkg::*;
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
  localparam logic [31:0] SIGN = 32'h8000_0000;

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

  // Datapath state
  logic [BEAT_W-1:0] q_q [NumQHeads][MAX_BPR];        // query rows, as they arrived
  logic [31:0] o_q      [NumQHeads][MAX_BPR][LANES];  // unnormalised output
  logic [31:0] score_q  [MaxClusterTokens][NumQHeads];
  logic [31:0] m_q      [NumQHeads];   // running max (log2 domain)
  logic [31:0] mrun_q   [NumQHeads];   // max including the current cluster
  logic [31:0] l_q      [NumQHeads];   // running softmax denominator
  logic [31:0] acc_q    [NumQHeads];   // dot-product accumulator of the current row
  logic [31:0] alpha_q  [NumQHeads];
  logic [31:0] p_q      [NumQHeads];   // exp2(t_j - m) of the current V row
  logic [31:0] lse_q    [NumQHeads];

  // K pipeline: s1 holds the per-head sums of the last accepted K beat
  logic              s1_valid_q, s1_valid_d, s1_last_row_q;
  logic [TW-1:0]     s1_tok_q;
  logic [31:0]       s1_sum_q [NumQHeads];

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
  // Arithmetic. The datapath below is written as registers loaded from nelssa_fp_pkg functions:
  // in hardware every call is a unit of its own (about 1,300 at HeadDim 128, 8 heads), in the
  // Verilated model only the calls of the active phase run, once per clock edge.

  // Dot product of one beat with the matching Q slice: 32 bf16 products summed in a binary tree
  // (level v, element k = elements 2k and 2k+1 of level v-1), the order of docs/numerics.md.
  function automatic logic [31:0] beat_dot(input logic [BEAT_W-1:0] q, input logic [BEAT_W-1:0] k);
    logic [31:0] s [LANES];
    for (int i = 0; i < LANES; i++) s[i] = bf16_mul(q[16*i +: 16], k[16*i +: 16]);
    for (int v = 1; v <= $clog2(LANES); v++) begin
      for (int n = 0; n < (LANES >> v); n++) s[n] = fp32_add(s[2*n], s[2*n+1]);
    end
    return s[0];
  endfunction

  // exp2(t - m): a softmax weight in the log2 domain; 0 while the running max m is still -Inf
  // (every score so far is -Inf), so such tokens add nothing instead of NaN (-Inf - -Inf)
  function automatic logic [31:0] weight(input logic [31:0] t, input logic [31:0] m);
    return (m == FP32_NEG_INF) ? 32'd0 : fp32_exp2(fp32_add(t, m ^ SIGN));
  endfunction

  logic first_row;
  assign first_row = (tok_q == 8'd0);

  logic [TW-1:0] ptok;  // score row of the next V row's weight
  assign ptok = (32'(tok_q) + 1 < MaxClusterTokens) ? TW'(tok_q + 8'd1) : '0;

  // ---------------------------------------------------------------------------------------------
  // Result beats: O of head head_q scaled by 1/l (16 products), then the LSE beat
  localparam int unsigned OUT_PER_PART = LANES / OUT_LANES;  // result beats per input beat
  logic [HW-1:0] out_head;
  logic [31:0]   out_inv;  // 1/l of the head being output (one reciprocal unit)
  assign out_head = HW'(head_q);

  always_comb begin
    res_data_o = '0;
    out_inv    = '0;
    if (state_q == StOut) begin
      if (head_q == nq_q) begin
        for (int h = 0; h < NumQHeads; h++) begin
          if (h < 32'(nq_q)) res_data_o[32*h +: 32] = lse_q[h];
        end
      end else begin
        out_inv = fp32_recip(l_q[out_head]);
        for (int k = 0; k < OUT_LANES; k++) begin
          res_data_o[32*k +: 32] = fp32_mul(
              o_q[out_head][PW'(obeat_q / 3'(OUT_PER_PART))]
                 [(32'(obeat_q) % OUT_PER_PART) * OUT_LANES + k],
              out_inv);
        end
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
  // Datapath registers (no reset: every command initialises what it reads)
  always_ff @(posedge clk_i) begin
    s1_tok_q      <= TW'(tok_q);
    s1_last_row_q <= row_end;

    unique case (state_q)
      StIdle: begin
        if (cmd_valid_i) begin
          c_q <= fp32_mul(cmd_scale_i, FP32_LOG2E);
          for (int h = 0; h < NumQHeads; h++) begin
            m_q[h]    <= FP32_NEG_INF;
            mrun_q[h] <= FP32_NEG_INF;
            l_q[h]   <= 32'd0;
            acc_q[h] <= 32'd0;
            for (int b = 0; b < MAX_BPR; b++) begin
              for (int i = 0; i < LANES; i++) o_q[h][b][i] <= 32'd0;
            end
          end
        end
      end
      StQ: begin
        if (kv_fire) q_q[HW'(head_q)][PW'(part_q)] <= kv_data_i;
      end
      StSetup: begin
        for (int h = 0; h < NumQHeads; h++) begin
          if (h < 32'(nq_q)) begin
            alpha_q[h] <= weight(m_q[h], mrun_q[h]);
            p_q[h]     <= weight(score_q[0][h], mrun_q[h]);
            m_q[h]     <= mrun_q[h];
          end
        end
      end
      StV: begin
        // o = o * (first row ? alpha : 1) + p * v; o * 1 is o for every value o can hold
        if (kv_fire) begin
          for (int h = 0; h < NumQHeads; h++) begin
            if (h < 32'(nq_q)) begin
              for (int i = 0; i < LANES; i++) begin
                o_q[h][PW'(part_q)][i] <= fp32_add(
                    first_row ? fp32_mul(o_q[h][PW'(part_q)][i], alpha_q[h]) : o_q[h][PW'(part_q)][i],
                    fp32_mul(p_q[h], {kv_data_i[16*i +: 16], 16'h0000}));
              end
              if (part_q == 2'd0) begin
                l_q[h] <= fp32_add(first_row ? fp32_mul(l_q[h], alpha_q[h]) : l_q[h], p_q[h]);
              end
              if (row_end) p_q[h] <= weight(score_q[ptok][h], mrun_q[h]);
            end
          end
        end
      end
      StFinal: begin
        lse_q[out_head] <= fp32_mul(fp32_add(m_q[out_head], fp32_log2(l_q[out_head])), FP32_LN2);
      end
      default: ;
    endcase

    // K pipeline: stage 1 forms the beat sums of an accepted K beat, stage 2 accumulates them;
    // at a row's end the score is scaled into the log2 domain, stored, and the running max
    // updated. mrun_q equals m_q outside a K phase (set-up copies it back), so a cluster's
    // running max starts from the max of all clusters before it.
    for (int h = 0; h < NumQHeads; h++) begin
      if (state_q == StK && kv_fire && h < 32'(nq_q)) begin
        s1_sum_q[h] <= beat_dot(q_q[h][PW'(part_q)], kv_data_i);
      end
      if (s1_valid_q && h < 32'(nq_q)) begin
        if (s1_last_row_q) begin
          acc_q[h]             <= 32'd0;
          score_q[s1_tok_q][h] <= fp32_mul(fp32_add(acc_q[h], s1_sum_q[h]), c_q);
          mrun_q[h]            <= fp32_max(mrun_q[h],
                                           fp32_mul(fp32_add(acc_q[h], s1_sum_q[h]), c_q));
        end else begin
          acc_q[h] <= fp32_add(acc_q[h], s1_sum_q[h]);
        end
      end
    end
  end

  assign done_o   = (state_q == StDone);
  assign status_o = status_q;
  assign busy_o   = (state_q != StIdle);
endmodule
