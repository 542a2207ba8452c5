"""Reusable cocotb bus models for valid/ready channels (the taxi and cocotbext-axi pattern).

A channel is a valid, a ready and a payload: a packed struct of the device package
(rtl/top/nelssa_dev_pkg.sv, generated from driver/cxl.py's port messages), one signal. A
transaction is a :class:`Packed` dataclass laid out as that struct (:func:`layout_of` reads the
layout from the same construct struct the generator reads). A :class:`StreamSource` offers its
queue one transaction at a time, holds valid and the payload until ready, and idles between
transactions as its pause generator says; a :class:`StreamSink` takes transactions with ready
driven by its pause generator (back-pressure) and checks the DUT's side of the rule: valid held
until ready, payload unchanged meanwhile. Each cycle runs: rising edge, drive, ReadOnly,
sample; the handshake is what is seen in ReadOnly.

AXI: cocotbext-axi's masters and slaves bind to ports named ``<prefix>_<signal>`` through
cocotb-bus ``Bus`` objects; :func:`axi_bus` and :func:`axil_bus` build those for the house
style's direction suffixes (``s_axi_awaddr_i``, ``s_axi_awready_o``), :func:`set_axi_pauses`
gives a master or slave idle and back-pressure generators (the taxi testbenches' pattern).
:class:`ReorderingAxiMemory` serves packed per-channel AXI4 master ports (``m_axi_*``, one
vector per signal holding every channel's field) with responses reordered across IDs, which
cocotbext-axi's AxiRam does not do (it answers each burst in order, at once).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_bus.bus import Bus
from cocotbext.axi import (
    AxiARBus,
    AxiAWBus,
    AxiBBus,
    AxiBus,
    AxiLiteARBus,
    AxiLiteAWBus,
    AxiLiteBBus,
    AxiLiteBus,
    AxiLiteRBus,
    AxiLiteWBus,
    AxiRBus,
    AxiWBus,
)

from nelssa.gen import mem_req_layout


def layout_of(struct) -> tuple[tuple[str, int], ...]:
    """(field, bits) of a fixed-size construct struct, first field first: the packed struct
    nelssa.gen writes for it, whose first field is the most significant."""
    return tuple((sub.name, 8 * sub.sizeof()) for sub in struct.subcons)


class Packed:
    """A transaction that packs into its channel's struct. Subclasses are dataclasses whose
    fields are LAYOUT's, in order."""

    LAYOUT: ClassVar[tuple[tuple[str, int], ...]]

    def pack(self) -> int:
        value = 0
        for name, bits in self.LAYOUT:
            field = getattr(self, name)
            if not 0 <= field < 1 << bits:
                raise ValueError(f"{type(self).__name__}.{name}={field} does not fit {bits} bits")
            value = value << bits | field
        return value

    @classmethod
    def unpack(cls, value: int) -> Self:
        values = {}
        for name, bits in reversed(cls.LAYOUT):
            values[name] = value & ((1 << bits) - 1)
            value >>= bits
        return cls(**values)


def random_pauses(rng: random.Random, probability: float) -> Iterator[bool]:
    """An endless pause generator: each cycle paused with ``probability``."""
    while True:
        yield rng.random() < probability


def never() -> Iterator[bool]:
    while True:
        yield False


def always() -> Iterator[bool]:
    while True:
        yield True


class _Channel:
    def __init__(self, dut, clk, valid: str, ready: str, payload: str, item: type[Packed]
                 ) -> None:
        names = [f.name for f in fields(item)]
        if names != [name for name, _ in item.LAYOUT]:
            raise ValueError(f"{item.__name__}: fields {names} are not its layout's")
        self.dut, self.clk, self.item = dut, clk, item
        self.valid, self.ready = getattr(dut, valid), getattr(dut, ready)
        self.payload = getattr(dut, payload)
        self.pause: Iterator[bool] = never()

    def set_pause_generator(self, pause: Iterator[bool]) -> None:
        self.pause = pause

    def read(self) -> Any:
        return self.item.unpack(int(self.payload.value))


class StreamSource(_Channel):
    """Drives a channel into the DUT: valid and payload are inputs, ready an output."""

    def __init__(self, dut, clk, valid: str, ready: str, payload: str, item: type[Packed],
                 on_accept: Callable[[Any], None] | None = None) -> None:
        super().__init__(dut, clk, valid, ready, payload, item)
        self.queue: deque[Any] = deque()
        self.on_accept = on_accept
        self.accepted = 0
        self.valid.value = 0
        self._task = cocotb.start_soon(self._run())

    def send(self, item: Any) -> None:
        self.queue.append(item)

    @property
    def idle(self) -> bool:
        return not self.queue and self._current is None

    _current: Any = None

    async def _run(self) -> None:
        while True:
            await RisingEdge(self.clk)
            if self._current is None and self.queue and not next(self.pause):
                self._current = self.queue.popleft()
                self.payload.value = self._current.pack()
            self.valid.value = int(self._current is not None)
            await ReadOnly()
            if self._current is not None and int(self.ready.value):
                self.accepted += 1
                if self.on_accept is not None:
                    self.on_accept(self._current)
                self._current = None


class StreamSink(_Channel):
    """Takes a channel out of the DUT: valid and payload are outputs, ready an input."""

    def __init__(self, dut, clk, valid: str, ready: str, payload: str, item: type[Packed],
                 on_receive: Callable[[Any], None] | None = None) -> None:
        super().__init__(dut, clk, valid, ready, payload, item)
        self.on_receive = on_receive
        self.received: deque[Any] = deque()
        self.ready.value = 0
        self._offered: Any = None  # offered last cycle, not taken
        self._task = cocotb.start_soon(self._run())

    async def _run(self) -> None:
        while True:
            await RisingEdge(self.clk)
            self.ready.value = int(not next(self.pause))
            await ReadOnly()
            if int(self.valid.value):
                item = self.read()
                assert self._offered is None or item == self._offered, (
                    f"{self.item.__name__} changed before ready: {self._offered} -> "
                    f"{item}")
                if int(self.ready.value):
                    self._offered = None
                    self.received.append(item)
                    if self.on_receive is not None:
                        self.on_receive(item)
                else:
                    self._offered = item
            else:
                assert self._offered is None, (
                    f"{self.item.__name__} valid dropped before ready: {self._offered}")


MASK512 = (1 << 512) - 1


def merge_line(old: int, data: int, strobe: int) -> int:
    """A 64-byte line after a write of ``data`` under byte strobes ``strobe`` (bit b: byte b)."""
    mask = 0
    for b in range(64):
        if strobe >> b & 1:
            mask |= 0xFF << (8 * b)
    return (data & mask) | (old & ~mask & MASK512)


@dataclass(frozen=True)
class MemReq(Packed):
    """mem_req_t: a request on a memory port."""
    LAYOUT = mem_req_layout()
    write: int
    addr: int
    tag: int
    wdata: int
    wstrb: int


class LineMemory:
    """Device memory behind one request port of the nelssa_ddr5_frontend kind (``<prefix>_o`` a
    mem_req_t, ``<prefix>_valid_o``, ``<prefix>_ready_i``, completions and read lanes): ready with
    back-pressure from its pause generator, each request answered after a random latency
    (a write's completion on the port's completion signal, a read's line on a random one of
    ``lanes`` read lanes, at most one line per lane per cycle), so answers leave request order.
    A fresh instance is a fresh, zeroed memory (``lines``: line address -> 512-bit value)."""

    def __init__(self, dut, clk, lanes: int, rng: random.Random, latency: tuple[int, int] = (1, 12),
                 prefix: str = "mem") -> None:
        self.dut, self.clk, self.lanes, self.rng, self.latency = dut, clk, lanes, rng, latency
        self.lines: dict[int, int] = {}
        self.pause: Iterator[bool] = never()
        self.p = prefix
        self.cycle = 0
        self.cpl: dict[int, int] = {}                   # cycle -> tag
        self.rd: dict[tuple[int, int], tuple[int, int]] = {}  # (cycle, lane) -> (tag, data)
        self.requests = 0
        for name in ("ready_i", "cpl_valid_i", "cpl_tag_i", "rd_valid_i", "rd_tag_i",
                     "rd_data_i"):
            getattr(dut, f"{prefix}_{name}").value = 0
        self._task = cocotb.start_soon(self._run())

    def set_pause_generator(self, pause: Iterator[bool]) -> None:
        self.pause = pause

    @property
    def owed(self) -> int:
        return len(self.cpl) + len(self.rd)

    def _sig(self, name: str):
        return getattr(self.dut, f"{self.p}_{name}")

    async def _run(self) -> None:
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            now = self.cycle
            self._sig("ready_i").value = int(not next(self.pause))
            tag = self.cpl.pop(now, None)
            self._sig("cpl_valid_i").value = int(tag is not None)
            self._sig("cpl_tag_i").value = tag or 0
            valid = tags = data = 0
            for lane in range(self.lanes):
                hit = self.rd.pop((now, lane), None)
                if hit is not None:
                    valid |= 1 << lane
                    tags |= hit[0] << (16 * lane)
                    data |= hit[1] << (512 * lane)
            self._sig("rd_valid_i").value = valid
            self._sig("rd_tag_i").value = tags
            self._sig("rd_data_i").value = data
            await ReadOnly()
            if int(self._sig("valid_o").value) and int(self._sig("ready_i").value):
                self._accept(now)

    def _accept(self, now: int) -> None:
        self.requests += 1
        req = MemReq.unpack(int(self._sig("o").value))
        addr, tag = req.addr, req.tag
        if req.write:
            self.lines[addr] = merge_line(self.lines.get(addr, 0), req.wdata, req.wstrb)
            at = now + self.rng.randint(*self.latency)
            while at in self.cpl:
                at += 1
            self.cpl[at] = tag
        else:
            data = self.lines.get(addr, 0)  # the line as of the request (writes keep order)
            at, lane = now + self.rng.randint(*self.latency), self.rng.randrange(self.lanes)
            while (at, lane) in self.rd:
                at += 1
            self.rd[(at, lane)] = (tag, data)


async def clock_and_reset(dut, zero: Iterable[str] = (), cycles: int = 2) -> None:
    """Start a 10 ns clock on clk_i, set the named inputs to 0, pulse rst_ni low, and return one
    cycle after reset (a test that drives every input itself starts here)."""
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    for name in zero:
        getattr(dut, name).value = 0
    dut.rst_ni.value = 0
    for _ in range(cycles):
        await RisingEdge(dut.clk_i)
    dut.rst_ni.value = 1
    await RisingEdge(dut.clk_i)


async def reset_with_memory(dut, mem: ReorderingAxiMemory, cycles: int = 3) -> None:
    """Hold rst_ni low for ``cycles`` cycles of a running clk_i, release it and start ``mem``
    (the FPGA top's testbenches: the host side's masters see the same reset)."""
    dut.rst_ni.value = 0
    for _ in range(cycles):
        await RisingEdge(dut.clk_i)
    dut.rst_ni.value = 1
    mem.start()


async def wait_cycles(dut, n: int) -> None:
    for _ in range(n):
        await RisingEdge(dut.clk_i)


async def pulse(dut, name: str, value: int = 1, settle: int = 3) -> None:
    """Drive input ``name`` to ``value`` for one cycle, then 0, and let ``settle`` cycles pass
    (a rule breaker's single stray answer)."""
    getattr(dut, name).value = value
    await wait_cycles(dut, 1)
    getattr(dut, name).value = 0
    await wait_cycles(dut, settle)


# -- AXI (cocotbext-axi) ---------------------------------------------------------------------------
def suffixed_bus(bus_cls: type[Bus], dut, prefix: str) -> Bus:
    """A cocotbext-axi channel bus (``AxiAWBus``, ``AxiLiteRBus``, ...) on the ports
    ``<prefix>_<signal>_i`` or ``<prefix>_<signal>_o``, whichever the DUT has: the house style's
    suffixes name the direction, which cocotbext-axi's ``from_prefix`` does not expect. Every
    required signal must be there; optional ones (awprot, wstrb, ...) are bound where present."""
    names = {}
    for sig in (*bus_cls._signals, *bus_cls._optional_signals):
        port = next((f"{sig}_{d}" for d in ("i", "o") if hasattr(dut, f"{prefix}_{sig}_{d}")),
                    None)
        if port is not None:
            names[sig] = port
        elif sig in bus_cls._signals:
            raise AttributeError(f"{bus_cls.__name__}: no {prefix}_{sig}_i or _o on the DUT")
    bus = bus_cls.__new__(bus_cls)  # the class's __init__ would name the ports itself
    Bus.__init__(bus, dut, prefix, names, case_insensitive=False)
    return bus


def axi_bus(dut, prefix: str) -> AxiBus:
    """An AXI4 interface (five channels) on house-style ports, for AxiMaster, AxiSlave, AxiRam."""
    return AxiBus.from_channels(*(suffixed_bus(c, dut, prefix)
                                  for c in (AxiAWBus, AxiWBus, AxiBBus, AxiARBus, AxiRBus)))


def axil_bus(dut, prefix: str) -> AxiLiteBus:
    """An AXI4-Lite interface on house-style ports, for AxiLiteMaster, AxiLiteSlave, AxiLiteRam."""
    return AxiLiteBus.from_channels(*(suffixed_bus(c, dut, prefix) for c in (
        AxiLiteAWBus, AxiLiteWBus, AxiLiteBBus, AxiLiteARBus, AxiLiteRBus)))


def set_axi_pauses(model, idle: Callable[[], Iterator[bool]] | None = None,
                   backpressure: Callable[[], Iterator[bool]] | None = None) -> None:
    """Pause generators on a cocotbext-axi master's (AxiMaster, AxiLiteMaster) or slave's
    channels, as the taxi testbenches set them: ``idle`` on the channels it drives (valid
    withheld), ``backpressure`` on those it takes (ready withheld); a fresh generator per
    channel from each factory. None clears them (each one is a coroutine woken every cycle)."""
    w, r = model.write_if, model.read_if
    master = hasattr(w.aw_channel, "send")  # a source: the master drives AW
    driven = (w.aw_channel, w.w_channel, r.ar_channel) if master else (w.b_channel, r.r_channel)
    taken = (w.b_channel, r.r_channel) if master else (w.aw_channel, w.w_channel, r.ar_channel)
    for channels, factory in ((driven, idle), (taken, backpressure)):
        for ch in channels:
            ch.set_pause_generator(factory() if factory is not None else None)
            if factory is None:
                ch.pause = False  # a cleared generator leaves its last value


def _field(value: int, index: int, width: int) -> int:
    return value >> (index * width) & ((1 << width) - 1)


class ReorderingAxiMemory:
    """AXI4 slaves behind a DUT's packed memory-channel masters (``<prefix>_awvalid_o`` holds
    every channel's valid, ``<prefix>_awaddr_o`` every channel's address, channel 0 in the low
    bits), each a sparse memory of 64-byte lines: random ready on AR, AW and W, each request
    answered after a random latency (``read_latency``, ``write_latency`` cycles), the R and B
    channels stalled at random and, among the IDs whose oldest answer is due, one chosen at
    random: responses reorder across IDs, in order within one (as AXI4 requires). Single-beat
    bursts of 64 bytes only (asserted), as the FPGA top issues. ``stall``: the probability of
    each ready or response being withheld in a cycle. Call :meth:`start` once reset is over."""

    LINE = 64

    def __init__(self, dut, clk, channels: int, id_width: int, addr_width: int,
                 rng: random.Random, stall: float = 0.3, read_latency: tuple[int, int] = (4, 40),
                 write_latency: tuple[int, int] = (2, 20), prefix: str = "m_axi") -> None:
        self.dut, self.clk, self.rng, self.stall = dut, clk, rng, stall
        self.channels, self.id_width, self.addr_width = channels, id_width, addr_width
        self.read_latency, self.write_latency = read_latency, write_latency
        self.p = prefix
        n = range(channels)
        self.lines: list[dict[int, bytes]] = [{} for _ in n]
        self.reads: list[dict[int, deque]] = [{} for _ in n]   # id -> (due cycle, line)
        self.writes: list[dict[int, deque]] = [{} for _ in n]  # id -> due cycle
        self.aw: list[deque] = [deque() for _ in n]
        self.w: list[deque] = [deque() for _ in n]
        self.r_shown: list[tuple | None] = [None] * channels
        self.b_shown: list[int | None] = [None] * channels
        self.cycle = 0
        self.requests = 0
        # the handles, looked up once (a lookup by name costs more than the access)
        self._h = {name: getattr(dut, f"{prefix}_{name}") for name in self._PORTS}
        for name in self._PORTS:
            if name.endswith("_i"):
                self._h[name].value = 0
        self._task = None

    _PORTS = ("rvalid_i", "bvalid_i", "arready_i", "awready_i", "wready_i", "rresp_i",
              "bresp_i", "rlast_i", "rid_i", "bid_i", "rdata_i", "rready_o", "bready_o",
              "arvalid_o", "awvalid_o", "wvalid_o", "araddr_o", "arid_o", "arlen_o", "awaddr_o",
              "awid_o", "awlen_o", "wdata_o", "wstrb_o")

    def _sig(self, name: str):
        return self._h[name]

    def start(self) -> None:
        self._task = cocotb.start_soon(self._run())

    def device_line(self, addr: int) -> bytes:
        """A line of device memory by device address, lines interleaved over the channels
        (line i is line i // channels of channel i % channels): a backdoor read."""
        line = addr // self.LINE
        return self.lines[line % self.channels].get(line // self.channels, bytes(self.LINE))

    def image(self) -> dict[int, bytes]:
        """Device address -> line, every line that is not all zero."""
        return {(idx * self.channels + c) * self.LINE: v for c in range(self.channels)
                for idx, v in self.lines[c].items() if any(v)}

    def _present(self, c: int, rv: int, bv: int) -> tuple[int, int, int, int, int]:
        """Choose channel ``c``'s R and B answers for this cycle (held until taken)."""
        rng, ln = self.rng, self.LINE
        rdata = rid = bid = 0
        if self.r_shown[c] is None:
            due = [i for i, q in self.reads[c].items() if q and q[0][0] <= self.cycle]
            if due and rng.random() > self.stall:
                i = rng.choice(due)
                self.r_shown[c] = (i, self.reads[c][i].popleft()[1])
        if self.r_shown[c] is not None:
            i, line = self.r_shown[c]
            rv |= 1 << c
            rid = i << (c * self.id_width)
            rdata = int.from_bytes(self.lines[c].get(line, bytes(ln)), "little") << (c * 8 * ln)
        if self.b_shown[c] is None:
            due = [i for i, q in self.writes[c].items() if q and q[0] <= self.cycle]
            if due and rng.random() > self.stall:
                i = rng.choice(due)
                self.writes[c][i].popleft()
                self.b_shown[c] = i
        if self.b_shown[c] is not None:
            bv |= 1 << c
            bid = self.b_shown[c] << (c * self.id_width)
        return rv, bv, rdata, rid, bid

    async def _run(self) -> None:
        rng, sig, ln = self.rng, self._sig, self.LINE
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            rv = bv = rdata = rid = bid = 0
            for c in range(self.channels):
                rv, bv, d, r, b = self._present(c, rv, bv)
                rdata, rid, bid = rdata | d, rid | r, bid | b
            sig("rvalid_i").value = rv
            sig("rid_i").value = rid
            sig("rdata_i").value = rdata
            sig("bvalid_i").value = bv
            sig("bid_i").value = bid
            ar_ready = aw_ready = w_ready = 0
            for c in range(self.channels):
                ar_ready |= int(rng.random() > self.stall) << c
                aw_ready |= int(rng.random() > self.stall) << c
                w_ready |= int(rng.random() > self.stall) << c
            sig("arready_i").value = ar_ready
            sig("awready_i").value = aw_ready
            sig("wready_i").value = w_ready
            await ReadOnly()
            rready, bready = int(sig("rready_o").value), int(sig("bready_o").value)
            arv, awv, wv = (int(sig("arvalid_o").value), int(sig("awvalid_o").value),
                            int(sig("wvalid_o").value))
            araddr = arid = awaddr = awid = wdata = wstrb = None
            for c in range(self.channels):
                if rv >> c & 1 and rready >> c & 1:
                    self.r_shown[c] = None
                if bv >> c & 1 and bready >> c & 1:
                    self.b_shown[c] = None
                if arv >> c & 1 and ar_ready >> c & 1:
                    araddr = araddr if araddr is not None else int(sig("araddr_o").value)
                    arid = arid if arid is not None else int(sig("arid_o").value)
                    addr = _field(araddr, c, self.addr_width)
                    assert addr % ln == 0, f"channel {c}: read of {addr:#x} not line-aligned"
                    assert _field(int(sig("arlen_o").value), c, 8) == 0, "a read burst"
                    self.reads[c].setdefault(_field(arid, c, self.id_width), deque()).append(
                        (self.cycle + rng.randrange(*self.read_latency), addr // ln))
                    self.requests += 1
                if awv >> c & 1 and aw_ready >> c & 1:
                    awaddr = awaddr if awaddr is not None else int(sig("awaddr_o").value)
                    awid = awid if awid is not None else int(sig("awid_o").value)
                    assert _field(int(sig("awlen_o").value), c, 8) == 0, "a write burst"
                    self.aw[c].append((_field(awaddr, c, self.addr_width),
                                       _field(awid, c, self.id_width)))
                if wv >> c & 1 and w_ready >> c & 1:
                    wdata = wdata if wdata is not None else int(sig("wdata_o").value)
                    wstrb = wstrb if wstrb is not None else int(sig("wstrb_o").value)
                    self.w[c].append((_field(wdata, c, 8 * ln), _field(wstrb, c, ln)))
                while self.aw[c] and self.w[c]:
                    (addr, i), (data, strb) = self.aw[c].popleft(), self.w[c].popleft()
                    old = bytearray(self.lines[c].get(addr // ln, bytes(ln)))
                    new = data.to_bytes(ln, "little")
                    for b in range(ln):
                        if strb >> b & 1:
                            old[b] = new[b]
                    self.lines[c][addr // ln] = bytes(old)
                    self.writes[c].setdefault(i, deque()).append(
                        self.cycle + rng.randrange(*self.write_latency))
                    self.requests += 1
