"""The FPGA top behind a PCIe link: cocotbext-pcie's root complex enumerates an endpoint whose
BAR 0 (4 KB, 32-bit) and BAR 2 (64-bit, prefetchable, the device memory) forward every memory
TLP to the top's AXI4-Lite and AXI4 slaves, as a PCIe-to-AXI bridge (XDMA's BAR master) does:
the root complex's writes arrive as posted MWr TLPs split at the max payload size, its reads as
MRd TLPs answered by completions split at the read completion boundary. Through that path the
model's workload (tests/rtl/fpga_case.py) is replayed: its memory image written into BAR 2, the
rings programmed and the doorbell rung through BAR 0, and afterwards the memory behind the top's
channels, the results and completion entries read back through BAR 2, and the registers equal
what the ``model`` device gives. The top is test_fpga_top's build (fpga_case.TOP_PARAMS: two
units, four channels, head_dim 64, two query heads, at -O0): the bridge in front of it does not
depend on what is behind the BARs, and one build serves both testbenches."""

from __future__ import annotations

import logging
import random

import cocotb
import pytest
from buses import axi_bus, axil_bus, reset_with_memory
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiLiteMaster, AxiMaster
from cocotbext.pcie.core import Device, MemoryEndpoint, RootComplex
from fpga_case import BUILD_ID, MEM_BYTES, RING_REGS, channel_memory, model_case, run_top

from nelssa.driver import regs
from nelssa.driver.iface import interface_hash32
from nelssa.hw.fpga.manifest import DEFAULT_DEVICE, DEFAULT_VENDOR

SHAPES = ((64, 2, 5, 3), (64, 1, 3, 2))
"""The workload: what the top's engine takes (head_dim 64, up to 2 query heads)."""
LINE = 64
OKAY = 0


class AxiBarEndpoint(MemoryEndpoint):
    """A PCIe endpoint function whose BARs are the FPGA top's AXI slaves: BAR 0 the register
    window (AxiLiteMaster), BAR 2/3 the device memory (AxiMaster). Every TLP's byte runs become
    AXI accesses with the same bytes (partial dwords: narrow strobes, as a bridge makes them)."""

    def __init__(self, axil: AxiLiteMaster, axi: AxiMaster, mem_bytes: int) -> None:
        super().__init__()
        self.vendor_id, self.device_id = DEFAULT_VENDOR, DEFAULT_DEVICE
        self.axil, self.axi = axil, axi
        self.responses: list[int] = []  # every AXI response, for the test to check
        self.add_mem_region(regs.REG_WINDOW_BYTES, read=self._regs_read, write=self._regs_write)
        self.bar_ptr = 2  # the manifest's bar_mem
        self.add_prefetchable_mem_region(mem_bytes, read=self._mem_read, write=self._mem_write)

    async def _regs_read(self, addr: int, length: int) -> bytes:
        rsp = await self.axil.read(addr, length)
        self.responses.append(int(rsp.resp))
        return rsp.data

    async def _regs_write(self, addr: int, data: bytes) -> None:
        self.responses.append(int((await self.axil.write(addr, data)).resp))

    async def _mem_read(self, addr: int, length: int) -> bytes:
        rsp = await self.axi.read(addr, length)
        self.responses.append(int(rsp.resp))
        return rsp.data

    async def _mem_write(self, addr: int, data: bytes) -> None:
        self.responses.append(int((await self.axi.write(addr, data)).resp))


class TB:
    """Clock, reset, the top's memory channel (stalling, reordering), the AXI masters behind
    the endpoint's BARs, the root complex and the enumerated function's BAR windows."""

    def __init__(self, dut, seed: int = 0) -> None:
        self.dut = dut
        self.mem = channel_memory(dut, random.Random(seed))
        cocotb.start_soon(Clock(dut.clk_i, 4, unit="ns").start())
        for name in ("s_axil", "s_axi", "pcie"):  # per-transfer INFO lines
            logging.getLogger(f"cocotb.{dut._name}.{name}").setLevel(logging.WARNING)
        logging.getLogger("cocotb.pcie").setLevel(logging.WARNING)
        axil = AxiLiteMaster(axil_bus(dut, "s_axil"), dut.clk_i, dut.rst_ni,
                             reset_active_level=False)
        axi = AxiMaster(axi_bus(dut, "s_axi"), dut.clk_i, dut.rst_ni, reset_active_level=False)
        self.ep = AxiBarEndpoint(axil, axi, MEM_BYTES)
        self.rc = RootComplex()
        self.rc.max_payload_size = 1  # 256-byte payloads: a line run splits over TLPs
        self.rc.make_port().connect(Device(self.ep))

    async def start(self) -> None:
        await reset_with_memory(self.dut, self.mem)
        await self.rc.enumerate()
        fn = self.rc.find_device(self.ep.pcie_id)
        await fn.enable_device()
        self.regs, self.bar = fn.bar_window[0], fn.bar_window[2]

    async def reg_read(self, name: str) -> int:
        return await self.regs.read_dword(regs.offset(name))

    async def reg_write(self, name: str, value: int) -> None:
        await self.regs.write_dword(regs.offset(name), value)


@cocotb.test(timeout_time=4, timeout_unit="ms")  # a hang fails, not stalls
async def workload_through_pcie(dut):
    case = model_case(seed=5, shapes=SHAPES, max_tokens=16)
    tb = TB(dut, seed=6)
    await tb.start()
    # identity through BAR 0: what `nelssa fpga probe` reads
    assert await tb.reg_read("MAGIC") == regs.DEVICE_MAGIC
    assert await tb.reg_read("IFACE_HASH") == interface_hash32()
    assert await tb.reg_read("BUILD_ID") == BUILD_ID
    caps = regs.unpack_caps(await tb.reg_read("CAPS"))
    assert (caps["engines"], caps["max_qheads"], caps["head_dims"]) == (2, 2, (64,))
    assert await tb.reg_read("MEM_SIZE_LO") == MEM_BYTES
    # the image: runs of consecutive lines as one write each (the root complex splits them)
    addrs = sorted(case.image_before)
    i = 0
    while i < len(addrs):
        j = i + 1
        while j < len(addrs) and addrs[j] == addrs[j - 1] + LINE:
            j += 1
        await tb.bar.write(addrs[i], b"".join(case.image_before[a] for a in addrs[i:j]))
        i = j
    first = addrs[0]
    want = b"".join(case.image_before.get(first + k * LINE, bytes(LINE)) for k in range(12))
    assert await tb.bar.read(first, len(want)) == want  # read back: several completions
    await tb.reg_write("CONTROL", 0)
    for name in RING_REGS:
        await tb.reg_write(name, case.ring[name])
    await tb.reg_write("CONTROL", 1)
    await tb.reg_write("SQ_TAIL", case.sq_tail)
    for _ in range(400):
        if await tb.reg_read("PERF_DESC_DONE") == case.descriptors:
            break
        await ClockCycles(dut.clk_i, 100)
    else:
        raise AssertionError("descriptors did not complete")
    await ClockCycles(dut.clk_i, 100)  # the last completion entry's write lands
    got = tb.mem.image()
    assert got.keys() == case.image_after.keys()
    diff = [hex(a) for a in got if got[a] != case.image_after[a]]
    assert not diff, f"lines differ from the model: {diff[:8]}"
    # results and completion entries through BAR 2 as the host reads them
    changed = sorted(a for a in case.image_after if case.image_before.get(a) !=
                     case.image_after[a])
    assert changed, "the workload wrote nothing"
    for addr in changed:
        assert await tb.bar.read(addr, LINE) == case.image_after[addr], hex(addr)
    assert await tb.reg_read("ERR_DESC") == 0
    assert int(dut.mem_err_o.value) == 0
    # a one-byte MWr to a register: the bridge's narrow strobe is refused, the register kept
    await tb.reg_write("CONTROL", 0)  # the rings' registers take writes while stopped
    await tb.reg_write("SQ_SIZE", 16)
    await tb.regs.write_byte(regs.offset("SQ_SIZE"), 0x40)
    assert await tb.reg_read("SQ_SIZE") == 16
    assert tb.ep.responses.count(2) == 1 and set(tb.ep.responses) == {OKAY, 2}


@pytest.mark.rtl
def test_fpga_pcie():
    run_top("test_fpga_pcie")
