// bf16 x bf16 -> fp32. The 8x8-bit significand product always fits, so the result is exact
// except for overflow (signed Inf) and products below 2^-126 (flushed to signed zero).
// Subnormal inputs read as zero. Combinational. Model: hw/model/fp.py bf16_mul.
module nelssa_bf16_mul (
  input  logic [15:0] a_i,
  input  logic [15:0] b_i,
  output logic [31:0] prod_o
);
  localparam logic [31:0] CANON_NAN = 32'h7FC0_0000;

  logic        sign;
  logic [7:0]  a_exp, b_exp;
  logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
  logic [15:0] sig_prod;
  logic [22:0] man;
  logic signed [10:0] exp_fin;

  assign sign   = a_i[15] ^ b_i[15];
  assign a_exp  = a_i[14:7];
  assign b_exp  = b_i[14:7];
  assign a_zero = (a_exp == 8'd0);
  assign b_zero = (b_exp == 8'd0);
  assign a_inf  = (a_exp == 8'hFF) && (a_i[6:0] == '0);
  assign b_inf  = (b_exp == 8'hFF) && (b_i[6:0] == '0);
  assign a_nan  = (a_exp == 8'hFF) && (a_i[6:0] != '0);
  assign b_nan  = (b_exp == 8'hFF) && (b_i[6:0] != '0);
  assign sig_prod = {1'b1, a_i[6:0]} * {1'b1, b_i[6:0]};

  always_comb begin
    if (sig_prod[15]) begin
      man     = {sig_prod[14:0], 8'd0};
      exp_fin = $signed({3'b000, a_exp}) + $signed({3'b000, b_exp}) - 11'sd126;
    end else begin
      man     = {sig_prod[13:0], 9'd0};
      exp_fin = $signed({3'b000, a_exp}) + $signed({3'b000, b_exp}) - 11'sd127;
    end
    if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
      prod_o = CANON_NAN;
    end else if (a_inf || b_inf) begin
      prod_o = {sign, 8'hFF, 23'd0};
    end else if (a_zero || b_zero || exp_fin <= 11'sd0) begin
      prod_o = {sign, 31'd0};
    end else if (exp_fin >= 11'sd255) begin
      prod_o = {sign, 8'hFF, 23'd0};
    end else begin
      prod_o = {sign, exp_fin[7:0], man};
    end
  end
endmodule
