// 1/x for fp32 x: 2^-e / (1.m), 1/(1.m) from a 128-interval piecewise quadratic, rounded half
// up to 24 bits. 1/+-0 = +-Inf, 1/+-Inf = +-0, results below 2^-126 flush to signed zero.
// Combinational. Model: hw/model/fp.py recip (bound: 0.53 ulp).
module nelssa_fp32_recip
  import nelssa_fp_tables_pkg::*;
(
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  localparam int unsigned MF = 23;               // mantissa bits
  localparam int unsigned RF = MF - INDEX_BITS;  // offset bits below the table index
  localparam logic signed [51:0] ONE_FIXED = 52'sd1 <<< COEF_FRAC;

  logic        sign, top;
  logic [7:0]  exp_in;
  logic [22:0] man;
  quad_t       coef;
  logic signed [51:0] poly;
  logic [24:0]        m24;
  logic signed [10:0] biased;

  assign sign   = x_i[31];
  assign exp_in = x_i[30:23];
  assign man    = x_i[22:0];

  always_comb begin
    coef = recip_coef(man[MF-1:RF]);
    poly = ($signed({{19{coef.c2[COEF_WIDTH-1]}}, coef.c2}) * $signed({36'd0, man[RF-1:0]})) >>> MF;
    poly = (poly + $signed({{19{coef.c1[COEF_WIDTH-1]}}, coef.c1}))
           * $signed({36'd0, man[RF-1:0]}) >>> MF;
    poly = poly + $signed({{19{coef.c0[COEF_WIDTH-1]}}, coef.c0});
    // 1/(1.m) lies in (0.5, 1]: exactly 1 only at m = 0
    top = (poly >= ONE_FIXED);
    m24 = top ? 25'((poly + 52'sd64) >>> (COEF_FRAC - 23))
              : 25'((poly + 52'sd32) >>> (COEF_FRAC - 24));
    biased = 11'sd254 - $signed({3'd0, exp_in}) - (top ? 11'sd0 : 11'sd1)
             + $signed({10'd0, m24[24]});

    if ((exp_in == 8'hFF) && (man != '0)) begin
      y_o = 32'h7FC0_0000;
    end else if (exp_in == 8'hFF) begin
      y_o = {sign, 31'd0};
    end else if (exp_in == 8'd0) begin
      y_o = {sign, 8'hFF, 23'd0};
    end else if (biased <= 11'sd0) begin
      y_o = {sign, 31'd0};
    end else begin
      y_o = {sign, biased[7:0], m24[24] ? 23'd0 : m24[22:0]};
    end
  end
endmodule
