// Simulation top of the seven arithmetic units side by side, for their cocotb tests
// (tests/rtl/test_fp32_*.py, test_bf16_mul.py): one Verilator build serves all seven, and each
// test drives its own unit through the ports named after it (<unit>_<port>), the other units'
// inputs left at zero. The units are connected as they are, nothing between port and unit.
module nelssa_fp_units_top (
  input  logic        en_i,  // every unit's en_i
  // nelssa_bf16_mul
  input  logic [15:0] bf16_mul_a_i,
  input  logic [15:0] bf16_mul_b_i,
  output logic [31:0] bf16_mul_prod_o,
  // nelssa_fp32_add
  input  logic [31:0] fp32_add_a_i,
  input  logic [31:0] fp32_add_b_i,
  output logic [31:0] fp32_add_sum_o,
  // nelssa_fp32_mul
  input  logic [31:0] fp32_mul_a_i,
  input  logic [31:0] fp32_mul_b_i,
  output logic [31:0] fp32_mul_prod_o,
  // nelssa_fp32_max
  input  logic [31:0] fp32_max_a_i,
  input  logic [31:0] fp32_max_b_i,
  output logic [31:0] fp32_max_max_o,
  // nelssa_fp32_exp2
  input  logic [31:0] fp32_exp2_x_i,
  output logic [31:0] fp32_exp2_y_o,
  // nelssa_fp32_log2
  input  logic [31:0] fp32_log2_x_i,
  output logic [31:0] fp32_log2_y_o,
  // nelssa_fp32_recip
  input  logic [31:0] fp32_recip_x_i,
  output logic [31:0] fp32_recip_y_o
);
  nelssa_bf16_mul u_bf16_mul (
    .en_i  (en_i),
    .a_i   (bf16_mul_a_i),
    .b_i   (bf16_mul_b_i),
    .prod_o(bf16_mul_prod_o)
  );

  nelssa_fp32_add u_fp32_add (
    .en_i (en_i),
    .a_i  (fp32_add_a_i),
    .b_i  (fp32_add_b_i),
    .sum_o(fp32_add_sum_o)
  );

  nelssa_fp32_mul u_fp32_mul (
    .en_i  (en_i),
    .a_i   (fp32_mul_a_i),
    .b_i   (fp32_mul_b_i),
    .prod_o(fp32_mul_prod_o)
  );

  nelssa_fp32_max u_fp32_max (
    .en_i (en_i),
    .a_i  (fp32_max_a_i),
    .b_i  (fp32_max_b_i),
    .max_o(fp32_max_max_o)
  );

  nelssa_fp32_exp2 u_fp32_exp2 (
    .en_i(en_i),
    .x_i (fp32_exp2_x_i),
    .y_o (fp32_exp2_y_o)
  );

  nelssa_fp32_log2 u_fp32_log2 (
    .en_i(en_i),
    .x_i (fp32_log2_x_i),
    .y_o (fp32_log2_y_o)
  );

  nelssa_fp32_recip u_fp32_recip (
    .en_i(en_i),
    .x_i (fp32_recip_x_i),
    .y_o (fp32_recip_y_o)
  );
endmodule
