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
