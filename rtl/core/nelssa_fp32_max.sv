// fp32 maximum: NaN if either input is NaN, max(+0, -0) = +0.
// Combinational, without a latency parameter: a compare and a select (the depth of an
// adder's exponent compare), and the engine's running max over a cluster's rows is
// loop-carried, so registers here would only slow the K phase.
// The implementation is nelssa_fp_pkg, the model hw/model/fp.py fmax.
// en_i: the result is used this cycle. Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise, which is what makes a
// Verilated engine evaluate only its active phase; tests run the engine both ways.
module nelssa_fp32_max
  import nelssa_fp_pkg::*;
(
  input  logic        en_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] max_o
);
`ifdef NELSSA_FP_GATED
  always_comb begin
    max_o = '0;
    if (en_i) max_o = fp32_max(a_i, b_i);
  end
`else
  logic unused_en;
  assign unused_en = en_i;
  assign max_o = fp32_max(a_i, b_i);
`endif
endmodule
