// 1/x = 2^-e / (1.m), the mantissa from a 128-interval piecewise quadratic, rounded half
// up; 1/+-0 = +-Inf, 1/+-Inf = +-0, results below 2^-126 flush. Error bound: 0.9 ulp.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py recip.
module nelssa_fp32_recip
  import nelssa_fp_pkg::*;
(
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  assign y_o = fp32_recip(x_i);
endmodule
