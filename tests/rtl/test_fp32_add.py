"""nelssa_fp32_add against hw/model/fp.py fadd, bit for bit."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, pipe_vectors, random_f32_bits, run_unit_tests

UNIT = "fp32_add"
"""nelssa_fp32_add, on the units' shared build (fpunit.run_unit_tests)"""


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["a_i", "b_i"], "sum_o")


@cocotb.test()
async def specials_cross(dut):
    """Every pair of special values (signed zeros, Inf - Inf, NaN, subnormals, overflow)."""
    a, b = np.meshgrid(SPECIALS32, SPECIALS32)
    await TB(dut).check(fp.fadd, a.ravel(), b.ravel(), label="specials")


@cocotb.test()
async def cancellation(dut):
    """Near-equal magnitudes of opposite sign: deep normalisation and exact zero."""
    rng = np.random.default_rng(1)
    a = random_f32_bits(rng, 3000)
    delta = rng.integers(-4, 5, a.size).astype(np.int64)
    b = ((a.astype(np.int64) + delta) & 0x7FFFFFFF | ((~a.astype(np.int64)) & 0x80000000))
    await TB(dut).check(fp.fadd, a, b.astype(np.uint32), label="cancellation")


@cocotb.test()
async def alignment_and_rounding(dut):
    """Exponent gaps 0..30 with random mantissas: guard/round/sticky and ties to even."""
    rng = np.random.default_rng(2)
    n = 4000
    ea = rng.integers(30, 220, n)
    eb = np.clip(ea - rng.integers(0, 31, n), 1, 254)
    a = (rng.integers(0, 2, n) << 31) | (ea << 23) | rng.integers(0, 2**23, n)
    b = (rng.integers(0, 2, n) << 31) | (eb << 23) | rng.integers(0, 2**23, n)
    await TB(dut).check(fp.fadd, a.astype(np.uint32), b.astype(np.uint32), label="alignment")


@cocotb.test()
async def zero_and_far_operands(dut):
    """A zero or subnormal operand beside a random normal one (the sum is that one, through
    the ordinary path), and exponent gaps 24..40 (every bit of the smaller one shifted out,
    the sticky bit alone, its edge at 27)."""
    rng = np.random.default_rng(4)
    n = 3000
    normal = ((rng.integers(0, 2, n) << 31) | (rng.integers(1, 255, n) << 23)
              | rng.integers(0, 2**23, n))
    tiny = (rng.integers(0, 2, n) << 31) | rng.integers(0, 2**23, n) * rng.integers(0, 2, n)
    ea = rng.integers(60, 254, n)
    eb = ea - rng.integers(24, 41, n)
    far = (rng.integers(0, 2, n) << 31) | (eb << 23) | rng.integers(0, 2**23, n)
    near = (rng.integers(0, 2, n) << 31) | (ea << 23) | rng.integers(0, 2**23, n)
    a = np.concatenate([normal, tiny, near, far]).astype(np.uint32)
    b = np.concatenate([tiny, normal, far, near]).astype(np.uint32)
    await TB(dut).check(fp.fadd, a, b, label="zero and far")


@cocotb.test()
async def random_bits(dut):
    """Constrained-random operands."""
    rng = np.random.default_rng(3)
    await TB(dut).check(fp.fadd, random_f32_bits(rng, 6000), random_f32_bits(rng, 6000),
                        label="random")


@cocotb.test()
async def pipelined(dut):
    """The pipelined instance (fpunit.PIPE_LATENCY): a vector a cycle, each result that many
    cycles later, bit for bit."""
    await TB(dut).check_pipelined(fp.fadd, *pipe_vectors(70, 2), label="pipelined")

@pytest.mark.rtl
def test_fp32_add():
    run_unit_tests("test_fp32_add")
