"""The FPGA top (nelssa_fpga_top, two units of a small engine) as a board drives it: registers
through the AXI4-Lite BAR, device memory through the AXI4 memory BAR, and four AXI4 memory
channels served by memory models that stall, answer after random delays and reorder responses
across IDs (in order within one, as AXI4 requires). A workload the ``model`` device ran first
(the driver's Memory and Command APIs) is replayed: its memory image written over the BAR, its
registers programmed, its doorbell rung; afterwards every line of device memory must equal the
model's, bit for bit. Then the BARs' refusals: a WRAP burst, a partial register write, an
address beyond memory."""

from __future__ import annotations

import logging
import random

import cocotb
import pytest
from buses import (
    axi_bus,
    axil_bus,
    random_pauses,
    reset_with_memory,
    set_axi_pauses,
)
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBurstType, AxiLiteMaster, AxiMaster
from cocotbext.axi.axi_channels import AxiRMonitor
from fpga_case import BUILD_ID, MEM_BYTES, RING_REGS, channel_memory, model_case, run_top

from nelssa.driver import regs
from nelssa.driver.iface import interface_hash32

SHAPES = ((64, 2, 12, 5), (64, 1, 6, 6), (64, 2, 9, 4), (64, 1, 3, 1))
"""Each request's head_dim, query heads, clusters and clusters selected (as fpga_case.SHAPES,
within the small engine's limits)."""
LINE = 64
OKAY, SLVERR = 0, 2
HOST_PAUSE = 0.2  # the host masters' idle and back-pressure: each channel paused 1 cycle in 5


class TB:
    """Clock, reset, the host's masters (cocotbext-axi's AxiLiteMaster on the register BAR,
    AxiMaster on the memory BAR, both with random idle cycles and back-pressure), a monitor of
    the memory BAR's R beats, and the memory channels."""

    def __init__(self, dut, seed: int = 0, pause: float = HOST_PAUSE) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = channel_memory(dut, random.Random(seed + 1))
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
        for bar in ("s_axil", "s_axi"):  # cocotbext-axi's INFO: every burst, its data in hex
            logging.getLogger(f"cocotb.{dut._name}.{bar}").setLevel(logging.WARNING)
        self.regs = AxiLiteMaster(axil_bus(dut, "s_axil"), dut.clk_i, dut.rst_ni,
                                  reset_active_level=False)
        self.bar = AxiMaster(axi_bus(dut, "s_axi"), dut.clk_i, dut.rst_ni,
                             reset_active_level=False)
        self.r_beats = AxiRMonitor(self.bar.read_if.r_channel.bus, dut.clk_i, dut.rst_ni,
                                   reset_active_level=False)
        self.set_pauses(pause)

    def set_pauses(self, probability: float, *masters) -> None:
        """Idle cycles and back-pressure on ``masters`` (both if none named), each channel
        paused a cycle with ``probability``; 0: none."""
        gen = None
        if probability:
            seeds = iter(range(self.rng.randrange(1 << 30), 1 << 31))
            gen = lambda: random_pauses(random.Random(next(seeds)), probability)  # noqa: E731
        for master in masters or (self.regs, self.bar):
            set_axi_pauses(master, idle=gen, backpressure=gen)

    def pause_only(self, *masters) -> None:
        """Pauses on ``masters``, none on the other: each paused channel is a coroutine woken
        every cycle, a cost worth paying on the master in use alone."""
        for master in (self.regs, self.bar):
            self.set_pauses(HOST_PAUSE if master in masters else 0, master)

    async def reset(self) -> None:
        await reset_with_memory(self.dut, self.mem)

    # -- AXI4-Lite --------------------------------------------------------------------------------
    @staticmethod
    def _offset(name_or_off) -> int:
        return regs.offset(name_or_off) if isinstance(name_or_off, str) else name_or_off

    async def reg_write(self, name_or_off, value: int, nbytes: int = 4) -> int:
        """Write the low ``nbytes`` of ``value`` (fewer than 4: a partial strobe); BRESP."""
        data = value.to_bytes(4, "little")[:nbytes]
        return int((await self.regs.write(self._offset(name_or_off), data)).resp)

    async def reg_read(self, name_or_off) -> int:
        rsp = await self.regs.read(self._offset(name_or_off), 4)
        assert rsp.resp == OKAY, f"register read of {name_or_off}: {rsp.resp!r}"
        return int.from_bytes(rsp.data, "little")

    # -- AXI4 memory BAR --------------------------------------------------------------------------
    async def mem_write(self, addr: int, data: bytes, burst: AxiBurstType = AxiBurstType.INCR,
                        size: int = 6) -> int:
        """One write from ``addr`` (``size``: log2 bytes a beat; narrower than a line, the
        strobes cover ``data``'s bytes alone); returns BRESP."""
        rsp = await self.bar.write(addr, data, awid=self.rng.randrange(16), burst=burst,
                                   size=size)
        return int(rsp.resp)

    async def mem_read(self, addr: int, beats: int, burst: AxiBurstType = AxiBurstType.INCR
                       ) -> tuple[bytes, list[int]]:
        """``beats`` lines from ``addr``: the data and each R beat's RRESP (seen by the
        monitor; AxiMaster reports the worst alone)."""
        while not self.r_beats.empty():
            self.r_beats.recv_nowait()
        arid = self.rng.randrange(16)
        rsp = await self.bar.read(addr, beats * LINE, arid=arid, burst=burst)
        beats_seen = []
        while not self.r_beats.empty():
            beats_seen.append(self.r_beats.recv_nowait())
        assert [int(r.rid) for r in beats_seen] == [arid] * beats
        resps = [int(r.rresp) for r in beats_seen]
        assert int(rsp.resp) == max(resps, default=OKAY)
        return rsp.data, resps

    async def write_image(self, image: dict[int, bytes]) -> None:
        """Write every line of ``image`` in bursts of consecutive lines (at most 16), all issued
        at once (AxiMaster keeps them outstanding, each on a random ID)."""
        addrs = sorted(image)
        bursts, i = [], 0
        while i < len(addrs):
            j = i + 1
            while j < len(addrs) and j - i < 16 and addrs[j] == addrs[j - 1] + LINE:
                j += 1
            data = b"".join(image[a] for a in addrs[i:j])
            bursts.append(cocotb.start_soon(self.mem_write(addrs[i], data)))
            i = j
        resps = [await b for b in bursts]
        assert resps == [OKAY] * len(bursts)


@cocotb.test(timeout_time=2, timeout_unit="ms")  # a hang fails, not stalls
async def identity_registers(dut):
    tb = TB(dut)
    await tb.reset()
    assert await tb.reg_read("MAGIC") == regs.DEVICE_MAGIC
    assert await tb.reg_read("VERSION") == regs.DEVICE_VERSION
    assert await tb.reg_read("IFACE_HASH") == interface_hash32()
    assert await tb.reg_read("BUILD_ID") == BUILD_ID
    caps = regs.unpack_caps(await tb.reg_read("CAPS"))
    assert (caps["engines"], caps["max_qheads"], caps["head_dims"]) == (2, 2, (64,))
    lo = await tb.reg_read("MEM_SIZE_LO")
    assert lo | await tb.reg_read("MEM_SIZE_HI") << 32 == MEM_BYTES
    assert await tb.reg_read(0xFFC) == regs.UNMAPPED_VALUE


@cocotb.test(timeout_time=2, timeout_unit="ms")  # a hang fails, not stalls
async def a_model_workload_replayed_bit_for_bit(dut):
    case = model_case(seed=3, shapes=SHAPES, max_tokens=16)
    tb = TB(dut, seed=4)
    await tb.reset()
    tb.pause_only(tb.bar)
    await tb.write_image(case.image_before)
    # the BAR reads back what went in
    first = min(case.image_before)
    data, resps = await tb.mem_read(first, 8)
    assert resps == [OKAY] * 8
    assert data == b"".join(case.image_before.get(first + i * LINE, bytes(LINE))
                            for i in range(8))
    tb.pause_only(tb.regs)
    assert await tb.reg_write("CONTROL", 0) == OKAY
    for name in RING_REGS:
        assert await tb.reg_write(name, case.ring[name]) == OKAY
    assert await tb.reg_write("CONTROL", 1) == OKAY
    assert await tb.reg_write("SQ_TAIL", case.sq_tail) == OKAY
    tb.pause_only()  # while the device runs the host only polls, every 50 cycles
    for _ in range(2000):
        if await tb.reg_read("PERF_DESC_DONE") == case.descriptors:
            break
        await ClockCycles(dut.clk_i, 50)
    else:
        raise AssertionError("descriptors did not complete")
    await ClockCycles(dut.clk_i, 100)  # let the last completion's write land
    tb.pause_only(tb.regs, tb.bar)
    got = tb.mem.image()
    assert got.keys() == case.image_after.keys()
    diff = [hex(a) for a in got if got[a] != case.image_after[a]]
    assert not diff, f"lines differ from the model: {diff[:8]}"
    assert await tb.reg_read("ERR_DESC") == 0
    assert int(dut.mem_err_o.value) == 0
    # outputs read back through the BAR equal the model's
    for addr in sorted(case.image_after)[-4:]:
        data, resps = await tb.mem_read(addr, 1)
        assert resps == [OKAY] and data == case.image_after[addr]
    dut._log.info("memory channels served %d requests", tb.mem.requests)


@cocotb.test(timeout_time=2, timeout_unit="ms")  # a hang fails, not stalls
async def bar_refusals_touch_nothing(dut):
    tb = TB(dut, seed=7)
    await tb.reset()
    line = bytes(range(64))
    assert await tb.mem_write(0x4000, line) == OKAY
    # WRAP burst: SLVERR, nothing written
    assert await tb.mem_write(0x4000, bytes(64) * 4, burst=AxiBurstType.WRAP) == SLVERR
    assert tb.mem.device_line(0x4000) == line
    data, resps = await tb.mem_read(0x4000, 2, burst=AxiBurstType.WRAP)
    assert resps == [SLVERR, SLVERR] and data == bytes(128)
    # beyond device memory: SLVERR, and the lines below are untouched
    assert await tb.mem_write(MEM_BYTES, bytes([0xAA]) * 64) == SLVERR
    # the last line and the first beyond (MEM_BYTES is 4 KB-aligned: AxiMaster splits the read
    # at the boundary into two single-beat bursts, as AXI4 requires)
    _, resps = await tb.mem_read(MEM_BYTES - 64, 2)
    assert resps == [OKAY, SLVERR]
    assert tb.mem.device_line(0) == bytes(64)
    # a narrow 4-byte write at an odd word: only those bytes change
    assert await tb.mem_write(0x4000 + 20, (0xDEADBEEF).to_bytes(4, "little"), size=2) == OKAY
    want = bytearray(line)
    want[20:24] = (0xDEADBEEF).to_bytes(4, "little")
    assert tb.mem.device_line(0x4000) == bytes(want)
    # a partial-strobe register write: SLVERR, the register unchanged
    assert await tb.reg_write("SQ_SIZE", 16) == OKAY
    assert await tb.reg_write("SQ_SIZE", 0x40, nbytes=1) == SLVERR
    assert await tb.reg_read("SQ_SIZE") == 16


@pytest.mark.rtl
def test_fpga_top():
    run_top("test_fpga_top")
