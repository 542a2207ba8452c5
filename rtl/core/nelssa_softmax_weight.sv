// A softmax weight in the log2 domain, exp2(t - m) (nelssa_fp32_add, nelssa_fp32_exp2); 0 while
// the running max m is still -Inf (every score so far is -Inf), so such tokens add nothing
// instead of NaN (-Inf - -Inf). Combinational.
// en_i: the weight is used this cycle (passed to both units; see nelssa_fp32_add).
module nelssa_softmax_weight
  import nelssa_engine_pkg::*;
(
  input  logic        en_i,
  input  logic [31:0] t_i,
  input  logic [31:0] m_i,
  output logic [31:0] w_o
);
  logic [31:0] diff, power;

  nelssa_fp32_add u_diff (
    .en_i,
    .a_i  (t_i),
    .b_i  (m_i ^ 32'h8000_0000),
    .sum_o(diff)
  );
  nelssa_fp32_exp2 u_exp2 (
    .en_i,
    .x_i(diff),
    .y_o(power)
  );

  assign w_o = (m_i == FP32_NEG_INF) ? 32'd0 : power;
endmodule
