"""The whole memory subsystem of one PNM device: an address map in front of eight independent
sub-channel controllers (one input FIFO each, so a busy sub-channel never blocks the others),
and the reader of Ramulator 2's LoadStoreTrace format for replaying address traces."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nelssa.emu.files import read_lines
from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_subchannel import (
    TCK_PER_CYCLE,
    ControllerConfig,
    RunStats,
    SubchannelModel,
    requests_from_lines,
)
from nelssa.hw.model.ddr5_timing import DDR5Timing

_TRACE_LINE = re.compile(r"^\s*(LD|ST)\s+(0x[0-9a-fA-F]+|\d+)\s*$")


class TraceFormatError(ValueError):
    """A trace line that is not ``LD <addr>`` or ``ST <addr>``."""


def read_loadstore_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Addresses and is-write flags of a Ramulator 2 LoadStoreTrace file (one ``LD 0x<addr>`` or
    ``ST 0x<addr>`` per line; blank lines and ``#`` comments are skipped)."""
    addrs, writes = [], []
    for number, raw in read_lines(path, "load/store trace"):
        line = raw.decode("ascii", errors="replace")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _TRACE_LINE.match(line)
        if not m:
            raise TraceFormatError(f"{path}:{number}: expected 'LD <addr>' or 'ST <addr>', "
                                   f"got {line.strip()[:60]!r}")
        addrs.append(int(m.group(2), 0))
        writes.append(m.group(1) == "ST")
    if not addrs:
        raise TraceFormatError(f"{path}: no requests")
    return np.asarray(addrs, dtype=np.int64), np.asarray(writes, dtype=bool)


def write_loadstore_trace(path: str | Path, addrs: np.ndarray, writes: np.ndarray | None = None
                          ) -> None:
    """Write addresses in the same format (for comparison runs with Ramulator 2)."""
    w = np.zeros(len(addrs), bool) if writes is None else writes
    Path(path).write_text("".join(f"{'ST' if x else 'LD'} {a:#x}\n"
                                  for a, x in zip(addrs.tolist(), w.tolist(), strict=True)))


@dataclass(frozen=True)
class DeviceRun:
    """Result of a device-level run."""

    per_subchannel: list[RunStats]
    """Statistics of every sub-channel that received requests."""
    cycles: int
    """Controller cycles until the last burst of any sub-channel."""
    bytes_moved: int

    def bandwidth_fraction(self, timing: DDR5Timing, subchannels: int) -> float:
        """Of the device peak (all sub-channels at one burst per burst_cycles)."""
        peak_per_cycle = subchannels * timing.burst_bytes * TCK_PER_CYCLE / timing.burst_cycles
        return self.bytes_moved / (self.cycles * peak_per_cycle)


def arrival_cycles(n: int, lines_per_cycle: int, arrival: np.ndarray | None) -> np.ndarray:
    """The cycle each of n requests reaches its sub-channel: ``arrival`` checked, or
    ``lines_per_cycle`` a cycle in order."""
    if arrival is None:
        return np.arange(n, dtype=np.int64) // lines_per_cycle
    a = np.asarray(arrival, dtype=np.int64)
    if a.shape != (n,):
        raise ValueError(f"arrival has shape {a.shape}, want ({n},)")
    if n and (a[0] < 0 or np.any(np.diff(a) < 0) or a[-1] >= 2**32):
        raise ValueError("arrival must be non-decreasing cycles from 0 to 2**32 - 1")
    return a


def run_device(addrs: np.ndarray, writes: np.ndarray | None, geometry: DeviceGeometry,
               address_map: str = "cacheline", config: ControllerConfig | None = None,
               lines_per_cycle: int = 4, check: bool = True,
               arrival: np.ndarray | None = None) -> DeviceRun:
    """Replay byte addresses (64-byte requests) through the front end and every sub-channel.
    Requests leave the front end at ``lines_per_cycle`` per cycle, in order, or each at its
    ``arrival`` cycle when given (non-decreasing)."""
    d = decode(addrs, geometry, address_map)
    w = np.zeros(len(addrs), bool) if writes is None else np.asarray(writes, bool)
    arrival = arrival_cycles(len(addrs), lines_per_cycle, arrival)
    stats = []
    for sc in range(geometry.subchannels):
        sel = d.subchannel == sc
        if not np.any(sel):
            continue
        reqs = requests_from_lines(d.bank_group[sel], d.bank[sel], d.row[sel], d.column[sel],
                                   w[sel], arrival[sel])
        stats.append(SubchannelModel(geometry.timing, config, check=check).run(reqs))
    cycles = max(s.cycles for s in stats)
    return DeviceRun(stats, cycles, len(addrs) * geometry.timing.burst_bytes)
