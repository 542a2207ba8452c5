// fp32 multiplier, round to nearest even; a product whose exact value is below 2^-126
// flushes to signed zero.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py fmul.
module nelssa_fp32_mul
  import nelssa_fp_pkg::*;
(
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] prod_o
);
  assign prod_o = fp32_mul(a_i, b_i);
endmodule
