"""nelssa_cmdq's assertions, each shown firing by a test that breaks its rule (the command queue
within its rules is exercised by the device tests: tests/test_rtl_device.py, test_fpga_top)."""

from __future__ import annotations

import cocotb
import pytest
from buses import clock_and_reset, pulse, wait_cycles

from nelssa.hw.sim.rtl_sources import RTL_ROOT

TOP = "nelssa_cmdq"
SOURCES = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", RTL_ROOT / "top" / "nelssa_cmdq.sv"]
PARAMS = {"NumUnits": 2}
INPUTS = ("enable_i", "sq_base_i", "sq_size_i", "sq_tail_i", "cq_base_i", "cq_size_i",
          "cq_head_i", "region_base_i", "region_limit_i", "sq_reset_i", "cq_reset_i",
          "unit_busy_i", "unit_done_i", "unit_status_i", "mem_ready_i", "mem_cpl_i",
          "rd_valid_i", "rd_data_i")


async def rings(dut, sq_base: int = 0x1000, cq_base: int = 0x2000) -> None:
    """Two 4-entry rings inside the region [0x1000, 0x10000), the submission ring empty."""
    await clock_and_reset(dut, INPUTS)
    dut.sq_base_i.value, dut.sq_size_i.value = sq_base, 4
    dut.cq_base_i.value, dut.cq_size_i.value = cq_base, 4
    dut.region_base_i.value, dut.region_limit_i.value = 0x1000, 0x10000


@cocotb.test()
async def breaks_ring_outside_region(dut):
    """Enabled with its submission ring below the region."""
    await rings(dut, sq_base=0x0)
    dut.enable_i.value = 1
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_ring_unaligned(dut):
    """Enabled with its completion ring off a line boundary (its records' places in a line are
    taken from the tail alone)."""
    await rings(dut, cq_base=0x2010)
    dut.enable_i.value = 1
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_ring_moved_while_enabled(dut):
    """The completion ring moves (inside the region) while the queue is enabled."""
    await rings(dut)
    dut.enable_i.value = 1
    await wait_cycles(dut, 2)
    dut.cq_base_i.value = 0x3000
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_data_not_asked_for(dut):
    """A descriptor line arrives while no read waits."""
    await rings(dut)
    await pulse(dut, "rd_valid_i")


@cocotb.test()
async def breaks_completion_not_asked_for(dut):
    """The memory completes a write the queue never made."""
    await rings(dut)
    await pulse(dut, "mem_cpl_i")


@cocotb.test()
async def breaks_unit_done_unstarted(dut):
    """A unit reports done for a descriptor it was never given."""
    await rings(dut)
    await pulse(dut, "unit_done_i", 0b10)


FIRES = [("breaks_ring_outside_region", {"RingsInRegion"}),
         ("breaks_ring_unaligned", {"RingsAligned"}),
         ("breaks_ring_moved_while_enabled", {"RingsStill"}),
         ("breaks_data_not_asked_for", {"ReadDataAsked"}),
         ("breaks_completion_not_asked_for", {"WriteCplAsked"}),
         ("breaks_unit_done_unstarted", {"UnitDoneUnstarted"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_cmdq_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_cmdq", PARAMS, sources=SOURCES, test_filter=case,
               expect_assertion=fired, unoptimized=True)
