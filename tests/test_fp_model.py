"""The arithmetic model (hw/model/fp.py): error bounds against float64, special values, and
IEEE agreement of add and multiply on normal results. These bounds are the ones docs/numerics.md
states for the RTL, which equals the model bit for bit (tests/rtl)."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model import fp

RNG = np.random.default_rng(7)


def _f64(bits: np.ndarray) -> np.ndarray:
    return fp.as_f32(bits).astype(np.float64)


def _exp2_ulp_error(x: np.ndarray) -> float:
    y = _f64(fp.exp2(x.astype(np.float32).view(np.uint32)))
    ref = np.exp2(x.astype(np.float32).astype(np.float64))
    return float(np.max(np.abs(y - ref) / np.exp2(np.floor(np.log2(ref)) - 23)))


def test_exp2_error_bound_dense():
    """1.25 ulp over the softmax range [-126, 0] (2M points plus every table breakpoint)."""
    x = np.concatenate([-RNG.uniform(0, 126, 2_000_000), -np.arange(0, 3 * 128) / 128.0])
    assert _exp2_ulp_error(x) <= 1.25


def test_exp2_error_bound_every_fixed_point_cell_near_zero():
    """Exhaustive over the 2^23 fixed-point cells of [-0.5, 0), where the floor of the input
    to 24 fraction bits costs most (worst case measured: 1.213 ulp)."""
    x = -np.arange(1, 2**23 + 1, dtype=np.float64) * 2.0**-24
    assert _exp2_ulp_error(x) <= 1.25


def test_recip_error_bound_every_mantissa():
    """0.9 ulp over all 2^23 mantissas (the result scales exactly with the exponent) and 2M
    random values of any exponent."""
    x = np.concatenate([np.exp(RNG.uniform(-80, 80, 2_000_000)).astype(np.float32),
                        (0x3F800000 + np.arange(2**23)).astype(np.uint32).view(np.float32)])
    y = _f64(fp.recip(x.view(np.uint32)))
    ref = 1.0 / x.astype(np.float64)
    ulp = np.exp2(np.floor(np.log2(ref)) - 23)
    assert np.max(np.abs(y - ref) / ulp) <= 0.9


def test_log2_error_bound():
    """|log2(x) - exact| <= 2^-26 + half an ulp of the result (absolute near x = 1)."""
    x = np.concatenate([np.exp(RNG.uniform(-80, 80, 2_000_000)).astype(np.float32),
                        (0x3F800000 + np.arange(-65535, 65536)).astype(np.uint32).view(np.float32)])
    y = _f64(fp.log2(x.view(np.uint32)))
    ref = np.log2(x.astype(np.float64))
    half_ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(ref), 2.0**-126))) - 24)
    assert np.all(np.abs(y - ref) <= 2.0**-26 + half_ulp)


@pytest.mark.parametrize(("func", "x", "want"), [
    (fp.exp2, 0x00000000, 0x3F800000), (fp.exp2, 0xFF800000, 0x00000000),
    (fp.exp2, 0x7F800000, 0x7F800000), (fp.exp2, 0x43000000, 0x7F800000),
    (fp.exp2, 0xC2FC0000, 0x00800000), (fp.exp2, 0x00000001, 0x3F800000),
    (fp.log2, 0x3F800000, 0x00000000), (fp.log2, 0x00000000, 0xFF800000),
    (fp.log2, 0xBF800000, 0x7FC00000), (fp.log2, 0x7F800000, 0x7F800000),
    (fp.log2, 0x41000000, 0x40400000),
    (fp.recip, 0x80000000, 0xFF800000), (fp.recip, 0x7F800000, 0x00000000),
    (fp.recip, 0x40000000, 0x3F000000), (fp.recip, 0x7F7FFFFF, 0x00000000),
    (fp.recip, 0xFFC12345, 0x7FC00000),
])
def test_table_function_specials(func, x, want):
    assert int(func(np.array([x], dtype=np.uint32))[0]) == want


def test_add_mul_round_the_exact_result_to_nearest_even():
    """Against an independent oracle: with exponents within 14 of each other a + b and a * b
    are exact in float64, so one float64 -> float32 conversion is the correctly rounded result."""
    n = 500_000
    a = (RNG.standard_normal(n) * np.exp2(RNG.integers(-7, 7, n))).astype(np.float32)
    b = (RNG.standard_normal(n) * np.exp2(RNG.integers(-7, 7, n))).astype(np.float32)
    exact_sum = a.astype(np.float64) + b.astype(np.float64)
    exact_prod = a.astype(np.float64) * b.astype(np.float64)
    assert np.array_equal(fp.fadd(a.view(np.uint32), b.view(np.uint32)),
                          exact_sum.astype(np.float32).view(np.uint32))
    assert np.array_equal(fp.fmul(a.view(np.uint32), b.view(np.uint32)),
                          exact_prod.astype(np.float32).view(np.uint32))


def test_flush_and_nan_policy():
    tiny = np.float32(2.0**-100)
    neg = np.float32(-(2.0**-30))
    prod = fp.fmul(np.array([tiny.view(np.uint32)]), np.array([neg.view(np.uint32)]))
    assert int(prod[0]) == 0x80000000  # exact 2^-130 flushes to -0
    sub = np.array([0x00000005], dtype=np.uint32)  # subnormal input reads as +0
    assert int(fp.fadd(sub, np.array([0x80000000], np.uint32))[0]) == 0x00000000
    nan = fp.fmul(np.array([0x7F800000], np.uint32), np.array([0], np.uint32))
    assert int(nan[0]) == 0x7FC00000
    assert int(fp.fmax(np.array([0x80000000], np.uint32), np.array([0], np.uint32))[0]) == 0


def test_bf16_product_is_exact():
    a = RNG.integers(0x3000, 0x4F00, 100_000).astype(np.uint16)
    b = RNG.integers(0xB000, 0xCF00, 100_000).astype(np.uint16)
    exact = _f64(fp.bf16_to_f32_bits(a)) * _f64(fp.bf16_to_f32_bits(b))
    assert np.array_equal(_f64(fp.bf16_mul(a, b)), exact)
