// log2(x) for fp32 x: e + log2(1.m), log2(1.m) from a 128-interval piecewise quadratic with
// 30 fraction bits, the sum formed exactly in fixed point, then rounded half up to fp32.
// log2(+-0) = -Inf, log2(x<0) = NaN, log2(+Inf) = +Inf. Combinational.
// Model: hw/model/fp.py log2 (bound: 2^-29 absolute plus half an ulp of the result).
module nelssa_fp32_log2
  import nelssa_fp_tables_pkg::*;
(
  input  logic [31:0] x_i,
  output logic [31:0] y_o
);
  localparam int unsigned MF = 23;               // mantissa bits
  localparam int unsigned RF = MF - INDEX_BITS;  // offset bits below the table index

  logic        sign;
  logic [7:0]  exp_in;
  logic [22:0] man;
  quad_t       coef;
  logic signed [51:0] poly;
  logic signed [39:0] total;
  logic [31:0]        fixed_fp;

  assign sign   = x_i[31];
  assign exp_in = x_i[30:23];
  assign man    = x_i[22:0];

  always_comb begin
    coef = log2_coef(man[MF-1:RF]);
    poly = ($signed({{19{coef.c2[COEF_WIDTH-1]}}, coef.c2}) * $signed({36'd0, man[RF-1:0]})) >>> MF;
    poly = (poly + $signed({{19{coef.c1[COEF_WIDTH-1]}}, coef.c1}))
           * $signed({36'd0, man[RF-1:0]}) >>> MF;
    poly = poly + $signed({{19{coef.c0[COEF_WIDTH-1]}}, coef.c0});
    total = ($signed({32'd0, exp_in}) - 40'sd127) * 40'sd1073741824 + 40'(poly);
  end

  nelssa_fixed_to_fp32 #(
    .Width(40),
    .Frac (COEF_FRAC)
  ) u_to_fp (
    .fix_i(total),
    .fp_o (fixed_fp)
  );

  always_comb begin
    if ((exp_in == 8'hFF) && (man != '0)) begin
      y_o = 32'h7FC0_0000;
    end else if (sign && (exp_in != 8'd0)) begin
      y_o = 32'h7FC0_0000;
    end else if (exp_in == 8'hFF) begin
      y_o = 32'h7F80_0000;
    end else if (exp_in == 8'd0) begin
      y_o = 32'hFF80_0000;
    end else begin
      y_o = fixed_fp;
    end
  end
endmodule
