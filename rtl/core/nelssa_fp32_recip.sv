// 1/x = 2^-e / (1.m), the mantissa from a 128-interval piecewise quadratic, rounded half
// up; 1/+-0 = +-Inf, 1/+-Inf = +-0, results below 2^-126 flush. Error bound: 0.9 ulp.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py recip.
// en_i: the result is used this cycle. Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise, which is what makes a
// Verilated engine evaluate only its active phase; tests run the engine both ways.
module nelssa_fp32_recip
  import nelssa_fp_pkg::*;
(
  input  logic        en_i,
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
`ifdef NELSSA_FP_GATED
  always_comb begin
    y_o = '0;
    if (en_i) y_o = fp32_recip(x_i);
  end
`else
  logic unused_en;
  assign unused_en = en_i;
  assign y_o = fp32_recip(x_i);
`endif
endmodule
