// Dot product of two 64-byte beats of bf16 lanes: LANES products (nelssa_bf16_mul) summed in a
// binary tree of nelssa_fp32_add, level v element k = elements 2k and 2k+1 of level v-1, the
// order of docs/numerics.md and hw/model/engine.py. The sum of the beats of cycle t appears at
// t + Bf16MulLatency + log2(LANES) * AddLatency (combinational when both are 0).
// en_i: the sum is used (that many cycles later); it travels with the data, so each level's
// units see the enable of their own operands (see nelssa_fp32_add).
module nelssa_beat_dot
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned Bf16MulLatency = 0,  // latency of each bf16 multiplier
  parameter int unsigned AddLatency     = 0   // latency of each fp32 adder of the tree
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  input  logic              en_i,
  input  logic [BEAT_W-1:0] a_i,
  input  logic [BEAT_W-1:0] b_i,
  output logic [31:0]       dot_o
);
  if (LANES < 2 || (LANES & (LANES - 1)) != 0) begin : gen_check_lanes
    $error("nelssa_beat_dot: LANES must be a power of two of at least 2");
  end

  localparam int unsigned LEVELS = $clog2(LANES);

  logic [31:0] prod [LANES];
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

  for (genvar i = 0; i < LANES; i++) begin : gen_lane
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

  // one array per level, so that no array is both read and written by the tree (a simulator
  // would see that as a combinational loop)
  // (each level's enables in its own scope: one vector driven from several levels reads to
  // the simulator as a loop)
  for (genvar v = 1; v <= LEVELS; v++) begin : gen_level
    logic [31:0] sum [LANES >> v];
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

    for (genvar k = 0; k < (LANES >> v); k++) begin : gen_sum
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

  logic unused_last_en;
  assign unused_last_en = gen_level[LEVELS].sum_en;
  assign dot_o = gen_level[LEVELS].sum[0];
endmodule
