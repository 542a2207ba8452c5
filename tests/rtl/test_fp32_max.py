"""nelssa_fp32_max against hw/model/fp.py fmax, bit for bit."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, random_f32_bits, run_unit_tests

UNIT = "fp32_max"
"""nelssa_fp32_max, on the units' shared build (fpunit.run_unit_tests)"""


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["a_i", "b_i"], "max_o")


@cocotb.test()
async def specials_cross(dut):
    """Signed zeros, infinities, NaN propagation, subnormals read as zero."""
    a, b = np.meshgrid(SPECIALS32, SPECIALS32)
    await TB(dut).check(fp.fmax, a.ravel(), b.ravel(), label="specials")


@cocotb.test()
async def random_bits(dut):
    """Random pairs, a quarter of them equal."""
    rng = np.random.default_rng(31)
    a = random_f32_bits(rng, 4000)
    b = np.where(rng.integers(0, 4, a.size) == 0, a, random_f32_bits(rng, a.size))
    await TB(dut).check(fp.fmax, a, b.astype(np.uint32), label="random")


@pytest.mark.rtl
def test_fp32_max():
    run_unit_tests("test_fp32_max")
