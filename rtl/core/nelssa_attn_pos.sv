// The positions of the attention engine (nelssa_attn_engine): what travels beside the datapath's
// pipelines, from the control's phase events (phase_i) to the buses that tell each stage when
// its operands are valid. A K or V beat is issued a chunk of ComputeLanes lanes a cycle.
// K: a beat's position beside its dot product (DotLatency, from its last chunk), stage 1 that
// holds its beat sum, the row's fold (stage k adds beat k, AddLatency each), the scaling
// (MulLatency: the score is written). Set-up: alpha at its first cycle, then the cluster's
// weights, one token a cycle (WeightLatency: each written over its score). V: a chunk's part,
// chunk and whether it is of its cluster's first row, to the issue of its adds (MulLatency
// later) and to their results (AddLatency later).
`include "nelssa_assert.svh"

module nelssa_attn_pos
  import nelssa_engine_pkg::*;
  import nelssa_attn_pkg::*;
#(
  parameter int unsigned HeadDim          = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned MaxClusterTokens = 64,   // score-buffer depth in tokens, 1..255
  parameter int unsigned ComputeLanes     = 32,   // lanes computed a cycle: a power of two
  parameter int unsigned AddLatency       = 0,    // cycles of the fp32 adder
  parameter int unsigned MulLatency       = 0,    // cycles of the fp32 multiplier
  parameter int unsigned DotLatency       = 0,    // cycles of a beat's dot product
  parameter int unsigned WeightLatency    = 0     // cycles of a softmax weight (subtract, exp2)
) (
  input  logic          clk_i,
  input  logic          rst_ni,
  input  phase_t        phase_i,
  output kscore_ctrl_t  kscore_o,
  output softmax_ctrl_t softmax_o,
  output vacc_ctrl_t    vacc_o
);
  if (HeadDim != 64 && HeadDim != 128) begin : gen_check_head_dim
    $error("nelssa_attn_pos: HeadDim must be 64 or 128");
  end
  if (MaxClusterTokens < 1 || MaxClusterTokens > 255) begin : gen_check_tokens
    $error("nelssa_attn_pos: MaxClusterTokens must be in 1..255");
  end
  if (AddLatency > 15 || MulLatency > 15) begin : gen_check_latency
    $error("nelssa_attn_pos: every unit latency must be in 0..15");
  end
  if (ComputeLanes < 1 || ComputeLanes > LANES || (ComputeLanes & (ComputeLanes - 1)) != 0)
  begin : gen_check_lanes
    $error("nelssa_attn_pos: ComputeLanes must be a power of two in 1..32");
  end
  // a beat's dot product is a bf16 multiply and a tree of five adds (nelssa_beat_dot); a
  // weight one subtraction and an exp2 (nelssa_softmax_weight)
  if (DotLatency < $clog2(LANES) * AddLatency || DotLatency > 15 + $clog2(LANES) * AddLatency)
  begin : gen_check_dot
    $error("nelssa_attn_pos: DotLatency must be Bf16MulLatency (0..15) + 5 * AddLatency");
  end
  if (WeightLatency < AddLatency || WeightLatency > AddLatency + 15) begin : gen_check_weight
    $error("nelssa_attn_pos: WeightLatency must be AddLatency + Exp2Latency");
  end

  localparam int unsigned TW = (MaxClusterTokens > 1) ? $clog2(MaxClusterTokens) : 1;
  localparam int unsigned MAX_BPR = HeadDim / LANES;                 // beats per row
  localparam int unsigned PW = (MAX_BPR > 1) ? $clog2(MAX_BPR) : 1;  // beat-in-row width
  localparam int unsigned CHUNKS = LANES / ComputeLanes;             // chunks a beat
  localparam int unsigned CW = (CHUNKS > 1) ? $clog2(CHUNKS) : 1;    // chunk index width

  logic [PW-1:0] part;       // beat within the row, as an index
  logic [CW-1:0] chunk;      // chunk within the beat, as an index
  logic          first_row;  // the beat is of its cluster's first row
  logic          unused_phase;
  assign part         = PW'(phase_i.part);
  assign chunk        = CW'(phase_i.chunk);
  assign first_row    = (phase_i.tok == 8'd0);
  assign unused_phase = ^{phase_i.part, phase_i.chunk};  // (its high bits)

  // ---------------------------------------------------------------------------------------------
  // K: stage 1 holds the beat sums of a K beat, DotLatency + 1 cycles after its last chunk
  logic          s1_valid_q, s1_last_row_q;
  logic [TW-1:0] s1_tok_q;
  logic [PW-1:0] s1_part_q;
  logic          dot_en, sc_en;
  logic [TW-1:0] dot_tok, sc_tok;
  logic [PW-1:0] dot_part;
  logic          dot_last;
  logic          fold_go, fold_done;  // a row's fold starts; its folded sum is ready
  logic [TW-1:0] fold_done_tok;
  logic [2:0]    fold_en;             // bit k-1: the fold's stage k has valid operands

  nelssa_pipe #(
    .Width  (TW + PW + 1),
    .Latency(DotLatency)
  ) u_dot_pos (
    .clk_i,
    .rst_ni,
    .en_i(phase_i.k_chunk && phase_i.last_chunk),
    .d_i ({TW'(phase_i.tok), part, phase_i.row_end}),
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
  for (genvar k = 1; k < 4; k++) begin : gen_fold_en
    if (k < MAX_BPR) begin : gen_stage
      assign fold_en[k-1] = gen_fold_pos[k].en;
    end else begin : gen_none
      assign fold_en[k-1] = 1'b0;
    end
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

  // ---------------------------------------------------------------------------------------------
  // Set-up: alpha (one per head) at the set-up's first cycle; then the cluster's weights
  // p_j = exp2(t_j - m), one token a cycle, each written over its score (the scores are not
  // read again): a V row reads its p there, and V starts when alpha and p_0 are written
  logic          wl_active_q, wl_active_d, wl_go, wout_en, alpha_load, unused_alpha;
  logic [7:0]    wl_tok_q, wl_tok_d, wl_idx;
  logic [TW-1:0] wout_tok;
  logic [7:0]    p_cnt_q, p_cnt_d;  // weights of the current cluster written

  assign wl_go  = (phase_i.setup_go || wl_active_q) && phase_i.weights_on;
  assign wl_idx = phase_i.setup_go ? 8'd0 : wl_tok_q;
  always_comb begin
    wl_active_d = wl_active_q && phase_i.weights_on;
    wl_tok_d    = wl_tok_q;
    if (wl_go) begin
      wl_active_d = (wl_idx != phase_i.ntok - 8'd1);
      wl_tok_d    = wl_idx + 8'd1;
    end
    p_cnt_d = (phase_i.setup_go ? 8'd0 : p_cnt_q) + 8'(wout_en);
  end
  nelssa_pipe #(
    .Width  (TW),
    .Latency(WeightLatency)
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
    .Latency(WeightLatency)
  ) u_alpha_load (
    .clk_i,
    .rst_ni,
    .en_i(phase_i.setup_go),
    .d_i (1'b0),
    .en_o(alpha_load),
    .q_o (unused_alpha)
  );

  // ---------------------------------------------------------------------------------------------
  // V: the issue of a chunk's adds (vi_*: p*v and the rescale are ready) and their results
  // (vo_*)
  logic          vi_en, vi_first, vo_en;
  logic [PW-1:0] vi_part, vo_part;
  logic [CW-1:0] vi_chunk, vo_chunk;

  nelssa_pipe #(
    .Width  (PW + CW + 1),
    .Latency(MulLatency)
  ) u_v_issue (
    .clk_i,
    .rst_ni,
    .en_i(phase_i.v_chunk),
    .d_i ({part, chunk, first_row}),
    .en_o(vi_en),
    .q_o ({vi_part, vi_chunk, vi_first})
  );
  nelssa_pipe #(
    .Width  (PW + CW),
    .Latency(AddLatency)
  ) u_v_out (
    .clk_i,
    .rst_ni,
    .en_i(vi_en),
    .d_i ({vi_part, vi_chunk}),
    .en_o(vo_en),
    .q_o ({vo_part, vo_chunk})
  );

  // ---------------------------------------------------------------------------------------------
  // The stages' buses
  assign kscore_o = '{
    k_chunk:     phase_i.k_chunk,
    chunk:       phase_i.chunk,
    part:        phase_i.part,
    dot_en:      dot_en,
    s1_valid:    s1_valid_q,
    s1_last_row: s1_last_row_q,
    s1_part:     2'(s1_part_q),
    bpr:         phase_i.bpr,
    fold_go:     fold_go,
    fold_en:     fold_en,
    fold_done:   fold_done
  };
  assign softmax_o = '{
    cmd_take:   phase_i.cmd_take,
    setup:      phase_i.setup,
    setup_go:   phase_i.setup_go,
    alpha_load: alpha_load,
    sc_en:      sc_en,
    sc_tok:     8'(sc_tok),
    wl_go:      wl_go,
    wl_idx:     wl_idx,
    wout_en:    wout_en,
    wout_tok:   8'(wout_tok),
    tok:        phase_i.tok
  };
  assign vacc_o = '{
    cmd_take:  phase_i.cmd_take,
    v_chunk:   phase_i.v_chunk,
    chunk:     phase_i.chunk,
    part:      phase_i.part,
    first_row: first_row,
    vi_en:     vi_en,
    vi_chunk:  5'(vi_chunk),
    vi_part:   2'(vi_part),
    vi_first:  vi_first,
    vo_en:     vo_en,
    vo_chunk:  5'(vo_chunk),
    vo_part:   2'(vo_part)
  };

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      s1_valid_q  <= 1'b0;
      wl_active_q <= 1'b0;
      wl_tok_q    <= 8'd0;
      p_cnt_q     <= 8'd0;
    end else begin
      s1_valid_q  <= dot_en;
      wl_active_q <= wl_active_d;
      wl_tok_q    <= wl_tok_d;
      p_cnt_q     <= p_cnt_d;
    end
  end
  // (no reset: read only under s1_valid_q)
  always_ff @(posedge clk_i) begin
    s1_tok_q      <= dot_tok;
    s1_part_q     <= dot_part;
    s1_last_row_q <= dot_last;
  end

  // A V row's weight is written before the row reads it; a score and a weight are never
  // written in one cycle (the weights overwrite the scores they come from); nothing of a
  // command is left in a pipeline when the next is taken.
  logic fold_busy;
  assign fold_busy = fold_done || gen_fold_pos[MAX_BPR-1].busy;
  `NELSSA_ASSERT(WeightReady, !phase_i.v_chunk || phase_i.tok < p_cnt_q)
  `NELSSA_ASSERT_NEVER(ScoreWeightClash, sc_en && wout_en)
  `NELSSA_ASSERT_NEVER(PipeBusyAtTake, phase_i.cmd_take &&
                       (dot_en || s1_valid_q || fold_busy || sc_en || wl_go || wout_en ||
                        vi_en || vo_en))
endmodule
