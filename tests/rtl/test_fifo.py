"""nelssa_fifo against a deque, and its two assertions (no push when full, no pop when empty)
firing when a user breaks them."""

from __future__ import annotations

import random
from collections import deque

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.hw.sim.rtl_sources import FIFO

TOP = "nelssa_fifo"
PARAMS = {"Width": 8, "Depth": 4}
WITHIN_CONTRACT = r"\.(?!breaks_)\w+$"
"""cocotb's test filter (searched in module.test): every test but the rule breakers"""


async def reset(dut) -> None:
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    dut.push_i.value = 0
    dut.pop_i.value = 0
    dut.data_i.value = 0
    dut.rst_ni.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk_i)
    dut.rst_ni.value = 1
    await RisingEdge(dut.clk_i)


@cocotb.test()
async def matches_a_deque(dut):
    """Random pushes and pops within the contract, head and flags checked every cycle."""
    await reset(dut)
    rng = random.Random(1)
    depth = int(dut.Depth.value)
    model: deque[int] = deque()
    for _ in range(2000):
        pop = bool(model) and rng.random() < 0.5
        push = len(model) < depth and rng.random() < 0.5
        value = rng.getrandbits(8)
        dut.push_i.value, dut.pop_i.value, dut.data_i.value = int(push), int(pop), value
        await ReadOnly()
        assert int(dut.empty_o.value) == (not model)
        assert int(dut.full_o.value) == (len(model) == depth)
        if model:
            assert int(dut.head_o.value) == model[0]
        await RisingEdge(dut.clk_i)
        if pop:
            model.popleft()
        if push:
            model.append(value)


@cocotb.test()
async def breaks_push_when_full(dut):
    await reset(dut)
    dut.push_i.value = 1
    for _ in range(int(dut.Depth.value) + 3):
        await RisingEdge(dut.clk_i)


@cocotb.test()
async def breaks_pop_when_empty(dut):
    await reset(dut)
    dut.pop_i.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk_i)


@pytest.mark.rtl
@pytest.mark.parametrize("block_ram", [0, 1])
def test_fifo(block_ram: int):
    """Both storage reads: asynchronous, and registered with its bypass (BlockRam)."""
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_fifo", {**PARAMS, "BlockRam": block_ram}, sources=FIFO,
               test_filter=WITHIN_CONTRACT, unoptimized=True)


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "assertion"), [("breaks_push_when_full", "FifoOverflow"),
                                                 ("breaks_pop_when_empty", "FifoUnderflow")])
def test_fifo_assertion_fires(case: str, assertion: str):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_fifo", PARAMS, sources=FIFO, test_filter=case,
               expect_assertion=assertion, unoptimized=True)
