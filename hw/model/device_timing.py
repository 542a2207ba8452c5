"""How long an attention unit of the RTL device takes for one descriptor, as a linear function
of what the descriptor makes it do, with coefficients fitted to RTL runs by
``scripts/calibrate_device.py`` (stored in ``device_calibration.json`` with the fit's error).

Features: 1 (fetch, checks, memory latency of each phase, completion), selected clusters (a
directory read each, the id reads, and the engine's two stall cycles at each K-to-V turn),
stream beats (Q and every selected cluster's K and V rows, about one per cycle), and result
beats written.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nelssa.driver.formats import DescOpcode
from nelssa.driver.status import ENGINE_LANES
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.engine import EngineParams
from nelssa.hw.model.engine_cycles import EngineTiming, LatencyCost

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
    softness: float = 0.0
    """How early the units slow as together they near what DDR5 can serve: their speed is
    ``(1 + load ** (1 / softness)) ** -softness`` of the load (their DDR5 time over their unit
    time, summed), a smooth ``min(1, 1 / load)`` (0: that min itself). The queues fill before
    the bus does: four units asking 95 % of DDR5 run about 6 % slower, not at full speed."""
    cluster_wait: float = 0.0
    """Unit cycles each selected cluster loses at full load (``min(load, 1) ** 8`` of it):
    its directory read and the K-to-V turn wait for reads that queue behind the other units'
    near DDR5's rate; short descriptors of many small clusters lose most."""
    host_line_memory: float = 0.3
    """Cycles of the whole DDR5 subsystem one host CXL.mem line costs the units (its slot and
    a share of the write-to-read turnarounds it causes)."""
    refresh_stall: float | None = None
    """Cycles a running descriptor loses to one all-bank refresh (its banks closed, nRFC, the
    queue refilled); None: nRFC alone (``Refresh.of``)."""
    doorbell_cycles: float = 28.0
    """From the doorbell to the command queue's first ring read."""
    fetch_cycles: float = 30.0
    """One descriptor's read from the ring (idle read latency 28 cycles, and the queue's
    step); the queue reads one at a time, so a batch's units start this far apart."""
    refresh_tail: float = 108.0
    """The last cycles of a descriptor, which need no DDR5 read (its last beats, the engine's
    normalisation, the result written): a refresh there does not hold it."""
    latency: LatencyCost | None = None
    """What the engines' pipelined arithmetic adds to a descriptor (:meth:`for_engine`; the
    coefficients are fitted on combinational units); None: nothing."""

    def for_engine(self, params: EngineParams) -> UnitTiming:
        """This timing for engines with ``params``' unit latencies and lanes (itself for the
        fitted engine: combinational, a beat a cycle)."""
        if params.as_fitted:
            return self
        return replace(self, latency=EngineTiming.of(params).over_combinational(params))

    @classmethod
    def load(cls) -> UnitTiming:
        if not CALIBRATION_FILE.exists():
            return cls()
        data = json.loads(CALIBRATION_FILE.read_text())
        stall = data.get("refresh_stall")
        return cls(tuple(float(c) for c in data["coefficients"]),
                   float(data.get("softness", 0.0)),
                   float(data.get("cluster_wait", 0.0)),
                   float(data.get("host_line_memory", cls.host_line_memory)),
                   None if stall is None else float(stall),
                   float(data.get("doorbell_cycles", cls.doorbell_cycles)),
                   float(data.get("fetch_cycles", cls.fetch_cycles)),
                   float(data.get("refresh_tail", cls.refresh_tail)))

    def cycles(self, d, lines_read: int) -> int:
        f = features(d, lines_read)
        base = round(float(np.dot(f, self.coefficients)))
        if self.latency is None or not f[2]:
            return base
        bpr = d.head_dim // ENGINE_LANES
        tokens = max(0, int(f[2]) - d.q_heads * bpr) // (2 * bpr)
        return base + self.latency.cycles(d.head_dim, int(f[1]), tokens, d.q_heads)


@dataclass(frozen=True)
class Refresh:
    """When DDR5 serves nothing: the RTL controllers (rtl/mem/nelssa_ddr5_ctrl.sv) all refresh
    together, every nREFI from reset (each REF due at a fixed tCK however late the one before
    was), so a device cycle ``t`` lies in a refresh window when ``t mod period < stall`` (the
    first window at one period). The window is where the units stall, fitted
    (``UnitTiming.refresh_stall``): a short batch meets one or none, which is worth 10-25 %
    of its time, so its phase is modelled, not its average."""

    period: float
    """Device cycles between two refreshes: nREFI / TCK_PER_CYCLE."""
    stall: float
    """Cycles each window holds the units."""
    tail: float = 0.0
    """A descriptor with no more than this many cycles of work left runs on through a window."""

    @classmethod
    def of(cls, timing, unit: UnitTiming) -> Refresh:
        """The windows of a DDR5Timing preset as ``unit`` meets them."""
        stall = unit.refresh_stall
        return cls(timing.nREFI / TCK_PER_CYCLE,
                   timing.nRFC / TCK_PER_CYCLE if stall is None else float(stall),
                   unit.refresh_tail)

    def inside(self, t: float) -> float | None:
        """The end of the window ``t`` lies in; None outside one."""
        start, end = self.window(t)
        return end if start <= t else None

    def window(self, t: float) -> tuple[float, float]:
        """The window ``t`` lies in, else the next one: (start, end)."""
        k = math.floor(t / self.period)
        if k >= 1 and t < k * self.period + self.stall:
            start = k * self.period
        else:
            start = (k + 1) * self.period
        return start, start + self.stall


HOST_SHARE = 8
"""While a unit runs, the RTL's memory front end spaces the host's CXL.mem requests this many
cycles apart (rtl/top/nelssa_device.sv HostShare); idle, it takes one per cycle."""


@dataclass
class _Job:
    key: object
    left: float
    """Unit cycles of work left (at full speed)."""
    demand: float
    """Memory it takes per unit cycle of progress: its DDR5 time alone over its unit time."""
    arrived: float
    """When the command queue may begin to read it (the doorbell's cycle and its latency)."""
    clusters: float = 0.0
    """Selected clusters per unit cycle of work."""
    held_until: float = math.inf
    """When its read from the ring ends (it is in flight from then); inf before the read
    began."""


class Schedule:
    """When the model device's descriptors finish, as the RTL's command queue and units run
    them (rtl/top/nelssa_cmdq.sv): the queue reads descriptors from the ring one at a time
    (``fetch_cycles`` each, from ``doorbell_cycles`` after the doorbell), each only once a
    unit is free for it, at most ``order_depth`` in flight; a unit is freed when its
    completion is written, in fetch order. Each runs as fast as its unit allows
    (its calibrated cycles) unless together with the host's CXL.mem traffic they ask more of
    DDR5 than it has; then all slow by the same factor (the front end serves its ports round
    robin), and each selected cluster loses ``cluster_wait`` cycles at full load. DDR5 serves
    nothing in refresh windows. A fluid model: progress between events (a
    fetch, a start, a finish, a window) at constant rates."""

    def __init__(self, engines: int, timing: UnitTiming | None = None,
                 refresh: Refresh | None = None, order_depth: int = 8) -> None:
        timing = timing or UnitTiming()
        self.engines = engines
        self.order_depth = order_depth
        self.timing = timing
        self.refresh = refresh
        """DDR5's refresh windows (None: memory never pauses)."""
        self.now = 0.0
        self.queue: list[_Job] = []
        """On the ring, not yet read."""
        self.fetched: list[_Job] = []
        """Being read for a free unit."""
        self.running: list[_Job] = []
        """On a unit, until its completion is written."""
        self.fetch_free = 0.0
        """When the queue's ring reader is free for the next descriptor."""
        self.host_lines = 0.0
        """Host lines not yet served (instant in the model's memory, paced in its time)."""
        self.busy = 0.0
        """Cycles with a descriptor in flight (read and not yet completed), up to ``now``: the
        RTL's PERF_BUSY."""

    def add(self, key: object, unit_cycles: float, memory_cycles: float,
            clusters: float = 0.0) -> None:
        """A descriptor the doorbell at ``now`` put on the ring: ``unit_cycles`` alone on its
        unit, ``memory_cycles`` of the whole DDR5 subsystem for its reads, ``clusters``
        selected."""
        unit = max(1.0, float(unit_cycles))
        self.queue.append(_Job(key, unit, max(0.0, float(memory_cycles)) / unit,
                               self.now + self.timing.doorbell_cycles,
                               max(0.0, float(clusters)) / unit))
        self._start()

    def add_host_lines(self, n: int) -> None:
        self.host_lines += n

    @property
    def idle(self) -> bool:
        return not (self.queue or self.fetched or self.running)

    def _start(self) -> None:
        # the queue reads a descriptor only for a free unit (nelssa_cmdq's can_fetch): a unit
        # freed by a completion waits out the next ring read, it is not read ahead
        while self.queue and len(self.running) + len(self.fetched) < min(self.engines,
                                                                          self.order_depth):
            job = self.queue.pop(0)
            begin = max(self.now, job.arrived, self.fetch_free)
            if self.refresh is not None:  # the ring read waits out a refresh
                begin = self.refresh.inside(begin) or begin
            job.held_until = self.fetch_free = begin + self.timing.fetch_cycles
            self.fetched.append(job)
        while self.fetched and len(self.running) < self.engines:
            self.running.append(self.fetched.pop(0))

    def _speed(self) -> tuple[float, float]:
        """(unit speed, host lines per cycle) now."""
        host = 1.0 / HOST_SHARE if self.host_lines > 0 else 0.0
        moving = [j for j in self.running if j.left > 0 and j.held_until <= self.now]
        if not moving:
            return 1.0, host
        load = sum(j.demand for j in moving) + host * self.timing.host_line_memory
        softness = self.timing.softness
        if load <= 0:
            speed = 1.0
        elif softness > 0:
            speed = (1.0 + load ** (1.0 / softness)) ** -softness
        else:
            speed = min(1.0, 1.0 / load)
        if self.timing.cluster_wait > 0:  # the clusters' dependent reads wait in the queues
            density = sum(j.clusters for j in moving) / len(moving)
            speed /= 1.0 + self.timing.cluster_wait * density * min(load, 1.0) ** 8
        return speed, host * speed

    def _advance(self, dt: float, moving: list[_Job], speed: float,
                 finished: dict[object, float]) -> None:
        """``dt`` cycles at ``speed`` for ``moving``; completions written in fetch order."""
        if any(j.held_until <= self.now for j in self.running + self.fetched):
            self.busy += dt
        for j in moving:
            j.left -= dt * speed
            if j.left <= 1e-9:
                j.left = 0.0
                finished[j.key] = self.now + dt
        self.now += dt
        # a unit is free once its completion is written, and completions go in fetch order:
        # a descriptor done ahead of an earlier one holds its unit until that one is done
        while self.running and self.running[0].left == 0:
            self.running.pop(0)
        self._start()

    def _holds(self) -> list[float]:
        """Cycles until the next ring read ends."""
        return [j.held_until - self.now for j in self.running + self.fetched
                if j.held_until > self.now]

    def _step(self, until: float | None, finished: dict[object, float]) -> bool:
        """Advance to the next event or ``until``, whichever is first; False at ``until`` or
        when nothing is in flight."""
        if self.idle:
            if until is not None:
                self.host_lines = max(0.0, self.host_lines - (until - self.now))
                self.now = max(self.now, until)
            return False
        speed, host = self._speed()
        window = self.refresh.window(self.now) if self.refresh is not None else None
        if window is not None and window[0] <= self.now:
            # refreshing: only the descriptors in their tails move, and ring reads end
            moving = [j for j in self.running if 0 < j.left <= self.refresh.tail + 1e-9
                      and j.held_until <= self.now]
            dt = min([window[1] - self.now] + [j.left for j in moving] + self._holds())
            speed, host = 1.0, 0.0
        else:
            moving = [j for j in self.running if j.left > 0 and j.held_until <= self.now]
            dt = min([j.left / speed for j in moving] + self._holds()
                     + ([self.host_lines / host] if host > 0 else [])  # speeds change then
                     + ([window[0] - self.now] if window is not None else []))
        stop = until is not None and self.now + dt >= until
        if stop:
            dt = until - self.now
        self.host_lines = max(0.0, self.host_lines - dt * host)
        self._advance(dt, moving, speed, finished)
        return not stop

    def sync(self, t: float) -> None:
        """Account progress up to cycle ``t``."""
        if t <= self.now:
            return
        while self._step(t, {}):
            pass

    def finish_times(self) -> dict[object, float]:
        """The cycle each descriptor now known finishes, if nothing more arrives."""
        ahead = copy.copy(self)
        ahead.queue, ahead.fetched, ahead.running = ([replace(j) for j in jobs] for jobs in
                                                     (self.queue, self.fetched, self.running))
        finished: dict[object, float] = {}
        while not ahead.idle:
            ahead._step(None, finished)
        return finished
