// log2(x) = e + log2(1.m), the table part with 30 fraction bits, summed exactly in fixed
// point, rounded half up; log2(+-0) = -Inf, log2(x < 0) = NaN. Error: 2^-26 + half an ulp.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py log2.
module nelssa_fp32_log2
  import nelssa_fp_pkg::*;
(
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  assign y_o = fp32_log2(x_i);
endmodule
