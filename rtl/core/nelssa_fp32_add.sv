// fp32 adder, round to nearest even; subnormals read as zero and tiny sums flush to zero.
// Latency 0: combinational; Latency L: the result of the inputs of cycle t at t + L, the
// function followed by a register at L = 1, the hand-staged unit (nelssa_fp32_add_staged) at 2 and more.
// The implementation is nelssa_fp_pkg, the model hw/model/fp.py fadd.
// en_i: the result is used (Latency cycles later). Hardware ignores it. A simulation built with
// NELSSA_FP_GATED computes only then and outputs zero otherwise (en_i travels down the pipe
// with the result), which is what makes a Verilated engine evaluate only its active phase;
// tests run the engine both ways.
module nelssa_fp32_add
  import nelssa_fp_pkg::*;
#(
  parameter int unsigned Latency = 0  // cycles from the inputs to the result
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        en_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] sum_o
);
  logic [31:0] res_q;  // the result, Latency cycles after its inputs
  logic        res_en;  // en_i of those inputs

`ifdef NELSSA_FP_GATED
  // (at Latency 0 the function's output is gated already)
  assign sum_o = (Latency == 0 || res_en) ? res_q : '0;
`else
  logic unused_en;
  assign unused_en = res_en;
  assign sum_o = res_q;
`endif

  // Latency 0 and 1: the function, then its register (the cheapest to simulate); 2 and more:
  // the hand-staged unit, registers between its stages (docs/results/fpga_units.md: a vendor
  // flow's retiming is not needed to reach the staged clock), bit for bit the same function
  if (Latency >= 2) begin : gen_staged
    nelssa_fp32_add_staged #(
      .Latency(Latency)
    ) u_staged (
      .clk_i,
      .rst_ni,
      .en_i,
      .a_i,
      .b_i,
      .en_o  (res_en),
      .sum_o(res_q)
    );
  end else begin : gen_func
    logic [31:0] res;
`ifdef NELSSA_FP_GATED
    always_comb begin
      res = '0;
      if (en_i) res = fp32_add(a_i, b_i);
    end
`else
    assign res = fp32_add(a_i, b_i);
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
  end
endmodule
