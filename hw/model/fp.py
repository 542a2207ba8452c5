"""Bit-exact models of the engine's arithmetic units (docs/numerics.md is the contract).

Every function takes and returns bit patterns as ``numpy.uint32`` arrays (``uint16`` for bf16
inputs), vectorised over any shape, so scoreboards compare bits and the engine model can run a
whole cluster in a few numpy calls. Policy shared with the RTL:

* round to nearest even in add and multiply; the table functions round half up;
* subnormal inputs are read as zero of the same sign and subnormal results are flushed to a zero
  of the same sign ("tiny" is judged on the exact result, before rounding);
* every NaN result is the canonical quiet NaN ``0x7FC00000``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.fp_tables import COEF_FRAC, INDEX_BITS, TABLES

U32 = npt.NDArray[np.uint32]
U16 = npt.NDArray[np.uint16]

CANON_NAN = np.uint32(0x7FC00000)
POS_INF = np.uint32(0x7F800000)
NEG_INF = np.uint32(0xFF800000)
ONE = np.uint32(0x3F800000)
MIN_NORMAL = np.float32(2.0**-126)
LOG2E_BITS = np.uint32(0x3FB8AA3B)
"""log2(e) rounded to fp32."""
LN2_BITS = np.uint32(0x3F317218)
"""ln(2) rounded to fp32."""

EXP_MASK = np.uint32(0x7F800000)
MANT_MASK = np.uint32(0x007FFFFF)
_SIGN = np.uint32(0x80000000)


def as_u32(x: npt.ArrayLike) -> U32:
    """View float32 data as bits, or coerce integer bit patterns to uint32."""
    arr = np.asarray(x)
    if arr.dtype == np.float32:
        return arr.view(np.uint32)
    return arr.astype(np.uint32)


def as_f32(bits: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Reinterpret uint32 bit patterns as float32."""
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bf16_to_f32_bits(b: npt.ArrayLike) -> U32:
    """Widen bf16 bits to fp32 bits, exactly, then apply the subnormal/NaN policy."""
    return daz(np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16))


def f32_to_bf16_bits(x: npt.ArrayLike) -> U16:
    """Round float32 values to bf16 bits (nearest even); for building test inputs."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def has_special(bits: U32) -> bool:
    """Whether any of these fp32 bit patterns is subnormal or NaN (what ``daz`` changes).

    With the sign cleared, a NaN is above +Inf, and minus one (wrapping) takes +0 to the top
    and a subnormal below the smallest normal: a max and a min, one temporary, where the
    fields one by one took six."""
    if bits.size == 0:
        return False
    mag = bits & ~_SIGN
    if mag.max() > POS_INF:
        return True
    mag -= np.uint32(1)
    return bool(mag.min() < MANT_MASK)


def daz(bits: npt.ArrayLike) -> U32:
    """Subnormal inputs become signed zero, NaNs become the canonical NaN."""
    b = np.asarray(bits, dtype=np.uint32)
    if not has_special(b):
        return b.copy()  # the common case: no subnormal, no NaN (zeros have no mantissa)
    return _flush(b)


def _read(bits: npt.ArrayLike) -> U32:
    """What an operation reads of its input: ``daz`` without the copy where nothing changes
    (the operations never write their inputs)."""
    b = np.asarray(bits, dtype=np.uint32)
    return _flush(b) if has_special(b) else b


def _flush(b: U32) -> U32:
    exp = b & EXP_MASK
    mant_set = (b & MANT_MASK) != 0
    out = np.where(exp == 0, b & _SIGN, b)
    return np.where((exp == EXP_MASK) & mant_set, CANON_NAN, out).astype(np.uint32)


def _finish(f: npt.NDArray[np.float32] | U32) -> U32:
    """Flush tiny results to signed zero and canonicalise NaN: ``daz`` of an array of the
    caller's own, returned as it is in the common case (no copy)."""
    b = np.asarray(f).view(np.uint32)
    return _flush(b) if has_special(b) else b


def fadd(a: npt.ArrayLike, b: npt.ArrayLike) -> U32:
    """fp32 a + b, RNE. Tiny sums of normals are exact, so IEEE-then-flush equals the RTL."""
    with np.errstate(all="ignore"):
        r = as_f32(_read(a)) + as_f32(_read(b))
    return _finish(np.asarray(r, dtype=np.float32))


def fsub(a: npt.ArrayLike, b: npt.ArrayLike) -> U32:
    """fp32 a - b as a + (-b)."""
    return fadd(a, np.asarray(b, dtype=np.uint32) ^ _SIGN)


def fmul(a: npt.ArrayLike, b: npt.ArrayLike) -> U32:
    """fp32 a * b, RNE; a result whose exact value is below 2**-126 flushes to signed zero."""
    with np.errstate(all="ignore"):
        exact = as_f32(_read(a)).astype(np.float64) * as_f32(_read(b)).astype(np.float64)
        bits = exact.astype(np.float32).view(np.uint32)
    # below 2**-126 exactly is a float32 exponent of 0 (flushed by daz), but for products
    # that round up to the smallest normal: those alone need the exact value
    edge = (bits & ~_SIGN) == MIN_NORMAL.view(np.uint32)
    if edge.any():
        bits = np.where(edge & (np.abs(exact) < 2.0**-126), bits & _SIGN, bits)
    return _finish(bits)


def bf16_mul(a: npt.ArrayLike, b: npt.ArrayLike) -> U32:
    """bf16 a * bf16 b into fp32; exact except for overflow (Inf) and flush of tiny results.

    Two 8-bit significands make 16 bits, so float32 holds the product exactly wherever it is
    normal; below 2**-126 it is representable down to 2**-134 and never rounds up to 2**-126,
    so a float32 exponent of 0 is exactly a product to flush (fmul's result in float32
    arithmetic, without its float64 temporaries)."""
    with np.errstate(all="ignore"):
        r = as_f32(bf16_to_f32_bits(a)) * as_f32(bf16_to_f32_bits(b))
    return _finish(r)


def fmax(a: npt.ArrayLike, b: npt.ArrayLike) -> U32:
    """Maximum; NaN if either is NaN; max(+0, -0) is +0."""
    a = _read(a)
    b = _read(b)
    fa, fb = as_f32(a), as_f32(b)
    r = np.where(fa > fb, a, np.where(fb > fa, b, a & b))
    return np.where(np.isnan(fa) | np.isnan(fb), CANON_NAN, r).astype(np.uint32)


def _quad(name: str, idx: np.ndarray, r: np.ndarray, r_frac: int) -> np.ndarray:
    """Horner evaluation of one table function, in the RTL's integer steps (Q.COEF_FRAC).

    ``r`` is the offset into interval ``idx`` in units of ``2**-r_frac``."""
    c0, c1, c2 = (np.asarray(c, dtype=np.int64)[idx] for c in TABLES[name])
    t = (c2 * r) >> r_frac
    t = (c1 + t) * r >> r_frac
    return c0 + t


def _pack(sign: np.ndarray, biased_exp: np.ndarray, mant: np.ndarray) -> U32:
    return ((sign.astype(np.uint32) << 31) | (biased_exp.astype(np.uint32) << 23)
            | mant.astype(np.uint32)).astype(np.uint32)


_EXP2_XF = 24  # fraction bits of the fixed-point argument of exp2
_EXP2_RF = _EXP2_XF - INDEX_BITS


def exp2(x: npt.ArrayLike) -> U32:
    """2**x. Range reduction x = n + f (floor), 2**f from the table, result rounded half up."""
    x = daz(x).astype(np.int64)
    sign = (x >> 31) & 1
    e = (x >> 23) & 0xFF
    mant24 = (x & 0x7FFFFF) | 0x800000
    # floor(|x| * 2**24) and whether bits were dropped, for |x| < 128 (e <= 133)
    lsh = np.clip(e - 126, 0, 7)
    rsh = np.clip(126 - e, 0, 40)
    mag = np.where(e >= 126, mant24 << lsh, mant24 >> rsh)
    sticky = np.where(e >= 126, 0, (mant24 & ((np.int64(1) << rsh) - 1)) != 0)
    xfx = np.where(sign == 1, -(mag + sticky), mag)
    n = xfx >> _EXP2_XF
    f = xfx & ((1 << _EXP2_XF) - 1)
    y = _quad("exp2", f >> _EXP2_RF, f & ((1 << _EXP2_RF) - 1), _EXP2_XF)
    m24 = (y + (1 << (COEF_FRAC - 24))) >> (COEF_FRAC - 23)
    carry = m24 >> 24
    biased = n + 127 + carry
    mant = np.where(carry == 1, 0, m24 - (1 << 23))
    zero_s = np.zeros_like(sign)
    out = _pack(zero_s, np.clip(biased, 0, 255), np.clip(mant, 0, (1 << 23) - 1))
    out = np.where(biased >= 255, POS_INF, out)
    out = np.where(biased <= 0, np.uint32(0), out)
    big = e >= 134  # |x| >= 128
    out = np.where(big & (sign == 0), POS_INF, out)
    out = np.where(big & (sign == 1), np.uint32(0), out)
    out = np.where(e == 0, ONE, out)  # +-0
    is_nan = (e == 255) & ((x & 0x7FFFFF) != 0)
    return np.where(is_nan, CANON_NAN, out).astype(np.uint32)


_LR_RF = 23 - INDEX_BITS  # log2/recip: offset bits below the table index


def _fixed_to_f32(v: np.ndarray, frac: int) -> U32:
    """Signed fixed-point (``frac`` fraction bits, |v| < 2**40) to fp32, rounded half up."""
    sign = (v < 0).astype(np.int64)
    mag = np.abs(v)
    lead = np.zeros_like(mag)
    for k in range(40):
        lead = np.where((mag >> k) & 1 == 1, k, lead)
    # shift the leading one to bit 23, rounding half up on the magnitude
    sh = lead - 23
    rounded = np.where(sh > 0, (mag + ((np.int64(1) << np.maximum(sh - 1, 0)) * (sh > 0)))
                       >> np.maximum(sh, 0), mag << np.maximum(-sh, 0))
    carry = rounded >> 24
    exp = lead - frac + 127 + carry
    mant = np.where(carry == 1, 0, rounded & 0x7FFFFF)
    out = _pack(sign, exp, mant)
    return np.where(mag == 0, np.uint32(0), out).astype(np.uint32)


def log2(x: npt.ArrayLike) -> U32:
    """log2(x) = e + log2(1.m); the sum is exact in fixed point, then rounded to fp32."""
    x = daz(x).astype(np.int64)
    sign = (x >> 31) & 1
    e = (x >> 23) & 0xFF
    m = x & 0x7FFFFF
    g = _quad("log2", m >> _LR_RF, m & ((1 << _LR_RF) - 1), 23)
    total = ((e - 127) << COEF_FRAC) + g
    out = _fixed_to_f32(total, COEF_FRAC)
    out = np.where(e == 0, NEG_INF, out)
    out = np.where((e == 255) & (sign == 0), POS_INF, out)
    out = np.where((sign == 1) & (e != 0), CANON_NAN, out)
    out = np.where((e == 255) & (m != 0), CANON_NAN, out)
    return out.astype(np.uint32)


def recip(x: npt.ArrayLike) -> U32:
    """1/x = 2**-e / (1.m), the mantissa from the table, rounded half up."""
    x = daz(x).astype(np.int64)
    sign = (x >> 31) & 1
    e = (x >> 23) & 0xFF
    m = x & 0x7FFFFF
    y = _quad("recip", m >> _LR_RF, m & ((1 << _LR_RF) - 1), 23)
    one = np.int64(1) << COEF_FRAC
    top = y >= one  # only at m == 0, where y is exactly 1.0
    m24 = np.where(top, (y + (1 << (COEF_FRAC - 24))) >> (COEF_FRAC - 23),
                   (y + (1 << (COEF_FRAC - 25))) >> (COEF_FRAC - 24))
    carry = m24 >> 24
    biased = (127 - (e - 127)) - np.where(top, 0, 1) + carry
    mant = np.where(carry == 1, 0, m24 - (1 << 23))
    out = _pack(sign, np.clip(biased, 0, 255), np.clip(mant, 0, (1 << 23) - 1))
    out = np.where(biased <= 0, sign.astype(np.uint32) << 31, out)
    out = np.where(e == 0, POS_INF | (sign.astype(np.uint32) << 31), out)
    out = np.where(e == 255, sign.astype(np.uint32) << 31, out)
    out = np.where((e == 255) & (m != 0), CANON_NAN, out)
    return out.astype(np.uint32)
