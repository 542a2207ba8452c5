// fp32 maximum: NaN if either input is NaN, max(+0, -0) = +0, subnormals read as zero.
// Combinational. Model: hw/model/fp.py fmax.
module nelssa_fp32_max (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] max_o
);
  localparam logic [31:0] CANON_NAN = 32'h7FC0_0000;

  logic [31:0] a_daz, b_daz, a_key, b_key;
  logic        a_nan, b_nan;

  assign a_daz = (a_i[30:23] == 8'd0) ? {a_i[31], 31'd0} : a_i;
  assign b_daz = (b_i[30:23] == 8'd0) ? {b_i[31], 31'd0} : b_i;
  assign a_nan = (a_i[30:23] == 8'hFF) && (a_i[22:0] != '0);
  assign b_nan = (b_i[30:23] == 8'hFF) && (b_i[22:0] != '0);
  // Map sign-magnitude onto an unsigned order: negatives inverted, positives offset.
  assign a_key = a_daz[31] ? ~a_daz : {1'b1, a_daz[30:0]};
  assign b_key = b_daz[31] ? ~b_daz : {1'b1, b_daz[30:0]};
  assign max_o = (a_nan || b_nan) ? CANON_NAN : ((a_key >= b_key) ? a_daz : b_daz);
endmodule
