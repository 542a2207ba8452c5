"""Unit split: a batch of attention requests cut into descriptors that fill a device's units.

A device runs one descriptor per attention unit at a time and a unit streams at most one beat
(64 bytes) per cycle, so a device handed fewer descriptors than it has units leaves DDR5
bandwidth unused: two KV heads on one device, the single-request case, read at 45 % of the peak
with two units busy and two idle (issue 23). The split cuts each request's selected clusters
into parts, one descriptor each, so that the batch comes to a whole number of rounds of the
units with about equal work per part. A part's (O, LSE) is the exact attention over its
clusters; the parts of a request merge by log-sum-exp (``emu/policy/merge.py``, applied by the
node's aggregator), so splitting changes the result only by the merge's rounding.

Work is counted in stream beats (tokens x head_dim: K and V rows), parts are handed out to the
request whose part would otherwise be largest (which minimises the largest part), each
request's clusters are cut, in the order given, where its running work crosses an equal share,
and the parts are submitted largest first (the device hands each descriptor to the first free
unit, so this is longest-processing-time-first scheduling).
A request with more clusters than a descriptor takes (``max_ids``) is always cut into enough
parts to fit.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from nelssa.driver.formats import MAX_IDS

if TYPE_CHECKING:  # command.py imports this module
    from nelssa.driver.command import AttnRequest


@dataclass(frozen=True)
class Part:
    """One descriptor's worth of a request."""

    request: int
    """Index of the request in the batch."""
    attn: AttnRequest
    """The request with a subset of its clusters (the same region, query rows and scale)."""


def _work(i: int, r: AttnRequest) -> np.ndarray:
    """Stream work of each selected cluster: its tokens times head_dim (one per id)."""
    ids = np.asarray(r.cluster_ids, dtype=np.int64).reshape(-1)
    if not ids.size:
        raise ValueError(f"request {i} selects no cluster")
    bad = ids[(ids < 0) | (ids >= r.region.num_clusters)]
    if bad.size:
        raise ValueError(f"request {i}: cluster id {int(bad[0])} not in the region (0.."
                         f"{r.region.num_clusters - 1})")
    tokens = np.array([r.region.clusters[c][1] for c in ids.tolist()], dtype=np.int64)
    return tokens * r.region.head_dim


def _parts_per_request(work: list[np.ndarray], target: int, max_ids: int) -> list[int]:
    counts = [-(-len(w) // max_ids) for w in work]  # each request at least fits
    totals = [int(w.sum()) for w in work]
    while sum(counts) < target:
        open_ = [i for i, w in enumerate(work) if counts[i] < len(w)]
        if not open_:
            break
        # the request whose parts are largest gets one more (lowest index on ties)
        i = max(open_, key=lambda j: (totals[j] / counts[j], -j))
        counts[i] += 1
    return counts


def _cut(work: np.ndarray, parts: int, max_ids: int) -> list[slice]:
    """``parts`` contiguous non-empty runs of ``work``, each close to an equal share of it and
    at most ``max_ids`` long."""
    n = len(work)
    cum = np.cumsum(work)
    bounds = [0]
    for j in range(1, parts):
        share = cum[-1] * j / parts
        i = int(np.searchsorted(cum, share, side="left"))  # the cluster crossing the share
        before = int(cum[i - 1]) if i else 0
        at = i + 1 if cum[i] - share <= share - before else i  # whichever side is nearer
        # at least one cluster in this part and in each one after it
        at = min(max(at, bounds[-1] + 1), n - (parts - j))
        bounds.append(at)
    bounds.append(n)
    if any(b - a > max_ids for a, b in itertools.pairwise(bounds)):
        # clusters of very different sizes: equal counts always fit
        bounds = [round(n * j / parts) for j in range(parts + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


PART_OVERHEAD_WORK = 16 * 100
"""What one more descriptor costs a unit, in work units (tokens x head_dim; a 64-byte beat is
16 of them): about 100 cycles of fetch, directory and output writes beside its stream (the RTL
device's fixed and result costs, hw/model/device_calibration.json). It decides how finely to
cut, not how a device is timed."""


def _makespan(sizes: list[int], units: int) -> float:
    """When ``sizes`` (submitted in order) finish on ``units`` units, each descriptor taken by
    the first free unit, and a unit freed when its completion is written: in submission order,
    so one done ahead of an earlier one holds its unit (rtl/top/nelssa_cmdq.sv)."""
    free = [0.0] * units
    released = 0.0
    for size in sizes:
        t = heapq.heappop(free)
        released = max(t + size + PART_OVERHEAD_WORK, released)
        heapq.heappush(free, released)
    return released


def _plan(requests: Sequence[AttnRequest], work: list[np.ndarray], target: int,
          max_ids: int) -> list[tuple[int, Part]]:
    out: list[tuple[int, Part]] = []
    for i, (r, w, k) in enumerate(zip(requests, work, _parts_per_request(work, target, max_ids),
                                      strict=True)):
        ids = list(r.cluster_ids)
        if k == 1:
            out.append((int(w.sum()), Part(i, r)))
            continue
        for s in _cut(w, k, max_ids):
            out.append((int(w[s].sum()), Part(i, replace(r, cluster_ids=ids[s]))))
    # largest first: a unit that frees early takes a small part, not the last large one
    # (six KV heads on four units as 4 whole + 4 halves: 1.5 rounds this way, 2 in request order)
    out.sort(key=lambda wp: -wp[0])
    return out


def split_batch(requests: Sequence[AttnRequest], units: int, max_ids: int = MAX_IDS
                ) -> list[Part]:
    """The descriptors to submit for ``requests`` on a device of ``units`` attention units.
    Their count is the multiple of ``units`` (from the first at or above ``len(requests)``,
    ``units`` more at most) whose plan finishes soonest by ``_makespan``, the fewer on ties:
    two KV heads on four units make 4 parts, three make 12 (each cut in four: three even
    rounds, where 4 parts would leave two units idle half the time). A request with more
    clusters than ``max_ids`` always gets enough parts to fit; one with few clusters caps its
    parts. Parts come largest first (the order to submit them in), a request's parts in
    cluster order among equals. ``units`` 1 keeps one descriptor per request (unless one
    exceeds ``max_ids``)."""
    if units < 1:
        raise ValueError(f"units must be >= 1, got {units}")
    if max_ids < 1:
        raise ValueError(f"max_ids must be >= 1, got {max_ids}")
    if not requests:
        return []
    work = [_work(i, r) for i, r in enumerate(requests)]
    first = -(-len(requests) // units)
    best: tuple[float, list[tuple[int, Part]]] | None = None
    for rounds in range(first, first + (units if units > 1 else 0) + 1):
        plan = _plan(requests, work, rounds * units, max_ids)
        span = _makespan([w for w, _ in plan], units)
        if best is None or span < best[0]:
            best = (span, plan)
        if len(plan) < rounds * units:  # no request has clusters to cut further
            break
    assert best is not None
    return [p for _, p in best[1]]
