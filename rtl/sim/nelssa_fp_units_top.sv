// Simulation top of the seven arithmetic units side by side, for their cocotb tests
// (tests/rtl/test_fp32_*.py, test_bf16_mul.py): one Verilator build serves all seven, and each
// test drives its own unit through the ports named after it (<unit>_<port>), the other units'
// inputs left at zero. The units are connected as they are, nothing between port and unit.
// Beside each unit that has a latency parameter, a pipelined instance of it on the same inputs
// (<unit>_pipe_<output>, its latency <Unit>PipeLatency), clocked by clk_i.
module nelssa_fp_units_top #(
  parameter int unsigned Bf16MulPipeLatency = 1,  // the pipelined bf16 multiplier's latency
  parameter int unsigned AddPipeLatency     = 3,  // the pipelined fp32 adder's latency
  parameter int unsigned MulPipeLatency     = 2,  // the pipelined fp32 multiplier's latency
  parameter int unsigned Exp2PipeLatency    = 4,  // the pipelined exp2's latency
  parameter int unsigned Log2PipeLatency    = 5,  // the pipelined log2's latency
  parameter int unsigned RecipPipeLatency   = 4   // the pipelined reciprocal's latency
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        en_i,  // every unit's en_i
  // nelssa_bf16_mul
  input  logic [15:0] bf16_mul_a_i,
  input  logic [15:0] bf16_mul_b_i,
  output logic [31:0] bf16_mul_prod_o,
  output logic [31:0] bf16_mul_pipe_prod_o,
  // nelssa_fp32_add
  input  logic [31:0] fp32_add_a_i,
  input  logic [31:0] fp32_add_b_i,
  output logic [31:0] fp32_add_sum_o,
  output logic [31:0] fp32_add_pipe_sum_o,
  // nelssa_fp32_mul
  input  logic [31:0] fp32_mul_a_i,
  input  logic [31:0] fp32_mul_b_i,
  output logic [31:0] fp32_mul_prod_o,
  output logic [31:0] fp32_mul_pipe_prod_o,
  // nelssa_fp32_max
  input  logic [31:0] fp32_max_a_i,
  input  logic [31:0] fp32_max_b_i,
  output logic [31:0] fp32_max_max_o,
  // nelssa_fp32_exp2
  input  logic [31:0] fp32_exp2_x_i,
  output logic [31:0] fp32_exp2_y_o,
  output logic [31:0] fp32_exp2_pipe_y_o,
  // nelssa_fp32_log2
  input  logic [31:0] fp32_log2_x_i,
  output logic [31:0] fp32_log2_y_o,
  output logic [31:0] fp32_log2_pipe_y_o,
  // nelssa_fp32_recip
  input  logic [31:0] fp32_recip_x_i,
  output logic [31:0] fp32_recip_y_o,
  output logic [31:0] fp32_recip_pipe_y_o
);
  for (genvar p = 0; p < 2; p++) begin : gen_form  // 0: combinational, 1: pipelined
    logic [31:0] bf16_mul_prod, fp32_add_sum, fp32_mul_prod, fp32_exp2_y, fp32_log2_y,
                 fp32_recip_y;

    nelssa_bf16_mul #(
      .Latency(p * Bf16MulPipeLatency)
    ) u_bf16_mul (
      .clk_i,
      .rst_ni,
      .en_i,
      .a_i   (bf16_mul_a_i),
      .b_i   (bf16_mul_b_i),
      .prod_o(bf16_mul_prod)
    );

    nelssa_fp32_add #(
      .Latency(p * AddPipeLatency)
    ) u_fp32_add (
      .clk_i,
      .rst_ni,
      .en_i,
      .a_i  (fp32_add_a_i),
      .b_i  (fp32_add_b_i),
      .sum_o(fp32_add_sum)
    );

    nelssa_fp32_mul #(
      .Latency(p * MulPipeLatency)
    ) u_fp32_mul (
      .clk_i,
      .rst_ni,
      .en_i,
      .a_i   (fp32_mul_a_i),
      .b_i   (fp32_mul_b_i),
      .prod_o(fp32_mul_prod)
    );

    nelssa_fp32_exp2 #(
      .Latency(p * Exp2PipeLatency)
    ) u_fp32_exp2 (
      .clk_i,
      .rst_ni,
      .en_i,
      .x_i(fp32_exp2_x_i),
      .y_o(fp32_exp2_y)
    );

    nelssa_fp32_log2 #(
      .Latency(p * Log2PipeLatency)
    ) u_fp32_log2 (
      .clk_i,
      .rst_ni,
      .en_i,
      .x_i(fp32_log2_x_i),
      .y_o(fp32_log2_y)
    );

    nelssa_fp32_recip #(
      .Latency(p * RecipPipeLatency)
    ) u_fp32_recip (
      .clk_i,
      .rst_ni,
      .en_i,
      .x_i(fp32_recip_x_i),
      .y_o(fp32_recip_y)
    );
  end

  assign bf16_mul_prod_o      = gen_form[0].bf16_mul_prod;
  assign bf16_mul_pipe_prod_o = gen_form[1].bf16_mul_prod;
  assign fp32_add_sum_o       = gen_form[0].fp32_add_sum;
  assign fp32_add_pipe_sum_o  = gen_form[1].fp32_add_sum;
  assign fp32_mul_prod_o      = gen_form[0].fp32_mul_prod;
  assign fp32_mul_pipe_prod_o = gen_form[1].fp32_mul_prod;
  assign fp32_exp2_y_o        = gen_form[0].fp32_exp2_y;
  assign fp32_exp2_pipe_y_o   = gen_form[1].fp32_exp2_y;
  assign fp32_log2_y_o        = gen_form[0].fp32_log2_y;
  assign fp32_log2_pipe_y_o   = gen_form[1].fp32_log2_y;
  assign fp32_recip_y_o       = gen_form[0].fp32_recip_y;
  assign fp32_recip_pipe_y_o  = gen_form[1].fp32_recip_y;

  nelssa_fp32_max u_fp32_max (
    .en_i (en_i),
    .a_i  (fp32_max_a_i),
    .b_i  (fp32_max_b_i),
    .max_o(fp32_max_max_o)
  );
endmodule
