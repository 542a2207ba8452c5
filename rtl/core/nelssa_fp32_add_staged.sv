// fp32 adder (nelssa_fp_pkg fp32_add, bit for bit) in the three stages of nelssa_fp_pkg
// (alignment | sum and leading zeros | normalisation and rounding), with Latency registers from
// operands to result: 0 combinational; 1 a register after the rounding; 2 also one after the
// alignment (cut there, the two halves are closer in delay than cut after the sum:
// docs/results/fpga_units.md); 3 also one after the sum; each further one another output
// register. nelssa_fp32_add uses it at Latency 2 and more.
// A new operand pair every cycle; the result of cycle t's pair is on sum_o at cycle
// t + Latency, with en_i's value of cycle t on en_o (nelssa_pipe: under NELSSA_FP_GATED a
// stage loads only with its enable). The model is hw/model/fp.py fadd;
// tests/rtl/test_fp_stages.py checks it.
module nelssa_fp32_add_staged
  import nelssa_fp_pkg::*;
#(
  parameter int unsigned Latency = 3  // registers from a_i/b_i to sum_o (cycles)
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        en_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic        en_o,
  output logic [31:0] sum_o
);
  add_align_t align_q;
  add_sum_t   sum_q;
  logic       align_en, sum_en;

  nelssa_pipe #(
    .Width  ($bits(add_align_t)),
    .Latency((Latency >= 2) ? 1 : 0)
  ) u_align (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (add_align(a_i, b_i)),
    .en_o(align_en),
    .q_o (align_q)
  );
  nelssa_pipe #(
    .Width  ($bits(add_sum_t)),
    .Latency((Latency >= 3) ? 1 : 0)
  ) u_sum (
    .clk_i,
    .rst_ni,
    .en_i(align_en),
    .d_i (add_sum(align_q)),
    .en_o(sum_en),
    .q_o (sum_q)
  );
  // the rounding's register, and those beyond three
  nelssa_pipe #(
    .Width  (32),
    .Latency((Latency >= 3) ? Latency - 2 : ((Latency >= 1) ? 1 : 0))
  ) u_out (
    .clk_i,
    .rst_ni,
    .en_i(sum_en),
    .d_i (add_round(sum_q)),
    .en_o,
    .q_o (sum_o)
  );
endmodule
