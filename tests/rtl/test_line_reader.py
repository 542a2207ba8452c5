"""nelssa_line_reader alone: lines come out in address order whatever order a memory with random
latency answers in; and its assertions, each shown firing by a test that breaks its rule."""

from __future__ import annotations

import random

import cocotb
import pytest
from buses import clock_and_reset, pulse, wait_cycles
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.hw.sim.rtl_sources import RTL_ROOT

TOP = "nelssa_line_reader"
SOURCES = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", RTL_ROOT / "top" / "nelssa_line_reader.sv"]
PARAMS = {"Depth": 4, "Lanes": 2, "AddrW": 20}
WITHIN_CONTRACT = r"\.(?!breaks_)\w+$"
INPUTS = ("addr_valid_i", "addr_i", "mem_ready_i", "rd_valid_i", "rd_tag_i", "rd_data_i",
          "out_ready_i")


def line_of(addr: int) -> int:
    return (addr * 0x9E3779B97F4A7C15) & ((1 << 512) - 1)  # a line's data, from its address


@cocotb.test()
async def lines_in_address_order(dut):
    await clock_and_reset(dut, INPUTS)
    rng = random.Random(1)
    addrs = [rng.randrange(0, 1 << 14) * 64 for _ in range(300)]
    pending: dict[int, list[tuple[int, int, int]]] = {}  # cycle -> [(lane, tag, data)]
    issued = 0
    got: list[int] = []
    for cycle in range(20_000):
        if len(got) == len(addrs):
            break
        dut.addr_valid_i.value = int(issued < len(addrs))
        dut.addr_i.value = addrs[issued] if issued < len(addrs) else 0
        dut.mem_ready_i.value = int(rng.random() < 0.7)
        dut.out_ready_i.value = int(rng.random() < 0.6)
        valid = tags = data = 0
        for lane, tag, line in pending.pop(cycle, []):
            valid |= 1 << lane
            tags |= tag << (16 * lane)
            data |= line << (512 * lane)
        dut.rd_valid_i.value, dut.rd_tag_i.value, dut.rd_data_i.value = valid, tags, data
        await ReadOnly()
        if int(dut.mem_valid_o.value) and int(dut.mem_ready_i.value):
            tag, addr = int(dut.mem_tag_o.value), int(dut.mem_addr_o.value)
            at, lane = cycle + rng.randint(1, 15), rng.randrange(2)
            while any(hit[0] == lane for hit in pending.get(at, [])):
                at += 1
            pending.setdefault(at, []).append((lane, tag, line_of(addr)))
            issued += 1
        if int(dut.out_valid_o.value) and int(dut.out_ready_i.value):
            got.append(int(dut.out_data_o.value))
        await RisingEdge(dut.clk_i)
    assert got == [line_of(a) for a in addrs]


@cocotb.test()
async def breaks_addr_withdrawn(dut):
    """The user withdraws an address the memory has not taken."""
    await clock_and_reset(dut, INPUTS)
    dut.addr_valid_i.value = 1
    await wait_cycles(dut, 2)
    dut.addr_valid_i.value = 0
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_data_not_asked_for(dut):
    """A line comes back on lane 1 with no read in flight."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "rd_valid_i", 0b10)


@cocotb.test()
async def breaks_read_answered_twice(dut):
    """One read taken, its line returned twice while the user takes nothing."""
    await clock_and_reset(dut, INPUTS)
    dut.addr_valid_i.value = 1
    dut.mem_ready_i.value = 1
    await ReadOnly()
    assert int(dut.addr_ready_o.value)
    await RisingEdge(dut.clk_i)
    dut.addr_valid_i.value = 0
    dut.mem_ready_i.value = 0
    for _ in range(2):
        dut.rd_valid_i.value = 1
        await wait_cycles(dut, 1)
    dut.rd_valid_i.value = 0
    await wait_cycles(dut, 3)


FIRES = [("breaks_addr_withdrawn", {"AddrHeld"}),
         ("breaks_data_not_asked_for", {"ReadNotInFlight"}),
         ("breaks_read_answered_twice", {"ReadAnsweredTwice"})]


@pytest.mark.rtl
def test_line_reader():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_line_reader", PARAMS, sources=SOURCES, test_filter=WITHIN_CONTRACT,
               unoptimized=True)


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_line_reader_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_line_reader", PARAMS, sources=SOURCES, test_filter=case,
               expect_assertion=fired, unoptimized=True)
