"""The DDR5 timing estimate against the cycle model on generated patterns of every kind (issue 23,
item 4): the worst error of each kind per preset, in points of peak bandwidth, written to
docs/results/ddr5_estimate.md, and what one estimate costs.

    .venv/bin/python scripts/ddr5_estimate_check.py [--cases N] [--requests N] [--no-write]

Each case draws a kind's parameters (block size, hits per row, stride, cluster size and
interleave, hot rows, write fraction) and an address map from its own seed, runs the cycle model
(command-identical to the RTL controller) and both methods of the estimate (the compiled replay,
its default where g++ builds it, and the counted bounds, its fallback), and compares their
bandwidths.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nelssa.hw.model.ddr5_addr import ALL_ADDRESS_MAPS, DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_estimate import estimate_device
from nelssa.hw.model.ddr5_patterns import PATTERN_KINDS, generated_pattern, random_blocks
from nelssa.hw.model.ddr5_timing import PRESETS

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "results" / "ddr5_estimate.md"
MAPS = ALL_ADDRESS_MAPS


@dataclass(frozen=True)
class Case:
    kind: str
    preset: str
    subchannels: int
    address_map: str
    params: str
    model: float
    """Cycle model, % of peak."""
    estimate: float
    """The replay (estimate_device(method="replay")), % of peak."""
    counted: float
    """The counted bounds, % of peak."""

    def error(self, method: str = "replay") -> float:
        """Estimate minus model, points of peak."""
        return (self.estimate if method == "replay" else self.counted) - self.model


def run_case(kind: str, preset: str, subchannels: int, seed: int, requests: int) -> Case:
    timing = PRESETS[preset]
    geo = DeviceGeometry(timing, subchannels)
    rng = np.random.default_rng(seed)
    amap = MAPS[int(rng.integers(0, len(MAPS)))]
    (addrs, writes), params = generated_pattern(kind, requests, geo, rng, amap)
    model = run_device(addrs, writes, geo, amap, check=False)
    est, counted = (estimate_device(addrs, writes, geo, amap, method=m)
                    for m in ("replay", "counted"))
    return Case(kind, preset, subchannels, amap, params,
                model.bandwidth_fraction(timing, subchannels) * 100,
                est.bandwidth_fraction(timing, subchannels) * 100,
                counted.bandwidth_fraction(timing, subchannels) * 100)


def estimate_cost(repeat: int) -> list[tuple[int, float, float]]:
    """Milliseconds per estimate of random 8 KB cluster reads on the 8 sub-channels (what the
    model device times each descriptor with), by stream length, replay and counted; the median
    of ``repeat``."""
    geo = DeviceGeometry(PRESETS["ddr5-6400"])
    out = []
    for n in (256, 4096, 40960):
        addrs = random_blocks(n, 8192 if n >= 128 else 256, geo, np.random.default_rng(n))
        ms = []
        for method in ("replay", "counted"):
            estimate_device(addrs, None, geo, method=method)
            runs = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                estimate_device(addrs, None, geo, method=method)
                runs.append(time.perf_counter() - t0)
            ms.append(sorted(runs)[len(runs) // 2] * 1e3)
        out.append((n, *ms))
    return out


def _worst_table(cases: list[Case], method: str) -> list[str]:
    lines = [
        "| kind | preset | worst error | sub-channels | map | pattern | model | estimate | cases "
        "| mean abs |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for kind in PATTERN_KINDS:
        for preset in PRESETS:
            sel = [c for c in cases if c.kind == kind and c.preset == preset]
            if not sel:
                continue
            w = max(sel, key=lambda c: abs(c.error(method)))
            mean = sum(abs(c.error(method)) for c in sel) / len(sel)
            lines.append(f"| {kind} | {preset} | {w.error(method):+.2f} | {w.subchannels} | "
                         f"{w.address_map} | {w.params} | {w.model:.1f} % | "
                         f"{w.model + w.error(method):.1f} % | {len(sel)} | {mean:.2f} |")
    worst = max(cases, key=lambda c: abs(c.error(method)))
    return [*lines, "", f"Worst of all: {worst.error(method):+.2f} points ({worst.kind}, "
            f"{worst.preset}, {worst.params})."]


def page(cases: list[Case], cost: list[tuple[int, float, float]], command: str,
         elapsed: float) -> str:
    lines = [
        "# DDR5 timing estimate against the cycle model",
        "",
        f"Written by `{command}` ({len(cases)} cases, {elapsed:.0f} s).",
        "",
        "Each case: a pattern of one kind with parameters and address map drawn from its seed, on",
        "the cycle model (command-identical to the RTL controller) and on the estimate",
        "(`hw/model/ddr5_estimate.py`); error = estimate minus model in points of the peak",
        "bandwidth (25.6 GB/s per sub-channel).",
        "",
        "## The replay (the estimate's default where g++ builds it)",
        "",
        "`estimate_device(method=\"replay\")`: the cycle model compiled",
        "(`hw/model/ddr5_replay.cpp`, step for step the policy of `ddr5_subchannel.py`). Worst",
        "case (largest |error|) of each kind:",
        "",
        *_worst_table(cases, "replay"),
        "",
        "## The counted bounds (the fallback without a C++ compiler)",
        "",
        "`estimate_device(method=\"counted\")`: the bank-level bounds and the calibrated loss",
        "factor. Worst case of each kind:",
        "",
        *_worst_table(cases, "counted"),
        "",
        "Cost of one estimate (random 8 KB cluster reads on 8 sub-channels, median wall time on",
        "this machine, shared with other jobs):",
        "",
        "| lines | replay, ms | counted, ms |",
        "| ---: | ---: | ---: |",
    ]
    lines += [f"| {n} | {replay_ms:.2f} | {counted_ms:.2f} |" for n, replay_ms, counted_ms in cost]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=12,
                        help="cases per kind, preset and sub-channel count")
    parser.add_argument("--requests", type=int, default=1200, help="requests per sub-channel")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args()
    if args.cases < 1 or args.requests < 1:
        print("ddr5_estimate_check: --cases and --requests must be positive", file=sys.stderr)
        raise SystemExit(2)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    cases = []
    for kind in PATTERN_KINDS:
        for preset in PRESETS:
            for subs in (1, 8):
                count = args.cases if subs == 1 else max(1, args.cases // 3)
                for i in range(count):
                    seed = args.seed + 1000 * PATTERN_KINDS.index(kind) + 100 * subs + i
                    c = run_case(kind, preset, subs, seed, args.requests * min(subs, 2))
                    cases.append(c)
                    if args.verbose:
                        log.info("%-22s %-11s %d %-9s %-48s model %5.1f replay %+6.2f "
                                 "counted %+6.2f", kind, preset, subs, c.address_map, c.params,
                                 c.model, c.error(), c.error("counted"))
    elapsed = time.perf_counter() - t0
    cost = estimate_cost(20)
    command = "python scripts/ddr5_estimate_check.py " + " ".join(sys.argv[1:])
    text = page(cases, cost, command.strip(), elapsed)
    print(text)
    if not args.no_write:
        PAGE.write_text(text)
        log.info("wrote %s", PAGE)


if __name__ == "__main__":
    main()
