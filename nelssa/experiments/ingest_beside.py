"""KV ingestion beside decode (issue 44 item 12; the paper's architectural isolation, 5.1): one
layer's attention descriptors on one device, alone and again while the host writes KV through
CXL.mem (line by line, as the Memory API's front door does), and how much longer the second
batch takes in the device's own cycles (PERF_BUSY), on the RTL and on the model's cycle model.

Device cycles are the RTL's count, not wall time: the machine's load (it is shared) does not
enter them. Each point is run ``--repeats`` times (the model on a fresh device each time, the
RTL on its one device per process, whose DRAM state carries over); the page gives the spread.

    .venv/bin/python scripts/ingest_beside.py [--batches 1 2 3 4] [--repeats 2] [--write]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nelssa.hw.model.bandwidth import Workload, run_workload
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_timing import HOST_SHARE
from nelssa.provenance import commit_label

log = logging.getLogger(__name__)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "ingest_beside.md"
GOAL = 0.05
"""The most a batch may slow down while KV is ingested (issue 44 item 12)."""
INGEST_BYTES = 4 << 20
"""KV the host writes while the batch runs (the device benchmark's 4 MB)."""


@dataclass(frozen=True)
class IngestPoint:
    backend: str
    batch: int
    split: bool
    descriptors: int
    alone: int
    """Busy cycles of the batch alone."""
    beside: tuple[int, ...]
    """Busy cycles of the same batch with ingestion, one per repeat."""
    alone_all: tuple[int, ...]

    @property
    def slowdown(self) -> tuple[float, ...]:
        return tuple(b / a - 1 for a, b in zip(self.alone_all, self.beside, strict=True))


def beside(port, w: Workload, split: bool, ingest_bytes: int = INGEST_BYTES
           ) -> tuple[int, int, int]:
    """(descriptors, busy cycles alone, busy cycles with ``ingest_bytes`` written through
    CXL.mem while the same descriptors run again)."""
    r = run_workload(port, w, split=split)
    dev, mem, cq = r.dev, r.mem, r.cq
    rng = np.random.default_rng(w.seed + 1)
    data = rng.integers(0, 256, ingest_bytes, np.uint8).tobytes()
    busy0 = dev.reg_read64("PERF_BUSY")
    again = cq.submit([p.attn for p in r.parts])
    dev.bulk = False  # line by line over CXL.mem, as it is timed
    try:
        dev.mem_write(mem.alloc.alloc(ingest_bytes), data)
    finally:
        dev.bulk = True
    cq.wait(again, timeout_cycles=100_000_000)
    return len(r.ids), r.cycles, dev.reg_read64("PERF_BUSY") - busy0


def measure(backends: dict[str, Callable[[], object]], batches: list[int], repeats: int,
            kv_heads: int = 2, compare_split: bool = True) -> list[IngestPoint]:
    runs = [(1, False)] if compare_split else []
    runs += [(b, True) for b in batches]
    points = []
    for name, make in backends.items():
        for batch, split in runs:
            w = Workload(kv_heads=kv_heads * batch)
            got = [beside(make(), w, split) for _ in range(repeats)]
            p = IngestPoint(name, batch, split, got[0][0], got[0][1], tuple(g[2] for g in got),
                      tuple(g[1] for g in got))
            log.info("%s batch %d%s: %s alone, %s beside: %s", name, batch,
                     "" if split else " (no split)", p.alone_all, p.beside,
                     ", ".join(f"{s:+.2%}" for s in p.slowdown))
            points.append(p)
    return points


def page(points: list[IngestPoint], command: str, commit: str, wall_s: float) -> str:
    rows = []
    for p in points:
        lo, hi = min(p.slowdown), max(p.slowdown)
        spread = f"{lo:+.2%}" if lo == hi else f"{lo:+.2%} .. {hi:+.2%}"
        same = ("one run" if len(p.beside) == 1 else "identical"
                if len(set(p.beside)) == 1 and len(set(p.alone_all)) == 1 else "differ")
        rows.append(f"| {p.backend} | {p.batch} | {'yes' if p.split else 'no'} | "
                    f"{p.descriptors} | {p.alone:,} | {', '.join(f'{b:,}' for b in p.beside)} | "
                    f"{spread} | {same} | {'yes' if hi < GOAL else 'NO'} |")
    rtl = [s for p in points if p.backend == "rtl" for s in p.slowdown]
    worst = f"{max(rtl):+.2%}" if rtl else "-"
    return "\n".join([
        "# KV ingestion beside decode", "",
        f"Written by `{command}` at commit {commit} ({wall_s:.0f} s wall on a shared 2-core "
        "machine; the figures are device cycles, which its load does not change).", "",
        "One layer's attention on one device (131,072 tokens per KV head, 4 % of clusters of "
        "8-24 tokens, 2 KV heads x 4 query heads per request, head_dim 128, 4 units, "
        "DDR5-6400): the batch's busy cycles (PERF_BUSY) alone, then the same descriptors "
        f"again while the host writes {INGEST_BYTES >> 20} MB of KV through CXL.mem, line by "
        "line (the Memory API's front door). The paper's architectural isolation (5.1) "
        f"promises that ingestion adds no jitter to decode; the goal is under {GOAL:.0%} in "
        f"every run. While a unit runs, the device spaces the host's requests {HOST_SHARE} "
        "cycles apart (`nelssa_device`'s HostShare; idle, one per cycle), and its memory "
        "front end serves the units' reads first.", "",
        f"Worst slowdown on the RTL: **{worst}**.", "",
        "| backend | batch | split | descriptors | cycles alone | cycles beside ingestion "
        "(each run) | slowdown | runs | under 5 % |",
        "| --- | ---: | --- | ---: | ---: | --- | ---: | --- | --- |",
        *rows, "",
        "Why the throttle and not zero: the units read at about 87 % of the DDR5 peak, so the "
        "memory has about 13 % left, and every host write also costs a write-to-read "
        "turnaround in its sub-channel. A host allowed one 64-byte line every 4 cycles "
        "(12.8 GB/s at 800 MHz, 6 % of the 204.8 GB/s peak) slowed these batches by 3.2-5.2 % "
        "on the RTL, three of five at 5 % or more (this script with --repeats 1 at a41a4e4, "
        "before HostShare went from 4 to 8; the issue measured 5.2-8.7 % at an earlier "
        "commit); "
        f"one every {HOST_SHARE} cycles ({64 * 800e6 / HOST_SHARE / 1e9:g} GB/s) is the "
        "rate at which the table above holds. Ingestion is not starved by it: a 128K-token "
        "request's KV (Llama-3-8B, 16 GiB over 4 devices, 4 GiB each) takes 10 s or more "
        "to prefill on an H100, 0.4 GB/s per device, far below the throttled rate, and the "
        "host writes at one line per cycle whenever no unit runs.", ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 3, 4],
                    help="requests per batch (2 KV heads each), split over the units")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each point")
    ap.add_argument("--no-rtl", action="store_true", help="the model device only")
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.name}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    commit = commit_label()
    t0 = time.perf_counter()
    cfg = DeviceConfig()
    backends = {"model": lambda: ModelDevice(replace(cfg))}
    if not args.no_rtl:
        from nelssa.hw.sim.device import RtlDevice

        rtl = RtlDevice(units=cfg.engines)  # one per process (its DRAM store is the process's)
        backends = {"rtl": lambda: rtl, **backends}
    points = measure(backends, args.batches, args.repeats)
    shown = sys.argv[1:] if argv is None else argv
    text = page(points, " ".join(["python scripts/ingest_beside.py", *shown]), commit,
                time.perf_counter() - t0)
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
    return 0 if all(max(p.slowdown) < GOAL for p in points if p.backend == "rtl") else 1
