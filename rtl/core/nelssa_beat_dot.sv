// Dot product of two 64-byte beats of bf16 lanes: LANES products (nelssa_bf16_mul) summed in a
// binary tree of nelssa_fp32_add, level v element k = elements 2k and 2k+1 of level v-1, the
// order of docs/numerics.md and hw/model/engine.py. Combinational.
// en_i: the sum is used this cycle (passed to every unit; see nelssa_fp32_add).
module nelssa_beat_dot
  import nelssa_engine_pkg::*;
(
  input  logic              en_i,
  input  logic [BEAT_W-1:0] a_i,
  input  logic [BEAT_W-1:0] b_i,
  output logic [31:0]       dot_o
);
  if (LANES < 2 || (LANES & (LANES - 1)) != 0) begin : gen_check_lanes
    $error("nelssa_beat_dot: LANES must be a power of two of at least 2");
  end

  localparam int unsigned LEVELS = $clog2(LANES);

  logic [31:0] prod [LANES];

  for (genvar i = 0; i < LANES; i++) begin : gen_lane
    nelssa_bf16_mul u_mul (
      .en_i,
      .a_i   (a_i[16*i +: 16]),
      .b_i   (b_i[16*i +: 16]),
      .prod_o(prod[i])
    );
  end

  // one array per level, so that no array is both read and written by the tree (a simulator
  // would see that as a combinational loop)
  for (genvar v = 1; v <= LEVELS; v++) begin : gen_level
    logic [31:0] sum [LANES >> v];
    for (genvar k = 0; k < (LANES >> v); k++) begin : gen_sum
      logic [31:0] a, b;
      if (v == 1) begin : gen_products
        assign a = prod[2*k];
        assign b = prod[2*k+1];
      end else begin : gen_sums
        assign a = gen_level[v-1].sum[2*k];
        assign b = gen_level[v-1].sum[2*k+1];
      end
      nelssa_fp32_add u_add (
        .en_i,
        .a_i  (a),
        .b_i  (b),
        .sum_o(sum[k])
      );
    end
  end

  assign dot_o = gen_level[LEVELS].sum[0];
endmodule
