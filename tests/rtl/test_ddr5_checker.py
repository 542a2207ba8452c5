"""nelssa_ddr5_checker (rtl/sim) against hw/model/ddr5_checker.py: the same rules fire for the
same commands, on random command streams full of near-miss and broken timings."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from nelssa.hw.model.ddr5_checker import CheckRule, DDR5TimingChecker, DramCmd
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON as T
from nelssa.hw.sim.rtl_sources import DDR5_CHECKER

SLOTS = 3


def random_stream(rng: np.random.Generator, n: int) -> list[tuple[int, DramCmd, int, int, int]]:
    """Mostly plausible commands at gaps around the JEDEC limits, some plainly wrong."""
    open_rows: dict[tuple[int, int], int] = {}
    tck, out = 0, []
    for _ in range(n):
        tck += int(rng.choice([0, 1, 2, 4, 6, 8, 12, 16, 30, 46, 60, 110, 150]))
        g, k = int(rng.integers(0, 8)), int(rng.integers(0, 4))
        roll = rng.random()
        if roll < 0.02:
            cmd = DramCmd.REF
        elif roll < 0.04:
            cmd = DramCmd.PREA
        elif (g, k) in open_rows:
            cmd = DramCmd(int(rng.choice([1, 1, 2, 3, 0])))  # mostly RD/WR, sometimes PRE/ACT
        else:
            cmd = DramCmd.ACT if rng.random() < 0.9 else DramCmd.RD
        row = int(rng.integers(0, 1 << 16))
        if cmd == DramCmd.ACT:
            open_rows[(g, k)] = row
        elif cmd == DramCmd.PRE:
            open_rows.pop((g, k), None)
        elif cmd in (DramCmd.PREA, DramCmd.REF):
            open_rows.clear()
        out.append((tck, cmd, g, k, row))
    return out


def expected_masks(groups: list[list[tuple[int, DramCmd, int, int, int]]]) -> list[int]:
    """Per group, the rules broken; a group is in the order the checker takes it (tCK, then
    slot), which play() leaves in the group lists."""
    chk = DDR5TimingChecker(T, strict=False)
    masks = []
    for group in groups:
        before = len(chk.violations)
        for c in group:
            chk.issue(*c)
        masks.append(sum(1 << CheckRule[r] for r in {v.rule for v in chk.violations[before:]}))
    return masks


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())

    async def reset(self) -> None:
        self.dut.cmd_valid_i.value = 0
        self.dut.rst_ni.value = 0
        for _ in range(2):
            await RisingEdge(self.dut.clk_i)
        self.dut.rst_ni.value = 1
        await RisingEdge(self.dut.clk_i)

    async def play(self, groups, rng) -> list[int]:
        """Each group in one clock, its commands in shuffled slots; returns the masks. Reorders
        each group in place to the checker's order: by tCK, ties by slot."""
        d, masks = self.dut, []
        for group in groups:
            slots = rng.permutation(SLOTS)[: len(group)]
            order = sorted(range(len(group)), key=lambda i: (group[i][0], slots[i]))
            group[:] = [group[i] for i in order]
            slots = slots[order]
            valid = cmd = tck = bg = bank = row = 0
            for (t, c, g, k, r), s in zip(group, slots, strict=True):
                valid |= 1 << int(s)
                cmd |= int(c) << (3 * int(s))
                tck |= t << (64 * int(s))
                bg |= g << (3 * int(s))
                bank |= k << (2 * int(s))
                row |= r << (17 * int(s))
            d.cmd_valid_i.value, d.cmd_i.value, d.tck_i.value = valid, cmd, tck
            d.bg_i.value, d.bank_i.value, d.row_i.value = bg, bank, row
            await RisingEdge(d.clk_i)  # the checker takes the group at this edge
            await ReadOnly()
            masks.append(int(d.violation_o.value))
            await FallingEdge(d.clk_i)
        d.cmd_valid_i.value = 0
        return masks


def _rules(mask: int) -> list[str]:
    return [r.name for r in CheckRule if mask >> r & 1]


@cocotb.test()
async def one_command_per_clock(dut):
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(1)
    groups = [[c] for c in random_stream(rng, 3000)]
    got, want = await tb.play(groups, rng), expected_masks(groups)
    assert sum(1 for m in want if m) > 300, "the stream should break many rules"
    pairs = enumerate(zip(got, want, strict=True))
    bad = [(i, groups[i], _rules(g), _rules(w)) for i, (g, w) in pairs if g != w]
    assert not bad, f"{len(bad)} commands differ, first: {bad[:3]}"
    assert int(dut.violations_o.value) >= sum(1 for m in want if m)


@cocotb.test()
async def several_commands_per_clock_in_any_slot_order(dut):
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(2)
    stream = random_stream(rng, 3000)
    groups, i = [], 0
    while i < len(stream):
        k = int(rng.integers(1, SLOTS + 1))
        groups.append(stream[i:i + k])
        i += k
    got, want = await tb.play(groups, rng), expected_masks(groups)
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert not bad, f"{len(bad)} clocks differ, first at {bad[0]}: {_rules(got[bad[0]])} vs " \
                    f"{_rules(want[bad[0]])} for {groups[bad[0]]}"


@cocotb.test()
async def legal_stream_is_clean(dut):
    """The controller model's own commands (a random-read run) break no rule."""
    from nelssa.hw.model.ddr5_subchannel import SubchannelModel, requests_from_lines

    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(3)
    n = 600
    model = SubchannelModel(T)
    log: list[tuple[int, DramCmd, int, int, int]] = []
    issue = model.checker.issue

    def record(*args):
        log.append(args)
        issue(*args)

    model.checker.issue = record
    model.run(requests_from_lines(rng.integers(0, 8, n), rng.integers(0, 4, n),
                                  rng.integers(0, 8, n), rng.integers(0, 64, n)))
    masks = await tb.play([[c] for c in log], rng)
    assert not any(masks) and int(dut.violations_o.value) == 0


@pytest.mark.rtl
def test_ddr5_checker():
    from cocotb_runner import run_cocotb

    # -O0: the runs are short against the build (cold, 26 s of CPU against 29 at -Os)
    run_cocotb("nelssa_ddr5_checker", "test_ddr5_checker", parameters={"Fatal": 0},
               sources=DDR5_CHECKER, unoptimized=True)
