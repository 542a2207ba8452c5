// A softmax weight in the log2 domain, exp2(t - m) (nelssa_fp32_add, nelssa_fp32_exp2); 0 while
// the running max m is still -Inf (every score so far is -Inf), so such tokens add nothing
// instead of NaN (-Inf - -Inf). The weight of the inputs of cycle t appears at
// t + AddLatency + Exp2Latency (combinational when both are 0).
// en_i: the weight is used (that many cycles later; it travels with the data, see
// nelssa_fp32_add).
module nelssa_softmax_weight
  import nelssa_engine_pkg::*;
#(
  parameter int unsigned AddLatency  = 0,  // latency of the subtraction t - m
  parameter int unsigned Exp2Latency = 0   // latency of exp2
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        en_i,
  input  logic [31:0] t_i,
  input  logic [31:0] m_i,
  output logic [31:0] w_o
);
  logic [31:0] diff, power;
  logic        diff_en, no_max, unused_en;

  nelssa_fp32_add #(
    .Latency(AddLatency)
  ) u_diff (
    .clk_i,
    .rst_ni,
    .en_i,
    .a_i  (t_i),
    .b_i  (m_i ^ 32'h8000_0000),
    .sum_o(diff)
  );
  // the enable of exp2's operand, and whether m was -Inf, beside the units
  nelssa_pipe #(
    .Width  (1),
    .Latency(AddLatency)
  ) u_en (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (1'b0),
    .en_o(diff_en),
    .q_o (unused_en)
  );
  nelssa_fp32_exp2 #(
    .Latency(Exp2Latency)
  ) u_exp2 (
    .clk_i,
    .rst_ni,
    .en_i(diff_en),
    .x_i (diff),
    .y_o (power)
  );
  logic unused_no_max_en;
  nelssa_pipe #(
    .Width  (1),
    .Latency(AddLatency + Exp2Latency)
  ) u_no_max (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (m_i == FP32_NEG_INF),
    .en_o(unused_no_max_en),
    .q_o (no_max)
  );

  assign w_o = no_max ? 32'd0 : power;
endmodule
