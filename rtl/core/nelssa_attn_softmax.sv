// The online-softmax state of one query head of the attention engine (nelssa_attn_engine): the
// running max over the clusters so far (m) and including the current one (mrun), the current
// cluster's scores, each overwritten by its weight p_j = exp2(t_j - mrun) in the set-up (the
// scores are not read again), and alpha = exp2(m - mrun), the rescale of what the clusters
// before gave. mrun equals m outside a K phase (the set-up copies it back), so a cluster's
// running max starts from the max of all clusters before it. The engine's positions
// (softmax_ctrl_t) say when a score or a weight is written.
module nelssa_attn_softmax
  import nelssa_engine_pkg::*;
  import nelssa_attn_pkg::*;
#(
  parameter int unsigned MaxClusterTokens = 64,  // score-buffer depth in tokens, 1..255
  parameter int unsigned AddLatency       = 0,   // cycles of the fp32 adder
  parameter int unsigned Exp2Latency      = 0    // cycles of exp2
) (
  input  logic          clk_i,
  input  logic          rst_ni,
  input  logic          on_i,     // the head is in this command
  input  softmax_ctrl_t ctrl_i,
  input  logic [31:0]   score_i,  // the K stage's score of token ctrl_i.sc_tok
  output logic [31:0]   p_o,      // the weight of token ctrl_i.tok
  output logic [31:0]   alpha_o,  // the rescale of the clusters before the current one
  output logic [31:0]   m_o       // the running max (log2 domain)
);
  if (MaxClusterTokens < 1 || MaxClusterTokens > 255) begin : gen_check_tokens
    $error("nelssa_attn_softmax: MaxClusterTokens must be in 1..255");
  end
  if (AddLatency > 15 || Exp2Latency > 15) begin : gen_check_latency
    $error("nelssa_attn_softmax: every unit latency must be in 0..15");
  end

  localparam int unsigned TW = (MaxClusterTokens > 1) ? $clog2(MaxClusterTokens) : 1;

  logic [31:0] score_q [MaxClusterTokens];  // scores of the current cluster, then weights
  logic [31:0] m_q;      // running max (log2 domain)
  logic [31:0] mrun_q;   // max including the current cluster
  logic [31:0] alpha_q;  // rescale of the clusters before: exp2(m - mrun)
  logic [31:0] score_max, alpha_w, p_w;
  logic unused_ctrl;
  assign unused_ctrl = ^{ctrl_i.sc_tok, ctrl_i.wl_idx, ctrl_i.wout_tok, ctrl_i.tok};  // (high bits)

  assign p_o     = score_q[TW'(ctrl_i.tok)];
  assign alpha_o = alpha_q;
  assign m_o     = m_q;

  nelssa_fp32_max u_max (
    .en_i (ctrl_i.sc_en && on_i),
    .a_i  (mrun_q),
    .b_i  (score_i),
    .max_o(score_max)
  );
  // set-up: the rescale of what the clusters before gave; the cluster's weights in turn
  nelssa_softmax_weight #(
    .AddLatency (AddLatency),
    .Exp2Latency(Exp2Latency)
  ) u_alpha (
    .clk_i,
    .rst_ni,
    .en_i(ctrl_i.setup_go && on_i),
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
    .en_i(ctrl_i.wl_go && on_i),
    .t_i (score_q[TW'(ctrl_i.wl_idx)]),
    .m_i (mrun_q),
    .w_o (p_w)
  );

  // (no reset: every command initialises what it reads)
  always_ff @(posedge clk_i) begin
    if (ctrl_i.cmd_take) begin
      m_q    <= FP32_NEG_INF;
      mrun_q <= FP32_NEG_INF;
    end
    if (ctrl_i.setup && on_i) m_q <= mrun_q;
    if (ctrl_i.alpha_load && on_i) alpha_q <= alpha_w;
    if (ctrl_i.wout_en && on_i) score_q[TW'(ctrl_i.wout_tok)] <= p_w;
    if (ctrl_i.sc_en && on_i) begin
      score_q[TW'(ctrl_i.sc_tok)] <= score_i;
      mrun_q                      <= score_max;
    end
  end
endmodule
