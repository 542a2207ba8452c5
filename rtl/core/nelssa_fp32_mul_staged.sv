// fp32 multiplier (nelssa_fp_pkg fp32_mul, bit for bit) in three hand-cut stages
// (nelssa_fp_stages_pkg: partial products | product | normalisation and rounding), with Latency registers from operands to result:
// 0 combinational; 1 a register after the rounding; 2 also one after the product;
// 3 also one after the partial products; each further one another output register. A new operand
// pair every cycle; the result of the pair of cycle t is on prod_o at cycle t + Latency.
// The model is hw/model/fp.py fmul; tests/rtl/test_fp_stages.py checks it.
module nelssa_fp32_mul_staged
  import nelssa_fp_stages_pkg::*;
#(
  parameter int unsigned Latency = 3  // registers from a_i/b_i to prod_o (cycles)
) (
  input  logic        clk_i,
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] prod_o
);
  localparam int unsigned OutRegs = (Latency >= 3) ? Latency - 2 : ((Latency >= 1) ? 1 : 0);

  mul_parts_t parts_d, parts_q;
  mul_sum_t prod_d, prod_q;
  logic [31:0] res_d;

  assign parts_d = mul_parts(a_i, b_i);
  if (Latency >= 3) begin : gen_parts_reg
    always_ff @(posedge clk_i) parts_q <= parts_d;
  end else begin : gen_parts_wire
    assign parts_q = parts_d;
  end

  assign prod_d = mul_sum(parts_q);
  if (Latency >= 2) begin : gen_prod_reg
    always_ff @(posedge clk_i) prod_q <= prod_d;
  end else begin : gen_prod_wire
    assign prod_q = prod_d;
  end

  assign res_d = mul_round(prod_q);
  if (OutRegs == 0) begin : gen_comb
    /* verilator lint_off UNUSEDSIGNAL */
    logic unused_clk;  // combinational: no register to clock
    /* verilator lint_on UNUSEDSIGNAL */
    assign unused_clk = clk_i;
    assign prod_o = res_d;
  end else begin : gen_out_regs
    logic [OutRegs-1:0][31:0] out_q;
    always_ff @(posedge clk_i) begin
      out_q[0] <= res_d;
      for (int unsigned i = 1; i < OutRegs; i++) out_q[i] <= out_q[i-1];
    end
    assign prod_o = out_q[OutRegs-1];
  end
endmodule
