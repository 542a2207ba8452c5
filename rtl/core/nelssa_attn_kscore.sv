// The K stage of one query head of the attention engine (nelssa_attn_engine): the head's Q row,
// each K beat's dot product with it (nelssa_beat_dot, a chunk of ComputeLanes lanes a cycle),
// the row's beat sums folded in beat order, and the folded sum scaled into the log2 domain (the
// score). The engine's positions (kscore_ctrl_t) say when each step's operands are valid; a unit's enable is exactly the
// condition under which its result is used (see nelssa_attn_engine). A score appears on score_o
// MulLatency cycles after ctrl_i.fold_done.
module nelssa_attn_kscore
  import nelssa_engine_pkg::*;
  import nelssa_attn_pkg::*;
#(
  parameter int unsigned HeadDim        = 128,  // largest head_dim accepted: 64 or 128
  parameter int unsigned ComputeLanes   = 32,   // lanes multiplied a cycle: a power of two
  parameter int unsigned Bf16MulLatency = 0,    // cycles of the bf16 x bf16 multiplier
  parameter int unsigned AddLatency     = 0,    // cycles of the fp32 adder
  parameter int unsigned MulLatency     = 0     // cycles of the fp32 multiplier
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  input  logic              on_i,       // the head is in this command
  input  logic              q_load_i,   // a Q beat of this head (beat ctrl_i.part of its row)
  input  kscore_ctrl_t      ctrl_i,
  input  logic [BEAT_W-1:0] kv_data_i,  // the Q beat
  input  logic [16*ComputeLanes-1:0] kv_chunk_i,  // the K chunk
  input  logic [31:0]       c_i,        // scale * log2(e), fp32
  output logic [31:0]       score_o
);
  if (HeadDim != 64 && HeadDim != 128) begin : gen_check_head_dim
    $error("nelssa_attn_kscore: HeadDim must be 64 or 128");
  end
  if (Bf16MulLatency > 15 || AddLatency > 15 || MulLatency > 15) begin : gen_check_latency
    $error("nelssa_attn_kscore: every unit latency must be in 0..15");
  end

  if (ComputeLanes < 1 || ComputeLanes > LANES || (ComputeLanes & (ComputeLanes - 1)) != 0)
  begin : gen_check_lanes
    $error("nelssa_attn_kscore: ComputeLanes must be a power of two in 1..32");
  end

  localparam int unsigned MAX_BPR = HeadDim / LANES;                 // beats per row
  localparam int unsigned PW = (MAX_BPR > 1) ? $clog2(MAX_BPR) : 1;  // beat-in-row width
  localparam int unsigned CHUNKS = LANES / ComputeLanes;             // chunks a beat
  localparam int unsigned CW = (CHUNKS > 1) ? $clog2(CHUNKS) : 1;    // chunk index width
  localparam int unsigned CB = 16 * ComputeLanes;                    // bits of a chunk

  logic [MAX_BPR-1:0][BEAT_W-1:0] q_q;  // query row, as it arrived
  logic [31:0] s1_sum_q;                // stage 1: sum of a beat
  logic [MAX_BPR-2:0][31:0] row_q;      // the beat sums of the row so far, at its end aligned

  logic [31:0] dot_sum;
  logic [MAX_BPR-1:0][31:0] fold_b;  // a row's beat sums, zeros in front of a short row
  logic [31:0] fold_x0;              // 0 + b_0
  logic [PW-1:0] part;               // beat within the row, as an index
  logic [PW-1:0] row_slot;           // where beat s1_part of a row lies in fold_b
  logic [CW-1:0] chunk;              // chunk of the K beat, as an index
  logic [BEAT_W-1:0] q_beat;         // the Q beat the K chunk meets
  logic [CB-1:0] q_chunk;            // ... its chunk
  logic unused_ctrl;
  assign part        = PW'(ctrl_i.part);
  assign chunk       = CW'(ctrl_i.chunk);
  assign q_beat      = q_q[part];
  if (CHUNKS == 1) begin : gen_whole
    logic unused_chunk;
    assign unused_chunk = ^chunk;
    assign q_chunk = q_beat;
  end else begin : gen_chunk
    assign q_chunk = q_beat[32'(chunk) * CB +: CB];
  end
  assign row_slot    = PW'(32'(ctrl_i.s1_part) + MAX_BPR - 32'(ctrl_i.bpr));
  // (the bits HeadDim 64 or fewer chunks leave)
  assign unused_ctrl = ^{ctrl_i.part, ctrl_i.s1_part, ctrl_i.fold_en, ctrl_i.chunk};

  nelssa_beat_dot #(
    .Lanes         (ComputeLanes),
    .Bf16MulLatency(Bf16MulLatency),
    .AddLatency    (AddLatency)
  ) u_dot (
    .clk_i,
    .rst_ni,
    .en_i (ctrl_i.k_chunk && on_i),
    .a_i  (q_chunk),
    .b_i  (kv_chunk_i),
    .dot_o(dot_sum)
  );
  // the fold (((0 + b_0) + b_1) + ...): 0 + b_0 is b_0 with -0 made +0 (a beat sum is an
  // adder's result: no subnormal, NaN canonical), so the first add needs no adder; a row of
  // head_dim 64 in an engine of HeadDim 128 is folded behind two zeros, which gives the same
  // bits ((0 + 0) + 0 = +0), so every row takes the same stages
  for (genvar k = 0; k < MAX_BPR; k++) begin : gen_fold_b
    if (k < MAX_BPR - 1) begin : gen_held
      assign fold_b[k] = (32'(k) < MAX_BPR - 32'(ctrl_i.bpr)) ? 32'd0 : row_q[k];
    end else begin : gen_last
      assign fold_b[k] = s1_sum_q;
    end
  end
  assign fold_x0 = (fold_b[0] == 32'h8000_0000) ? 32'd0 : fold_b[0];
  for (genvar k = 1; k < MAX_BPR; k++) begin : gen_fold
    logic [31:0] b_d;   // beat sum k, delayed to its stage
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
      .en_i(ctrl_i.fold_go && on_i),
      .d_i (fold_b[k]),
      .en_o(unused_b),
      .q_o (b_d)
    );
    nelssa_fp32_add #(
      .Latency(AddLatency)
    ) u_add (
      .clk_i,
      .rst_ni,
      .en_i (ctrl_i.fold_en[k-1] && on_i),
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
    .en_i  (ctrl_i.fold_done && on_i),
    .a_i   (gen_fold[MAX_BPR-1].x),
    .b_i   (c_i),
    .prod_o(score_o)
  );

  // (no reset: every command initialises what it reads)
  always_ff @(posedge clk_i) begin
    if (q_load_i) begin
      // verilator unroll_full
      for (int b = 0; b < MAX_BPR; b++) begin
        if (part == PW'(b)) q_q[b] <= kv_data_i;
      end
    end
    if (ctrl_i.dot_en && on_i) s1_sum_q <= dot_sum;
    if (ctrl_i.s1_valid && !ctrl_i.s1_last_row && on_i) begin
      // verilator unroll_full
      for (int b = 0; b < MAX_BPR - 1; b++) begin
        if (row_slot == PW'(b)) row_q[b] <= s1_sum_q;
      end
    end
  end
endmodule
