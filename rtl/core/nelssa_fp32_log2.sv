// log2(x) = e + log2(1.m), the table part with 30 fraction bits, summed exactly in fixed
// point, rounded half up; log2(+-0) = -Inf, log2(x < 0) = NaN. Error: 2^-26 + half an ulp.
// Latency 0: combinational; Latency L: the result of the inputs of cycle t at t + L. At 1 the
// function followed by a register; from 2 on staged (nelssa_fp_pkg's log2_arg | log2_poly |
// log2_round, registers by nelssa_pipe3): 2 a register after x's fields and specials (the table
// is read at the registered interval: a block RAM on an FPGA) and one after the rounding; 3
// also one after the quadratic; each further one another output register.
// The implementation is nelssa_fp_pkg, the model hw/model/fp.py log2.
// en_i: the result is used (Latency cycles later). Hardware ignores it. A simulation built with
// NELSSA_FP_GATED registers only then and outputs zero otherwise (en_i travels down the pipe
// with the result), which is what makes a Verilated engine evaluate only its active phase (the
// staged form's first stage follows its input regardless); tests run the engine both ways.
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
  logic [31:0] res_q;  // the result, Latency cycles after its inputs
  logic        res_en;  // en_i of those inputs

`ifdef NELSSA_FP_GATED
  // (at Latency 0 the function's output is gated already)
  assign y_o = (Latency == 0 || res_en) ? res_q : '0;
`else
  logic unused_en;
  assign unused_en = res_en;
  assign y_o = res_q;
`endif

  if (Latency >= 2) begin : gen_staged
    table_arg_t  arg_q;
    table_poly_t poly_q;

    nelssa_pipe3 #(
      .AWidth ($bits(table_arg_t)),
      .BWidth ($bits(table_poly_t)),
      .Width  (32),
      .Latency(Latency)
    ) u_stages (
      .clk_i,
      .rst_ni,
      .en_i,
      .a_d_i(log2_arg(x_i)),
      .a_q_o(arg_q),
      .b_d_i(log2_poly(arg_q)),
      .b_q_o(poly_q),
      .d_i  (log2_round(poly_q)),
      .en_o (res_en),
      .q_o  (res_q)
    );
  end else begin : gen_func
    logic [31:0] res;
`ifdef NELSSA_FP_GATED
    always_comb begin
      res = '0;
      if (en_i) res = fp32_log2(x_i);
    end
`else
    assign res = fp32_log2(x_i);
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
