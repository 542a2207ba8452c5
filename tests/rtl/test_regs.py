"""nelssa_regs (the PeakRDL-generated block behind the device's side of it) against the register
map: every register's reset value and its access per the map (read-only writes counted,
stored values read back, unmapped offsets), the writes the device refuses, the counters, the
LO/HI latch; and its host-side assertion shown firing by a host that breaks its rule. (The
device's registers within the whole device, against the model bit for bit: tests/test_rtl_device.py,
tests/test_device_hardening.py's register storm, test_fpga_top.)"""

from __future__ import annotations

from dataclasses import dataclass

import cocotb
import pytest
from buses import Packed, clock_and_reset, layout_of, wait_cycles
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.driver import cxl, regs
from nelssa.driver.cxl import MmioOpcode, RspStatus
from nelssa.driver.iface import interface_hash32
from nelssa.driver.regs import Access, Hw
from nelssa.hw.sim.rtl_sources import REGS

TOP = "nelssa_regs"
PARAMS = {"NumEngines": 3, "NumQHeads": 4, "HeadDim": 64, "MaxClusterTokens": 32,
          "BuildId": "32'h12345678", "MemBytes": "64'd1048576"}


@dataclass(frozen=True)
class MmioReq(Packed):
    LAYOUT = layout_of(cxl.MMIO_REQ)
    opcode: int
    tag: int
    offset: int
    value: int


@dataclass(frozen=True)
class MmioRsp(Packed):
    LAYOUT = layout_of(cxl.MMIO_RSP)
    tag: int
    status: int
    value: int


SOURCES = REGS
INPUTS = ("mmio_valid_i", "mmio_i", "rsp_ready_i", "sq_head_i", "cq_tail_i", "idle_i",
          "err_desc_i", "err_mem_i", "err_opcode_i", "desc_done_i", "busy_i", "bytes_read_i")
RESETS = {"MAGIC": regs.DEVICE_MAGIC, "VERSION": regs.DEVICE_VERSION, "STATUS": 1,
          "CAPS": regs.pack_caps(3, 4, (64,), 32), "IFACE_HASH": interface_hash32(),
          "BUILD_ID": 0x1234_5678, "MEM_SIZE_LO": 1 << 20}
"""What the block reads after reset (idle), where the map's reset is not it: the parameters."""


class RegsTb:
    """Drives the MMIO channel one request at a time (responses taken at once)."""

    def __init__(self, dut) -> None:
        self.dut = dut
        self.tag = 0

    async def start(self) -> None:
        await clock_and_reset(self.dut, INPUTS)
        self.dut.rsp_ready_i.value = 1
        self.dut.idle_i.value = 1

    async def request(self, opcode: int, off: int, value: int = 0) -> MmioRsp | None:
        dut, self.tag = self.dut, (self.tag + 1) & 0xFFFF
        dut.mmio_i.value = MmioReq(opcode, self.tag, off, value).pack()
        dut.mmio_valid_i.value = 1
        await ReadOnly()
        assert int(dut.mmio_ready_o.value), "the block takes a request when no response waits"
        await RisingEdge(dut.clk_i)
        dut.mmio_valid_i.value = 0
        await ReadOnly()
        answered = int(dut.rsp_valid_o.value)
        rsp = MmioRsp.unpack(int(dut.rsp_o.value)) if answered else None
        await RisingEdge(dut.clk_i)
        assert answered == (opcode != MmioOpcode.WRITE), "a read is answered the next cycle"
        assert rsp is None or rsp.tag == self.tag
        return rsp

    async def read(self, reg: str | int) -> int:
        rsp = await self.request(MmioOpcode.READ, regs.offset(reg) if isinstance(reg, str)
                                 else reg)
        assert rsp is not None and rsp.status == RspStatus.OK
        return rsp.value

    async def write(self, reg: str | int, value: int) -> None:
        await self.request(MmioOpcode.WRITE, regs.offset(reg) if isinstance(reg, str) else reg,
                           value)


@cocotb.test()
async def every_register_by_its_access(dut):
    """Reset values; a write to each register per its access: read-only ones unchanged and
    counted, stored ones read back; unmapped offsets (in the window and beyond it) and an
    undefined opcode answered and counted."""
    tb = RegsTb(dut)
    await tb.start()
    for r in regs.REGISTERS:
        value = await tb.read(r.name)
        if r.name == "PERF_CYCLES_LO":  # it counts the cycles since reset
            assert 0 < value < 100
        else:
            assert value == RESETS.get(r.name, r.reset), r.name
    ro = 0
    for r in regs.REGISTERS:
        before = await tb.read(r.name)
        value = 0x40 if r.access == Access.RING else 0  # 0: CONTROL disabled, heads in ring
        await tb.write(r.name, value if r.hw == Hw.STORED else 0xA5A5_A5A5)
        after = await tb.read(r.name)
        if r.access == Access.RO:
            ro += 1
            assert after == before or r.hw == Hw.COUNT, r.name
        else:
            assert after == value, r.name
    assert await tb.read("ERR_RO_WRITE") == ro
    # a hole in the map, and an offset beyond the window whose low bits name a register
    for off in (0x1FC, 0x1000 | regs.offset("SQ_BASE_LO")):
        assert await tb.read(off) == regs.UNMAPPED_VALUE
        await tb.write(off, 1)
    assert await tb.read("ERR_UNMAPPED") == 4
    rsp = await tb.request(0x7, regs.offset("MAGIC"))
    assert rsp is not None and (rsp.status, rsp.value) == (RspStatus.OPCODE_ERROR,
                                                           regs.UNMAPPED_VALUE)
    assert await tb.read("ERR_OPCODE") == 1


async def _rings(tb: RegsTb, sq: int, cq: int, size: int) -> None:
    for name, value in (("REGION_BASE_LO", 0), ("REGION_LIMIT_LO", 1 << 16), ("SQ_BASE_LO", sq),
                        ("SQ_SIZE", size), ("CQ_BASE_LO", cq), ("CQ_SIZE", size)):
        await tb.write(name, value)


@cocotb.test()
async def refused_writes_change_nothing(dut):
    """An enable of invalid rings, ring writes while enabled or busy, doorbells and completion
    heads outside their ring: refused, counted, STATUS.ring_error; a size write empties its
    ring."""
    tb = RegsTb(dut)
    await tb.start()
    await _rings(tb, 0x1000, 0x1000 + 8 * regs.DESC_BYTES - 8, 8)  # CQ base not aligned
    await tb.write("CONTROL", 1)
    assert (await tb.read("CONTROL"), await tb.read("STATUS")) == (0, 0b101)
    assert await tb.read("ERR_RING") == 1
    await tb.write("CQ_BASE_LO", 0x2000)
    await tb.write("CONTROL", 1)
    assert (await tb.read("CONTROL"), await tb.read("STATUS")) == (1, 0b011)
    await tb.write("SQ_SIZE", 4)  # enabled: the rings hold still
    await tb.write("CONTROL", 0)
    dut.idle_i.value = 0  # a descriptor still runs: so do they
    await tb.write("REGION_BASE_HI", 1)
    dut.idle_i.value = 1
    assert (await tb.read("SQ_SIZE"), await tb.read("REGION_BASE_HI")) == (8, 0)
    assert await tb.read("ERR_RING") == 3
    await tb.write("SQ_TAIL", 5)
    await tb.write("SQ_TAIL", 8)  # not an entry of the ring
    await tb.write("CQ_HEAD", 3)
    await tb.write("CQ_HEAD", 9)
    assert (await tb.read("SQ_TAIL"), await tb.read("CQ_HEAD")) == (5, 3)
    assert await tb.read("ERR_DOORBELL") == 2
    await tb.write("SQ_SIZE", 16)
    await tb.write("CQ_SIZE", 16)
    assert (await tb.read("SQ_TAIL"), await tb.read("CQ_HEAD")) == (0, 0)


@cocotb.test()
async def counters_and_the_latch(dut):
    """Each event input counts a cycle; PERF_BYTES_READ adds the bytes of each cycle;
    reading a LO latches its HI for the next read of that HI only."""
    tb = RegsTb(dut)
    await tb.start()
    events = {"err_desc_i": "ERR_DESC", "err_mem_i": "ERR_MEM", "desc_done_i": "PERF_DESC_DONE",
              "busy_i": "PERF_BUSY_LO", "err_opcode_i": "ERR_OPCODE"}
    for n, signal in enumerate(events, start=2):
        getattr(dut, signal).value = 1
        await wait_cycles(dut, n)
        getattr(dut, signal).value = 0
    dut.bytes_read_i.value = 192
    await wait_cycles(dut, 3)
    dut.bytes_read_i.value = 0
    for n, name in enumerate(events.values(), start=2):
        assert await tb.read(name) == n, name
    assert await tb.read("PERF_BYTES_READ_LO") == 576
    cycles = await tb.read("PERF_CYCLES_LO")
    assert cycles > 20 and await tb.read("PERF_CYCLES_HI") == 0
    await tb.write("SQ_BASE_HI", 5)
    await tb.read("SQ_BASE_LO")
    await tb.write("SQ_BASE_HI", 6)
    assert [await tb.read("SQ_BASE_HI") for _ in range(2)] == [5, 6]
    assert await tb.read(0x1000 | regs.offset("SQ_BASE_LO")) == regs.UNMAPPED_VALUE
    await tb.write("SQ_BASE_HI", 7)
    assert await tb.read("SQ_BASE_HI") == 7  # an unmapped read latches nothing


@cocotb.test()
async def every_register_through_the_peakrdl_model(dut):
    """The block through PeakRDL-python's register model of the same SystemRDL source (its
    async callbacks on the MMIO channel; a 64-bit register as its LO and HI words): each
    register's reset value, and each writable one written and read back."""
    import importlib
    import sys
    import tempfile

    from nelssa.gen_rdl import python_ral

    tb = RegsTb(dut)
    await tb.start()

    async def read(addr: int, width: int, accesswidth: int) -> int:
        words = [await tb.read(addr + 4 * k) for k in range(width // accesswidth)]
        return sum(w << (32 * k) for k, w in enumerate(words))

    async def write(addr: int, width: int, accesswidth: int, data: int) -> None:
        for k in range(width // accesswidth):
            await tb.write(addr + 4 * k, data >> (32 * k) & 0xFFFF_FFFF)

    folder = tempfile.mkdtemp(prefix="nelssa-ral-")
    sys.path.insert(0, folder)
    name = python_ral(folder)
    model = importlib.import_module(f"{name}.reg_model.{name}")
    lib = importlib.import_module(f"{name}.lib")
    ral = getattr(model, f"{name}_cls")(callbacks=lib.AsyncCallbackSet(read_callback=read,
                                                                      write_callback=write))
    highs = {lo.name: hi for lo, hi in regs.pairs()}
    expected, seen = {}, 0
    for r in regs.REGISTERS:
        reset = RESETS.get(r.name, r.reset)
        if r.name in highs:
            hi = highs[r.name]
            expected[r.name[:-3]] = (reset | RESETS.get(hi.name, hi.reset) << 32, r)
        elif r.name not in {h.name for h in highs.values()}:
            expected[r.name] = (reset, r)
    for reg in ral.get_readable_registers(unroll=True):
        value, r = expected[reg.inst_name]
        got = await reg.read()
        seen += 1
        if reg.inst_name == "PERF_CYCLES":  # the cycles since reset
            assert 0 < got < 10_000
        else:
            assert got == value, (reg.inst_name, hex(got), hex(value))
    assert seen == len(expected)
    written = 0
    for reg in ral.get_writable_registers(unroll=True):
        _, r = expected[reg.inst_name]
        value = 0x40 if r.access == Access.RING else 0  # CONTROL disabled, heads in their ring
        await reg.write(value)
        assert await reg.read() == value, reg.inst_name
        written += 1
    assert written == sum(1 for _, r in expected.values() if r.access != Access.RO)


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
def test_regs_by_the_map():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_regs", PARAMS, sources=SOURCES, unoptimized=True,
               test_filter=r"\.(?!breaks_)\w+$")


@pytest.mark.rtl
def test_regs_assertion_fires():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_regs", PARAMS, sources=SOURCES, test_filter="breaks_request_withdrawn",
               expect_assertion={"MmioHeld"}, unoptimized=True)
