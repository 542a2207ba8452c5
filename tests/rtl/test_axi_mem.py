"""nelssa_axi_mem's assertions shown firing when the AXI memory answers what nobody asked (the
memory side within its rules is exercised by test_fpga_top)."""

from __future__ import annotations

import cocotb
import pytest
from buses import clock_and_reset, pulse

from nelssa.hw.sim.rtl_sources import FIFO, RTL_ROOT

TOP = "nelssa_axi_mem"
SOURCES = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", *FIFO, RTL_ROOT / "top" / "nelssa_axi_mem.sv"]
PARAMS = {"NumPorts": 2, "NumChannels": 1, "Outstanding": 2}
INPUTS = ("mem_valid_i", "mem_addr_i", "mem_write_i", "mem_tag_i", "mem_wdata_i", "mem_wstrb_i",
          "m_awready_i", "m_wready_i", "m_bvalid_i", "m_bid_i", "m_bresp_i", "m_arready_i",
          "m_rvalid_i", "m_rid_i", "m_rdata_i", "m_rresp_i", "m_rlast_i")


@cocotb.test()
async def breaks_read_response_unasked(dut):
    """An R beat for port 1, which has no read in flight."""
    await clock_and_reset(dut, INPUTS)
    dut.m_rid_i.value = 1
    await pulse(dut, "m_rvalid_i")


@cocotb.test()
async def breaks_write_response_unasked(dut):
    """A B for port 0, which has no write in flight."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "m_bvalid_i")


# the port's tag FIFO underflows in the same cycle
FIRES = [("breaks_read_response_unasked", {"RUnasked", "FifoUnderflow"}),
         ("breaks_write_response_unasked", {"BUnasked", "FifoUnderflow"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_axi_mem_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_axi_mem", PARAMS, sources=SOURCES, test_filter=case,
               expect_assertion=fired, unoptimized=True)
