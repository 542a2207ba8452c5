// Simulation top of the staged fp32 units (tests/rtl/test_fp_stages.py): nelssa_fp32_add_staged
// and nelssa_fp32_mul_staged at Latency 0 to MaxLatency side by side on the same operands, and
// nelssa_fp_pkg's fp32_add / fp32_mul on them as the reference.
// Operands come from a_i/b_i (a testbench's vectors, checked against the model in Python) or,
// with gen_i, from a generator inside (no Python per cycle): in turn, a pair from a sweep of
// every pair of exponents (random signs, significands of four kinds: random, zero, all ones,
// low half zero for ties and exact products), a near-cancelling pair, random bit patterns. Every cycle each staged result is compared with the
// reference of its own operands (delayed by its latency); mismatches_o counts the differences
// (inject_i makes one on purpose, to show the count is live).
module nelssa_fp_stages_top
  import nelssa_fp_pkg::*;
#(
  parameter int unsigned MaxLatency = 3  // staged units at Latency 0..MaxLatency
) (
  input  logic                         clk_i,
  input  logic                         rst_ni,
  input  logic                         gen_i,       // operands from the generator, not a_i/b_i
  input  logic                         inject_i,    // flip the Latency-0 sum's reference LSB
  input  logic [31:0]                  a_i,
  input  logic [31:0]                  b_i,
  output logic [31:0]                  a_o,         // the operands of this cycle
  output logic [31:0]                  b_o,
  output logic [MaxLatency:0][31:0]    add_o,       // add_o[l]: the Latency-l adder's sum
  output logic [MaxLatency:0][31:0]    mul_o,
  output logic [31:0]                  checked_o,   // results compared with the reference
  output logic [31:0]                  mismatches_o // of them, those that differ
);
  logic [63:0] rnd_q;
  logic [31:0] cnt_q;
  logic [31:0] ga, gb;
  logic [22:0] ma, mb;

  // xorshift64: a new random word every cycle
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rnd_q <= 64'h9E37_79B9_7F4A_7C15;
      cnt_q <= '0;
    end else begin
      automatic logic [63:0] x = rnd_q;
      x = x ^ (x << 13);
      x = x ^ (x >> 7);
      x = x ^ (x << 17);
      rnd_q <= x;
      cnt_q <= cnt_q + 1'b1;
    end
  end

  function automatic logic [22:0] mant_of_kind(input logic [1:0] kind, input logic [22:0] r);
    unique case (kind)
      2'd0: return r;
      2'd1: return '0;
      2'd2: return '1;
      default: return {r[22:12], 12'd0};
    endcase
  endfunction

  assign ma = mant_of_kind(rnd_q[63:62], rnd_q[22:0]);
  assign mb = mant_of_kind(rnd_q[61:60], rnd_q[45:23]);
  // four kinds of pair in turn (cnt_q[1:0]); the sweep's exponent pair advances every four
  // cycles, so 2^18 cycles give every exponent pair twice, with random signs
  always_comb begin
    unique case (cnt_q[1:0])
      2'd0, 2'd1: begin  // every exponent pair
        ga = {rnd_q[59], cnt_q[9:2], ma};
        gb = {rnd_q[58], cnt_q[17:10], mb};
      end
      2'd2: begin  // near-equal magnitudes of opposite sign: deep cancellation
        ga = rnd_q[31:0];
        gb = {~rnd_q[31], 31'(rnd_q[30:0] + {{27{rnd_q[50]}}, rnd_q[50:47]})};
      end
      default: begin
        ga = rnd_q[31:0];
        gb = rnd_q[63:32];
      end
    endcase
  end

  assign a_o = gen_i ? ga : a_i;
  assign b_o = gen_i ? gb : b_i;

  logic [MaxLatency:0] add_en, mul_en;  // the units' enables, delayed with their results

  for (genvar l = 0; l <= MaxLatency; l++) begin : gen_lat
    nelssa_fp32_add_staged #(
      .Latency(l)
    ) u_add (
      .clk_i (clk_i),
      .rst_ni(rst_ni),
      .en_i  (1'b1),
      .a_i   (a_o),
      .b_i   (b_o),
      .en_o  (add_en[l]),
      .sum_o (add_o[l])
    );
    nelssa_fp32_mul_staged #(
      .Latency(l)
    ) u_mul (
      .clk_i (clk_i),
      .rst_ni(rst_ni),
      .en_i  (1'b1),
      .a_i   (a_o),
      .b_i   (b_o),
      .en_o  (mul_en[l]),
      .prod_o(mul_o[l])
    );
  end

  // the references of the last MaxLatency cycles' operands (index l-1: l cycles ago), and
  // which of those cycles were after the reset
  logic [MaxLatency-1:0][31:0] add_ref_q, mul_ref_q;
  logic [MaxLatency-1:0]       valid_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      valid_q      <= '0;
      checked_o    <= '0;
      mismatches_o <= '0;
    end else begin
      automatic logic [31:0] n = 32'd2;
      automatic logic [31:0] bad = 32'(add_o[0] != (fp32_add(a_o, b_o) ^ 32'(inject_i)))
                                   + 32'(mul_o[0] != fp32_mul(a_o, b_o))
                                   + 32'(!add_en[0] || !mul_en[0]);
      for (int unsigned l = 1; l <= MaxLatency; l++) begin
        if (valid_q[l-1]) begin
          n += 2;
          bad += 32'(add_o[l] != add_ref_q[l-1]) + 32'(mul_o[l] != mul_ref_q[l-1]);
        end
        // an enable arrives with its result: valid exactly l cycles after the reset
        bad += 32'(add_en[l] != valid_q[l-1]) + 32'(mul_en[l] != valid_q[l-1]);
      end
      checked_o    <= checked_o + n;
      mismatches_o <= mismatches_o + bad;
      valid_q      <= MaxLatency'({valid_q, 1'b1});
    end
  end
  always_ff @(posedge clk_i) begin
    add_ref_q[0] <= fp32_add(a_o, b_o);
    mul_ref_q[0] <= fp32_mul(a_o, b_o);
    for (int unsigned l = 1; l < MaxLatency; l++) begin
      add_ref_q[l] <= add_ref_q[l-1];
      mul_ref_q[l] <= mul_ref_q[l-1];
    end
  end

  if (MaxLatency < 1) begin : gen_max_latency_check
    $error("nelssa_fp_stages_top: MaxLatency must be 1 or more");
  end
endmodule
