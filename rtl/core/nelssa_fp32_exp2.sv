// 2^x: range reduction x = n + f (floor, 24 fraction bits), 2^f from a 128-interval
// piecewise quadratic, rounded half up; below 2^-126 flushes to +0, from 2^128 on is +Inf.
// Error bound: 1.25 ulp.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py exp2.
module nelssa_fp32_exp2
  import nelssa_fp_pkg::*;
(
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  assign y_o = fp32_exp2(x_i);
endmodule
