// 2^x for fp32 x. Range reduction x = n + f with n = floor(x) on a fixed-point copy of x with
// 24 fraction bits (floor rounding), 2^f from a 128-interval piecewise quadratic
// (nelssa_fp_tables_pkg), rounded half up to 24 bits. 2^x below 2^-126 flushes to +0,
// at or above 2^128 is +Inf. Combinational. Model: hw/model/fp.py exp2 (bound: 0.6 ulp).
module nelssa_fp32_exp2
  import nelssa_fp_tables_pkg::*;
(
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  localparam int unsigned XF = 24;               // fraction bits of the fixed-point argument
  localparam int unsigned RF = XF - INDEX_BITS;  // offset bits below the table index

  logic        sign, is_nan, is_zero, is_big;
  logic [7:0]  exp_in;
  logic [23:0] sig;
  logic [5:0]  rshift;
  logic [2:0]  lshift;
  logic [63:0] shifted_wide;
  logic [30:0] mag;
  logic        sticky;
  logic signed [32:0] xfx;
  logic signed [8:0]  int_part;
  logic [XF-1:0]      frac;
  quad_t              coef;
  logic signed [51:0] poly;
  logic [24:0]        m24;
  logic signed [10:0] biased;

  assign sign    = x_i[31];
  assign exp_in  = x_i[30:23];
  assign sig     = {1'b1, x_i[22:0]};
  assign is_nan  = (exp_in == 8'hFF) && (x_i[22:0] != '0);
  assign is_zero = (exp_in == 8'd0);
  assign is_big  = (exp_in >= 8'd134);  // |x| >= 128, Inf included

  always_comb begin
    // floor(|x| * 2^XF) and whether nonzero bits were dropped, valid for |x| < 128
    lshift = (exp_in >= 8'd126) ? 3'((exp_in - 8'd126) > 8'd7 ? 8'd7 : exp_in - 8'd126) : 3'd0;
    rshift = (exp_in >= 8'd126) ? 6'd0 : ((8'd126 - exp_in) > 8'd40 ? 6'd40 : 6'(8'd126 - exp_in));
    shifted_wide = {sig, 40'd0} >> rshift;
    if (exp_in >= 8'd126) begin
      mag    = {7'd0, sig} << lshift;
      sticky = 1'b0;
    end else begin
      mag    = {7'd0, shifted_wide[63:40]};
      sticky = |shifted_wide[39:0];
    end
    xfx = sign ? -($signed({2'b00, mag}) + $signed({32'd0, sticky})) : $signed({2'b00, mag});
    int_part = 9'(xfx >>> XF);
    frac     = xfx[XF-1:0];
    coef = exp2_coef(frac[XF-1:RF]);
    poly = ($signed({{19{coef.c2[COEF_WIDTH-1]}}, coef.c2}) * $signed({35'd0, frac[RF-1:0]})) >>> XF;
    poly = (poly + $signed({{19{coef.c1[COEF_WIDTH-1]}}, coef.c1}))
           * $signed({35'd0, frac[RF-1:0]}) >>> XF;
    poly = poly + $signed({{19{coef.c0[COEF_WIDTH-1]}}, coef.c0});
    m24 = 25'((poly + 52'sd64) >>> (COEF_FRAC - 23));
    biased = $signed({{2{int_part[8]}}, int_part}) + 11'sd127 + $signed({10'd0, m24[24]});

    if (is_nan) begin
      y_o = 32'h7FC0_0000;
    end else if (is_zero) begin
      y_o = 32'h3F80_0000;
    end else if (is_big) begin
      y_o = sign ? 32'd0 : 32'h7F80_0000;
    end else if (biased <= 11'sd0) begin
      y_o = 32'd0;
    end else if (biased >= 11'sd255) begin
      y_o = 32'h7F80_0000;
    end else begin
      y_o = {1'b0, biased[7:0], m24[24] ? 23'd0 : m24[22:0]};
    end
  end
endmodule
