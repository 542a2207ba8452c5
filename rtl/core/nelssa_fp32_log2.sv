// log2(x) = e + log2(1.m), the table part with 30 fraction bits, summed exactly in fixed
// point, rounded half up; log2(+-0) = -Inf, log2(x < 0) = NaN. Error: 2^-26 + half an ulp.
// Latency 0: combinational; Latency L: the result of the inputs of cycle t at t + L, the
// function followed by L registers (nelssa_pipe) that a vendor flow's retiming moves into it.
// The implementation is nelssa_fp_pkg, the model hw/model/fp.py log2.
// en_i: the result is used (Latency cycles later). Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise (en_i travels down the pipe
// with the result), which is what makes a Verilated engine evaluate only its active phase;
// tests run the engine both ways.
module nelssa_fp32_log2
  import nelssa_fp_pkg::*;
#(
  parameter int unsigned Latency = 0  // cycles from the inputs to the result
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        en_i,
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  logic [31:0] res, res_q;
  logic        res_en;

`ifdef NELSSA_FP_GATED
  always_comb begin
    res = '0;
    if (en_i) res = fp32_log2(x_i);
  end
  // (at Latency 0 res is the result, gated already)
  assign y_o = (Latency == 0) ? res : res_en ? res_q : '0;
`else
  logic unused_en;
  assign unused_en = res_en;
  assign res = fp32_log2(x_i);
  assign y_o = res_q;
`endif

  nelssa_pipe #(
    .Width  (32),
    .Latency(Latency)
  ) u_pipe (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (res),
    .en_o(res_en),
    .q_o (res_q)
  );
endmodule
