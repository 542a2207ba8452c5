// bf16 x bf16 -> fp32: exact except for overflow (signed Inf) and products below 2^-126
// (flushed to signed zero).
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py bf16_mul.
module nelssa_bf16_mul
  import nelssa_fp_pkg::*;
(
  input  logic [15:0] a_i,
  input  logic [15:0] b_i,
  output logic [31:0] prod_o
);
  assign prod_o = bf16_mul(a_i, b_i);
endmodule
