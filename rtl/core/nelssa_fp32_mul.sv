// fp32 multiplier, round to nearest even. Subnormal inputs read as zero; a product whose exact
// value is below 2^-126 flushes to signed zero. Combinational. Model: hw/model/fp.py fmul.
module nelssa_fp32_mul (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] prod_o
);
  localparam logic [31:0] CANON_NAN = 32'h7FC0_0000;

  logic        sign;
  logic [7:0]  a_exp, b_exp;
  logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
  logic [47:0] sig_prod;
  logic [23:0] kept;
  logic        guard, sticky, round_up;
  logic [24:0] rounded;
  logic signed [10:0] exp_pre, exp_fin;

  assign sign   = a_i[31] ^ b_i[31];
  assign a_exp  = a_i[30:23];
  assign b_exp  = b_i[30:23];
  assign a_zero = (a_exp == 8'd0);
  assign b_zero = (b_exp == 8'd0);
  assign a_inf  = (a_exp == 8'hFF) && (a_i[22:0] == '0);
  assign b_inf  = (b_exp == 8'hFF) && (b_i[22:0] == '0);
  assign a_nan  = (a_exp == 8'hFF) && (a_i[22:0] != '0);
  assign b_nan  = (b_exp == 8'hFF) && (b_i[22:0] != '0);
  assign sig_prod = {1'b1, a_i[22:0]} * {1'b1, b_i[22:0]};

  always_comb begin
    if (sig_prod[47]) begin
      kept    = sig_prod[47:24];
      guard   = sig_prod[23];
      sticky  = |sig_prod[22:0];
      exp_pre = $signed({3'b000, a_exp}) + $signed({3'b000, b_exp}) - 11'sd126;
    end else begin
      kept    = sig_prod[46:23];
      guard   = sig_prod[22];
      sticky  = |sig_prod[21:0];
      exp_pre = $signed({3'b000, a_exp}) + $signed({3'b000, b_exp}) - 11'sd127;
    end
    round_up = guard & (sticky | kept[0]);
    rounded  = {1'b0, kept} + {24'd0, round_up};
    exp_fin  = rounded[24] ? exp_pre + 11'sd1 : exp_pre;

    if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
      prod_o = CANON_NAN;
    end else if (a_inf || b_inf) begin
      prod_o = {sign, 8'hFF, 23'd0};
    end else if (a_zero || b_zero || exp_pre <= 11'sd0) begin
      prod_o = {sign, 31'd0};
    end else if (exp_fin >= 11'sd255) begin
      prod_o = {sign, 8'hFF, 23'd0};
    end else begin
      prod_o = {sign, exp_fin[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
    end
  end
endmodule
