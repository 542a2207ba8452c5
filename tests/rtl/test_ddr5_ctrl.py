"""nelssa_ddr5_ctrl against hw/model/ddr5_subchannel.py: the same commands at the same tCK, for
read, write and mixed streams with refresh, and none of them breaks a timing rule; and each of the
controller's assertions shown firing on a named fault forced into it."""

from __future__ import annotations

from pathlib import Path

import cocotb
import numpy as np
import pytest
from buses import clock_and_reset
from cocotb.clock import Clock
from cocotb.handle import Force, Release
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from nelssa.gen import PERF_FIELDS, PERF_W
from nelssa.hw.model.ddr5_checker import DramCmd
from nelssa.hw.model.ddr5_subchannel import SubchannelModel, requests_from_lines
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON as T
from nelssa.hw.sim.rtl_sources import DDR5_CTRL, DDR5_VERILATOR_ARGS

WITHIN_CONTRACT = r"\.(?!breaks_)\w+$"
"""cocotb's test filter (searched in module.test): every test but the rule breakers"""


def model_commands(reqs) -> tuple[list[tuple[int, int, int, int, int]], dict[str, int]]:
    """The model's commands, and its counts under the names of the RTL's perf_o fields."""
    model = SubchannelModel(T)
    log = []
    issue = model.checker.issue

    def record(tck, cmd, g, k, row=0):
        log.append((tck, int(cmd), g, k, row if cmd == DramCmd.ACT else 0))
        issue(tck, cmd, g, k, row)

    model.checker.issue = record
    stats = model.run(reqs)
    perf = {f"n_{c.name.lower()}": n for c, n in ((c, stats.commands[c.name]) for c in DramCmd)}
    perf |= {f"cyc_{s.name.lower()}": n for s, n in stats.residency.items()}
    return sorted(log), perf


def read_perf(dut) -> dict[str, int]:
    """perf_o (nelssa_ddr5_pkg::ddr5_perf_t) by field, the first field most significant."""
    raw = int(dut.perf_o.value)
    n = len(PERF_FIELDS)
    return {f: raw >> (PERF_W * (n - 1 - i)) & (2**PERF_W - 1) for i, f in enumerate(PERF_FIELDS)}


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
        await ReadOnly()  # the counters with the last cycle's commands in
        self.perf = read_perf(d)
        return sorted(log)


async def compare(dut, reqs, max_cycles=200_000):
    tb = TB(dut)
    got = await tb.run(reqs, max_cycles)
    want, want_perf = model_commands(reqs)
    # the performance counters: the model's command counts and bank-state residencies over the
    # same cycles (the model stops after the cycle of its last column command, as run does)
    assert tb.perf == want_perf, f"perf_o {tb.perf} model {want_perf}"
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


FAULTS_VLT = Path(__file__).resolve().parent / "ddr5_ctrl_faults.vlt"
"""the signals a fault forces (the assertion tests below), marked forceable"""
BUILDS = {"tries": ({"ParallelSched": 0}, DDR5_VERILATOR_ARGS, False),
          "parallel": ({"ParallelSched": 1}, [*DDR5_VERILATOR_ARGS, str(FAULTS_VLT)], True)}
"""The scheduler's two forms by the controller's ParallelSched, each build's parameters, Verilator
arguments and -O0: the tries that simulation builds use, and the parallel form that synthesis
builds use (the controller's default). The parallel form's build is the assertion tests' (its
forceable signals change nothing while no test forces them), at -O0: its runs within the
contract cost less than a build of their own."""


def run_ctrl(form: str, test_filter: str, expect_assertion: set[str] | None = None) -> None:
    from cocotb_runner import run_cocotb

    params, args, unoptimized = BUILDS[form]
    # every signal public: Verilator free to optimize the controller's insides makes 20 to 40 %
    # more C++ of it (the parallel form's build and run: some 9 s more CPU)
    run_cocotb("nelssa_ddr5_ctrl", "test_ddr5_ctrl", params, sources=DDR5_CTRL,
               build_extra=args, test_filter=test_filter, expect_assertion=expect_assertion,
               unoptimized=unoptimized, public_all=True)


@pytest.mark.rtl
@pytest.mark.parametrize("form", list(BUILDS))
def test_ddr5_ctrl(form):
    """Both forms of the scheduler issue the cycle model's commands."""
    run_ctrl(form, WITHIN_CONTRACT)


# -- the controller's assertions, each shown firing ------------------------------------------------
# Its request port is accept-as-offered, so no input breaks a rule: the assertions state the
# controller's own invariants (queue bounds, what the scheduler may issue in one cycle). Each
# test below forces one named fault into a build where those signals are forceable
# (ddr5_ctrl_faults.vlt), lets one clock edge sample it and resets the controller right after,
# so what the fault leaves behind breaks no other rule: exactly the named assertion fires.
REQUEST_INPUTS = ("req_valid_i", "req_write_i", "req_bg_i", "req_bank_i", "req_row_i",
                  "req_col_i", "req_tag_i")
CMD_PRE = 3
"""dram_cmd_e's CMD_PRE (nelssa_ddr5_pkg)"""


class FaultTB:
    """The controller after reset, reads offered at its port, a fault forced mid-cycle and the
    controller reset once the assertion has sampled it."""

    def __init__(self, dut) -> None:
        self.dut = dut

    async def reset(self) -> None:
        """Clock started, inputs zero, reset done; returns mid-cycle."""
        await clock_and_reset(self.dut, REQUEST_INPUTS)
        await FallingEdge(self.dut.clk_i)

    def offer(self, row: int) -> None:
        """A read of bank group 0, bank 0, ``row``, column 0 at the port."""
        self.dut.req_valid_i.value = 1
        self.dut.req_row_i.value = row

    async def read_issuing(self) -> tuple[int, int]:
        """One read offered and taken; returns mid-cycle in the cycle its READ issues (bank 0
        open on row 0; the queue empty after this cycle), with the READ's tCK in the cycle and
        its bank."""
        d = self.dut
        self.offer(row=0)
        await FallingEdge(d.clk_i)
        d.req_valid_i.value = 0
        for _ in range(100):
            await FallingEdge(d.clk_i)
            if int(d.col_valid.value) == 1:
                return int(d.col_k.value), int(d.col_bank.value)
        raise AssertionError("the read was not served within 100 cycles")

    async def fault(self, values: dict[str, int], edges: int = 1) -> None:
        """Force ``values`` (mid-cycle) for the next rising edge, release them mid-cycle after
        it, and reset the controller mid-cycle after ``edges`` edges (the assertion samples what
        the fault did at the last one), so nothing it leaves behind is seen by another
        assertion. (Mid-cycle, not on RisingEdge: there the edge is not yet evaluated, the
        registers still hold their old values, so a release there would undo the fault before
        the edge took it.)"""
        d = self.dut
        for name, v in values.items():
            getattr(d, name).value = Force(v)
        d.req_valid_i.value = 0
        await FallingEdge(d.clk_i)
        for name in values:
            getattr(d, name).value = Release()
        for _ in range(edges - 1):
            await FallingEdge(d.clk_i)
        d.rst_ni.value = 0
        for _ in range(2):
            await RisingEdge(d.clk_i)


def row_commands(k: int, bank: int, k1: int = 0, bank1: int = 0, both: bool = False) -> dict:
    """The forced values of the row-command slots: a PRE at tCK ``k`` of the cycle on ``bank``
    in the first, and with ``both`` another at ``k1`` on ``bank1`` in the second."""
    return {"row_valid": 0b11 if both else 0b01, "row_cmd": CMD_PRE << 3 | CMD_PRE,
            "row_k": k1 << 2 | k, "row_bank": bank1 << 5 | bank}


@cocotb.test()
async def breaks_taken_when_full(dut):
    """A read taken into the full read queue (its refusal, req_ready_o low, ignored)."""
    tb = FaultTB(dut)
    await tb.reset()
    row = 0
    for _ in range(400):  # reads of distinct rows of one bank (a tRC each) fill the queue
        tb.offer(row=row)
        await FallingEdge(dut.clk_i)
        if int(dut.req_ready_o.value) == 0 and int(dut.col_valid.value) == 0:
            break  # full, and no entry leaves this cycle
        row += int(dut.req_ready_o.value)
    else:
        raise AssertionError("the read queue never filled")
    # the 33rd read is taken; QueuesBounded sees 33 entries at the next edge
    await tb.fault({"enters": 1}, edges=2)


@cocotb.test()
async def breaks_column_from_empty(dut):
    """A column command made up while the queues are empty (on the row left open, so the empty
    queue is all that is wrong)."""
    tb = FaultTB(dut)
    await tb.reset()
    await tb.read_issuing()
    await FallingEdge(dut.clk_i)
    assert int(dut.cmd_valid_o.value) == 0, "a command in the cycle meant to be idle"
    await tb.fault({"col_valid": 1})


@cocotb.test()
async def breaks_bank_register_cleared(dut):
    """The open-bank register cleared while a READ issues to the row it held open."""
    tb = FaultTB(dut)
    await tb.reset()
    await tb.read_issuing()
    await tb.fault({"open_q": 0})


@cocotb.test()
async def breaks_row_commands_on_one_bank(dut):
    """Two PREs in one cycle to one bank, on distinct CA slots, the controller idle."""
    tb = FaultTB(dut)
    await tb.reset()
    await tb.fault(row_commands(k=1, bank=5, k1=2, bank1=5, both=True))


@cocotb.test()
async def breaks_row_command_on_column_slot(dut):
    """A PRE to another bank on the tCK of the cycle's READ."""
    tb = FaultTB(dut)
    await tb.reset()
    k, bank = await tb.read_issuing()
    await tb.fault(row_commands(k=k, bank=(bank + 1) % 32))


@cocotb.test()
async def breaks_row_command_on_column_bank(dut):
    """A PRE to the READ's bank on another tCK of its cycle."""
    tb = FaultTB(dut)
    await tb.reset()
    k, bank = await tb.read_issuing()
    await tb.fault(row_commands(k=(k + 2) % 4, bank=bank))


FIRES = [("breaks_taken_when_full", {"QueuesBounded"}),
         ("breaks_column_from_empty", {"ServedFromEmpty"}),
         ("breaks_bank_register_cleared", {"ColumnOnOpenRow"}),
         ("breaks_row_commands_on_one_bank", {"RowCommandsClash"}),
         ("breaks_row_command_on_column_slot", {"RowOnColumnSlot"}),
         ("breaks_row_command_on_column_bank", {"RowOnColumnBank"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_ddr5_ctrl_assertion_fires(case: str, fired: set[str]):
    """Each of the controller's assertions fires, alone, on its fault (the synthesis form: it
    keeps no state of its own for a forced output to put out of step)."""
    run_ctrl("parallel", case, expect_assertion=fired)

