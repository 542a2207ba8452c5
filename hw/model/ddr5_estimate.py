"""Timing of the memory subsystem: the cycles an access stream takes, for the DDR5 studies
(scripts/bench_ddr5.py, scripts/ddr5_estimate_check.py; the model device's timers take theirs
from the compiled cycle model, hw/model/device_timers.py). Where a C++ compiler is at hand it
replays the stream on the compiled cycle model (hw/model/ddr5_replay.py: the controller's
policy step for step, command-identical to the RTL; a few ms per 4,096 lines); elsewhere, or with
``method="counted"``, it estimates from counts (no per-cycle simulation), calibrated against
the cycle model, as follows.

Per sub-channel the stream is reduced to counts. Row visits: the controller (FR-FCFS) serves
every queued request of an open row before it closes it, so a sub-channel's stream is cut into
windows of ``QUEUE_WINDOW`` requests and each (bank, row, direction) of a window is one visit
(split where its requests lie more than ``ROW_REACH`` apart: the row idled shut in between),
continuing the bank's last visit of the window before when it is the same row (of either
direction: open page) and no other row of the bank was wanted after it began (with another row
waiting, the open one closes as soon as the queue holds none of its requests: K and V of a
cluster in one bank switch rows every window). Each JEDEC rule then bounds the busy time from
below:

* data bus: a burst per read; the writes drain by drain (``_write_tck``: each drain serves
  WRITE_BATCH of the WRITE_POOL writes the write queue holds, the least busy banks' and groups'
  first, and takes their bursts, its busiest group's writes tCCD_L_WR apart, or its busiest
  bank's writes one after another, a row visit apart where they are in different rows); per
  write drain a turnaround, or PRE, ACT and tRCD where the new direction's rows are not open
  (``drain_tck``); the drains (``_drains``) at most one per WRITE_BATCH writes that finds a read
  waiting, and where writes are most of the stream, one per the reads served while WRITE_BATCH
  writes enter;
* per bank group: its reads tCCD_L apart, its writes tCCD_L_WR apart; its activations tRRD_L;
* per sub-channel: activations tRRD_S apart, four per tFAW;
* per bank: its visits one after another, each ACT, tRCD, its column commands (tCCD_L or
  tCCD_L_WR apart, the first with none before it), tRTP (or the write recovery) and PRE, and at
  least tRC;
* arrival: the front end delivers ``lines_per_cycle`` lines per cycle to the whole device, so
  the sub-channel cannot finish its k-th request's share of the work before that request came;
* the queue (``_queue_path``): the controller sees only QUEUE_DEPTH requests, so the work of
  each window of that many requests on each resource (bus, ACT rate, bank group, bank) waits
  for the windows before it to enter and issue: a bank group that holds the whole queue, or a
  bank whose rows interleaved streams fight over, stalls the bus, which the whole-stream
  bounds above cannot see. It has the arrivals in it (the arrival bound is not added to it).

Where a read-only sub-channel's rows switch often (READ_PATH_ACTS row openings per request,
or a bank whose counted visits outlast the data bus), the counts cannot say how much of the
banks' work the queue hides: nearly every request opens a row, and the bus, the ACT rate and
the banks' tRC tie (K and V of small clusters, random lines; the bounds were up to 10 points
off), or the queue fills with one bank's requests and serves more of them a visit than the
windows count (64 hot rows on the row map: the bank bound was 34 points low). There the stream
is served request by request as the controller serves it (``read_path``: the queue, FR-FCFS,
each bank's PRE, ACT and tRC, tRRD_S/L, tFAW, tCCD_S/L), which holds the bank-level rules
request by request; the busiest bank group's column time and the activation rate still bound
it from below, and the loss factor is not applied. It costs about 40 us a request (a Python
loop), so it runs only there: the model device's 8 KB cluster reads (one opening in two
requests) keep the counted bounds unless a descriptor is short enough that a bank's visits
outlast the bus.

Elsewhere the largest bound is what an ideal controller reaches; the real one loses more to row
switches it cannot hide and to write drains. That loss, on the data bus, is the calibrated factor
``1 + c . features`` (at least 1; ``features``: activations per request and their square, write
drains per request, arrivals at the bus rate with row openings, the queue's windows that wait
for row switches, and the bus tied with a bank group while rows switch; no constant term),
fitted by ``scripts/calibrate_ddr5.py`` (linear least squares on the factor the cycle model
needs, over both presets together) and stored in ``ddr5_calibration.json`` beside this file,
with the error of the fit. All-bank refresh comes on top where the run is long enough to meet
one (every nREFI, nRFC each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nelssa.hw.model import ddr5_replay as replay
from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_read_path import read_path, read_path_wanted
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE, ControllerConfig
from nelssa.hw.model.ddr5_timing import PRESETS, DDR5Timing

CALIBRATION_FILE = Path(__file__).with_name("ddr5_calibration.json")
NUM_COEFFICIENTS = 6
QUEUE_WINDOW = 2 * ControllerConfig().read_queue
"""The reach of the controller's reordering, in requests of the sub-channel: twice its read
queue, since an open row also takes the requests that enter while it is served (on one-bank
streams this window counts the cycle model's ACTs best: scripts/ddr5_estimate_check.py)."""
ROW_REACH = ControllerConfig().read_queue + ControllerConfig().close_idle // 8
"""Requests of the sub-channel after which an open row no longer takes a request for it: the
next one is still outside the queue when the row has idled ``close_idle`` tCK (at one burst,
8 tCK, a request), so the row was closed meanwhile."""
WRITE_BATCH = ControllerConfig().write_high - ControllerConfig().write_low
"""Writes served per drain."""
WRITE_POOL = ControllerConfig().write_queue
"""Writes a drain chooses among (the write queue: writes keep entering while it drains)."""


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
    """Time of the writes, drain by drain (:func:`_write_tck`)."""
    arrivals: npt.NDArray[np.int64] | None = field(default=None, repr=False, compare=False)
    """Cycle each of the sub-channel's requests leaves the front end (stream order)."""
    queue_tck: float = 0.0
    """Last column command of the queue's critical path (:func:`_queue_path`), in tCK."""
    conflicts: float = 0.0
    """Windows of QUEUE_DEPTH requests whose banks switch rows: the sum over the windows of the
    squared share of row visits beyond each bank's first per bank the window holds (at most 1):
    the queue fills with requests that wait for the switches, and few banks are left to hide
    them behind."""
    read_path_tck: float = 0.0
    """Last column command of the request-level read path (:func:`read_path`), in tCK, where
    it runs (a read-only sub-channel whose rows switch often: READ_PATH_ACTS); else 0."""


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
    # rows a bank visits in a window: with another row waiting, the open one closes as soon as
    # the queue holds none of its requests, so it does not last into the next window
    bc_first = np.zeros(bc_start.size, np.int64)
    bc_first[bc_of_group[is_last]] = g_first[is_last]
    other_row = g_row >> 1 != bc_last_row[bc_of_group] >> 1
    later = np.where(other_row, g_last, -1)
    bc_waits = (np.maximum.reduceat(later, bc_start) > bc_first) if n else np.zeros(0, bool)
    # unless the bank holds most of the queue: then the open row lasts until the queue is full
    # of the other row's requests, and its new requests keep coming meanwhile
    bc_reqs = np.add.reduceat(g_hits, bc_start) if n else np.zeros(0, np.int64)
    win_reqs = np.bincount(sc * chunks + chunk, minlength=geometry.subchannels * chunks)
    bc_win = (bc_key // chunks // t.banks) * chunks + bc_key % chunks
    bc_waits &= 2 * bc_reqs < win_reqs[bc_win]
    prev = np.searchsorted(bc_key, g_bc - 1)
    prev = np.minimum(prev, bc_key.size - 1)
    continues = ((bc_key[prev] == g_bc - 1) & (bc_last_row[prev] >> 1 == g_row >> 1)
                 & ~bc_waits[prev] & (g_bc % chunks > 0)
                 & (g_first - bc_last_pos[prev] <= ROW_REACH))
    # open page: the writes to a row its reads of the window opened find it open (and the other
    # way round), unless the bank opened another row between them
    other_dir = np.zeros(n_groups, bool)
    other_dir[1:] = (g_bc[1:] == g_bc[:-1]) & ((g_row[1:] ^ g_row[:-1]) == 1)
    new_visit = ~continues & ~other_dir
    # per-group serial time in its bank: column commands, and ACT/tRCD + closing + PRE per visit
    g_reads = g_hits - g_writes
    col = g_reads * t.nCCD_L + g_writes * t.nCCD_L_WR
    close = np.where(g_writes > 0, t.write_to_precharge, t.nRTP)
    g_bank = g_bc // chunks
    first_gap = np.where(g_writes > 0, t.nCCD_L_WR, t.nCCD_L)  # no column command before it
    g_tck = col + new_visit * (t.nRCD + close + t.nRP - first_gap)
    banks_total = geometry.subchannels * t.banks
    bank_tck = np.bincount(g_bank, weights=g_tck, minlength=banks_total)
    bank_acts = np.bincount(g_bank, weights=new_visit, minlength=banks_total)
    # the queue's windows whose banks switch rows: per window of QUEUE_DEPTH requests, the row
    # visits beyond each bank's first over the banks it holds (the banks that can hide a switch)
    per_sub = n // QUEUE_DEPTH + 1
    q_win = sc * per_sub + pos // QUEUE_DEPTH
    v_win = (g_bank // t.banks) * per_sub + g_first // QUEUE_DEPTH
    cells = geometry.subchannels * per_sub
    visits_w = np.bincount(v_win, weights=new_visit, minlength=cells)
    bank_w = np.unique(q_win * t.banks + bank)  # (window, bank) pairs
    banks_w = np.bincount(bank_w // t.banks, minlength=cells)
    q = np.minimum(1.0, np.maximum(visits_w - banks_w, 0) / np.maximum(banks_w, 1))
    conflicts = np.bincount(np.arange(cells) // per_sub, weights=q * q,
                            minlength=geometry.subchannels)
    write_acts = np.bincount(g_bank // t.banks, weights=new_visit & (g_row & 1 == 1),
                             minlength=geometry.subchannels)
    nwr = np.bincount(sc, weights=wr, minlength=geometry.subchannels)
    write_tck = _write_tck(geometry, sc[wr], bank[wr], write_acts / np.maximum(nwr, 1),
                           np.diff(sub_start) - nwr)
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
    flips = (sc[1:] == sc[:-1]) & (wr[1:] != wr[:-1])
    switches = np.bincount(sc[1:][flips], minlength=geometry.subchannels)
    new_req = np.zeros(n, bool)  # the request that opens its visit's row (an ACT)
    new_req[by_group[g_start]] = new_visit
    queue = _queue_path(t, sc, bank, wr, pos, arrival, new_req, g_bank, g_first,
                        g_writes > 0, g_hits, new_visit, geometry.subchannels)
    out: list[SubchannelCounts | None] = []
    for s in range(geometry.subchannels):
        if reqs[s] == 0:
            out.append(None)
            continue
        arr = arrival[sub_start[s]:sub_start[s + 1]]
        path_tck = 0.0
        if nwr[s] == 0 and read_path_wanted(t, bank_acts[s], reqs[s], bank_tck[s]):
            sl = slice(sub_start[s], sub_start[s + 1])
            path_tck = read_path(t, bank[sl], row[sl], arr * float(TCK_PER_CYCLE))
        out.append(SubchannelCounts(
            int(reqs[s]), int(nwr[s]), int(bank_acts[s].sum()), int(per_group[s].max()),
            int(bank_acts[s].max()), int(arr[-1]), int(switches[s]),
            float(group_tck[s].max()), int(group_acts[s].max()), float(bank_tck[s].max()),
            int(write_acts[s]), float(write_tck[s]), arr, float(queue[s]), float(conflicts[s]),
            path_tck))
    return out


QUEUE_DEPTH = ControllerConfig().read_queue
"""Requests the controller holds (its read queue): the window of the queue's critical path."""


def _queue_path(t: DDR5Timing, sc: np.ndarray, bank: np.ndarray, wr: np.ndarray,
                pos: np.ndarray, arrival: np.ndarray, new_req: np.ndarray,
                v_bank: np.ndarray, v_first: np.ndarray, v_writes: np.ndarray,
                v_hits: np.ndarray, v_new: np.ndarray, subs: int) -> np.ndarray:
    """Per sub-channel, the tCK its work ends when the queue holds only QUEUE_DEPTH requests:
    the stream is cut into windows of that many requests; the requests of a window enter the
    queue while the window before issues, so a window's work on each resource (the data bus,
    the ACT rate, each bank group's column commands tCCD_L or tCCD_L_WR apart, each bank's
    row visits one after another) starts no sooner than the window before began issuing and
    that resource finished the window before's work. A window begins issuing when the first
    of its bank groups may (tRCD after an ACT). This sees what a shallow queue cannot hide:
    a bank group that holds the whole queue, bank conflicts among interleaved streams."""
    n = sc.size
    if not n:
        return np.zeros(subs)
    groups, banks = t.bank_groups, t.banks
    res = 2 + groups + banks  # bus, ACT rate, bank groups, banks
    w_of = pos // QUEUE_DEPTH
    nw = int(w_of.max()) + 1
    cell = (sc * nw + w_of) * res
    size = subs * nw * res
    col = np.where(wr, t.nCCD_L_WR, t.nCCD_L)
    work = np.bincount(cell, minlength=size) * float(t.burst_cycles)
    work += np.bincount(cell + 1, weights=new_req * max(t.nRRD_S, t.nFAW / 4), minlength=size)
    g_cell = cell + 2 + bank // t.banks_per_group
    work += np.bincount(g_cell, weights=col, minlength=size)
    opens = np.bincount(g_cell, weights=new_req, minlength=size) > 0
    # a visit holds its bank from ACT to the next ACT: tRCD, its column commands, tRTP or the
    # write recovery, and tRP (the next row is opened on demand, open page), at least tRC
    v_sc = v_bank // banks
    v_gap = np.where(v_writes, t.nCCD_L_WR, t.nCCD_L) * (v_hits - 1) + t.nRCD + t.nRP + \
        np.where(v_writes, t.write_to_precharge, t.nRTP)
    v_cell = (v_sc * nw + v_first // QUEUE_DEPTH) * res + 2 + groups + v_bank % banks
    work += np.bincount(v_cell, weights=np.maximum(v_gap, t.nRC) * v_new, minlength=size)
    work = work.reshape(subs, nw, res)
    lat = np.where(opens, float(t.nRCD), 0.0).reshape(subs, nw, res)
    # entry, a request a cycle as the front end delivers them
    sub_start = np.searchsorted(sc, np.arange(subs + 1))
    entry = arrival * float(TCK_PER_CYCLE) + TCK_PER_CYCLE - pos * float(TCK_PER_CYCLE)
    entry = np.maximum.accumulate(entry + sc * _SEGMENT) - sc * _SEGMENT + \
        pos * float(TCK_PER_CYCLE)
    first = np.minimum(sub_start[:-1, None] + np.arange(nw)[None, :] * QUEUE_DEPTH, n - 1)
    last = np.minimum(first + QUEUE_DEPTH, sub_start[1:, None]) - 1
    used_w = first < sub_start[1:, None]
    e_first, e_last = entry[first], entry[np.maximum(last, 0)]
    # from a resource's work done to the last column command: a burst, a tCCD_L; a bank's
    # visit ends with tRTP and tRP after it
    tail = np.full(res, float(t.burst_cycles))
    tail[2:2 + groups] = t.nCCD_L
    tail[2 + groups:] = t.nRTP + t.nRP
    # a resource's work ends no sooner than its last request's column command after it
    # enters (tRCD after its bank's ACT), and the tail after that
    unit = tail.copy()
    unit[2 + groups:] += t.nRCD
    # requests per bank and window: a bank's visits finish one after another
    reqs_bank = np.bincount(v_cell, weights=v_hits * v_new, minlength=size)
    reqs_bank = reqs_bank.reshape(subs, nw, res)[:, :, 2 + groups:]
    # the wait of a visit's requests behind the visits before it in its bank and window
    v_win = v_first // QUEUE_DEPTH
    gap = np.maximum(v_gap, t.nRC) * v_new
    order = np.lexsort((v_first, v_bank, v_win))
    key = (v_win * (subs * banks) + v_bank)[order]
    seg = np.ones(order.size, bool)
    seg[1:] = key[1:] != key[:-1]
    cs = np.cumsum(gap[order]) - gap[order]
    before = cs - cs[np.maximum.accumulate(np.where(seg, np.arange(order.size), 0))]
    chain_wait = np.bincount((v_sc * nw + v_win)[order], weights=before * (v_hits * v_new)[order],
                             minlength=subs * nw).reshape(subs, nw)
    busy = np.full((subs, res), -_SEGMENT)
    counted = np.full((2, subs), -_SEGMENT)  # windows w-2, w-1 issued (all but stragglers)
    end = np.zeros(subs)
    for w in range(nw):
        wk = work[:, w]
        used = (wk > 0) & used_w[:, w, None]
        # the first request enters once the window two before has issued, the last once the
        # window before has
        enter_first = np.maximum(e_first[:, w], counted[0] + t.burst_cycles)
        enter_last = np.maximum(e_last[:, w], counted[1])
        start = np.maximum(busy, enter_first[:, None] + lat[:, w])  # ACTs hide behind work
        done = np.maximum(start + wk, enter_last[:, None] + lat[:, w] + unit)
        busy = np.where(used, done, busy)
        # when the window's requests have issued, stragglers aside: the bus and the bank
        # groups done, and twice the mean time a request of a bank's chain waits
        nb = reqs_bank[:, w]
        bank_mean = ((nb * start[:, 2 + groups:]).sum(axis=1) + chain_wait[:, w]) / \
            np.maximum(nb.sum(axis=1), 1)
        count_end = np.maximum(np.where(used[:, :2 + groups], done[:, :2 + groups], 0).max(axis=1),
                               2 * bank_mean - enter_first)
        counted = np.stack([counted[1], np.where(used_w[:, w], count_end, counted[1])])
        end = np.maximum(end, np.where(used, done - tail, 0).max(axis=1))
    return end  # the last column command


_SEGMENT = float(2**36)  # > any time in tCK: keeps a segmented running maximum in its segment


def _fewest(counts: list[int], want: int) -> int:
    """The least m such that taking at most m of each count takes ``want`` in all."""
    held = sorted(c for c in counts if c)
    below, m = 0, 1  # below: the counts under m, taken whole
    while True:
        while held and held[0] < m:
            below += held.pop(0)
        if below + m * len(held) >= want or not held:
            return m
        m += 1


def _write_tck(geometry: DeviceGeometry, sc: np.ndarray, bank: np.ndarray,
               row_share: np.ndarray, reads: np.ndarray) -> np.ndarray:
    """Per sub-channel: the time of its writes (their sub-channels and banks, in stream order),
    drain by drain. Each drain finds the write queue filled to WRITE_POOL and serves WRITE_BATCH
    of them, those it can serve soonest: the fewest from any one bank (FR-FCFS serves the ready
    ones and leaves the busy bank's for later). A drain takes its bursts, its busiest bank
    group's writes tCCD_L_WR apart (the drain balanced over the groups), or its busiest bank's
    writes one after another: tCCD_L_WR apart in one row, a row visit (ACT, tRCD, write
    recovery, PRE, tRP) apart in different rows, mixed by ``row_share`` (write row visits per
    write of the sub-channel), from when the bank is free of the drains before (the
    sub-channel's ``reads`` are served between drains, as many between any two). The writes a
    drain leaves wait for the next."""
    t = geometry.timing
    subs = geometry.subchannels
    out = np.zeros(subs)
    if not sc.size:
        return out
    start = np.searchsorted(sc, np.arange(subs + 1))
    visit = max(t.nRCD + t.write_to_precharge + t.nRP, t.nRC)
    per_group = t.banks_per_group
    for s in range(subs):
        b = bank[start[s]:start[s + 1]]
        if not b.size:
            continue
        apart = row_share[s] * visit + (1 - row_share[s]) * t.nCCD_L_WR
        cum = np.zeros((b.size + 1, t.banks), np.int64)  # writes per bank before each
        cum[1:] = np.cumsum(np.eye(t.banks, dtype=np.int64)[b], axis=0)
        seen = [0] * t.banks
        pool = [0] * t.banks
        ready = [0.0] * t.banks  # when each bank may take its next write
        between = reads[s] * t.burst_cycles * WRITE_BATCH / b.size  # reads between two drains
        taken, total, now = 0, 0.0, 0.0
        while True:
            nxt = min(b.size, taken + WRITE_POOL - sum(pool))
            upto = cum[nxt].tolist()
            pool = [p + y - x for p, x, y in zip(pool, seen, upto, strict=True)]
            taken, seen = nxt, upto
            held = sum(pool)
            if not held:
                break
            want = held if taken == b.size else min(WRITE_BATCH, held)
            m = _fewest(pool, want)
            served = [min(p, m) for p in pool]
            # the same drain balanced over the bank groups instead
            in_group = [sum(pool[g:g + per_group]) for g in range(0, t.banks, per_group)]
            m_group = _fewest(in_group, want)
            end = now + max(sum(served) * t.burst_cycles,
                            (m_group - 1) * t.nCCD_L_WR + t.burst_cycles)
            for k in (k for k, x in enumerate(served) if x):
                last = max(now, ready[k]) + (served[k] - 1) * apart
                ready[k] = last + apart
                end = max(end, last + t.burst_cycles)
            total += end - now
            now = end + between
            pool = [p - x for p, x in zip(pool, served, strict=True)]
        out[s] = total
    return out


def _drains(c: SubchannelCounts, t: DDR5Timing) -> float:
    """Write drains that end in a turnaround to reads: at most one per change of direction, and
    one per WRITE_BATCH writes that finds a read waiting (reads arrive at random, so a batch
    finds none with probability exp(-reads per batch)). And where writes are most of the stream,
    a drain lasts until the reads fill their queue (the writes that keep entering keep the write
    queue above ``write_low``); the reads in between are those served while WRITE_BATCH writes
    enter, a request a cycle, a burst a read: one drain per WRITE_BATCH / (w x bursts a cycle)
    reads (``w`` the write fraction)."""
    if not c.writes:
        return 0.0
    reads = c.requests - c.writes
    reads_per_batch = WRITE_BATCH * reads / c.writes
    w = c.writes / c.requests
    per_phase = WRITE_BATCH * TCK_PER_CYCLE / (w * t.burst_cycles)
    return min(c.switches / 2, c.writes / WRITE_BATCH * -np.expm1(-reads_per_batch),
               max(1.0, reads / per_phase))


def drain_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """Bus time lost per write drain: each change of direction waits for the bus turnaround,
    or, where the new direction's rows are not open (the controller opens rows only for the
    queue it serves), for PRE and ACT to tRCD, whichever is longer."""
    reads = c.requests - c.writes
    open_rows = t.nRP + t.nRCD + TCK_PER_CYCLE  # PRE the cycle after the switch, ACT, tRCD
    to_write = max(t.read_to_write - t.burst_cycles,
                   open_rows * c.write_activations / max(c.writes, 1))
    to_read = max(t.write_to_read(False) - t.burst_cycles,
                  open_rows * (c.activations - c.write_activations) / max(reads, 1))
    return to_write + to_read


def _drain_time(c: SubchannelCounts, t: DDR5Timing) -> float:
    """Bus time the write drains lose: their number times each one's."""
    return _drains(c, t) * drain_tck(c, t) if c.writes else 0.0


def bank_side_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The largest bound of one bank or bank group, in tCK: exact for a stream that keeps one
    bank or group busy, so the calibration leaves it alone."""
    return max(c.group_tck, c.group_acts * t.nRRD_L,
               c.bank_tck - (t.nRCD + t.nRTP + t.nRP))  # the last visit's latency is the tail's


def _exact_bounds(c: SubchannelCounts, t: DDR5Timing) -> tuple[float, float]:
    """The bounds whose counts need no model of the queue: the busiest bank group's column
    commands and the sub-channel's activations (the read path holds them too, up to its
    rounding)."""
    return c.group_tck, c.activations * max(t.nRRD_S, t.nFAW / 4)


def data_bus_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The data bus: a burst per read, the writes drain by drain, and a read/write turnaround
    per drain."""
    reads = c.requests - c.writes
    return reads * t.burst_cycles + c.write_tck + _drain_time(c, t)


def activation_tck(c: SubchannelCounts, t: DDR5Timing) -> float:
    """The sub-channel's activations: tRRD_S apart, four per tFAW; and each write drain stops
    them as it stops the bus (rows open only for the queue being served)."""
    return c.activations * max(t.nRRD_S, t.nFAW / 4) + _drain_time(c, t)


def features(c: SubchannelCounts, t: DDR5Timing) -> npt.NDArray[np.float64]:
    """The terms the calibration weighs: activations per request ``a`` and ``a^2``; write
    drains per request ``d``; ``r^8 a``, with r the load (the last arrival over the data bus
    time, at most 1: requests that come as fast as the bus serves them leave the queue nearly
    empty, with nothing to hide a row opening behind); ``q``, the queue's windows that wait for
    row switches per request (``SubchannelCounts.conflicts``); and ``s``, near 1 where the bus
    and the busiest bank or bank group tie while rows switch (neither hides the other's gaps).
    No constant: a stream that needs no row switch and no turnaround runs at the bound."""
    a = c.activations / c.requests
    load = min(1.0, c.last_arrival * TCK_PER_CYCLE / (c.requests * t.burst_cycles))
    bus, bank = data_bus_tck(c, t), bank_side_tck(c, t)
    tie = (min(bus, bank) / max(bus, bank, 1.0)) ** 8 * min(1.0, 10 * a)
    return np.array([a, a * a, _drains(c, t) / c.requests, load ** 8 * a,
                     c.conflicts / c.requests, tie])


def with_refresh(busy_tck: float, t: DDR5Timing) -> float:
    """Busy time stretched by the all-bank refreshes that fall inside it (one every nREFI from
    the start, nRFC each)."""
    return busy_tck + t.nRFC * np.floor(busy_tck / (t.nREFI - t.nRFC))


def busy_tck(c: SubchannelCounts, t: DDR5Timing, coefficients: npt.ArrayLike) -> float:
    """The sub-channel's work in tCK, refresh not included: the bank-side bound, the activation
    rate, or the data bus times the calibrated factor (the bus idles at row switches and drains
    the rules alone do not show), no sooner than the arrivals allow (each request's share of the
    work after it arrives). Where the read path ran, its last column command, no sooner than the
    busiest bank group's column time and the activation rate."""
    if c.read_path_tck:
        return max(c.read_path_tck - t.nRCD, *_exact_bounds(c, t))
    busy = max(bank_side_tck(c, t), activation_tck(c, t),
               # the bound is an ideal controller's: a real one is never faster
               data_bus_tck(c, t) * max(1.0, 1.0 + float(np.dot(features(c, t), coefficients))))
    if c.arrivals is not None:
        per = busy / c.requests
        late = c.arrivals * float(TCK_PER_CYCLE) - np.arange(c.requests) * per
        busy += max(0.0, float(late.max()))
    # the queue's path has the arrivals in it already
    return max(busy, c.queue_tck - t.nRCD)  # the tail adds tRCD, tCL and the burst


def subchannel_cycles(c: SubchannelCounts, t: DDR5Timing,
                      coefficients: npt.ArrayLike, refresh: bool = True) -> int:
    """Estimated controller cycles until the sub-channel's last burst (``refresh``: with the
    refreshes that fall inside, else without)."""
    tail = t.nRCD + t.nCL + t.burst_cycles  # the last request's own latency
    busy = busy_tck(c, t, coefficients)
    if refresh:
        busy = with_refresh(busy, t)
    return int(np.ceil((busy + tail) / TCK_PER_CYCLE))


@cache
def _calibration() -> dict[str, dict[str, object]]:
    if not CALIBRATION_FILE.exists():
        return {}
    return json.loads(CALIBRATION_FILE.read_text())


def calibrated_presets() -> list[str]:
    """The speed grades (hw/model/ddr5_timing.PRESETS keys) the counted bounds are calibrated
    for (``make calibrate-ddr5``): the DDR5-6400 ones a study of them uses; every other grade is
    timed by the replay."""
    names = {name for name, e in _calibration().items()
             if len(e.get("coefficients", ())) == NUM_COEFFICIENTS}
    return sorted(k for k, t in PRESETS.items() if t.name in names)


def coefficients_for(timing: DDR5Timing) -> npt.NDArray[np.float64]:
    """The calibrated coefficients of a preset; ValueError for a grade the counted bounds are
    not calibrated for (pass ``coefficients``, or use the replay)."""
    entry = _calibration().get(timing.name)
    if entry is None or len(entry["coefficients"]) != NUM_COEFFICIENTS:
        raise ValueError(f"the counted DDR5 estimate is not calibrated for {timing.name} "
                         f"(calibrated: {', '.join(calibrated_presets())}); time it with the "
                         "replay (method 'replay') or run make calibrate-ddr5")
    return np.asarray(entry["coefficients"], dtype=np.float64)


class EstimateMethod(StrEnum):
    """How :func:`estimate_device` times a stream: ``replay``, the compiled cycle model
    (hw/model/ddr5_replay.py: the controller's commands, exact); ``counted``, the bounds
    above; ``auto``, the replay where it can be built here, else the counted bounds."""

    AUTO = "auto"
    REPLAY = "replay"
    COUNTED = "counted"


def estimate_device(addrs: npt.ArrayLike, writes: npt.ArrayLike | None,
                    geometry: DeviceGeometry, address_map: str = "cacheline",
                    lines_per_cycle: int = 4,
                    coefficients: npt.ArrayLike | None = None,
                    refresh: bool = True,
                    method: EstimateMethod | str = EstimateMethod.AUTO) -> Estimate:
    """Estimated cycles of a stream of 64-byte requests (as run_device would replay it);
    ``refresh=False`` leaves out the refreshes (for a caller that places them itself: the
    model device, hw/model/device_timing.Refresh); ``method``: an EstimateMethod or its name;
    ``coefficients``: the counted bounds' loss factor (the replay has none)."""
    try:
        method = EstimateMethod(method)
    except ValueError:
        known = ", ".join(m.value for m in EstimateMethod)
        raise ValueError(f"unknown method {method!r}; known: {known}") from None
    t = geometry.timing
    n = int(np.asarray(addrs).size)
    if method is EstimateMethod.REPLAY or (method is EstimateMethod.AUTO
                                           and replay.available()):
        per = replay.replay_device(addrs, writes, geometry, address_map, lines_per_cycle,
                                   refresh=refresh)
        return Estimate(max(per), per, n * t.burst_bytes)
    coef = coefficients_for(t) if coefficients is None else np.asarray(coefficients)
    counts = count_subchannels(addrs, writes, geometry, address_map, lines_per_cycle)
    per = [subchannel_cycles(c, t, coef, refresh) if c else 0 for c in counts]
    return Estimate(max(per), per, n * t.burst_bytes)
