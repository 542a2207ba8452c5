"""nelssa_ddr5_frontend's assertion shown firing when a sub-channel controller gives back an ID
it was never handed (the front end within its rules runs in test_ddr5_system and the device
tests)."""

from __future__ import annotations

import cocotb
import pytest
from buses import clock_and_reset, pulse

from nelssa.hw.sim.rtl_sources import RTL_ROOT

TOP = "nelssa_ddr5_frontend"
SOURCES = [RTL_ROOT / "mem" / "nelssa_ddr5_pkg.sv", RTL_ROOT / "mem" / "nelssa_ddr5_addr_map.sv",
           RTL_ROOT / "mem" / "nelssa_ddr5_frontend.sv"]
PARAMS = {"NumPorts": 2}
INPUTS = ("req_valid_i", "req_addr_i", "req_write_i", "req_tag_i", "req_wdata_i", "req_wstrb_i",
          "sub_ready_i", "sub_rdata_valid_i", "sub_rdata_id_i", "sub_rdata_i", "sub_wdone_i",
          "sub_wdone_id_i")


@cocotb.test()
async def breaks_id_returned_unhanded(dut):
    """Sub-channel 3 returns read data (and so its ID) while every ID is free."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "sub_rdata_valid_i", 1 << 3)


@pytest.mark.rtl
def test_ddr5_frontend_assertion_fires():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_ddr5_frontend", PARAMS, sources=SOURCES,
               test_filter="breaks_id_returned_unhanded", expect_assertion={"IdsReturnedOnce"},
               unoptimized=True)
