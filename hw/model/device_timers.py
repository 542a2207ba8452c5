"""What times the model device's descriptors, chosen by name in its configuration
(``DeviceConfig.timer``) from :data:`TIMERS`:

- ``cycle`` (the default): the cycle model of the RTL device's memory side
  (hw/model/device_cycle.py): its command queue, units, host port and DDR5 controllers stepped
  on the lines each descriptor reads and writes; a host CXL.mem line is answered once that
  memory has taken it. It has the RTL's units, 1..``CYCLE_MAX_UNITS``.
- ``fluid``: the fluid schedule of hw/model/device_timing.py: each descriptor's calibrated unit
  time, its reads' DDR5 time alone (the compiled replay), and fitted sharing terms; host lines
  are answered at once. It takes any unit count CAPS can report (the calibration of
  ``scripts/calibrate_device.py`` and devices wider than the RTL's front end use it).

Both need the compiled DDR5 library (hw/model/ddr5_replay.py): without a C++ compiler the
device is not made (the error names the compiler), nothing falls back.

A timer sees the device's descriptors in flight as :class:`Timed` jobs (their ``done_cycle``)
and keeps it told when each completes.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from nelssa.driver import regs
from nelssa.driver.formats import DescStatus
from nelssa.hw.model import ddr5_replay
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.device_cycle import CYCLE_MAX_UNITS, CycleSchedule, CycleTiming
from nelssa.hw.model.device_timing import Refresh, Schedule, UnitTiming
from nelssa.hw.model.device_timing import features as timing_features

UNKNOWN = 1 << 62
"""The done cycle of a descriptor whose completion is not known yet."""


class Timed(Protocol):
    """A descriptor in flight as a timer sees it."""

    done_cycle: int


@dataclass(frozen=True)
class TimerSetup:
    """What a timer is built from: the device's configuration and its calibrations."""

    geometry: DeviceGeometry
    engines: int
    order_depth: int
    unit_timing: UnitTiming
    """The fluid schedule's calibrated unit time."""
    cycle_timing: CycleTiming | None
    """The cycle model's calibrated cycle counts (None: device_calibration.json's)."""
    emit: Callable[[bytes], None]
    """Sends a response to the host (a held host line's, once its memory took it)."""


class DeviceTimer(ABC):
    """When the model device's descriptors complete."""

    @property
    @abstractmethod
    def schedule(self) -> Schedule | CycleSchedule:
        """The model underneath (for calibration and tests)."""

    @property
    @abstractmethod
    def busy(self) -> float:
        """Cycles with a descriptor in flight, up to the last sync: PERF_BUSY."""

    @property
    @abstractmethod
    def holds_host_lines(self) -> bool:
        """A host line waits for the memory (its response not yet sent): work to run for."""

    @abstractmethod
    def add(self, key: object, d, status: DescStatus, lines: list[int],
            writes: list[tuple[int, bytes]], ring_addr: int, cq_addr: int, mem) -> None:
        """A descriptor fetched now (parsed DESCRIPTOR ``d``, as run_descriptor ran it), read
        from ``ring_addr``, its completion due at ``cq_addr``; ``mem`` holds its directory."""

    @abstractmethod
    def host_line(self, addr: int, write: bool, response: bytes) -> None:
        """A host CXL.mem line that takes DDR5 from the units; ``response`` goes to the host
        (``emit``) when the timer says it is served."""

    @abstractmethod
    def sync(self, t: int, jobs: Sequence[Timed]) -> None:
        """Run to cycle ``t``; done cycles the run learnt go to ``jobs``."""

    @abstractmethod
    def plan(self, jobs: Sequence[Timed], now: int) -> None:
        """Every job's done cycle up to date (for a timer that learns them only by running,
        nothing to do)."""

    @abstractmethod
    def before_advance(self, jobs: Sequence[Timed], now: int, until: int) -> None:
        """Done cycles of ``jobs`` known up to ``until`` before the device retires them."""

    @abstractmethod
    def next_completion(self, jobs: Sequence[Timed], now: int) -> int:
        """Cycle at which the oldest of ``jobs`` (not empty) completes, if nothing more
        arrives."""

    @abstractmethod
    def run_to_next_completion(self, jobs: Sequence[Timed], now: int, limit: int) -> None:
        """Learn the next done cycle (running ahead to ``limit`` at most where it must)."""


class CycleTimer(DeviceTimer):
    """``cycle``: the cycle model of the RTL's memory side."""

    def __init__(self, s: TimerSetup) -> None:
        ddr5_replay.require("the model device's cycle timer")
        self._schedule = CycleSchedule(s.geometry, s.engines, s.order_depth, s.cycle_timing)
        self._emit = s.emit
        self._held: dict[int, bytes] = {}  # host responses waiting for the memory
        self._host_tag = 0

    @property
    def schedule(self) -> CycleSchedule:
        return self._schedule

    @property
    def busy(self) -> float:
        return self._schedule.busy

    @property
    def holds_host_lines(self) -> bool:
        return bool(self._held)

    def add(self, key, d, status, lines, writes, ring_addr, cq_addr, mem) -> None:
        self._schedule.add(key, d, status, lines, writes, ring_addr, cq_addr, mem)

    def host_line(self, addr: int, write: bool, response: bytes) -> None:
        self._held[self._host_tag] = response
        self._schedule.add_host_line(addr, write, self._host_tag)
        self._host_tag += 1

    def _done(self, done: dict[object, int], jobs: Sequence[Timed]) -> None:
        """The cycle model's completions and the host lines it served."""
        for job in jobs:
            job.done_cycle = done.get(id(job), job.done_cycle)
        for tag in self._schedule.host_served:
            self._emit(self._held.pop(tag))
        self._schedule.host_served.clear()

    def sync(self, t: int, jobs: Sequence[Timed]) -> None:
        self._done(self._schedule.sync(t), jobs)

    def plan(self, jobs: Sequence[Timed], now: int) -> None:
        """Done cycles come as the cycle model runs."""

    def before_advance(self, jobs: Sequence[Timed], now: int, until: int) -> None:
        self.sync(until, jobs)

    def next_completion(self, jobs: Sequence[Timed], now: int) -> int:
        self.sync(now, jobs)  # ahead on a copy of the cycle model
        head = jobs[0]
        if head.done_cycle == UNKNOWN:
            return self._schedule.finish_times().get(id(head), UNKNOWN)
        return head.done_cycle

    def run_to_next_completion(self, jobs: Sequence[Timed], now: int, limit: int) -> None:
        if jobs:
            self.sync(now, jobs)
            self._done(self._schedule.run_to_next_completion(limit), jobs)


class FluidTimer(DeviceTimer):
    """``fluid``: the fluid schedule and its fitted sharing terms."""

    holds_host_lines = False

    def __init__(self, s: TimerSetup) -> None:
        ddr5_replay.require("the model device's fluid timer")
        self.geometry = s.geometry
        self.unit_timing = s.unit_timing
        self._schedule = Schedule(s.engines, s.unit_timing,
                                  Refresh.of(s.geometry.timing, s.unit_timing), s.order_depth)
        self._emit = s.emit
        self._planned = True  # done cycles of the jobs in flight are up to date

    @property
    def schedule(self) -> Schedule:
        return self._schedule

    @property
    def busy(self) -> float:
        return self._schedule.busy

    def add(self, key, d, status, lines, writes, ring_addr, cq_addr, mem) -> None:
        self._schedule.add(key, *self._cycles(d, lines))
        self._planned = False

    def _cycles(self, d, lines: list[int]) -> tuple[int, int, float]:
        """Cycles of one descriptor alone on its unit (the calibrated unit time), cycles of
        the whole DDR5 subsystem its reads take (the compiled replay, refreshes left to the
        schedule), and the clusters it reads."""
        unit = self.unit_timing.cycles(d, len(lines))
        mem = 0
        if lines:
            mem = max(ddr5_replay.replay_device(np.asarray(lines, dtype=np.int64), None,
                                                self.geometry, lines_per_cycle=4,
                                                refresh=False))
        return unit, mem, float(timing_features(d, len(lines))[1])

    def host_line(self, addr: int, write: bool, response: bytes) -> None:
        self._schedule.add_host_lines(1)
        self._planned = False
        self._emit(response)

    def sync(self, t: int, jobs: Sequence[Timed]) -> None:
        self._schedule.sync(t)

    def plan(self, jobs: Sequence[Timed], now: int) -> None:
        """Done cycles from the schedule (completions in order: none before the one fetched
        ahead of it)."""
        if self._planned:
            return
        finish = self._schedule.finish_times()
        done = now
        for job in jobs:
            done = max(done, math.ceil(finish.get(id(job), now) - 1e-6))
            job.done_cycle = done
        self._planned = True

    def before_advance(self, jobs: Sequence[Timed], now: int, until: int) -> None:
        self.plan(jobs, now)

    def next_completion(self, jobs: Sequence[Timed], now: int) -> int:
        self.plan(jobs, now)
        return jobs[0].done_cycle

    def run_to_next_completion(self, jobs: Sequence[Timed], now: int, limit: int) -> None:
        self.plan(jobs, now)


@dataclass(frozen=True)
class TimerKind:
    """One entry of the registry."""

    make: Callable[[TimerSetup], DeviceTimer]
    max_units: int
    """The most attention units it can time."""


TIMERS: dict[str, TimerKind] = {
    "cycle": TimerKind(CycleTimer, CYCLE_MAX_UNITS),
    "fluid": TimerKind(FluidTimer, regs.CAPS_MAX_ENGINES),
}
"""Every timer of the model device, by the name its configuration gives."""
DEFAULT_TIMER = "cycle"


def default_timer(engines: int) -> str:
    """The timer of a device that names none: ``cycle`` for the units the RTL has, ``fluid``
    beyond (the RTL's memory front end has no ports for more)."""
    return DEFAULT_TIMER if engines <= TIMERS[DEFAULT_TIMER].max_units else "fluid"


def check_timer(name: str, engines: int) -> None:
    """ValueError naming the timer and the known ones, or the units it cannot time."""
    kind = TIMERS.get(name)
    if kind is None:
        raise ValueError(f"timer {name!r} is unknown; known: {', '.join(TIMERS)}")
    if engines > kind.max_units:
        raise ValueError(f"the {name} timer times 1..{kind.max_units} units, not {engines} "
                         f"(the fluid timer takes up to {TIMERS['fluid'].max_units})")
