"""nelssa_fp32_log2 against hw/model/fp.py log2, bit for bit."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from nelssa.hw.model import fp

from fpunit import SPECIALS32, CombTB, pipe_vectors, random_f32_bits, run_unit_tests

UNIT = "fp32_log2"
"""nelssa_fp32_log2, on the units' shared build (fpunit.run_unit_tests)"""


class TB(CombTB):
    def __init__(self, dut) -> None:
        super().__init__(dut, UNIT, ["x_i"], "y_o")


@cocotb.test()
async def specials(dut):
    """0 gives -Inf, negatives NaN, +Inf +Inf, powers of two exact."""
    pow2 = (np.arange(1, 255) << 23).astype(np.uint32)
    await TB(dut).check(fp.log2, np.concatenate([SPECIALS32, pow2]), label="specials")


@cocotb.test()
async def softmax_sums(dut):
    """The range of softmax denominators l in [1, 2^20], and values just below 1."""
    rng = np.random.default_rng(51)
    x = np.exp2(rng.uniform(0, 20, 4000)).astype(np.float32)
    below_one = (0x3F800000 - rng.integers(1, 2**16, 500)).astype(np.uint32)
    await TB(dut).check(fp.log2, np.concatenate([x.view(np.uint32), below_one]), label="sums")


@cocotb.test()
async def random_bits(dut):
    """Constrained-random arguments."""
    rng = np.random.default_rng(52)
    await TB(dut).check(fp.log2, random_f32_bits(rng, 5000), label="random")


@cocotb.test()
async def pipelined(dut):
    """The pipelined instance (fpunit.PIPE_LATENCY): a vector a cycle, each result that many
    cycles later, bit for bit."""
    await TB(dut).check_pipelined(fp.log2, *pipe_vectors(73, 1), label="pipelined")

@pytest.mark.rtl
def test_fp32_log2():
    run_unit_tests("test_fp32_log2")
