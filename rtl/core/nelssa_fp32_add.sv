// fp32 adder, round to nearest even; subnormals read as zero and tiny sums flush to zero.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py fadd.
module nelssa_fp32_add
  import nelssa_fp_pkg::*;
(
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] sum_o
);
  assign sum_o = fp32_add(a_i, b_i);
endmodule
