"""How long an attention unit of the RTL device takes for one descriptor, as a linear function
of what the descriptor makes it do, with coefficients fitted to RTL runs by
``scripts/calibrate_device.py`` (stored in ``device_calibration.json`` with the fit's error).

Features: 1 (fetch, checks, memory latency of each phase, completion), selected clusters (a
directory read each, the id reads, and the engine's two stall cycles at each K-to-V turn),
stream beats (Q and every selected cluster's K and V rows, about one per cycle), and result
beats written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nelssa.driver.formats import DescOpcode

CALIBRATION_FILE = Path(__file__).with_name("device_calibration.json")
FEATURES = ("fixed", "clusters", "stream_beats", "result_beats")
DEFAULT = (150.0, 3.0, 1.0, 1.0)
"""Before calibration: one cycle per line moved plus a fixed cost."""


def features(d, lines_read: int) -> np.ndarray:
    """The feature vector of a descriptor (parsed DESCRIPTOR) that read ``lines_read`` lines."""
    if d.opcode != DescOpcode.ATTN or lines_read == 0:
        return np.array([1.0, 0.0, 0.0, 0.0])
    id_lines = -(-d.num_ids * 4 // 64)
    dir_reads = min(d.num_ids, max(0, lines_read - id_lines))
    stream = max(0, lines_read - id_lines - dir_reads)
    result = d.q_heads * d.head_dim // 16 + 1 if stream else 0
    return np.array([1.0, dir_reads, stream, result], dtype=np.float64)


@dataclass(frozen=True)
class UnitTiming:
    coefficients: tuple[float, ...] = DEFAULT
    contention: float = 0.0
    """How much more DDR5 time each descriptor's reads take per other descriptor streaming at
    the same time (their interleaved rows conflict), as a fraction of its time alone."""
    host_line_memory: float = 0.3
    """Cycles of the whole DDR5 subsystem one host CXL.mem line costs the units (its slot and
    a share of the write-to-read turnarounds it causes)."""

    @classmethod
    def load(cls) -> UnitTiming:
        if not CALIBRATION_FILE.exists():
            return cls()
        data = json.loads(CALIBRATION_FILE.read_text())
        return cls(tuple(float(c) for c in data["coefficients"]),
                   float(data.get("contention", 0.0)),
                   float(data.get("host_line_memory", cls.host_line_memory)))

    def cycles(self, d, lines_read: int) -> int:
        return round(float(np.dot(features(d, lines_read), self.coefficients)))


HOST_SHARE = 4
"""While a unit runs, the RTL's memory front end spaces the host's CXL.mem requests this many
cycles apart (rtl/top/nelssa_device.sv HostShare); idle, it takes one per cycle."""


@dataclass
class _Job:
    key: object
    left: float
    """Unit cycles of work left (at full speed)."""
    demand: float
    """Memory it takes per unit cycle of progress: its DDR5 time alone over its unit time."""


class Schedule:
    """When the model device's descriptors finish: at most ``engines`` hold a unit at once, in
    fetch order (a unit is freed when its completion is written, and completions are written
    in fetch order: rtl/top/nelssa_cmdq.sv), each as fast as its unit allows (its calibrated
    cycles) unless together with the host's CXL.mem traffic they ask more of DDR5 than it has;
    then all slow by the same factor (the front end serves its ports round robin). A fluid
    model: progress between events (a start, a finish) at constant rates."""

    def __init__(self, engines: int, host_line_memory: float = 0.3,
                 contention: float = 0.0) -> None:
        self.engines = engines
        self.host_line_memory = host_line_memory
        self.contention = contention
        self.now = 0.0
        self.running: list[_Job] = []
        self.waiting: list[_Job] = []
        self.host_lines = 0.0
        """Host lines not yet served (instant in the model's memory, paced in its time)."""
        self.busy = 0.0
        """Cycles with a descriptor running, up to ``now``."""

    def add(self, key: object, unit_cycles: float, memory_cycles: float) -> None:
        """A descriptor fetched at ``now``: ``unit_cycles`` alone on its unit,
        ``memory_cycles`` of the whole DDR5 subsystem for its reads."""
        unit = max(1.0, float(unit_cycles))
        self.waiting.append(_Job(key, unit, max(0.0, float(memory_cycles)) / unit))
        self._start()

    def add_host_lines(self, n: int) -> None:
        self.host_lines += n

    def _start(self) -> None:
        while self.waiting and len(self.running) < self.engines:
            self.running.append(self.waiting.pop(0))

    def _speed(self) -> tuple[float, float]:
        """(unit speed, host lines per cycle) now."""
        if not self.running:
            return 1.0, 1.0
        host = 1.0 / HOST_SHARE if self.host_lines > 0 else 0.0
        streams = [j.demand for j in self.running if j.left > 0]
        demand = (sum(streams) * (1.0 + self.contention * max(0, len(streams) - 1))
                  + host * self.host_line_memory)
        speed = min(1.0, 1.0 / demand) if demand > 0 else 1.0
        return speed, host * speed

    def _step(self, until: float | None, finished: dict[object, float]) -> bool:
        """Advance to the next event or ``until``, whichever is first; False at ``until`` or
        when nothing runs."""
        speed, host = self._speed()
        if not self.running:
            if until is not None:
                self.host_lines = max(0.0, self.host_lines - (until - self.now))
                self.now = max(self.now, until)
            return False
        active = [j for j in self.running if j.left > 0]
        dt = min(j.left for j in active) / speed
        if host > 0:
            dt = min(dt, self.host_lines / host)  # the host's traffic ends: speeds change
        stop = until is not None and self.now + dt >= until
        if stop:
            dt = until - self.now
        for j in active:
            j.left -= dt * speed
            if j.left <= 1e-9:
                j.left = 0.0
                finished[j.key] = self.now + dt
        self.host_lines = max(0.0, self.host_lines - dt * host)
        self.now += dt
        self.busy += dt
        # a unit is free once its completion is written, and completions go in fetch order:
        # a descriptor done ahead of an earlier one holds its unit until that one is done
        while self.running and self.running[0].left == 0:
            self.running.pop(0)
        self._start()
        return not stop

    def sync(self, t: float) -> None:
        """Account progress up to cycle ``t``."""
        if t <= self.now:
            return
        while self._step(t, {}):
            pass

    def finish_times(self) -> dict[object, float]:
        """The cycle each descriptor now known finishes, if nothing more arrives."""
        ahead = Schedule(self.engines, self.host_line_memory, self.contention)
        ahead.now, ahead.host_lines, ahead.busy = self.now, self.host_lines, self.busy
        ahead.running = [_Job(j.key, j.left, j.demand) for j in self.running]
        ahead.waiting = [_Job(j.key, j.left, j.demand) for j in self.waiting]
        finished: dict[object, float] = {}
        while ahead.running or ahead.waiting:
            ahead._step(None, finished)
        return finished
