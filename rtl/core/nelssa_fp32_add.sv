// fp32 adder, round to nearest even, subnormals flushed to zero on input and output.
// Combinational. NaN results are the canonical quiet NaN. Model: hw/model/fp.py fadd.
module nelssa_fp32_add (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] sum_o
);
  localparam logic [31:0] CANON_NAN = 32'h7FC0_0000;

  logic        a_sign, b_sign, big_sign;
  logic [7:0]  a_exp, b_exp, big_exp, small_exp;
  logic [22:0] a_man, b_man;
  logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
  logic        swap;
  logic [26:0] big_sig, small_sig, small_aligned;
  logic [53:0] align_wide;
  logic [7:0]  exp_diff;
  logic [4:0]  shift_amt;
  logic [27:0] raw_sum;
  logic [26:0] norm_sig;
  logic [4:0]  lead_zeros;
  logic signed [9:0] norm_exp;
  logic        round_up;
  logic [24:0] rounded;
  logic signed [9:0] final_exp;
  logic        sub_op;

  assign a_sign = a_i[31];
  assign b_sign = b_i[31];
  assign a_exp  = a_i[30:23];
  assign b_exp  = b_i[30:23];
  assign a_man  = a_i[22:0];
  assign b_man  = b_i[22:0];
  assign a_zero = (a_exp == 8'd0);
  assign b_zero = (b_exp == 8'd0);
  assign a_inf  = (a_exp == 8'hFF) && (a_man == '0);
  assign b_inf  = (b_exp == 8'hFF) && (b_man == '0);
  assign a_nan  = (a_exp == 8'hFF) && (a_man != '0);
  assign b_nan  = (b_exp == 8'hFF) && (b_man != '0);

  // Order operands by magnitude so the subtraction below never goes negative.
  assign swap      = {b_exp, b_man} > {a_exp, a_man};
  assign big_sign  = swap ? b_sign : a_sign;
  assign big_exp   = swap ? b_exp : a_exp;
  assign small_exp = swap ? a_exp : b_exp;
  assign big_sig   = {1'b1, (swap ? b_man : a_man), 3'b000};
  assign small_sig = {1'b1, (swap ? a_man : b_man), 3'b000};
  assign exp_diff  = big_exp - small_exp;
  assign shift_amt = (exp_diff > 8'd31) ? 5'd31 : exp_diff[4:0];
  assign sub_op    = a_sign ^ b_sign;

  // Align with a sticky bit: bits shifted out are ORed into the LSB (guard, round, sticky).
  assign align_wide    = {small_sig, 27'd0} >> shift_amt;
  assign small_aligned = align_wide[53:27] | {26'd0, |align_wide[26:0]};

  always_comb begin
    raw_sum = sub_op ? ({1'b0, big_sig} - {1'b0, small_aligned})
                     : ({1'b0, big_sig} + {1'b0, small_aligned});
    lead_zeros = 5'd0;
    for (int i = 0; i < 27; i++) begin
      if (raw_sum[i]) lead_zeros = 5'(26 - i);
    end
    if (raw_sum[27]) begin
      norm_sig = {raw_sum[27:2], raw_sum[1] | raw_sum[0]};
      norm_exp = $signed({2'b00, big_exp}) + 10'sd1;
    end else begin
      norm_sig = raw_sum[26:0] << lead_zeros;
      norm_exp = $signed({2'b00, big_exp}) - $signed({5'd0, lead_zeros});
    end
    round_up  = norm_sig[2] & (norm_sig[1] | norm_sig[0] | norm_sig[3]);
    rounded   = {1'b0, norm_sig[26:3]} + {24'd0, round_up};
    final_exp = rounded[24] ? norm_exp + 10'sd1 : norm_exp;

    if (a_nan || b_nan || (a_inf && b_inf && sub_op)) begin
      sum_o = CANON_NAN;
    end else if (a_inf) begin
      sum_o = {a_sign, 8'hFF, 23'd0};
    end else if (b_inf) begin
      sum_o = {b_sign, 8'hFF, 23'd0};
    end else if (a_zero && b_zero) begin
      sum_o = {a_sign & b_sign, 31'd0};
    end else if (b_zero) begin
      sum_o = a_i;
    end else if (a_zero) begin
      sum_o = b_i;
    end else if (raw_sum == '0) begin
      sum_o = 32'd0;
    end else if (final_exp >= 10'sd255) begin
      sum_o = {big_sign, 8'hFF, 23'd0};
    end else if (final_exp <= 10'sd0) begin
      sum_o = {big_sign, 31'd0};
    end else begin
      sum_o = {big_sign, final_exp[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
    end
  end
endmodule
