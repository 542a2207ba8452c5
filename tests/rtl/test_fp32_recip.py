"""nelssa_fp32_recip against hw/model/fp.py recip, bit for bit."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, pipe_vectors, random_f32_bits, run_unit_tests

UNIT = "fp32_recip"
"""nelssa_fp32_recip, on the units' shared build (fpunit.run_unit_tests)"""


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["x_i"], "y_o")


@cocotb.test()
async def specials(dut):
    """+-0 -> +-Inf, +-Inf -> +-0, NaN, and the flush of 1/x for x >= 2^126."""
    big = ((np.arange(250, 255) << 23) | 0x123).astype(np.uint32)
    await TB(dut).check(fp.recip, np.concatenate([SPECIALS32, big]), label="specials")


@cocotb.test()
async def every_interval(dut):
    """Both ends and the middle of every table interval, in both signs."""
    idx = np.arange(128, dtype=np.uint32) << 16
    m = np.concatenate([idx, idx | 0x8000, idx | 0xFFFF])
    x = np.concatenate([0x3F800000 | m, 0xC1000000 | m]).astype(np.uint32)
    await TB(dut).check(fp.recip, x, label="intervals")


@cocotb.test()
async def random_bits(dut):
    """Constrained-random arguments."""
    rng = np.random.default_rng(61)
    await TB(dut).check(fp.recip, random_f32_bits(rng, 5000), label="random")


@cocotb.test()
async def pipelined(dut):
    """The pipelined instance (fpunit.PIPE_LATENCY): a vector a cycle, each result that many
    cycles later, bit for bit."""
    await TB(dut).check_pipelined(fp.recip, *pipe_vectors(74, 1), label="pipelined")

@pytest.mark.rtl
def test_fp32_recip():
    run_unit_tests("test_fp32_recip")
