// fp32 multiplier, round to nearest even; a product whose exact value is below 2^-126
// flushes to signed zero.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py fmul.
// en_i: the result is used this cycle. Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise, which is what makes a
// Verilated engine evaluate only its active phase; tests run the engine both ways.
module nelssa_fp32_mul
  import nelssa_fp_pkg::*;
(
  input  logic        en_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] prod_o
);
`ifdef NELSSA_FP_GATED
  always_comb begin
    prod_o = '0;
    if (en_i) prod_o = fp32_mul(a_i, b_i);
  end
`else
  logic unused_en;
  assign unused_en = en_i;
  assign prod_o = fp32_mul(a_i, b_i);
`endif
endmodule
