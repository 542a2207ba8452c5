// fp32 adder (nelssa_fp_pkg fp32_add, bit for bit) in three hand-cut stages
// (nelssa_fp_stages_pkg: alignment | sum and leading zeros | normalisation and rounding), with Latency registers from operands to result:
// 0 combinational; 1 a register after the rounding; 2 also one after the sum;
// 3 also one after the alignment; each further one another output register. A new operand
// pair every cycle; the result of the pair of cycle t is on sum_o at cycle t + Latency.
// The model is hw/model/fp.py fadd; tests/rtl/test_fp_stages.py checks it.
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
  localparam int unsigned OutRegs = (Latency >= 3) ? Latency - 2 : ((Latency >= 1) ? 1 : 0);

  add_align_t align_d, align_q;
  add_sum_t sum_d, sum_q;
  logic [31:0] res_d;

  assign align_d = add_align(a_i, b_i);
  if (Latency >= 3) begin : gen_align_reg
    always_ff @(posedge clk_i) align_q <= align_d;
  end else begin : gen_align_wire
    assign align_q = align_d;
  end

  assign sum_d = add_sum(align_q);
  if (Latency >= 2) begin : gen_sum_reg
    always_ff @(posedge clk_i) sum_q <= sum_d;
  end else begin : gen_sum_wire
    assign sum_q = sum_d;
  end

  assign res_d = add_round(sum_q);
  if (OutRegs == 0) begin : gen_comb
    /* verilator lint_off UNUSEDSIGNAL */
    logic unused_clk;  // combinational: no register to clock
    /* verilator lint_on UNUSEDSIGNAL */
    assign unused_clk = clk_i;
    assign sum_o = res_d;
  end else begin : gen_out_regs
    logic [OutRegs-1:0][31:0] out_q;
    always_ff @(posedge clk_i) begin
      out_q[0] <= res_d;
      for (int unsigned i = 1; i < OutRegs; i++) out_q[i] <= out_q[i-1];
    end
    assign sum_o = out_q[OutRegs-1];
  end
endmodule
