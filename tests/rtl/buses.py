"""Reusable cocotb bus models for valid/ready channels (the taxi and cocotbext-axi pattern).

A channel is a valid, a ready and payload signals; a transaction is a frozen dataclass whose
fields name the payload signals (``fields`` maps field to signal). A :class:`StreamSource`
offers its queue one transaction at a time, holds valid and the payload until ready, and idles
between transactions as its pause generator says; a :class:`StreamSink` takes transactions with
ready driven by its pause generator (back-pressure) and checks the DUT's side of the rule:
valid held until ready, payload unchanged meanwhile. Each cycle runs: rising edge, drive,
ReadOnly, sample; the handshake is what is seen in ReadOnly.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import astuple, fields
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge


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
    def __init__(self, dut, clk, valid: str, ready: str, signals: Mapping[str, str],
                 item: type) -> None:
        names = [f.name for f in fields(item)]
        if sorted(names) != sorted(signals):
            raise ValueError(f"{item.__name__}: fields {names}, signals for {sorted(signals)}")
        self.dut, self.clk, self.item = dut, clk, item
        self.valid, self.ready = getattr(dut, valid), getattr(dut, ready)
        self.signals = {name: getattr(dut, signals[name]) for name in names}
        self.pause: Iterator[bool] = never()

    def set_pause_generator(self, pause: Iterator[bool]) -> None:
        self.pause = pause

    def read(self) -> Any:
        return self.item(**{n: int(s.value) for n, s in self.signals.items()})


class StreamSource(_Channel):
    """Drives a channel into the DUT: valid and payload are inputs, ready an output."""

    def __init__(self, dut, clk, valid: str, ready: str, signals: Mapping[str, str],
                 item: type, on_accept: Callable[[Any], None] | None = None) -> None:
        super().__init__(dut, clk, valid, ready, signals, item)
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
                for name, sig in self.signals.items():
                    sig.value = getattr(self._current, name)
            self.valid.value = int(self._current is not None)
            await ReadOnly()
            if self._current is not None and int(self.ready.value):
                self.accepted += 1
                if self.on_accept is not None:
                    self.on_accept(self._current)
                self._current = None


class StreamSink(_Channel):
    """Takes a channel out of the DUT: valid and payload are outputs, ready an input."""

    def __init__(self, dut, clk, valid: str, ready: str, signals: Mapping[str, str],
                 item: type, on_receive: Callable[[Any], None] | None = None) -> None:
        super().__init__(dut, clk, valid, ready, signals, item)
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
                    f"{self.item.__name__} changed before ready: {astuple(self._offered)} -> "
                    f"{astuple(item)}")
                if int(self.ready.value):
                    self._offered = None
                    self.received.append(item)
                    if self.on_receive is not None:
                        self.on_receive(item)
                else:
                    self._offered = item
            else:
                assert self._offered is None, (
                    f"{self.item.__name__} valid dropped before ready: {astuple(self._offered)}")


MASK512 = (1 << 512) - 1


def merge_line(old: int, data: int, strobe: int) -> int:
    """A 64-byte line after a write of ``data`` under byte strobes ``strobe`` (bit b: byte b)."""
    mask = 0
    for b in range(64):
        if strobe >> b & 1:
            mask |= 0xFF << (8 * b)
    return (data & mask) | (old & ~mask & MASK512)


class LineMemory:
    """Device memory behind one request port of the nelssa_ddr5_frontend kind: ready with
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
        addr, tag = int(self._sig("addr_o").value), int(self._sig("tag_o").value)
        if int(self._sig("write_o").value):
            self.lines[addr] = merge_line(self.lines.get(addr, 0), int(self._sig("wdata_o").value),
                                          int(self._sig("wstrb_o").value))
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
