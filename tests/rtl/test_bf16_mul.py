"""nelssa_bf16_mul against hw/model/fp.py bf16_mul, bit for bit (exhaustive over specials)."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, run_unit_tests

UNIT = "bf16_mul"
"""nelssa_bf16_mul, on the units' shared build (fpunit.run_unit_tests)"""
SPECIALS16 = np.unique((SPECIALS32 >> 16).astype(np.uint16))


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["a_i", "b_i"], "prod_o")


@cocotb.test()
async def specials_cross(dut):
    """Every pair of bf16 specials."""
    a, b = np.meshgrid(SPECIALS16, SPECIALS16)
    await TB(dut).check(fp.bf16_mul, a.ravel(), b.ravel(), label="specials")


@cocotb.test()
async def all_mantissa_pairs_one_exponent(dut):
    """All 128 x 128 significand pairs at exponents that land near 1 (exactness)."""
    m = np.arange(128, dtype=np.uint16)
    a, b = np.meshgrid(0x3F80 | m, 0xBF00 | m)
    await TB(dut).check(fp.bf16_mul, a.ravel().astype(np.uint16), b.ravel().astype(np.uint16),
                        label="mantissas")


@cocotb.test()
async def random_bits(dut):
    """Uniformly random bf16 pairs, including underflow and overflow."""
    rng = np.random.default_rng(21)
    a = rng.integers(0, 2**16, 6000).astype(np.uint16)
    b = rng.integers(0, 2**16, 6000).astype(np.uint16)
    await TB(dut).check(fp.bf16_mul, a, b, label="random")


@cocotb.test()
async def pipelined(dut):
    """The pipelined instance (fpunit.PIPE_LATENCY): a vector a cycle, each result that many
    cycles later, bit for bit: specials and random pairs."""
    rng = np.random.default_rng(75)
    a, b = np.meshgrid(SPECIALS16, SPECIALS16)
    a = np.concatenate([a.ravel(), rng.integers(0, 2**16, 1500).astype(np.uint16)])
    b = np.concatenate([b.ravel(), rng.integers(0, 2**16, 1500).astype(np.uint16)])
    await TB(dut).check_pipelined(fp.bf16_mul, a, b, label="pipelined")


@pytest.mark.rtl
def test_bf16_mul():
    run_unit_tests("test_bf16_mul")
