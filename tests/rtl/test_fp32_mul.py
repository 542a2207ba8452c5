"""nelssa_fp32_mul against hw/model/fp.py fmul, bit for bit."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, pipe_vectors, random_f32_bits, run_unit_tests

UNIT = "fp32_mul"
"""nelssa_fp32_mul, on the units' shared build (fpunit.run_unit_tests)"""


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["a_i", "b_i"], "prod_o")


@cocotb.test()
async def specials_cross(dut):
    """Every pair of special values: 0 * Inf, NaN, overflow, signed zeros."""
    a, b = np.meshgrid(SPECIALS32, SPECIALS32)
    await TB(dut).check(fp.fmul, a.ravel(), b.ravel(), label="specials")


@cocotb.test()
async def underflow_and_overflow_edges(dut):
    """Exponent sums around the flush threshold (2^-126) and around 2^128."""
    rng = np.random.default_rng(11)
    n = 4000
    ea = rng.integers(1, 255, n)
    target = np.where(rng.integers(0, 2, n) == 0, 127 + rng.integers(-3, 3, n),
                      127 + 254 + rng.integers(-3, 3, n))
    eb = np.clip(target - ea, 1, 254)
    a = (rng.integers(0, 2, n) << 31) | (ea << 23) | rng.integers(0, 2**23, n)
    b = (rng.integers(0, 2, n) << 31) | (eb << 23) | rng.integers(0, 2**23, n)
    await TB(dut).check(fp.fmul, a.astype(np.uint32), b.astype(np.uint32), label="edges")


@cocotb.test()
async def random_bits(dut):
    """Constrained-random operands."""
    rng = np.random.default_rng(12)
    await TB(dut).check(fp.fmul, random_f32_bits(rng, 6000), random_f32_bits(rng, 6000),
                        label="random")


@cocotb.test()
async def pipelined(dut):
    """The pipelined instance (fpunit.PIPE_LATENCY): a vector a cycle, each result that many
    cycles later, bit for bit."""
    await TB(dut).check_pipelined(fp.fmul, *pipe_vectors(71, 2), label="pipelined")

@pytest.mark.rtl
def test_fp32_mul():
    run_unit_tests("test_fp32_mul")
