"""The FPGA top (nelssa_fpga_top) as a board drives it: registers through the AXI4-Lite BAR,
device memory through the AXI4 memory BAR, and four AXI4 memory channels served by memory
models that stall, answer after random delays and reorder responses across IDs (in order within
one, as AXI4 requires). A workload the ``model`` device ran first (the driver's Memory and
Command APIs) is replayed: its memory image written over the BAR, its registers programmed, its
doorbell rung; afterwards every line of device memory must equal the model's, bit for bit.
Then the BARs' refusals: a WRAP burst, a partial register write, an address beyond memory."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.driver import regs
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.iface import interface_hash32
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.sim.rtl_sources import FP_GATED_ARGS, FPGA_TOP

CHANNELS = 4
CHAN_ADDR_W = 28
MEM_BYTES = CHANNELS << CHAN_ADDR_W  # 1 GiB
BUILD_ID = 0x0B17_D1D0
PARAMS = {"NumUnits": 2, "NumChannels": CHANNELS, "ChanAddrW": CHAN_ADDR_W,
          "MemBytes": f"64'd{MEM_BYTES}", "BuildId": f"32'h{BUILD_ID:08X}"}
PORT_W = 2  # $clog2(NumUnits + 2)
LINE = 64
OKAY, SLVERR = 0, 2
# the registers CommandQueue programs, in its order
RING_REGS = ("REGION_BASE_LO", "REGION_BASE_HI", "REGION_LIMIT_LO", "REGION_LIMIT_HI",
             "SQ_BASE_LO", "SQ_BASE_HI", "SQ_SIZE", "CQ_BASE_LO", "CQ_BASE_HI", "CQ_SIZE")


def _field(value: int, index: int, width: int) -> int:
    return value >> (index * width) & ((1 << width) - 1)


class MemoryChannels:
    """Four AXI4 slaves with a sparse memory each (line index -> 64 bytes): random ready,
    random latency, responses reordered across IDs."""

    def __init__(self, dut, rng: random.Random, stall: float = 0.3) -> None:
        self.dut, self.rng, self.stall = dut, rng, stall
        self.lines: list[dict[int, bytes]] = [{} for _ in range(CHANNELS)]
        self.reads: list[dict[int, deque]] = [{} for _ in range(CHANNELS)]   # id -> (ready, line)
        self.writes: list[dict[int, deque]] = [{} for _ in range(CHANNELS)]  # id -> ready cycle
        self.aw: list[deque] = [deque() for _ in range(CHANNELS)]
        self.w: list[deque] = [deque() for _ in range(CHANNELS)]
        self.r_shown: list[tuple | None] = [None] * CHANNELS
        self.b_shown: list[int | None] = [None] * CHANNELS
        self.cycle = 0
        self.requests = 0

    def read_line(self, chan: int, addr: int) -> bytes:
        return self.lines[chan].get(addr // LINE, bytes(LINE))

    async def run(self) -> None:
        d, rng = self.dut, self.rng
        while True:
            await RisingEdge(d.clk_i)
            self.cycle += 1
            rv = bv = 0
            rdata = rid = bid = 0
            for c in range(CHANNELS):
                if self.r_shown[c] is None:
                    ready = [i for i, q in self.reads[c].items() if q and q[0][0] <= self.cycle]
                    if ready and rng.random() > self.stall:
                        i = rng.choice(ready)
                        self.r_shown[c] = (i, self.reads[c][i].popleft()[1])
                if self.r_shown[c] is not None:
                    i, line = self.r_shown[c]
                    rv |= 1 << c
                    rid |= i << (c * PORT_W)
                    rdata |= int.from_bytes(self.lines[c].get(line, bytes(LINE)), "little") \
                        << (c * 512)
                if self.b_shown[c] is None:
                    ready = [i for i, q in self.writes[c].items() if q and q[0] <= self.cycle]
                    if ready and rng.random() > self.stall:
                        i = rng.choice(ready)
                        self.writes[c][i].popleft()
                        self.b_shown[c] = i
                if self.b_shown[c] is not None:
                    bv |= 1 << c
                    bid |= self.b_shown[c] << (c * PORT_W)
            d.m_axi_rvalid_i.value = rv
            d.m_axi_rid_i.value = rid
            d.m_axi_rdata_i.value = rdata
            d.m_axi_bvalid_i.value = bv
            d.m_axi_bid_i.value = bid
            ar_ready = aw_ready = w_ready = 0
            for c in range(CHANNELS):
                ar_ready |= int(rng.random() > self.stall) << c
                aw_ready |= int(rng.random() > self.stall) << c
                w_ready |= int(rng.random() > self.stall) << c
            d.m_axi_arready_i.value = ar_ready
            d.m_axi_awready_i.value = aw_ready
            d.m_axi_wready_i.value = w_ready
            await ReadOnly()
            rready, bready = int(d.m_axi_rready_o.value), int(d.m_axi_bready_o.value)
            arv, awv, wv = (int(d.m_axi_arvalid_o.value), int(d.m_axi_awvalid_o.value),
                            int(d.m_axi_wvalid_o.value))
            araddr = arid = awaddr = awid = wdata = wstrb = None
            for c in range(CHANNELS):
                if rv >> c & 1 and rready >> c & 1:
                    self.r_shown[c] = None
                if bv >> c & 1 and bready >> c & 1:
                    self.b_shown[c] = None
                if arv >> c & 1 and ar_ready >> c & 1:
                    araddr = araddr if araddr is not None else int(d.m_axi_araddr_o.value)
                    arid = arid if arid is not None else int(d.m_axi_arid_o.value)
                    addr = _field(araddr, c, CHAN_ADDR_W)
                    assert addr % LINE == 0
                    assert int(d.m_axi_arlen_o.value) == 0
                    self.reads[c].setdefault(_field(arid, c, PORT_W), deque()).append(
                        (self.cycle + rng.randrange(4, 40), addr // LINE))
                    self.requests += 1
                if awv >> c & 1 and aw_ready >> c & 1:
                    awaddr = awaddr if awaddr is not None else int(d.m_axi_awaddr_o.value)
                    awid = awid if awid is not None else int(d.m_axi_awid_o.value)
                    self.aw[c].append((_field(awaddr, c, CHAN_ADDR_W), _field(awid, c, PORT_W)))
                if wv >> c & 1 and w_ready >> c & 1:
                    wdata = wdata if wdata is not None else int(d.m_axi_wdata_o.value)
                    wstrb = wstrb if wstrb is not None else int(d.m_axi_wstrb_o.value)
                    self.w[c].append((_field(wdata, c, 512), _field(wstrb, c, 64)))
                while self.aw[c] and self.w[c]:
                    (addr, i), (data, strb) = self.aw[c].popleft(), self.w[c].popleft()
                    old = bytearray(self.lines[c].get(addr // LINE, bytes(LINE)))
                    new = data.to_bytes(LINE, "little")
                    for b in range(LINE):
                        if strb >> b & 1:
                            old[b] = new[b]
                    self.lines[c][addr // LINE] = bytes(old)
                    self.writes[c].setdefault(i, deque()).append(self.cycle + rng.randrange(2, 20))
                    self.requests += 1

    def device_line(self, addr: int) -> bytes:
        """A line of device memory by device address (backdoor)."""
        line = addr // LINE
        return self.lines[line % CHANNELS].get(line // CHANNELS, bytes(LINE))

    def image(self) -> dict[int, bytes]:
        return {(idx * CHANNELS + c) * LINE: v for c in range(CHANNELS)
                for idx, v in self.lines[c].items() if any(v)}


class TB:
    """Clock, reset, the AXI4-Lite and AXI4 masters of the host, the memory channels."""

    def __init__(self, dut, seed: int = 0) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = MemoryChannels(dut, random.Random(seed + 1))
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())

    async def reset(self) -> None:
        d = self.dut
        for s in (d.s_axil_awvalid_i, d.s_axil_wvalid_i, d.s_axil_bready_i, d.s_axil_arvalid_i,
                  d.s_axil_rready_i, d.s_axi_awvalid_i, d.s_axi_wvalid_i, d.s_axi_bready_i,
                  d.s_axi_arvalid_i, d.s_axi_rready_i, d.m_axi_rvalid_i, d.m_axi_bvalid_i,
                  d.m_axi_arready_i, d.m_axi_awready_i, d.m_axi_wready_i, d.m_axi_rresp_i,
                  d.m_axi_bresp_i, d.m_axi_rlast_i):
            s.value = 0
        d.rst_ni.value = 0
        for _ in range(3):
            await RisingEdge(d.clk_i)
        d.rst_ni.value = 1
        cocotb.start_soon(self.mem.run())

    async def _wait(self, valid, ready, limit: int = 10_000) -> None:
        """Hold ``valid`` until the handshake, then drop it."""
        d = self.dut
        valid.value = 1
        for _ in range(limit):
            await ReadOnly()
            if int(ready.value):
                await RisingEdge(d.clk_i)
                valid.value = 0
                return
            await RisingEdge(d.clk_i)
        raise AssertionError(f"no handshake on {valid._name} in {limit} cycles")

    # -- AXI4-Lite --------------------------------------------------------------------------------
    async def reg_write(self, name_or_off, value: int, strobe: int = 0xF) -> int:
        d = self.dut
        off = regs.offset(name_or_off) if isinstance(name_or_off, str) else name_or_off
        d.s_axil_awaddr_i.value, d.s_axil_wdata_i.value = off, value
        d.s_axil_wstrb_i.value = strobe
        d.s_axil_wvalid_i.value = 1
        await self._wait(d.s_axil_awvalid_i, d.s_axil_awready_o)
        d.s_axil_wvalid_i.value = 0
        d.s_axil_bready_i.value = 1
        await self._wait_valid(d.s_axil_bvalid_o)
        resp = int(d.s_axil_bresp_o.value)
        await RisingEdge(d.clk_i)
        d.s_axil_bready_i.value = 0
        return resp

    async def _wait_valid(self, valid, limit: int = 10_000) -> None:
        for _ in range(limit):
            await ReadOnly()
            if int(valid.value):
                return
            await RisingEdge(self.dut.clk_i)
        raise AssertionError(f"{valid._name} never came")

    async def reg_read(self, name_or_off) -> int:
        d = self.dut
        off = regs.offset(name_or_off) if isinstance(name_or_off, str) else name_or_off
        d.s_axil_araddr_i.value = off
        await self._wait(d.s_axil_arvalid_i, d.s_axil_arready_o)
        d.s_axil_rready_i.value = 1
        await self._wait_valid(d.s_axil_rvalid_o)
        value = int(d.s_axil_rdata_o.value)
        await RisingEdge(d.clk_i)
        d.s_axil_rready_i.value = 0
        return value

    # -- AXI4 memory BAR --------------------------------------------------------------------------
    async def mem_write(self, addr: int, data: bytes, burst: int = 1, size: int = 6,
                        strobes: list[int] | None = None) -> int:
        """One burst from ``addr`` (line-aligned unless narrow); returns BRESP."""
        d = self.dut
        beat_bytes = 1 << size
        beats = max(1, len(data) // beat_bytes) if strobes is None else len(strobes)
        d.s_axi_awid_i.value = self.rng.randrange(16)
        d.s_axi_awaddr_i.value, d.s_axi_awlen_i.value = addr, beats - 1
        d.s_axi_awsize_i.value, d.s_axi_awburst_i.value = size, burst
        await self._wait(d.s_axi_awvalid_i, d.s_axi_awready_o)
        for i in range(beats):
            if strobes is None:
                chunk = data[i * LINE:(i + 1) * LINE]
                d.s_axi_wdata_i.value = int.from_bytes(chunk, "little")
                d.s_axi_wstrb_i.value = (1 << 64) - 1
            else:
                d.s_axi_wdata_i.value = int.from_bytes(data, "little")
                d.s_axi_wstrb_i.value = strobes[i]
            d.s_axi_wlast_i.value = int(i == beats - 1)
            await self._wait(d.s_axi_wvalid_i, d.s_axi_wready_o)
        d.s_axi_bready_i.value = 1
        await self._wait_valid(d.s_axi_bvalid_o, limit=100_000)
        resp = int(d.s_axi_bresp_o.value)
        await RisingEdge(d.clk_i)
        d.s_axi_bready_i.value = 0
        return resp

    async def mem_read(self, addr: int, beats: int, burst: int = 1) -> tuple[bytes, list[int]]:
        d = self.dut
        d.s_axi_arid_i.value = self.rng.randrange(16)
        d.s_axi_araddr_i.value, d.s_axi_arlen_i.value = addr, beats - 1
        d.s_axi_arsize_i.value, d.s_axi_arburst_i.value = 6, burst
        await self._wait(d.s_axi_arvalid_i, d.s_axi_arready_o)
        out, resps = bytearray(), []
        d.s_axi_rready_i.value = 1
        for i in range(beats):
            await self._wait_valid(d.s_axi_rvalid_o, limit=100_000)
            out += int(d.s_axi_rdata_o.value).to_bytes(LINE, "little")
            resps.append(int(d.s_axi_rresp_o.value))
            assert int(d.s_axi_rlast_o.value) == int(i == beats - 1)
            await RisingEdge(d.clk_i)
        d.s_axi_rready_i.value = 0
        return bytes(out), resps

    async def write_image(self, image: dict[int, bytes]) -> None:
        """Write every line of ``image`` in bursts of consecutive lines (at most 16)."""
        addrs = sorted(image)
        i = 0
        while i < len(addrs):
            j = i + 1
            while j < len(addrs) and j - i < 16 and addrs[j] == addrs[j - 1] + LINE:
                j += 1
            data = b"".join(image[a] for a in addrs[i:j])
            assert await self.mem_write(addrs[i], data) == OKAY
            i = j


@dataclass
class Case:
    image_before: dict[int, bytes]
    image_after: dict[int, bytes]
    ring: dict[str, int]
    sq_tail: int
    descriptors: int


def model_case(seed: int) -> Case:
    """A workload run on the model device: the memory before the doorbell, after it, and the
    ring registers the driver programmed."""
    port = ModelDevice()
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 26)
    rng = np.random.default_rng(seed)
    reqs = []
    for head, (hd, heads, n, sel) in enumerate([(128, 4, 12, 5), (64, 2, 6, 6), (128, 8, 9, 4),
                                                (64, 1, 3, 1)]):
        tokens = rng.integers(1, 33, n)
        ks = [fp.f32_to_bf16_bits(rng.standard_normal((t, hd)).astype(np.float32))
              for t in tokens]
        vs = [fp.f32_to_bf16_bits(rng.standard_normal((t, hd)).astype(np.float32))
              for t in tokens]
        region = mem.alloc_kv(0, 0, head, hd, n, int(tokens.sum()))
        mem.write_clusters(region, ks, vs)
        q = fp.f32_to_bf16_bits(rng.standard_normal((heads, hd)).astype(np.float32))
        reqs.append(AttnRequest(region, q, rng.choice(n, sel, replace=False).tolist()))
    cq = CommandQueue(mem, entries=8)
    dev.reg_write("CONTROL", 0)  # hold the model: the image before any descriptor runs
    ids = cq.submit(reqs)
    before = port.mem.image()
    ring = {name: dev.reg_read(name) for name in RING_REGS}
    sq_tail = dev.reg_read("SQ_TAIL")
    dev.reg_write("CONTROL", 1)
    cq.wait(ids)
    return Case(before, port.mem.image(), ring, sq_tail, len(ids))


@cocotb.test()
async def identity_registers(dut):
    tb = TB(dut)
    await tb.reset()
    assert await tb.reg_read("MAGIC") == regs.DEVICE_MAGIC
    assert await tb.reg_read("VERSION") == regs.DEVICE_VERSION
    assert await tb.reg_read("IFACE_HASH") == interface_hash32()
    assert await tb.reg_read("BUILD_ID") == BUILD_ID
    caps = regs.unpack_caps(await tb.reg_read("CAPS"))
    assert caps["engines"] == 2 and caps["head_dims"] == (64, 128)
    lo = await tb.reg_read("MEM_SIZE_LO")
    assert lo | await tb.reg_read("MEM_SIZE_HI") << 32 == MEM_BYTES
    assert await tb.reg_read(0xFFC) == regs.UNMAPPED_VALUE


@cocotb.test()
async def a_model_workload_replayed_bit_for_bit(dut):
    case = model_case(seed=3)
    tb = TB(dut, seed=4)
    await tb.reset()
    await tb.write_image(case.image_before)
    # the BAR reads back what went in
    first = min(case.image_before)
    data, resps = await tb.mem_read(first, 8)
    assert resps == [OKAY] * 8
    assert data == b"".join(case.image_before.get(first + i * LINE, bytes(LINE))
                            for i in range(8))
    assert await tb.reg_write("CONTROL", 0) == OKAY
    for name in RING_REGS:
        assert await tb.reg_write(name, case.ring[name]) == OKAY
    assert await tb.reg_write("CONTROL", 1) == OKAY
    assert await tb.reg_write("SQ_TAIL", case.sq_tail) == OKAY
    for _ in range(2000):
        if await tb.reg_read("PERF_DESC_DONE") == case.descriptors:
            break
        for _ in range(50):
            await RisingEdge(dut.clk_i)
    else:
        raise AssertionError("descriptors did not complete")
    for _ in range(100):  # let the last completion's write land
        await RisingEdge(dut.clk_i)
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


@cocotb.test()
async def bar_refusals_touch_nothing(dut):
    tb = TB(dut, seed=7)
    await tb.reset()
    line = bytes(range(64))
    assert await tb.mem_write(0x4000, line) == OKAY
    # WRAP burst: SLVERR, nothing written
    assert await tb.mem_write(0x4000, bytes(64) * 4, burst=2) == SLVERR
    assert tb.mem.device_line(0x4000) == line
    data, resps = await tb.mem_read(0x4000, 2, burst=2)
    assert resps == [SLVERR, SLVERR] and data == bytes(128)
    # beyond device memory: SLVERR, and the lines below are untouched
    assert await tb.mem_write(MEM_BYTES, bytes([0xAA]) * 64) == SLVERR
    _, resps = await tb.mem_read(MEM_BYTES - 64, 2)
    assert resps == [OKAY, SLVERR]
    assert tb.mem.device_line(0) == bytes(64)
    # a narrow 4-byte write at an odd word: only those bytes change
    word = (0xDEADBEEF << (8 * 20)).to_bytes(64, "little")
    assert await tb.mem_write(0x4000 + 20, word, size=2, strobes=[0xF << 20]) == OKAY
    want = bytearray(line)
    want[20:24] = (0xDEADBEEF).to_bytes(4, "little")
    assert tb.mem.device_line(0x4000) == bytes(want)
    # a partial-strobe register write: SLVERR, the register unchanged
    assert await tb.reg_write("SQ_SIZE", 16) == OKAY
    assert await tb.reg_write("SQ_SIZE", 0x40, strobe=0x1) == SLVERR
    assert await tb.reg_read("SQ_SIZE") == 16


@pytest.mark.rtl
def test_fpga_top():
    from cocotb_runner import run_cocotb

    run_cocotb("nelssa_fpga_top", "test_fpga_top", parameters=PARAMS, sources=FPGA_TOP,
               build_extra=FP_GATED_ARGS)
