// fp32 multiplier (nelssa_fp_pkg fp32_mul, bit for bit) in the three stages of
// nelssa_fp_pkg (partial products | product | normalisation and rounding), with Latency
// registers from operands to result: 0 combinational; 1 a register after the rounding; 2 also
// one after the product; 3 also one after the partial products; each further one another
// output register. nelssa_fp32_mul uses it at Latency 2 and more.
// A new operand pair every cycle; the result of cycle t's pair is on prod_o at cycle
// t + Latency, with en_i's value of cycle t on en_o (nelssa_pipe: under NELSSA_FP_GATED a
// stage loads only with its enable). The model is hw/model/fp.py fmul;
// tests/rtl/test_fp_stages.py checks it.
module nelssa_fp32_mul_staged
  import nelssa_fp_pkg::*;
#(
  parameter int unsigned Latency = 3  // registers from a_i/b_i to prod_o (cycles)
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        en_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic        en_o,
  output logic [31:0] prod_o
);
  mul_parts_t parts_q;
  mul_sum_t   prod_q;
  logic       parts_en, prod_en;

  nelssa_pipe #(
    .Width  ($bits(mul_parts_t)),
    .Latency((Latency >= 3) ? 1 : 0)
  ) u_parts (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (mul_parts(a_i, b_i)),
    .en_o(parts_en),
    .q_o (parts_q)
  );
  nelssa_pipe #(
    .Width  ($bits(mul_sum_t)),
    .Latency((Latency >= 2) ? 1 : 0)
  ) u_prod (
    .clk_i,
    .rst_ni,
    .en_i(parts_en),
    .d_i (mul_sum(parts_q)),
    .en_o(prod_en),
    .q_o (prod_q)
  );
  // the rounding's register, and those beyond three
  nelssa_pipe #(
    .Width  (32),
    .Latency((Latency >= 3) ? Latency - 2 : ((Latency >= 1) ? 1 : 0))
  ) u_out (
    .clk_i,
    .rst_ni,
    .en_i(prod_en),
    .d_i (mul_round(prod_q)),
    .en_o,
    .q_o (prod_o)
  );
endmodule
