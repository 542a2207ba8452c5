// fp32 adder (nelssa_fp_pkg fp32_add, bit for bit) in the three stages of nelssa_fp_stages_pkg
// (alignment | sum and leading zeros | normalisation and rounding), with Latency registers from
// operands to result: 0 combinational; 1 a register after the rounding; 2 also one after the
// alignment (cut there, the two halves are closer in delay than cut after the sum:
// docs/results/fpga_units.md); 3 also one after the sum; each further one another output
// register.
// A new operand pair every cycle; the result of cycle t's pair is on sum_o at cycle
// t + Latency. The model is hw/model/fp.py fadd; tests/rtl/test_fp_stages.py checks it.
module nelssa_fp32_add_staged
  import nelssa_fp_stages_pkg::*;
#(
  parameter int unsigned Latency = 3  // registers from a_i/b_i to sum_o (cycles)
) (
  input  logic        clk_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] sum_o
);
  add_align_t align_q;
  add_sum_t sum_q;

  nelssa_pipe #(.Width($bits(add_align_t)), .Depth((Latency >= 2) ? 1 : 0)) u_align (
    .clk_i(clk_i),
    .d_i  (add_align(a_i, b_i)),
    .q_o  (align_q)
  );
  nelssa_pipe #(.Width($bits(add_sum_t)), .Depth((Latency >= 3) ? 1 : 0)) u_sum (
    .clk_i(clk_i),
    .d_i  (add_sum(align_q)),
    .q_o  (sum_q)
  );
  // the rounding's register, and those beyond three
  nelssa_pipe #(
    .Width(32),
    .Depth((Latency >= 3) ? Latency - 2 : ((Latency >= 1) ? 1 : 0))
  ) u_out (
    .clk_i(clk_i),
    .d_i  (add_round(sum_q)),
    .q_o  (sum_o)
  );
endmodule
