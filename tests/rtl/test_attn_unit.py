"""nelssa_attn_unit's assertions (and its line reader's, inside it), each shown firing by a
test that breaks its rule; the smallest engine keeps the build short (the unit within its rules
runs in tests/test_rtl_device.py and test_fpga_top)."""

from __future__ import annotations

import cocotb
import pytest
from buses import clock_and_reset, pulse, wait_cycles

from nelssa.hw.sim.rtl_sources import ENGINE, FP_GATED_ARGS, RTL_ROOT

TOP = "nelssa_attn_unit"
SOURCES = [*ENGINE, RTL_ROOT / "top" / "nelssa_dev_pkg.sv",
           RTL_ROOT / "top" / "nelssa_line_reader.sv", RTL_ROOT / "top" / "nelssa_attn_unit.sv"]
PARAMS = {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 1, "Lanes": 1}
INPUTS = ("start_i", "desc_i", "region_lo_i", "region_hi_i", "ring_lo_i", "ring_hi_i",
          "mem_ready_i", "mem_cpl_i", "rd_valid_i", "rd_tag_i", "rd_data_i")


@cocotb.test()
async def breaks_start_while_busy(dut):
    """A descriptor with an undefined opcode keeps the unit busy until its completion is
    taken; the command queue starts it again meanwhile."""
    await clock_and_reset(dut, INPUTS)
    dut.desc_i.value = 0xEE  # opcode byte: not ATTN
    dut.start_i.value = 1
    await wait_cycles(dut, 1)
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_completion_unasked(dut):
    """The memory completes a write the unit never made."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "mem_cpl_i")


@cocotb.test()
async def breaks_read_data_unasked(dut):
    """A line arrives for the unit's reader with no read in flight."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "rd_valid_i")


FIRES = [("breaks_start_while_busy", {"StartWhileBusy"}),
         ("breaks_completion_unasked", {"CplUnasked"}),
         ("breaks_read_data_unasked", {"ReadNotInFlight"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_attn_unit_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_attn_unit", PARAMS, sources=SOURCES, test_filter=case,
               build_extra=FP_GATED_ARGS, expect_assertion=fired, unoptimized=True,
               single_compile=True)
