"""nelssa_ddr5_ctrl against hw/model/ddr5_subchannel.py: the same commands at the same tCK, for
read, write and mixed streams with refresh, and none of them breaks a timing rule."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.hw.model.ddr5_checker import DramCmd
from nelssa.hw.model.ddr5_subchannel import SubchannelModel, requests_from_lines
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON as T
from nelssa.hw.sim.rtl_sources import DDR5_CTRL, DDR5_VERILATOR_ARGS

WITHIN_CONTRACT = r"\.(?!breaks_)\w+$"
"""cocotb's test filter (searched in module.test): every test but the rule breakers"""


def model_commands(reqs) -> list[tuple[int, int, int, int, int]]:
    model = SubchannelModel(T)
    log = []
    issue = model.checker.issue

    def record(tck, cmd, g, k, row=0):
        log.append((tck, int(cmd), g, k, row if cmd == DramCmd.ACT else 0))
        issue(tck, cmd, g, k, row)

    model.checker.issue = record
    model.run(reqs)
    return sorted(log)


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())

    async def run(self, reqs, max_cycles: int) -> list[tuple[int, int, int, int, int]]:
        d = self.dut
        d.req_valid_i.value = 0
        d.rst_ni.value = 0
        for _ in range(2):
            await RisingEdge(d.clk_i)
        d.rst_ni.value = 1
        pending = list(reqs)
        log, cycle, served = [], 0, 0
        total_cols = len(reqs)
        while served < total_cols:
            assert cycle < max_cycles, f"controller stuck: {served} of {total_cols} served"
            r = pending[0] if pending and pending[0].arrival <= cycle else None
            d.req_valid_i.value = int(r is not None)
            if r is not None:
                d.req_write_i.value = int(r.is_write)
                d.req_bg_i.value, d.req_bank_i.value = r.bank_group, r.bank
                d.req_row_i.value, d.req_col_i.value, d.req_tag_i.value = r.row, r.column, r.index
            await ReadOnly()
            valid = int(d.cmd_valid_o.value)
            for s in range(3):
                if valid >> s & 1:
                    cmd = int(d.cmd_o.value) >> (3 * s) & 7
                    tck = int(d.cmd_tck_o.value) >> (64 * s) & (2**64 - 1)
                    g = int(d.cmd_bg_o.value) >> (3 * s) & 7
                    k = int(d.cmd_bank_o.value) >> (2 * s) & 3
                    row = int(d.cmd_row_o.value) >> (17 * s) & (2**17 - 1)
                    log.append((tck, cmd, g, k, row if cmd == int(DramCmd.ACT) else 0))
                    if s == 0:
                        served += 1
            if r is not None and d.req_ready_o.value == 1:
                pending.pop(0)
            await RisingEdge(d.clk_i)
            cycle += 1
        return sorted(log)


async def compare(dut, reqs, max_cycles=200_000):
    got = await TB(dut).run(reqs, max_cycles)
    want = model_commands(reqs)
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    assert got == want, (f"{len(got)} RTL vs {len(want)} model commands; first difference at "
                         f"{first}: rtl {got[first:first + 3] if first is not None else None} "
                         f"model {want[first:first + 3] if first is not None else None}")
    return got


@cocotb.test()
async def random_reads(dut):
    rng = np.random.default_rng(1)
    n = 1500
    await compare(dut, requests_from_lines(rng.integers(0, 8, n), rng.integers(0, 4, n),
                                           rng.integers(0, 64, n), rng.integers(0, 64, n)))


@cocotb.test()
async def sequential_reads_across_refresh(dut):
    n = 8000
    line = np.arange(n)
    cmds = await compare(dut, requests_from_lines(line % 8, (line // 512) % 4, line // 2048,
                                                  (line // 8) % 64))
    assert sum(1 for c in cmds if c[1] == int(DramCmd.REF)) >= 2


@cocotb.test()
async def mixed_reads_and_writes_with_gaps(dut):
    rng = np.random.default_rng(2)
    n = 2000
    arrival = np.cumsum(rng.integers(0, 4, n))
    await compare(dut, requests_from_lines(rng.integers(0, 8, n), rng.integers(0, 4, n),
                                           rng.integers(0, 6, n), rng.integers(0, 64, n),
                                           is_write=rng.random(n) < 0.35, arrival=arrival))


@cocotb.test()
async def same_line_reads_and_writes(dut):
    """Few lines, many reads and writes: the same-line ordering stalls match too."""
    rng = np.random.default_rng(3)
    n = 1500
    await compare(dut, requests_from_lines(rng.integers(0, 2, n), rng.integers(0, 2, n),
                                           rng.integers(0, 2, n), rng.integers(0, 4, n),
                                           is_write=rng.random(n) < 0.5))


FORMS = {"tries": 0, "parallel": 1}
"""The scheduler's two forms by the controller's ParallelSched: the tries that simulation builds
use and the parallel form that synthesis builds use (the controller's default)."""


@pytest.mark.rtl
@pytest.mark.parametrize("form", list(FORMS))
def test_ddr5_ctrl(form):
    """Both forms of the scheduler issue the cycle model's commands."""
    from cocotb_runner import run_cocotb

    run_cocotb("nelssa_ddr5_ctrl", "test_ddr5_ctrl", {"ParallelSched": FORMS[form]},
               sources=DDR5_CTRL, build_extra=DDR5_VERILATOR_ARGS, test_filter=WITHIN_CONTRACT)
