"""nelssa_axi_host's assertions, each shown firing by a test that breaks its rule (the AXI host
within its rules is exercised by test_fpga_top)."""

from __future__ import annotations

import cocotb
import pytest
from buses import clock_and_reset, pulse, wait_cycles
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.hw.sim.rtl_sources import RTL_ROOT

TOP = "nelssa_axi_host"
SOURCES = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", RTL_ROOT / "top" / "nelssa_axi_host.sv"]
INPUTS = ("s_awvalid_i", "s_awid_i", "s_awaddr_i", "s_awlen_i", "s_awsize_i", "s_awburst_i",
          "s_wvalid_i", "s_wdata_i", "s_wstrb_i", "s_wlast_i", "s_bready_i", "s_arvalid_i",
          "s_arid_i", "s_araddr_i", "s_arlen_i", "s_arsize_i", "s_arburst_i", "s_rready_i",
          "req_ready_i", "rwd_ready_i", "ndr_valid_i", "ndr_i", "drs_valid_i", "drs_i")


@cocotb.test()
async def breaks_w_withdrawn(dut):
    """A one-beat INCR write burst is taken; its beat waits (the CXL.mem slave is not ready)
    and the master withdraws it. The line request the beat made is withdrawn with it."""
    await clock_and_reset(dut, INPUTS)
    dut.s_awburst_i.value = 1
    dut.s_awsize_i.value = 6
    dut.s_awvalid_i.value = 1
    await ReadOnly()
    assert int(dut.s_awready_o.value)
    await RisingEdge(dut.clk_i)
    dut.s_awvalid_i.value = 0
    dut.s_wvalid_i.value = 1
    dut.s_wstrb_i.value = (1 << 64) - 1
    dut.s_wlast_i.value = 1
    await wait_cycles(dut, 2)
    dut.s_wvalid_i.value = 0
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_read_data_unasked(dut):
    """The CXL.mem slave returns a line while no read burst runs."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "drs_valid_i")


@cocotb.test()
async def breaks_completion_unasked(dut):
    """The CXL.mem slave completes a write while no write burst runs."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "ndr_valid_i")


FIRES = [("breaks_w_withdrawn", {"WHeld", "RwdHeld"}),
         ("breaks_read_data_unasked", {"DrsUnasked"}),
         ("breaks_completion_unasked", {"NdrUnasked"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_axi_host_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_axi_host", {}, sources=SOURCES, test_filter=case,
               expect_assertion=fired, unoptimized=True)
