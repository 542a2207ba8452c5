"""nelssa_regs' host-side assertion shown firing by a host that breaks its rule (the register
block within its rules is exercised by tests/test_rtl_device.py and test_fpga_top)."""

from __future__ import annotations

from dataclasses import dataclass

import cocotb
import pytest
from buses import Packed, clock_and_reset, layout_of, wait_cycles
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.driver import cxl
from nelssa.driver.cxl import MmioOpcode
from nelssa.hw.sim.rtl_sources import RTL_ROOT

TOP = "nelssa_regs"


@dataclass(frozen=True)
class MmioReq(Packed):
    LAYOUT = layout_of(cxl.MMIO_REQ)
    opcode: int
    tag: int
    offset: int
    value: int


SOURCES = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", RTL_ROOT / "top" / "nelssa_regs.sv"]
INPUTS = ("mmio_valid_i", "mmio_i", "rsp_ready_i", "sq_head_i", "cq_tail_i", "idle_i",
          "err_desc_i", "err_mem_i", "err_opcode_i", "desc_done_i", "busy_i", "bytes_read_i")


@cocotb.test()
async def breaks_request_withdrawn(dut):
    """A read is answered and its response not taken, so the next request waits; the host
    withdraws it."""
    await clock_and_reset(dut, INPUTS)
    dut.mmio_i.value = MmioReq(MmioOpcode.READ, 0, 0, 0).pack()
    dut.mmio_valid_i.value = 1
    await ReadOnly()
    assert int(dut.mmio_ready_o.value)
    await RisingEdge(dut.clk_i)
    dut.mmio_i.value = MmioReq(MmioOpcode.READ, 1, 0, 0).pack()  # waits behind the response
    await wait_cycles(dut, 2)
    dut.mmio_valid_i.value = 0
    await wait_cycles(dut, 3)


@pytest.mark.rtl
def test_regs_assertion_fires():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_regs", {}, sources=SOURCES, test_filter="breaks_request_withdrawn",
               expect_assertion={"MmioHeld"}, unoptimized=True)
