// Registers of an arithmetic unit staged in three functions (exp2, log2 and the reciprocal:
// nelssa_fp_pkg's exp2_reduce | exp2_poly | exp2_round and the like), Latency 2 and more: the
// unit computes a_d_i from its inputs, b_d_i from a_q_o and d_i from b_q_o; a_q_o is a_d_i a
// cycle later, b_q_o is b_d_i (Latency 2) or b_d_i a cycle later (3 and more), q_o is d_i a
// cycle later plus one more per latency beyond three. So at 2 a register after the first
// stage and one after the last; at 3 also one after the second; en_o is en_i of the inputs q_o
// is the result of (nelssa_pipe's: under NELSSA_FP_GATED the registers load only with it).
module nelssa_pipe3 #(
  parameter int unsigned AWidth  = 32,  // the first stage's result bits
  parameter int unsigned BWidth  = 32,  // the second stage's result bits
  parameter int unsigned Width   = 32,  // the last stage's (the unit's result) bits
  parameter int unsigned Latency = 2    // cycles from the unit's inputs to q_o, 2 or more
) (
  input  logic              clk_i,
  input  logic              rst_ni,
  input  logic              en_i,
  input  logic [AWidth-1:0] a_d_i,
  output logic [AWidth-1:0] a_q_o,
  input  logic [BWidth-1:0] b_d_i,
  output logic [BWidth-1:0] b_q_o,
  input  logic [Width-1:0]  d_i,
  output logic              en_o,
  output logic [Width-1:0]  q_o
);
  if (Latency < 2) begin : gen_check_latency
    $error("nelssa_pipe3: Latency must be 2 or more");
  end

  logic a_en, b_en;

  nelssa_pipe #(
    .Width  (AWidth),
    .Latency(1)
  ) u_a (
    .clk_i,
    .rst_ni,
    .en_i,
    .d_i (a_d_i),
    .en_o(a_en),
    .q_o (a_q_o)
  );
  nelssa_pipe #(
    .Width  (BWidth),
    .Latency((Latency >= 3) ? 1 : 0)
  ) u_b (
    .clk_i,
    .rst_ni,
    .en_i(a_en),
    .d_i (b_d_i),
    .en_o(b_en),
    .q_o (b_q_o)
  );
  // the last stage's register, and those beyond three
  nelssa_pipe #(
    .Width  (Width),
    .Latency((Latency >= 3) ? Latency - 2 : 1)
  ) u_out (
    .clk_i,
    .rst_ni,
    .en_i(b_en),
    .d_i,
    .en_o,
    .q_o
  );
endmodule
