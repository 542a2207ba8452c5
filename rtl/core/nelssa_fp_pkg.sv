// Arithmetic of the attention engine as functions: the one implementation of each operation.
// The unit modules (nelssa_fp32_add, ...) wrap one function each for unit tests and per-unit
// synthesis; the engine calls the functions inside its clocked datapath. The numeric contract
// is docs/numerics.md and the bit-exact model hw/model/fp.py:
//   - round to nearest even in add and multiply, half up in the table functions;
//   - subnormal inputs read as signed zero, tiny results flush to signed zero;
//   - every NaN result is the canonical quiet NaN 32'h7FC0_0000.
// no_inline_task keeps one copy of each function in the Verilated model (the engine calls them
// about 1,300 times per cycle in hardware terms; inlined, the C++ would not fit in any cache).
package nelssa_fp_pkg;
  import nelssa_fp_tables_pkg::*;

  localparam logic [31:0] CANON_NAN = 32'h7FC0_0000;
  localparam logic [31:0] POS_INF   = 32'h7F80_0000;

  // Leading zeros of a 27-bit value (0 for zero) and the value shifted left by them (its
  // normalised form), halving the window: five steps where a bit loop takes 27, in gates and in
  // a Verilated model (which keeps loops as loops). The steps' shifts are the normalisation: no
  // second shifter by the count.
  function automatic void lead_norm27(input logic [26:0] x, output logic [4:0] n,
                                      output logic [26:0] norm);
    logic [31:0] w;
    w = {x, 5'd0};
    n = '0;
    if (w[31:16] == '0) begin n[4] = 1'b1; w = w << 16; end
    if (w[31:24] == '0) begin n[3] = 1'b1; w = w << 8; end
    if (w[31:28] == '0) begin n[2] = 1'b1; w = w << 4; end
    if (w[31:30] == '0) begin n[1] = 1'b1; w = w << 2; end
    if (!w[31]) begin n[0] = 1'b1; w = w << 1; end
    if (x == '0) n = '0;
    norm = w[31:5];
  endfunction

  // ---- fp32 add and multiply ----------------------------------------------------------------
  // Each is defined once, in steps: fp32_add and fp32_mul call them in turn, and the
  // hand-staged units (nelssa_fp32_add_staged, nelssa_fp32_mul_staged) register between the
  // stage functions below, which call the same steps (tests/rtl/test_fp_stages.py checks both
  // against the model hw/model/fp.py):
  //   add: add_align (classify, order by magnitude, align with sticky)
  //        | add_sum (add or subtract, count leading zeros) | add_round (normalise, round, pack)
  //   mul: mul_parts (classify, exponent, two 24x12 partial products)
  //        | mul_sum (the 48-bit product) | mul_round (normalise, round, pack)
  // Results that the operands alone decide (NaN, Inf, zero operands) are chosen first and
  // carried, so the later steps only see finite nonzero operands' arithmetic. The steps hand
  // scalars to each other (outputs, not structs), few and large: a Verilated model packs a
  // struct field by field, and copies every argument of every call it inlines (at -O0, as the
  // cocotb builds compile, each copy costs).

  // ---- add ----------------------------------------------------------------------------------
  // The operands ordered by magnitude (so the subtraction never goes negative) and aligned.
  typedef struct packed {
    logic        sub_op;         // the signs differ: subtract the magnitudes
    logic        big_sign;       // sign of the larger magnitude (the result's)
    logic [7:0]  big_exp;
    logic [26:0] big_sig;        // 1.m with guard, round and sticky bits
    logic [26:0] small_aligned;  // the smaller significand shifted to big_exp, sticky in bit 0
  } add_ops_t;

  typedef struct packed {
    logic        special;        // the result is special_r (NaN, Inf or a zero operand)
    logic [31:0] special_r;
    add_ops_t    ops;
  } add_align_t;

  typedef struct packed {
    logic        special;
    logic [31:0] special_r;
    logic        big_sign;
    logic [7:0]  big_exp;
    logic [27:0] raw_sum;        // big_sig +/- small_aligned, carry in bit 27
    logic [4:0]  lead_zeros;     // of raw_sum[26:0]
    logic [26:0] norm_sum;       // raw_sum[26:0] shifted left by lead_zeros
  } add_sum_t;

  // Classify (subnormals read as zero), choose what the operands alone decide, order by
  // magnitude and align with guard, round and sticky.
  function automatic void add_front(input logic [31:0] a, input logic [31:0] b,
                                    output logic special, output logic [31:0] special_r,
                                    output logic sub_op, output logic big_sign,
                                    output logic [7:0] big_exp, output logic [26:0] big_sig,
                                    output logic [26:0] small_aligned);
    logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan, swap, small_zero;
    logic [7:0]  small_exp, exp_diff;
    logic [26:0] small_sig, lost;
    a_zero = (a[30:23] == 8'd0);
    b_zero = (b[30:23] == 8'd0);
    a_inf  = (a[30:23] == 8'hFF) && (a[22:0] == '0);
    b_inf  = (b[30:23] == 8'hFF) && (b[22:0] == '0);
    a_nan  = (a[30:23] == 8'hFF) && (a[22:0] != '0);
    b_nan  = (b[30:23] == 8'hFF) && (b[22:0] != '0);
    sub_op = a[31] ^ b[31];
    special = 1'b1;
    if (a_nan || b_nan || (a_inf && b_inf && sub_op)) special_r = CANON_NAN;
    else if (a_inf) special_r = {a[31], 8'hFF, 23'd0};
    else if (b_inf) special_r = {b[31], 8'hFF, 23'd0};
    else if (a_zero && b_zero) special_r = {a[31] & b[31], 31'd0};
    else begin
      special   = 1'b0;
      special_r = '0;
    end
    swap      = b[30:0] > a[30:0];
    big_sign  = swap ? b[31] : a[31];
    big_exp   = swap ? b[30:23] : a[30:23];
    small_exp = swap ? a[30:23] : b[30:23];
    big_sig   = {1'b1, (swap ? b[22:0] : a[22:0]), 3'b000};
    // a zero operand (never the larger: both zero is special) adds a zero significand, so
    // the sum is the other operand exactly
    small_zero = swap ? a_zero : b_zero;
    small_sig = small_zero ? 27'd0 : {1'b1, (swap ? a[22:0] : b[22:0]), 3'b000};
    exp_diff  = big_exp - small_exp;
    // bits shifted out are ORed into the LSB (the sticky bit); from 27 on all are
    lost = small_sig & ~(27'h7FF_FFFF << exp_diff[4:0]);
    small_aligned = (exp_diff >= 8'd27) ? {26'd0, !small_zero}
                                        : (small_sig >> exp_diff[4:0]) | {26'd0, |lost};
  endfunction

  function automatic logic [27:0] add_raw(input logic sub_op, input logic [26:0] big_sig,
                                          input logic [26:0] small_aligned);
    return sub_op ? ({1'b0, big_sig} - {1'b0, small_aligned})
                  : ({1'b0, big_sig} + {1'b0, small_aligned});
  endfunction

  // Normalise, round to nearest even and pack; or the result the operands decided.
  function automatic logic [31:0] add_back(input logic special, input logic [31:0] special_r,
                                           input logic big_sign, input logic [7:0] big_exp,
                                           input logic [27:0] raw_sum,
                                           input logic [4:0] lead_zeros,
                                           input logic [26:0] norm_sum);
    logic              round_up;
    logic [26:0]       norm_sig;
    logic [24:0]       rounded;
    logic signed [9:0] norm_exp, final_exp;
    if (raw_sum[27]) begin
      norm_sig = {raw_sum[27:2], raw_sum[1] | raw_sum[0]};
      norm_exp = $signed({2'b00, big_exp}) + 10'sd1;
    end else begin
      norm_sig = norm_sum;
      norm_exp = $signed({2'b00, big_exp}) - $signed({5'd0, lead_zeros});
    end
    round_up  = norm_sig[2] & (norm_sig[1] | norm_sig[0] | norm_sig[3]);
    rounded   = {1'b0, norm_sig[26:3]} + {24'd0, round_up};
    final_exp = rounded[24] ? norm_exp + 10'sd1 : norm_exp;
    if (special) return special_r;
    if (raw_sum == '0) return 32'd0;
    if (final_exp >= 10'sd255) return {big_sign, 8'hFF, 23'd0};
    if (final_exp <= 10'sd0) return {big_sign, 31'd0};
    return {big_sign, final_exp[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
  endfunction

  // fp32 a + b.
  function automatic logic [31:0] fp32_add(input logic [31:0] a, input logic [31:0] b);
    /*verilator no_inline_task*/
    logic        special, sub_op, big_sign;
    logic [31:0] special_r;
    logic [7:0]  big_exp;
    logic [26:0] big_sig, small_aligned;
    logic [27:0] raw_sum;
    logic [4:0]  lead_zeros;
    logic [26:0] norm_sum;
    add_front(a, b, special, special_r, sub_op, big_sign, big_exp, big_sig, small_aligned);
    raw_sum = add_raw(sub_op, big_sig, small_aligned);
    lead_norm27(raw_sum[26:0], lead_zeros, norm_sum);
    return add_back(special, special_r, big_sign, big_exp, raw_sum, lead_zeros, norm_sum);
  endfunction

  // The add's stages.
  function automatic add_align_t add_align(input logic [31:0] a, input logic [31:0] b);
    add_align_t s;
    add_front(a, b, s.special, s.special_r, s.ops.sub_op, s.ops.big_sign, s.ops.big_exp,
              s.ops.big_sig, s.ops.small_aligned);
    return s;
  endfunction

  function automatic add_sum_t add_sum(input add_align_t s);
    add_sum_t t;
    t.special    = s.special;
    t.special_r  = s.special_r;
    t.big_sign   = s.ops.big_sign;
    t.big_exp    = s.ops.big_exp;
    t.raw_sum    = add_raw(s.ops.sub_op, s.ops.big_sig, s.ops.small_aligned);
    lead_norm27(t.raw_sum[26:0], t.lead_zeros, t.norm_sum);
    return t;
  endfunction

  function automatic logic [31:0] add_round(input add_sum_t t);
    return add_back(t.special, t.special_r, t.big_sign, t.big_exp, t.raw_sum, t.lead_zeros,
                    t.norm_sum);
  endfunction

  // ---- multiply -----------------------------------------------------------------------------
  typedef struct packed {
    logic               special;   // the result is special_r (NaN, Inf or a zero operand)
    logic [31:0]        special_r;
    logic               sign;
    logic signed [10:0] exp_pre;   // ea + eb - 127, before normalisation
    logic [35:0]        prod_lo;   // 1.ma * (1.mb)[11:0]
    logic [35:0]        prod_hi;   // 1.ma * (1.mb)[23:12]
  } mul_parts_t;

  typedef struct packed {
    logic               special;
    logic [31:0]        special_r;
    logic               sign;
    logic signed [10:0] exp_pre;
    logic [47:0]        sig_prod;  // 1.ma * 1.mb, exact
  } mul_sum_t;

  // Classify (subnormals read as zero), choose what the operands alone decide, and the
  // product's sign and exponent before normalisation, ea + eb - 127.
  function automatic void mul_front(input logic [31:0] a, input logic [31:0] b,
                                    output logic special, output logic [31:0] special_r,
                                    output logic sign, output logic signed [10:0] exp_pre);
    logic a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
    a_zero = (a[30:23] == 8'd0);
    b_zero = (b[30:23] == 8'd0);
    a_inf  = (a[30:23] == 8'hFF) && (a[22:0] == '0);
    b_inf  = (b[30:23] == 8'hFF) && (b[22:0] == '0);
    a_nan  = (a[30:23] == 8'hFF) && (a[22:0] != '0);
    b_nan  = (b[30:23] == 8'hFF) && (b[22:0] != '0);
    sign   = a[31] ^ b[31];
    special = 1'b1;
    if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) special_r = CANON_NAN;
    else if (a_inf || b_inf) special_r = {sign, 8'hFF, 23'd0};
    else if (a_zero || b_zero) special_r = {sign, 31'd0};
    else begin
      special   = 1'b0;
      special_r = '0;
    end
    exp_pre = $signed({3'b000, a[30:23]}) + $signed({3'b000, b[30:23]}) - 11'sd127;
  endfunction

  // Normalise, round to nearest even and pack the exact product 1.ma * 1.mb (below 2^-126 it
  // flushes to signed zero); or the result the operands decided.
  function automatic logic [31:0] mul_back(input logic special, input logic [31:0] special_r,
                                           input logic sign, input logic signed [10:0] exp_in,
                                           input logic [47:0] sig_prod);
    logic               guard, sticky, round_up;
    logic [23:0]        kept;
    logic [24:0]        rounded;
    logic signed [10:0] exp_pre, exp_fin;
    exp_pre = exp_in;
    if (sig_prod[47]) begin
      kept    = sig_prod[47:24];
      guard   = sig_prod[23];
      sticky  = |sig_prod[22:0];
      exp_pre = exp_pre + 11'sd1;
    end else begin
      kept    = sig_prod[46:23];
      guard   = sig_prod[22];
      sticky  = |sig_prod[21:0];
    end
    round_up = guard & (sticky | kept[0]);
    rounded  = {1'b0, kept} + {24'd0, round_up};
    exp_fin  = rounded[24] ? exp_pre + 11'sd1 : exp_pre;
    if (special) return special_r;
    if (exp_pre <= 11'sd0) return {sign, 31'd0};
    if (exp_fin >= 11'sd255) return {sign, 8'hFF, 23'd0};
    return {sign, exp_fin[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
  endfunction

  // fp32 a * b; a product whose exact value is below 2^-126 flushes to signed zero. (The
  // staged multiplier forms the same product from two partial products, mul_parts.)
  function automatic logic [31:0] fp32_mul(input logic [31:0] a, input logic [31:0] b);
    /*verilator no_inline_task*/
    logic               special, sign;
    logic [31:0]        special_r;
    logic signed [10:0] exp_pre;
    mul_front(a, b, special, special_r, sign, exp_pre);
    return mul_back(special, special_r, sign, exp_pre,
                    {24'd0, 1'b1, a[22:0]} * {24'd0, 1'b1, b[22:0]});
  endfunction

  // The multiply's stages.
  function automatic mul_parts_t mul_parts(input logic [31:0] a, input logic [31:0] b);
    logic [23:0] sig_b;
    mul_parts_t  p;
    mul_front(a, b, p.special, p.special_r, p.sign, p.exp_pre);
    sig_b     = {1'b1, b[22:0]};
    p.prod_lo = {12'd0, 1'b1, a[22:0]} * {24'd0, sig_b[11:0]};
    p.prod_hi = {12'd0, 1'b1, a[22:0]} * {24'd0, sig_b[23:12]};
    return p;
  endfunction

  function automatic mul_sum_t mul_sum(input mul_parts_t p);
    mul_sum_t s;
    s.special   = p.special;
    s.special_r = p.special_r;
    s.sign      = p.sign;
    s.exp_pre   = p.exp_pre;
    s.sig_prod  = {12'd0, p.prod_lo} + {p.prod_hi, 12'd0};
    return s;
  endfunction

  function automatic logic [31:0] mul_round(input mul_sum_t s);
    return mul_back(s.special, s.special_r, s.sign, s.exp_pre, s.sig_prod);
  endfunction

  // bf16 a * bf16 b into fp32: exact but for overflow (signed Inf) and flush of tiny products.
  // The widened operands have 8-bit significands, so fp32_mul never rounds here; synthesis
  // trims the multiplier to the bits that are not constant zero.
  function automatic logic [31:0] bf16_mul(input logic [15:0] a, input logic [15:0] b);
    /*verilator no_inline_task*/
    return fp32_mul({a, 16'h0000}, {b, 16'h0000});
  endfunction

  // Maximum; NaN if either is NaN; max(+0, -0) = +0.
  function automatic logic [31:0] fp32_max(input logic [31:0] a, input logic [31:0] b);
    /*verilator no_inline_task*/
    logic [31:0] a_daz, b_daz, a_key, b_key;
    a_daz = (a[30:23] == 8'd0) ? {a[31], 31'd0} : a;
    b_daz = (b[30:23] == 8'd0) ? {b[31], 31'd0} : b;
    // sign-magnitude onto an unsigned order: negatives inverted, positives offset
    a_key = a_daz[31] ? ~a_daz : {1'b1, a_daz[30:0]};
    b_key = b_daz[31] ? ~b_daz : {1'b1, b_daz[30:0]};
    if (((a[30:23] == 8'hFF) && (a[22:0] != '0)) || ((b[30:23] == 8'hFF) && (b[22:0] != '0))) begin
      return CANON_NAN;
    end
    return (a_key >= b_key) ? a_daz : b_daz;
  endfunction

  // Horner evaluation c0 + (c1 + c2*r)*r of a table quadratic; r in units of 2^-RF.
  function automatic logic signed [51:0] quad_eval(input quad_t c, input logic [16:0] r,
                                                   input int unsigned rf);
    logic signed [51:0] p;
    p = ($signed({{19{c.c2[COEF_WIDTH-1]}}, c.c2}) * $signed({35'd0, r})) >>> rf;
    p = p + $signed({{19{c.c1[COEF_WIDTH-1]}}, c.c1});
    p = (p * $signed({35'd0, r})) >>> rf;
    return p + $signed({{19{c.c0[COEF_WIDTH-1]}}, c.c0});
  endfunction

  // 2^x: x = n + f (floor) on 24 fraction bits, 2^f from the table, rounded half up. In three
  // stages (nelssa_fp32_exp2 puts registers between them from Latency 2 on): the range
  // reduction and the special results (exp2_reduce), the table's quadratic (exp2_poly), the
  // rounding and the exponent (exp2_round).
  typedef struct packed {
    logic              special;    // the result is special_r
    logic [31:0]       special_r;
    logic signed [8:0] n;          // floor(x)
    logic [23:0]       f;          // x - n, 24 fraction bits
  } exp2_red_t;

  typedef struct packed {
    logic              special;
    logic [31:0]       special_r;
    logic signed [8:0] n;
    logic signed [51:0] y;         // 2^f, COEF_FRAC fraction bits
  } exp2_poly_t;

  function automatic exp2_red_t exp2_reduce(input logic [31:0] x);
    logic [7:0]  e;
    logic [23:0] sig;
    logic [5:0]  rshift;
    logic [2:0]  lshift;
    logic [63:0] shifted_wide;
    logic [30:0] mag;
    logic        sticky;
    logic signed [32:0] xfx;
    exp2_red_t r;
    e   = x[30:23];
    sig = {1'b1, x[22:0]};
    // floor(|x| * 2^24) and whether nonzero bits were dropped, valid for |x| < 128
    lshift = (e >= 8'd126) ? 3'((e - 8'd126) > 8'd7 ? 8'd7 : e - 8'd126) : 3'd0;
    rshift = (e >= 8'd126) ? 6'd0 : ((8'd126 - e) > 8'd40 ? 6'd40 : 6'(8'd126 - e));
    shifted_wide = {sig, 40'd0} >> rshift;
    if (e >= 8'd126) begin
      mag    = {7'd0, sig} << lshift;
      sticky = 1'b0;
    end else begin
      mag    = {7'd0, shifted_wide[63:40]};
      sticky = |shifted_wide[39:0];
    end
    xfx = x[31] ? -($signed({2'b00, mag}) + $signed({32'd0, sticky})) : $signed({2'b00, mag});
    r.n = 9'(xfx >>> 24);
    r.f = xfx[23:0];
    r.special = 1'b1;
    if ((e == 8'hFF) && (x[22:0] != '0)) r.special_r = CANON_NAN;
    else if (e == 8'd0) r.special_r = 32'h3F80_0000;
    else if (e >= 8'd134) r.special_r = x[31] ? 32'd0 : POS_INF;  // |x| >= 128, Inf included
    else begin
      r.special = 1'b0;
      r.special_r = '0;
    end
    return r;
  endfunction

  function automatic exp2_poly_t exp2_poly(input exp2_red_t r);
    exp2_poly_t p;
    p.special = r.special;
    p.special_r = r.special_r;
    p.n = r.n;
    p.y = quad_eval(exp2_coef(r.f[23:17]), r.f[16:0], 24);
    return p;
  endfunction

  function automatic logic [31:0] exp2_round(input exp2_poly_t p);
    logic [24:0]        m24;
    logic signed [10:0] biased;
    m24 = 25'((p.y + 52'sd64) >>> (COEF_FRAC - 23));
    biased = $signed({{2{p.n[8]}}, p.n}) + 11'sd127 + $signed({10'd0, m24[24]});
    if (p.special) return p.special_r;
    if (biased <= 11'sd0) return 32'd0;
    if (biased >= 11'sd255) return POS_INF;
    return {1'b0, biased[7:0], m24[24] ? 23'd0 : m24[22:0]};
  endfunction

  function automatic logic [31:0] fp32_exp2(input logic [31:0] x);
    /*verilator no_inline_task*/
    return exp2_round(exp2_poly(exp2_reduce(x)));
  endfunction

  // Signed fixed point with 30 fraction bits (|v| < 2^39) to fp32, magnitude rounded half up.
  function automatic logic [31:0] fixed30_to_fp32(input logic signed [39:0] v);
    logic [39:0] mag, rounded_wide;
    logic [6:0]  lead;
    logic signed [9:0] exp_out;
    mag  = v[39] ? 40'(-v) : 40'(v);
    lead = '0;
    for (int i = 0; i < 40; i++) begin
      if (mag[i]) lead = 7'(i);
    end
    if (lead > 7'd23) rounded_wide = (mag + (40'd1 << (lead - 7'd24))) >> (lead - 7'd23);
    else rounded_wide = mag << (7'd23 - lead);
    exp_out = $signed({3'd0, lead}) - 10'sd30 + 10'sd127 + $signed({9'd0, rounded_wide[24]});
    if (mag == '0) return 32'd0;
    return {v[39], exp_out[7:0], rounded_wide[24] ? 23'd0 : rounded_wide[22:0]};
  endfunction

  // log2 and the reciprocal in three stages (nelssa_fp32_log2 and nelssa_fp32_recip put
  // registers between them from Latency 2 on): x's fields and the special results (log2_arg,
  // recip_arg), the table's quadratic (log2_poly, recip_poly: the table is read at x's interval
  // from the first stage's register, which makes it a block RAM on an FPGA, as exp2's), the
  // result rounded (log2_round, recip_round). What passes between them:
  typedef struct packed {
    logic        special;    // the result is special_r
    logic [31:0] special_r;
    logic        s;          // x's sign
    logic [7:0]  e;          // x's biased exponent
    logic [22:0] m;          // x's mantissa: its table interval (high bits) and the rest
  } table_arg_t;

  typedef struct packed {
    logic               special;
    logic [31:0]        special_r;
    logic               s;
    logic [7:0]         e;
    logic signed [51:0] y;   // the table's function of 1.m, COEF_FRAC fraction bits
  } table_poly_t;

  // The first stage but for the special results.
  function automatic table_arg_t table_arg(input logic [31:0] x);
    table_arg_t a;
    a.special = 1'b0;
    a.special_r = '0;
    a.s = x[31];
    a.e = x[30:23];
    a.m = x[22:0];
    return a;
  endfunction

  // The second stage, c the table's entry of a's interval.
  function automatic table_poly_t table_poly(input quad_t c, input table_arg_t a);
    table_poly_t p;
    p.special = a.special;
    p.special_r = a.special_r;
    p.s = a.s;
    p.e = a.e;
    p.y = quad_eval(c, {1'b0, a.m[15:0]}, 23);
    return p;
  endfunction

  // log2(x) = e + log2(1.m), summed exactly in fixed point, then rounded to fp32.
  function automatic table_arg_t log2_arg(input logic [31:0] x);
    table_arg_t a;
    a = table_arg(x);
    a.special = 1'b1;
    if ((x[30:23] == 8'hFF) && (x[22:0] != '0)) a.special_r = CANON_NAN;
    else if (x[31] && (x[30:23] != 8'd0)) a.special_r = CANON_NAN;
    else if (x[30:23] == 8'hFF) a.special_r = POS_INF;
    else if (x[30:23] == 8'd0) a.special_r = 32'hFF80_0000;
    else a.special = 1'b0;
    return a;
  endfunction

  function automatic table_poly_t log2_poly(input table_arg_t a);
    return table_poly(log2_coef(a.m[22:16]), a);
  endfunction

  function automatic logic [31:0] log2_round(input table_poly_t p);
    logic signed [39:0] total;
    total = ($signed({32'd0, p.e}) - 40'sd127) * 40'sd1073741824 + 40'(p.y);
    if (p.special) return p.special_r;
    return fixed30_to_fp32(total);
  endfunction

  function automatic logic [31:0] fp32_log2(input logic [31:0] x);
    /*verilator no_inline_task*/
    return log2_round(log2_poly(log2_arg(x)));
  endfunction

  // 1/x = 2^-e / (1.m), the mantissa from the table, rounded half up.
  function automatic table_arg_t recip_arg(input logic [31:0] x);
    table_arg_t a;
    a = table_arg(x);
    a.special = 1'b1;
    if ((x[30:23] == 8'hFF) && (x[22:0] != '0)) a.special_r = CANON_NAN;
    else if (x[30:23] == 8'hFF) a.special_r = {x[31], 31'd0};
    else if (x[30:23] == 8'd0) a.special_r = {x[31], 8'hFF, 23'd0};
    else a.special = 1'b0;
    return a;
  endfunction

  function automatic table_poly_t recip_poly(input table_arg_t a);
    return table_poly(recip_coef(a.m[22:16]), a);
  endfunction

  function automatic logic [31:0] recip_round(input table_poly_t p);
    logic               top;
    logic [24:0]        m24;
    logic signed [10:0] biased;
    top = (p.y >= (52'sd1 <<< COEF_FRAC));  // 1/(1.m) is exactly 1 only at m = 0
    m24 = top ? 25'((p.y + 52'sd64) >>> (COEF_FRAC - 23))
              : 25'((p.y + 52'sd32) >>> (COEF_FRAC - 24));
    biased = 11'sd254 - $signed({3'd0, p.e}) - (top ? 11'sd0 : 11'sd1)
             + $signed({10'd0, m24[24]});
    if (p.special) return p.special_r;
    if (biased <= 11'sd0) return {p.s, 31'd0};
    return {p.s, biased[7:0], m24[24] ? 23'd0 : m24[22:0]};
  endfunction

  function automatic logic [31:0] fp32_recip(input logic [31:0] x);
    /*verilator no_inline_task*/
    return recip_round(recip_poly(recip_arg(x)));
  endfunction
endpackage
