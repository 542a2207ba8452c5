// fp32 maximum: NaN if either input is NaN, max(+0, -0) = +0.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py fmax.
module nelssa_fp32_max
  import nelssa_fp_pkg::*;
(
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] max_o
);
  assign max_o = fp32_max(a_i, b_i);
endmodule
