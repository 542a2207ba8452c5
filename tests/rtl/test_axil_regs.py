"""nelssa_axil_regs' assertions, each shown firing by a test that breaks its rule (the register
BAR within its rules is exercised by test_fpga_top)."""

from __future__ import annotations

import cocotb
import pytest
from buses import clock_and_reset, pulse, wait_cycles
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.hw.sim.rtl_sources import RTL_ROOT

TOP = "nelssa_axil_regs"
SOURCES = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", RTL_ROOT / "top" / "nelssa_axil_regs.sv"]
INPUTS = ("s_awvalid_i", "s_awaddr_i", "s_wvalid_i", "s_wdata_i", "s_wstrb_i", "s_bready_i",
          "s_arvalid_i", "s_araddr_i", "s_rready_i", "mmio_ready_i", "mmio_rsp_valid_i",
          "mmio_rsp_i")


@cocotb.test()
async def breaks_read_address_withdrawn(dut):
    """A read is taken and waits on the register port; the master offers a second read and
    withdraws it before it is taken."""
    await clock_and_reset(dut, INPUTS)
    dut.s_arvalid_i.value = 1
    await ReadOnly()
    assert int(dut.s_arready_o.value)
    await RisingEdge(dut.clk_i)
    dut.s_araddr_i.value = 4  # the second read, waiting
    await wait_cycles(dut, 2)
    dut.s_arvalid_i.value = 0
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_response_unasked(dut):
    """The register port answers a read nobody made."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "mmio_rsp_valid_i")


FIRES = [("breaks_read_address_withdrawn", {"ArHeld"}),
         ("breaks_response_unasked", {"RspUnasked"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_axil_regs_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_axil_regs", {}, sources=SOURCES, test_filter=case,
               expect_assertion=fired, unoptimized=True)
