"""The fast paths of hw/model/fp.py against the plain definitions they replace: ``bf16_mul`` in
float32 arithmetic, ``fmul``'s flush judged on the float32 result (the exact value only at the
smallest normal), and ``has_special``'s max/min test. The definitions are written here once,
field by field, as the oracle; every case must give the same bits."""

from __future__ import annotations

import numpy as np

from nelssa.hw.model import fp

RNG = np.random.default_rng(11)
SIGN = np.uint32(0x80000000)


def _daz(b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, dtype=np.uint32)
    exp, mant = b & fp.EXP_MASK, b & fp.MANT_MASK
    out = np.where(exp == 0, b & SIGN, b)
    return np.where((exp == fp.EXP_MASK) & (mant != 0), fp.CANON_NAN, out).astype(np.uint32)


def _fmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The definition: the exact product rounded once, flushed where it is below 2**-126."""
    with np.errstate(all="ignore"):
        exact = fp.as_f32(_daz(a)).astype(np.float64) * fp.as_f32(_daz(b)).astype(np.float64)
        r = exact.astype(np.float32)
    r = np.where(np.abs(exact) < 2.0**-126, np.copysign(np.float32(0), r), r)
    return _daz(r.astype(np.float32).view(np.uint32))


def test_bf16_product_is_the_definition_for_every_bf16_times_chosen_values():
    """Every bf16 pattern (NaNs, Infs, subnormals, both zeros) times values that put the
    products across the whole range: overflow, the subnormal band, and both sides of 2**-126."""
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    specials = [0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC1, 0x3F80, 0x0080, 0x7F7F]
    b = np.array(specials + RNG.integers(0, 1 << 16, 40).tolist(), np.uint16)
    for y in b:
        col = np.full(a.shape, y, np.uint16)
        assert np.array_equal(fp.bf16_mul(a, col), _fmul(fp.bf16_to_f32_bits(a),
                                                          fp.bf16_to_f32_bits(col))), hex(y)


def test_products_that_round_up_to_the_smallest_normal_are_flushed():
    """(1 - 2**-24) * 2**-126 is 2**-126 - 2**-150, tiny, but halfway between the largest
    subnormal and 2**-126, so float32 rounds it up to 2**-126 (even): flushed (to the
    product's sign), as the exact value says; 1 - 2**-23 makes a subnormal, flushed too."""
    a = np.array([0x3F7FFFFF, 0xBF7FFFFF, 0x3F7FFFFE, 0x3F800000, 0x3F800001], np.uint32)
    b = np.full(a.shape, 0x00800000, np.uint32)
    with np.errstate(all="ignore"):
        rounded = (fp.as_f32(a) * fp.as_f32(b)).view(np.uint32)
    assert rounded[0] == 0x00800000  # what float32 alone would keep
    assert fp.fmul(a, b).tolist() == _fmul(a, b).tolist() == [
        0x00000000, 0x80000000, 0x00000000, 0x00800000, 0x00800001]


def test_fmul_is_the_definition_on_random_and_special_operands():
    n = 400_000
    a = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    b = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # exponents summing near the bottom of the normal range, where the flush decides
    a[: n // 2] = (a[: n // 2] & ~fp.EXP_MASK) | (RNG.integers(40, 90, n // 2).astype(
        np.uint32) << 23)
    b[: n // 2] = (b[: n // 2] & ~fp.EXP_MASK) | (RNG.integers(40, 90, n // 2).astype(
        np.uint32) << 23)
    assert np.array_equal(fp.fmul(a, b), _fmul(a, b))


def test_has_special_is_subnormal_or_nan():
    cases = {0x00000000: False, 0x80000000: False, 0x00000001: True, 0x807FFFFF: True,
             0x00800000: False, 0x7F7FFFFF: False, 0x7F800000: False, 0xFF800000: False,
             0x7F800001: True, 0xFFFFFFFF: True, 0x3F800000: False}
    for bits, want in cases.items():
        arr = np.array([0x3F800000, bits, 0x40000000], np.uint32)
        assert fp.has_special(arr) is want, hex(bits)
        assert np.array_equal(fp.daz(arr), _daz(arr))
    assert fp.has_special(np.zeros(0, np.uint32)) is False
