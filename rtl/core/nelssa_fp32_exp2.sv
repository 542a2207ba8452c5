// 2^x: range reduction x = n + f (floor, 24 fraction bits), 2^f from a 128-interval
// piecewise quadratic, rounded half up; below 2^-126 flushes to +0, from 2^128 on is +Inf.
// Error bound: 1.25 ulp.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py exp2.
// en_i: the result is used this cycle. Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise, which is what makes a
// Verilated engine evaluate only its active phase; tests run the engine both ways.
module nelssa_fp32_exp2
  import nelssa_fp_pkg::*;
(
  input  logic        en_i,
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
`ifdef NELSSA_FP_GATED
  always_comb begin
    y_o = '0;
    if (en_i) y_o = fp32_exp2(x_i);
  end
`else
  logic unused_en;
  assign unused_en = en_i;
  assign y_o = fp32_exp2(x_i);
`endif
endmodule
