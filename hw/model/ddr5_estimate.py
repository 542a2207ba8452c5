"""Analytical timing of the memory subsystem: the cycles an access stream takes, from counts
(no per-cycle simulation), calibrated against the cycle model (itself command-identical to the
RTL controller). This is the time source of the fast ``model`` backend and the latency model.

Per sub-channel the stream is reduced to counts: requests, writes, activations (a request whose
bank last saw another row, in stream order), the busiest bank group and bank. Each JEDEC rule
then bounds the time from below:

* data bus: one burst per request;
* tCCD_L: requests of the busiest bank group;
* tRRD_S and tFAW: activations of the sub-channel; tRC: activations of the busiest bank;
* arrival: the front end delivers ``lines_per_cycle`` lines per cycle to the whole device.

The largest bound over the refresh efficiency is what an ideal controller reaches; the real one
loses a little more to row switches it cannot hide and to write drains. That loss is the
calibrated factor ``1 + c0 + c1 a + c2 a^2 + c3 w`` (``a`` activations per request, ``w``
writes per request), fitted per preset by ``scripts/calibrate_ddr5.py`` and stored in
``ddr5_calibration.json`` beside this file, with the error of the fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.ddr5_timing import DDR5Timing

CALIBRATION_FILE = Path(__file__).with_name("ddr5_calibration.json")
NUM_COEFFICIENTS = 5


@dataclass(frozen=True)
class SubchannelCounts:
    """What the estimate needs to know of one sub-channel's share of a stream."""

    requests: int
    writes: int
    activations: int
    busiest_group: int
    """Requests of the bank group with the most."""
    busiest_bank_acts: int
    """Activations of the bank with the most."""
    last_arrival: int
    """Controller cycle the sub-channel's last request leaves the front end."""
    switches: int = 0
    """Changes between reads and writes along the sub-channel's stream."""


@dataclass(frozen=True)
class Estimate:
    """Estimated time of a stream on the device."""

    cycles: int
    """Controller cycles until the last data burst (as RunStats.cycles / DeviceRun.cycles)."""
    per_subchannel_cycles: list[int]
    bytes_moved: int

    def bandwidth_fraction(self, timing: DDR5Timing, subchannels: int) -> float:
        peak_per_cycle = subchannels * timing.burst_bytes * TCK_PER_CYCLE / timing.burst_cycles
        return self.bytes_moved / (self.cycles * peak_per_cycle)


def count_subchannels(addrs: npt.ArrayLike, writes: npt.ArrayLike | None,
                      geometry: DeviceGeometry, address_map: str = "cacheline",
                      lines_per_cycle: int = 4) -> list[SubchannelCounts | None]:
    """Per-sub-channel counts of a stream of byte addresses (None where it sends nothing)."""
    d = decode(addrs, geometry, address_map)
    n = len(d.row)
    w = np.zeros(n, bool) if writes is None else np.asarray(writes, bool)
    t = geometry.timing
    bank = d.bank_group * t.banks_per_group + d.bank
    key = d.subchannel * t.banks + bank
    order = np.argsort(key, kind="stable")  # each bank's requests, in stream order
    k_sorted, r_sorted = key[order], d.row[order]
    new = np.ones(n, bool)
    new[1:] = (k_sorted[1:] != k_sorted[:-1]) | (r_sorted[1:] != r_sorted[:-1])
    acts_per_bank = np.bincount(k_sorted[new], minlength=geometry.subchannels * t.banks)
    acts_per_bank = acts_per_bank.reshape(geometry.subchannels, t.banks)
    group = d.subchannel * t.bank_groups + d.bank_group
    per_group = np.bincount(group, minlength=geometry.subchannels * t.bank_groups)
    per_group = per_group.reshape(geometry.subchannels, t.bank_groups)
    reqs = np.bincount(d.subchannel, minlength=geometry.subchannels)
    wr = np.bincount(d.subchannel, weights=w, minlength=geometry.subchannels)
    by_sub = np.argsort(d.subchannel, kind="stable")
    s_sorted, w_sorted = d.subchannel[by_sub], w[by_sub]
    flips = (s_sorted[1:] == s_sorted[:-1]) & (w_sorted[1:] != w_sorted[:-1])
    switches = np.bincount(s_sorted[1:][flips], minlength=geometry.subchannels)
    last = np.full(geometry.subchannels, -1, np.int64)
    np.maximum.at(last, d.subchannel, np.arange(n, dtype=np.int64))
    out: list[SubchannelCounts | None] = []
    for s in range(geometry.subchannels):
        if reqs[s] == 0:
            out.append(None)
            continue
        out.append(SubchannelCounts(int(reqs[s]), int(wr[s]), int(acts_per_bank[s].sum()),
                                    int(per_group[s].max()), int(acts_per_bank[s].max()),
                                    int(last[s]) // lines_per_cycle, int(switches[s])))
    return out


def _bounds(c: SubchannelCounts, t: DDR5Timing) -> list[float]:
    return sorted((
        c.requests * t.burst_cycles,
        c.busiest_group * t.nCCD_L,
        c.activations * t.nRRD_S,
        c.activations * t.nFAW / 4,
        c.busiest_bank_acts * t.nRC,
    ))


def bound_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The largest lower bound of the rules on the sub-channel's busy time, in tCK, over the
    refresh efficiency (refresh takes its share whatever else binds)."""
    return _bounds(c, t)[-1] / t.refresh_efficiency


WRITE_BATCH = 16
"""Writes served per drain (ControllerConfig write_high - write_low)."""


def features(c: SubchannelCounts) -> npt.NDArray[np.float64]:
    """The terms the calibration weighs, per request: 1, activations a, a^2, writes, and write
    drains (a read/write turnaround each: one per change of direction, at most one per
    WRITE_BATCH writes, since the controller batches them)."""
    a = c.activations / c.requests
    drains = min(c.switches / 2, c.writes / WRITE_BATCH)
    return np.array([1.0, a, a * a, c.writes / c.requests, drains / c.requests])


def subchannel_cycles(c: SubchannelCounts, t: DDR5Timing,
                      coefficients: npt.ArrayLike) -> int:
    """Estimated controller cycles until the sub-channel's last burst."""
    busy = bound_tck(c, t) * (1.0 + float(np.dot(features(c), coefficients)))
    tail = t.nRCD + t.nCL + t.burst_cycles  # the last request's own latency
    busy_end = max(busy, c.last_arrival * TCK_PER_CYCLE)
    return int(np.ceil((busy_end + tail) / TCK_PER_CYCLE))


@cache
def _calibration() -> dict[str, dict[str, object]]:
    if not CALIBRATION_FILE.exists():
        return {}
    return json.loads(CALIBRATION_FILE.read_text())


def coefficients_for(timing: DDR5Timing) -> npt.NDArray[np.float64]:
    """The calibrated coefficients of a preset (zeros, the ideal controller, if uncalibrated)."""
    entry = _calibration().get(timing.name)
    if entry is None:
        return np.zeros(NUM_COEFFICIENTS)
    return np.asarray(entry["coefficients"], dtype=np.float64)


def estimate_device(addrs: npt.ArrayLike, writes: npt.ArrayLike | None,
                    geometry: DeviceGeometry, address_map: str = "cacheline",
                    lines_per_cycle: int = 4,
                    coefficients: npt.ArrayLike | None = None) -> Estimate:
    """Estimated cycles of a stream of 64-byte requests (as run_device would replay it)."""
    t = geometry.timing
    coef = coefficients_for(t) if coefficients is None else np.asarray(coefficients)
    counts = count_subchannels(addrs, writes, geometry, address_map, lines_per_cycle)
    per = [subchannel_cycles(c, t, coef) if c else 0 for c in counts]
    n = int(np.asarray(addrs).size)
    return Estimate(max(per), per, n * t.burst_bytes)
