// Dot product of two 64-byte beats of bf16 lanes, taken a chunk of Lanes contiguous lanes a
// cycle (chunk 0 first, LANES / Lanes chunks a beat, in consecutive enabled cycles or with gaps):
// the LANES products (nelssa_bf16_mul) summed in a binary tree of nelssa_fp32_add, level v
// element k = elements 2k and 2k+1 of level v-1, the order of docs/numerics.md and
// hw/model/engine.py. The tree's lower log2(Lanes) levels sum each chunk (the same additions as
// the full tree's over those lanes: the tree pairs contiguous halves); each upper level has one
// adder that pairs the elements of the level below in turn, the first of a pair held in a
// register. The sum of a beat whose last chunk is issued at t appears at
// t + Bf16MulLatency + log2(LANES) * AddLatency (combinational when both are 0).
// en_i: the chunk's sum is used (that many cycles later); it travels with the data, so each
// level's units see the enable of their own operands (see nelssa_fp32_add).
module nelssa_beat_dot
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned Lanes          = 32,  // lanes multiplied a cycle: a power of two, 1..32
  parameter int unsigned Bf16MulLatency = 0,   // latency of each bf16 multiplier
  parameter int unsigned AddLatency     = 0    // latency of each fp32 adder of the tree
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  input  logic                  en_i,
  input  logic [16*Lanes-1:0]   a_i,
  input  logic [16*Lanes-1:0]   b_i,
  output logic [31:0]           dot_o
);
  if (LANES < 2 || (LANES & (LANES - 1)) != 0) begin : gen_check_lanes
    $error("nelssa_beat_dot: LANES must be a power of two of at least 2");
  end
  if (Lanes < 1 || Lanes > LANES || (Lanes & (Lanes - 1)) != 0) begin : gen_check_chunk
    $error("nelssa_beat_dot: Lanes must be a power of two in 1..LANES");
  end

  localparam int unsigned LOW = $clog2(Lanes);             // levels within a chunk
  // levels over the chunks' sums (0 where Lanes is out of range: its check above reports it)
  localparam int unsigned UP = ($clog2(LANES) > LOW) ? $clog2(LANES) - LOW : 0;

  logic [31:0] prod [Lanes];
  logic prod_en, unused_prod;  // the products are valid

  nelssa_pipe #(
    .Width  (1),
    .Latency(Bf16MulLatency)
  ) u_en_mul (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (1'b0),
    .en_o(prod_en),
    .q_o (unused_prod)
  );

  for (genvar i = 0; i < Lanes; i++) begin : gen_lane
    nelssa_bf16_mul #(
      .Latency(Bf16MulLatency)
    ) u_mul (
      .clk_i,
      .rst_ni,
      .en_i,
      .a_i   (a_i[16*i +: 16]),
      .b_i   (b_i[16*i +: 16]),
      .prod_o(prod[i])
    );
  end

  // the lower levels: one array per level, so that no array is both read and written by the
  // tree (a simulator would see that as a combinational loop); each level's enables in its
  // own scope (one vector driven from several levels reads to the simulator as a loop)
  logic [31:0] chunk_sum;  // the chunk's sum (level LOW of the tree)
  logic        chunk_en;   // ... valid
  if (LOW == 0) begin : gen_no_low
    assign chunk_sum = prod[0];
    assign chunk_en  = prod_en;
  end else begin : gen_low
    for (genvar v = 1; v <= LOW; v++) begin : gen_level
      logic [31:0] sum [Lanes >> v];
      logic        op_en, sum_en, unused_sum;  // the operands and the sums of this level valid

      if (v == 1) begin : gen_first
        assign op_en = prod_en;
      end else begin : gen_next
        assign op_en = gen_level[v-1].sum_en;
      end
      nelssa_pipe #(
        .Width  (1),
        .Latency(AddLatency)
      ) u_en (
        .clk_i,
        .rst_ni,
        .en_i(op_en),
        .d_i (1'b0),
        .en_o(sum_en),
        .q_o (unused_sum)
      );

      for (genvar k = 0; k < (Lanes >> v); k++) begin : gen_sum
        logic [31:0] a, b;
        if (v == 1) begin : gen_products
          assign a = prod[2*k];
          assign b = prod[2*k+1];
        end else begin : gen_sums
          assign a = gen_level[v-1].sum[2*k];
          assign b = gen_level[v-1].sum[2*k+1];
        end
        nelssa_fp32_add #(
          .Latency(AddLatency)
        ) u_add (
          .clk_i,
          .rst_ni,
          .en_i (op_en),
          .a_i  (a),
          .b_i  (b),
          .sum_o(sum[k])
        );
      end
    end
    assign chunk_sum = gen_level[LOW].sum[0];
    assign chunk_en  = gen_level[LOW].sum_en;
  end

  // the upper levels: level u's adder takes the elements of level u-1 in pairs, element 2k held
  // until element 2k+1 arrives (a beat gives each level an even number of elements, so the
  // pairing restarts at every beat)
  if (UP == 0) begin : gen_no_up
    assign dot_o = chunk_sum;
    logic unused_up;
    assign unused_up = chunk_en;
  end else begin : gen_up
    for (genvar u = 1; u <= UP; u++) begin : gen_level
      logic [31:0] x, held_q, sum;
      logic        x_en, odd_q, sum_en, unused_sum;  // x valid; x is element 2k+1; sum valid
      if (u == 1) begin : gen_first
        assign x    = chunk_sum;
        assign x_en = chunk_en;
      end else begin : gen_next
        assign x    = gen_level[u-1].sum;
        assign x_en = gen_level[u-1].sum_en;
      end
      nelssa_pipe #(
        .Width  (1),
        .Latency(AddLatency)
      ) u_en (
        .clk_i,
        .rst_ni,
        .en_i(x_en && odd_q),
        .d_i (1'b0),
        .en_o(sum_en),
        .q_o (unused_sum)
      );
      nelssa_fp32_add #(
        .Latency(AddLatency)
      ) u_add (
        .clk_i,
        .rst_ni,
        .en_i (x_en && odd_q),
        .a_i  (held_q),
        .b_i  (x),
        .sum_o(sum)
      );
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni) odd_q <= 1'b0;
        else if (x_en) odd_q <= !odd_q;
      end
      // (no reset: read only with odd_q, after a write)
      always_ff @(posedge clk_i) begin
        if (x_en && !odd_q) held_q <= x;
      end
    end
    logic unused_last_en;
    assign unused_last_en = gen_level[UP].sum_en;
    assign dot_o = gen_level[UP].sum;
  end
endmodule
