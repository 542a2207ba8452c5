// fp32 add and multiply cut into pipeline stages, for units with internal registers: each
// stage is a function from the previous stage's packed struct to the next one's, and the
// composition of a unit's stages is bit for bit nelssa_fp_pkg's fp32_add / fp32_mul (the
// numeric contract of docs/numerics.md; tests/rtl/test_fp_stages.py checks the composition and
// the registered units nelssa_fp32_add_staged / nelssa_fp32_mul_staged against both those
// functions and the model hw/model/fp.py).
//   add: add_align (classify, order by magnitude, align with sticky)
//        | add_sum (add or subtract, count leading zeros) | add_round (normalise, round, pack)
//   mul: mul_parts (classify, exponent, two 24x12 partial products)
//        | mul_sum (the 48-bit product) | mul_round (normalise, round, pack)
// Results that the operands alone decide (NaN, Inf, zero operands) are chosen in the first
// stage and carried, so the later stages only see finite nonzero operands' arithmetic.
package nelssa_fp_stages_pkg;
  import nelssa_fp_pkg::*;

  // What an operand is, as add and multiply read it (subnormals read as zero).
  typedef struct packed {
    logic zero;
    logic inf;
    logic nan;
  } fp_class_t;

  function automatic fp_class_t fp_class(input logic [31:0] x);
    fp_class_t c;
    c.zero = (x[30:23] == 8'd0);
    c.inf  = (x[30:23] == 8'hFF) && (x[22:0] == '0);
    c.nan  = (x[30:23] == 8'hFF) && (x[22:0] != '0);
    return c;
  endfunction

  // ---- add ----------------------------------------------------------------------------------
  typedef struct packed {
    logic        special;        // the result is special_r (NaN, Inf or a zero operand)
    logic [31:0] special_r;
    logic        sub_op;         // the signs differ: subtract the magnitudes
    logic        big_sign;       // sign of the larger magnitude (the result's)
    logic [7:0]  big_exp;
    logic [26:0] big_sig;        // 1.m with guard, round and sticky bits
    logic [26:0] small_aligned;  // the smaller significand shifted to big_exp, sticky in bit 0
  } add_align_t;

  typedef struct packed {
    logic        special;
    logic [31:0] special_r;
    logic        big_sign;
    logic [7:0]  big_exp;
    logic [27:0] raw_sum;        // big_sig +/- small_aligned, carry in bit 27
    logic [4:0]  lead_zeros;     // of raw_sum[26:0]
  } add_sum_t;

  function automatic add_align_t add_align(input logic [31:0] a, input logic [31:0] b);
    fp_class_t   ca, cb;
    logic        swap;
    logic [7:0]  small_exp, exp_diff;
    logic [4:0]  shift_amt;
    logic [26:0] small_sig;
    logic [53:0] align_wide;
    add_align_t  s;
    ca = fp_class(a);
    cb = fp_class(b);
    s.sub_op = a[31] ^ b[31];
    s.special = 1'b1;
    if (ca.nan || cb.nan || (ca.inf && cb.inf && s.sub_op)) s.special_r = CANON_NAN;
    else if (ca.inf) s.special_r = {a[31], 8'hFF, 23'd0};
    else if (cb.inf) s.special_r = {b[31], 8'hFF, 23'd0};
    else if (ca.zero && cb.zero) s.special_r = {a[31] & b[31], 31'd0};
    else if (cb.zero) s.special_r = a;
    else if (ca.zero) s.special_r = b;
    else begin
      s.special   = 1'b0;
      s.special_r = '0;
    end
    // order by magnitude so the subtraction never goes negative
    swap        = b[30:0] > a[30:0];
    s.big_sign  = swap ? b[31] : a[31];
    s.big_exp   = swap ? b[30:23] : a[30:23];
    small_exp   = swap ? a[30:23] : b[30:23];
    s.big_sig   = {1'b1, (swap ? b[22:0] : a[22:0]), 3'b000};
    small_sig   = {1'b1, (swap ? a[22:0] : b[22:0]), 3'b000};
    exp_diff    = s.big_exp - small_exp;
    shift_amt   = (exp_diff > 8'd31) ? 5'd31 : exp_diff[4:0];
    // align with guard, round and sticky: bits shifted out are ORed into the LSB
    align_wide      = {small_sig, 27'd0} >> shift_amt;
    s.small_aligned = align_wide[53:27] | {26'd0, |align_wide[26:0]};
    return s;
  endfunction

  function automatic add_sum_t add_sum(input add_align_t s);
    add_sum_t t;
    t.special    = s.special;
    t.special_r  = s.special_r;
    t.big_sign   = s.big_sign;
    t.big_exp    = s.big_exp;
    t.raw_sum    = s.sub_op ? ({1'b0, s.big_sig} - {1'b0, s.small_aligned})
                            : ({1'b0, s.big_sig} + {1'b0, s.small_aligned});
    t.lead_zeros = lead_zeros27(t.raw_sum[26:0]);
    return t;
  endfunction

  function automatic logic [31:0] add_round(input add_sum_t t);
    logic              round_up;
    logic [26:0]       norm_sig;
    logic [24:0]       rounded;
    logic signed [9:0] norm_exp, final_exp;
    if (t.raw_sum[27]) begin
      norm_sig = {t.raw_sum[27:2], t.raw_sum[1] | t.raw_sum[0]};
      norm_exp = $signed({2'b00, t.big_exp}) + 10'sd1;
    end else begin
      norm_sig = t.raw_sum[26:0] << t.lead_zeros;
      norm_exp = $signed({2'b00, t.big_exp}) - $signed({5'd0, t.lead_zeros});
    end
    round_up  = norm_sig[2] & (norm_sig[1] | norm_sig[0] | norm_sig[3]);
    rounded   = {1'b0, norm_sig[26:3]} + {24'd0, round_up};
    final_exp = rounded[24] ? norm_exp + 10'sd1 : norm_exp;
    if (t.special) return t.special_r;
    if (t.raw_sum == '0) return 32'd0;
    if (final_exp >= 10'sd255) return {t.big_sign, 8'hFF, 23'd0};
    if (final_exp <= 10'sd0) return {t.big_sign, 31'd0};
    return {t.big_sign, final_exp[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
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

  function automatic mul_parts_t mul_parts(input logic [31:0] a, input logic [31:0] b);
    fp_class_t   ca, cb;
    logic [23:0] sig_b;
    mul_parts_t  p;
    p.sign = a[31] ^ b[31];
    ca = fp_class(a);
    cb = fp_class(b);
    p.special = 1'b1;
    if (ca.nan || cb.nan || (ca.inf && cb.zero) || (cb.inf && ca.zero)) p.special_r = CANON_NAN;
    else if (ca.inf || cb.inf) p.special_r = {p.sign, 8'hFF, 23'd0};
    else if (ca.zero || cb.zero) p.special_r = {p.sign, 31'd0};
    else begin
      p.special   = 1'b0;
      p.special_r = '0;
    end
    p.exp_pre = $signed({3'b000, a[30:23]}) + $signed({3'b000, b[30:23]}) - 11'sd127;
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
    logic               guard, sticky, round_up;
    logic [23:0]        kept;
    logic [24:0]        rounded;
    logic signed [10:0] exp_pre, exp_fin;
    exp_pre = s.exp_pre;
    if (s.sig_prod[47]) begin
      kept    = s.sig_prod[47:24];
      guard   = s.sig_prod[23];
      sticky  = |s.sig_prod[22:0];
      exp_pre = exp_pre + 11'sd1;
    end else begin
      kept    = s.sig_prod[46:23];
      guard   = s.sig_prod[22];
      sticky  = |s.sig_prod[21:0];
    end
    round_up = guard & (sticky | kept[0]);
    rounded  = {1'b0, kept} + {24'd0, round_up};
    exp_fin  = rounded[24] ? exp_pre + 11'sd1 : exp_pre;
    if (s.special) return s.special_r;
    if (exp_pre <= 11'sd0) return {s.sign, 31'd0};
    if (exp_fin >= 11'sd255) return {s.sign, 8'hFF, 23'd0};
    return {s.sign, exp_fin[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
  endfunction
endpackage
