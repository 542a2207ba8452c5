"""Analytical timing of the memory subsystem: the cycles an access stream takes, from counts
(no per-cycle simulation), calibrated against the cycle model (itself command-identical to the
RTL controller). This is the time source of the fast ``model`` backend and the latency model.

Per sub-channel the stream is reduced to counts. Row visits: the controller (FR-FCFS) serves
every queued request of an open row before it closes it, so a sub-channel's stream is cut into
windows of ``QUEUE_WINDOW`` requests and each (bank, row, direction) of a window is one visit
(split where its requests lie more than ``ROW_REACH`` apart: the row idled shut in between),
continuing the bank's last visit of the window before when it is the same row. Each JEDEC rule
then bounds the busy time from below:

* data bus: a burst per read; the writes a write queue at a time, each batch at least a burst a
  write and tCCD_L_WR apart in its busiest bank group; per write drain a turnaround, or PRE and
  ACT to tRCD where the new direction's rows are not open (``drain_tck``);
* per bank group: its reads tCCD_L apart, its writes tCCD_L_WR apart; its activations tRRD_L;
* per sub-channel: activations tRRD_S apart, four per tFAW;
* per bank: its visits one after another, each ACT, tRCD, its column commands (tCCD_L or
  tCCD_L_WR apart), tRTP (or the write recovery) and PRE, and at least tRC;
* arrival: the front end delivers ``lines_per_cycle`` lines per cycle to the whole device, so
  the sub-channel cannot finish its k-th request's share of the work before that request came.

The largest bound is what an ideal controller reaches; the real one loses a little more to row
switches it cannot hide and to write drains. That loss, on the data bus, is the calibrated
factor ``1 + c0 + c1 a + c2 a^2 + c3 d + c4 r^2`` (``a`` activations, ``d`` write drains per
request, ``r`` the load: see ``features``), at least 1,
fitted per preset by ``scripts/calibrate_ddr5.py`` (least squares in points of peak bandwidth)
and stored in ``ddr5_calibration.json`` beside this file, with the error of the fit. All-bank
refresh comes on top where the run is long enough to meet one (every nREFI, nRFC each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE, ControllerConfig
from nelssa.hw.model.ddr5_timing import DDR5Timing

CALIBRATION_FILE = Path(__file__).with_name("ddr5_calibration.json")
NUM_COEFFICIENTS = 5
QUEUE_WINDOW = 2 * ControllerConfig().read_queue
"""The reach of the controller's reordering, in requests of the sub-channel: twice its read
queue, since an open row also takes the requests that enter while it is served (on one-bank
streams this window counts the cycle model's ACTs best: scripts/ddr5_estimate_check.py)."""
ROW_REACH = ControllerConfig().read_queue + ControllerConfig().close_idle // 8
"""Requests of the sub-channel after which an open row no longer takes a request for it: the
next one is still outside the queue when the row has idled ``close_idle`` tCK (at one burst,
8 tCK, a request), so the row was closed meanwhile."""
WRITE_WINDOW = ControllerConfig().write_queue
"""Writes the controller chooses among while it drains (its write queue)."""
WRITE_BATCH = ControllerConfig().write_high - ControllerConfig().write_low
"""Writes served per drain."""


@dataclass(frozen=True)
class SubchannelCounts:
    """What the estimate needs to know of one sub-channel's share of a stream."""

    requests: int
    writes: int
    activations: int
    """Row visits (an ACT each), after the controller's reordering."""
    busiest_group: int
    """Requests of the bank group with the most."""
    busiest_bank_acts: int
    """Activations of the bank with the most."""
    last_arrival: int
    """Controller cycle the sub-channel's last request leaves the front end."""
    switches: int = 0
    """Changes between reads and writes along the sub-channel's stream."""
    group_tck: float = 0.0
    """Column time of the busiest bank group: reads tCCD_L, writes tCCD_L_WR apart."""
    group_acts: int = 0
    """Activations of the bank group with the most."""
    bank_tck: float = 0.0
    """Serial time of the busiest bank's visits."""
    write_activations: int = 0
    """Row visits of writes (among ``activations``)."""
    write_tck: float = 0.0
    """Time of the writes, a write queue's worth at a time (WRITE_WINDOW), each batch
    at least a burst a write and tCCD_L_WR apart in its busiest bank group."""
    arrivals: npt.NDArray[np.int64] | None = field(default=None, repr=False, compare=False)
    """Cycle each of the sub-channel's requests leaves the front end (stream order)."""


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


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index of each run of equal keys, and each element's run number."""
    new = np.ones(sorted_keys.size, bool)
    new[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return np.flatnonzero(new), np.cumsum(new) - 1


def count_subchannels(addrs: npt.ArrayLike, writes: npt.ArrayLike | None,
                      geometry: DeviceGeometry, address_map: str = "cacheline",
                      lines_per_cycle: int = 4) -> list[SubchannelCounts | None]:
    """Per-sub-channel counts of a stream of byte addresses (None where it sends nothing)."""
    d = decode(addrs, geometry, address_map)
    t = geometry.timing
    n = len(d.row)
    w_all = np.zeros(n, bool) if writes is None else np.asarray(writes, bool)
    order = np.argsort(d.subchannel, kind="stable")  # each sub-channel's stream, in order
    sc = d.subchannel[order]
    bank = d.bank_group[order] * t.banks_per_group + d.bank[order]
    row, wr = d.row[order], w_all[order]
    arrival = order // lines_per_cycle
    sub_start = np.searchsorted(sc, np.arange(geometry.subchannels + 1))
    pos = np.arange(n) - sub_start[sc]
    chunk = pos // QUEUE_WINDOW
    chunks = int(chunk.max()) + 2 if n else 1
    bank_key = sc * t.banks + bank
    bank_chunk = bank_key * chunks + chunk
    # groups: one (bank, window, row, read or write) each, a visit unless it continues the
    # window before (reads and writes of a row are served in different phases: two visits)
    rbits = t.rows.bit_length() + 1
    gkey = (bank_chunk << rbits) | (row << 1) | wr
    by_group = np.argsort(gkey, kind="stable")
    g_sorted = gkey[by_group]
    g_pos = pos[by_group]
    new = np.ones(n, bool)
    new[1:] = (g_sorted[1:] != g_sorted[:-1]) | (g_pos[1:] - g_pos[:-1] > ROW_REACH)
    g_start = np.flatnonzero(new)
    g_of = np.cumsum(new) - 1
    n_groups = g_start.size
    g_bc = g_sorted[g_start] >> rbits
    g_row = g_sorted[g_start] & ((1 << rbits) - 1)  # row and direction
    g_writes = np.bincount(g_of, weights=wr[by_group], minlength=n_groups)
    g_hits = np.diff(np.append(g_start, n))
    g_first = g_pos[g_start]  # stream order within a group is kept by the stable sort
    g_last = g_pos[np.append(g_start[1:], n) - 1]
    # the row a bank serves last in a window: the visit that began last
    bc_start, bc_of_group = _runs(g_bc)
    last_first = np.maximum.reduceat(g_first, bc_start) if n else g_first
    is_last = g_first == last_first[bc_of_group]
    bc_key = g_bc[bc_start]
    bc_last_row = np.zeros(bc_start.size, np.int64)
    bc_last_row[bc_of_group[is_last]] = g_row[is_last]
    bc_last_pos = np.zeros(bc_start.size, np.int64)
    bc_last_pos[bc_of_group[is_last]] = g_last[is_last]
    prev = np.searchsorted(bc_key, g_bc - 1)
    prev = np.minimum(prev, bc_key.size - 1)
    continues = ((bc_key[prev] == g_bc - 1) & (bc_last_row[prev] == g_row) & (g_bc % chunks > 0)
                 & (g_first - bc_last_pos[prev] <= ROW_REACH))
    new_visit = ~continues
    # per-group serial time in its bank: column commands, and ACT/tRCD + closing + PRE per visit
    g_reads = g_hits - g_writes
    col = g_reads * t.nCCD_L + g_writes * t.nCCD_L_WR
    close = np.where(g_writes > 0, t.write_to_precharge, t.nRTP)
    g_bank = g_bc // chunks
    g_tck = col + new_visit * (t.nRCD + close + t.nRP - t.nCCD_L)
    banks_total = geometry.subchannels * t.banks
    bank_tck = np.bincount(g_bank, weights=g_tck, minlength=banks_total)
    bank_acts = np.bincount(g_bank, weights=new_visit, minlength=banks_total)
    write_acts = np.bincount(g_bank // t.banks, weights=new_visit & (g_row & 1 == 1),
                             minlength=geometry.subchannels)
    bank_tck = np.maximum(bank_tck, bank_acts * t.nRC).reshape(geometry.subchannels, t.banks)
    bank_acts = bank_acts.reshape(geometry.subchannels, t.banks)
    grp = bank_key // t.banks_per_group  # sub-channel * groups + group
    grp_of_group = g_bank // t.banks_per_group
    groups_total = geometry.subchannels * t.bank_groups
    group_tck = np.bincount(grp_of_group, weights=col, minlength=groups_total)
    group_tck = group_tck.reshape(geometry.subchannels, t.bank_groups)
    group_acts = np.bincount(grp_of_group, weights=new_visit, minlength=groups_total)
    group_acts = group_acts.reshape(geometry.subchannels, t.bank_groups)
    per_group = np.bincount(grp, minlength=groups_total).reshape(geometry.subchannels,
                                                                 t.bank_groups)
    reqs = np.diff(sub_start)
    write_tck = _write_tck(geometry, sc[wr], bank[wr])
    nwr = np.bincount(sc, weights=wr, minlength=geometry.subchannels)
    flips = (sc[1:] == sc[:-1]) & (wr[1:] != wr[:-1])
    switches = np.bincount(sc[1:][flips], minlength=geometry.subchannels)
    out: list[SubchannelCounts | None] = []
    for s in range(geometry.subchannels):
        if reqs[s] == 0:
            out.append(None)
            continue
        arr = arrival[sub_start[s]:sub_start[s + 1]]
        out.append(SubchannelCounts(
            int(reqs[s]), int(nwr[s]), int(bank_acts[s].sum()), int(per_group[s].max()),
            int(bank_acts[s].max()), int(arr[-1]), int(switches[s]),
            float(group_tck[s].max()), int(group_acts[s].max()), float(bank_tck[s].max()),
            int(write_acts[s]), float(write_tck[s]), arr))
    return out


def _write_tck(geometry: DeviceGeometry, sc: np.ndarray, bank: np.ndarray) -> np.ndarray:
    """Per sub-channel: the writes (their sub-channels and banks, in stream order) served in
    batches of WRITE_WINDOW, each batch as long as its bursts or its busiest bank group's writes
    tCCD_L_WR apart."""
    t = geometry.timing
    subs = geometry.subchannels
    if not sc.size:
        return np.zeros(subs)
    start = np.searchsorted(sc, np.arange(subs))
    batch = (np.arange(sc.size) - start[sc]) // WRITE_WINDOW
    batches = int(batch.max()) + 1
    key = (sc * batches + batch) * t.bank_groups + bank // t.banks_per_group
    per_group = np.bincount(key, minlength=subs * batches * t.bank_groups)
    per_group = per_group.reshape(subs, batches, t.bank_groups)
    busiest = per_group.max(axis=2)
    per_batch = np.maximum(per_group.sum(axis=2) * t.burst_cycles,
                           np.maximum(busiest - 1, 0) * t.nCCD_L_WR + t.burst_cycles)
    return per_batch.sum(axis=1).astype(np.float64)


def _drains(c: SubchannelCounts) -> float:
    """Write drains that end in a turnaround to reads: at most one per change of direction, and
    one per WRITE_BATCH writes that finds a read waiting (reads arrive at random, so a batch
    finds none with probability exp(-reads per batch))."""
    if not c.writes:
        return 0.0
    reads_per_batch = WRITE_BATCH * (c.requests - c.writes) / c.writes
    return min(c.switches / 2, c.writes / WRITE_BATCH * -np.expm1(-reads_per_batch))


def drain_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """Bus time lost per write drain: each change of direction waits for the bus turnaround,
    or, where the new direction's rows are not open (the controller opens rows only for the
    queue it serves), for PRE and ACT to tRCD, whichever is longer."""
    reads = c.requests - c.writes
    open_rows = t.nRP + t.nRCD
    to_write = max(t.read_to_write - t.burst_cycles,
                   open_rows * c.write_activations / max(c.writes, 1))
    to_read = max(t.write_to_read(False) - t.burst_cycles,
                  open_rows * (c.activations - c.write_activations) / max(reads, 1))
    return to_write + to_read


def bank_side_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The largest bound of one bank or bank group, in tCK: exact for a stream that keeps one
    bank or group busy, so the calibration leaves it alone."""
    return max(c.group_tck, c.group_acts * t.nRRD_L,
               c.bank_tck - (t.nRCD + t.nRTP + t.nRP))  # the last visit's latency is the tail's


def data_bus_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The data bus: a burst per read, the writes drain by drain, and a read/write turnaround
    per drain."""
    reads = c.requests - c.writes
    return reads * t.burst_cycles + c.write_tck + _drains(c) * drain_tck(c, t)


def activation_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The sub-channel's activations: tRRD_S apart, four per tFAW."""
    return c.activations * max(t.nRRD_S, t.nFAW / 4)


def features(c: SubchannelCounts, t: DDR5Timing) -> npt.NDArray[np.float64]:
    """The terms the calibration weighs, per request: 1, activations a, a^2, write drains d,
    and the squared load r^2 (r: the last arrival over the data bus time, at most 1: requests
    that come as fast as the bus serves them leave no slack to hide a row switch in)."""
    a = c.activations / c.requests
    load = min(1.0, c.last_arrival * TCK_PER_CYCLE / (c.requests * t.burst_cycles))
    return np.array([1.0, a, a * a, _drains(c) / c.requests, load * load])


def with_refresh(busy_tck: float, t: DDR5Timing) -> float:
    """Busy time stretched by the all-bank refreshes that fall inside it (one every nREFI from
    the start, nRFC each)."""
    return busy_tck + t.nRFC * np.floor(busy_tck / (t.nREFI - t.nRFC))


def busy_tck(c: SubchannelCounts, t: DDR5Timing, coefficients: npt.ArrayLike) -> float:
    """The sub-channel's work in tCK, refresh not included: the bank-side bound, the activation
    rate, or the data bus times the calibrated factor (the bus idles at row switches and drains
    the rules alone do not show), no sooner than the arrivals allow (each request's share of the
    work after it arrives)."""
    busy = max(bank_side_tck(c, t), activation_tck(c, t),
               # the bound is an ideal controller's: a real one is never faster
               data_bus_tck(c, t) * max(1.0, 1.0 + float(np.dot(features(c, t), coefficients))))
    if c.arrivals is not None:
        per = busy / c.requests
        late = c.arrivals * float(TCK_PER_CYCLE) - np.arange(c.requests) * per
        busy += max(0.0, float(late.max()))
    return busy


def subchannel_cycles(c: SubchannelCounts, t: DDR5Timing,
                      coefficients: npt.ArrayLike) -> int:
    """Estimated controller cycles until the sub-channel's last burst."""
    tail = t.nRCD + t.nCL + t.burst_cycles  # the last request's own latency
    busy = with_refresh(busy_tck(c, t, coefficients), t)
    return int(np.ceil((busy + tail) / TCK_PER_CYCLE))


@cache
def _calibration() -> dict[str, dict[str, object]]:
    if not CALIBRATION_FILE.exists():
        return {}
    return json.loads(CALIBRATION_FILE.read_text())


def coefficients_for(timing: DDR5Timing) -> npt.NDArray[np.float64]:
    """The calibrated coefficients of a preset (zeros, the ideal controller, if uncalibrated)."""
    entry = _calibration().get(timing.name)
    if entry is None or len(entry["coefficients"]) != NUM_COEFFICIENTS:
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
