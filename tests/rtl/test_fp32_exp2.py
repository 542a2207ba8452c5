"""nelssa_fp32_exp2 against hw/model/fp.py exp2, bit for bit."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, pipe_vectors, random_f32_bits, run_unit_tests

UNIT = "fp32_exp2"
"""nelssa_fp32_exp2, on the units' shared build (fpunit.run_unit_tests)"""


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["x_i"], "y_o")


@cocotb.test()
async def specials(dut):
    """0, +-Inf, NaN, subnormals, the flush edge at -126 and the overflow edge at 128."""
    edges = np.array([np.float32(v).view(np.uint32) for v in
                      (-126.0, -126.00001, -125.99999, 127.99999, 128.0, -127.0, 1e-30, -1e-30,
                       -0.0, 0.5, -0.5, 1.0, -1.0)], dtype=np.uint32)
    await TB(dut).check(fp.exp2, np.concatenate([SPECIALS32, edges]), label="specials")


@cocotb.test()
async def softmax_range(dut):
    """The range softmax uses, x in [-40, 0], including every table interval boundary."""
    rng = np.random.default_rng(41)
    x = -rng.uniform(0, 40, 4000).astype(np.float32)
    bounds = -(np.arange(0, 3 * 128) / 128.0).astype(np.float32)
    await TB(dut).check(fp.exp2, np.concatenate([x, bounds]).view(np.uint32), label="softmax")


@cocotb.test()
async def random_bits(dut):
    """Constrained-random arguments of any magnitude."""
    rng = np.random.default_rng(42)
    await TB(dut).check(fp.exp2, random_f32_bits(rng, 5000), label="random")


@cocotb.test()
async def pipelined(dut):
    """The pipelined instance (fpunit.PIPE_LATENCY): a vector a cycle, each result that many
    cycles later, bit for bit."""
    await TB(dut).check_pipelined(fp.exp2, *pipe_vectors(72, 1), label="pipelined")

@pytest.mark.rtl
def test_fp32_exp2():
    run_unit_tests("test_fp32_exp2")
