// log2(x) = e + log2(1.m), the table part with 30 fraction bits, summed exactly in fixed
// point, rounded half up; log2(+-0) = -Inf, log2(x < 0) = NaN. Error: 2^-26 + half an ulp.
// Combinational; the implementation is nelssa_fp_pkg, the model hw/model/fp.py log2.
// en_i: the result is used this cycle. Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise, which is what makes a
// Verilated engine evaluate only its active phase; tests run the engine both ways.
module nelssa_fp32_log2
  import nelssa_fp_pkg::*;
(
  input  logic        en_i,
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
`ifdef NELSSA_FP_GATED
  always_comb begin
    y_o = '0;
    if (en_i) y_o = fp32_log2(x_i);
  end
`else
  logic unused_en;
  assign unused_en = en_i;
  assign y_o = fp32_log2(x_i);
`endif
endmodule
