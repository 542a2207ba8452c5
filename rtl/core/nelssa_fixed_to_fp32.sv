// Signed fixed point (Frac fraction bits) to fp32, magnitude rounded half up.
// Combinational; used by log2. Model: hw/model/fp.py _fixed_to_f32.
module nelssa_fixed_to_fp32 #(
  parameter int unsigned Width = 40,  // bits of the two's-complement input
  parameter int unsigned Frac  = 30   // fraction bits of the input
) (
  input  logic signed [Width-1:0] fix_i,
  output logic        [31:0]      fp_o
);
  if (Width < 25 || Width > 64) begin : gen_width_check
    $error("nelssa_fixed_to_fp32: Width must be in 25..64");
  end

  logic             sign;
  logic [Width-1:0] mag, rounded_wide;
  logic [6:0]       lead;
  logic [24:0]      rounded;
  logic signed [9:0] exp_out;

  always_comb begin
    sign = fix_i[Width-1];
    mag  = sign ? Width'(-fix_i) : Width'(fix_i);
    lead = '0;
    for (int i = 0; i < Width; i++) begin
      if (mag[i]) lead = 7'(i);
    end
    if (lead > 7'd23) begin
      rounded_wide = (mag + (Width'(1) << (lead - 7'd24))) >> (lead - 7'd23);
    end else begin
      rounded_wide = mag << (7'd23 - lead);
    end
    rounded = rounded_wide[24:0];
    exp_out = $signed({3'd0, lead}) - 10'(Frac) + 10'sd127 + $signed({9'd0, rounded[24]});
    if (mag == '0) begin
      fp_o = 32'd0;
    end else begin
      fp_o = {sign, exp_out[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
    end
  end
endmodule
