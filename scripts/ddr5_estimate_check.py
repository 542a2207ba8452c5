"""The DDR5 timing estimate against the cycle model on generated patterns of every kind (issue 23,
item 4): the worst error of each kind per preset, in points of peak bandwidth, written to
docs/results/ddr5_estimate.md, and what one estimate costs.

    .venv/bin/python scripts/ddr5_estimate_check.py [--cases N] [--requests N] [--no-write]

Each case draws a kind's parameters (block size, hits per row, stride, cluster size and
interleave, hot rows, write fraction) and an address map from its own seed, runs the cycle model
(command-identical to the RTL controller) and the estimate, and compares their bandwidths.
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

    @property
    def error(self) -> float:
        """Estimate minus model, points of peak."""
        return self.estimate - self.model


def run_case(kind: str, preset: str, subchannels: int, seed: int, requests: int) -> Case:
    timing = PRESETS[preset]
    geo = DeviceGeometry(timing, subchannels)
    rng = np.random.default_rng(seed)
    amap = MAPS[int(rng.integers(0, len(MAPS)))]
    (addrs, writes), params = generated_pattern(kind, requests, geo, rng, amap)
    model = run_device(addrs, writes, geo, amap, check=False)
    est = estimate_device(addrs, writes, geo, amap)
    return Case(kind, preset, subchannels, amap, params,
                model.bandwidth_fraction(timing, subchannels) * 100,
                est.bandwidth_fraction(timing, subchannels) * 100)


def estimate_cost(repeat: int) -> list[tuple[int, float]]:
    """Milliseconds per estimate of random 8 KB cluster reads on the 8 sub-channels (what the
    model device times each descriptor with), by stream length; the median of ``repeat``."""
    geo = DeviceGeometry(PRESETS["ddr5-6400"])
    out = []
    for n in (256, 4096, 40960):
        addrs = random_blocks(n, 8192 if n >= 128 else 256, geo, np.random.default_rng(n))
        estimate_device(addrs, None, geo)
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            estimate_device(addrs, None, geo)
            runs.append(time.perf_counter() - t0)
        out.append((n, sorted(runs)[len(runs) // 2] * 1e3))
    return out


def page(cases: list[Case], cost: list[tuple[int, float]], command: str, elapsed: float) -> str:
    lines = [
        "# DDR5 timing estimate against the cycle model",
        "",
        f"Written by `{command}` ({len(cases)} cases, {elapsed:.0f} s).",
        "",
        "Each case: a pattern of one kind with parameters and address map drawn from its seed, on",
        "the cycle model (command-identical to the RTL controller) and on the estimate",
        "(`hw/model/ddr5_estimate.py`); error = estimate minus model in points of the peak",
        "bandwidth (25.6 GB/s per sub-channel). Worst case (largest |error|) of each kind:",
        "",
        "| kind | preset | worst error | sub-channels | map | pattern | model | estimate | cases "
        "| mean abs |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for kind in PATTERN_KINDS:
        for preset in PRESETS:
            sel = [c for c in cases if c.kind == kind and c.preset == preset]
            if not sel:
                continue
            w = max(sel, key=lambda c: abs(c.error))
            mean = sum(abs(c.error) for c in sel) / len(sel)
            lines.append(f"| {kind} | {preset} | {w.error:+.2f} | {w.subchannels} | "
                         f"{w.address_map} | {w.params} | {w.model:.1f} % | {w.estimate:.1f} % | "
                         f"{len(sel)} | {mean:.2f} |")
    worst = max(cases, key=lambda c: abs(c.error))
    lines += ["", f"Worst of all: {worst.error:+.2f} points ({worst.kind}, {worst.preset}, "
              f"{worst.params}).", "",
              "Cost of one estimate (random 8 KB cluster reads on 8 sub-channels, median wall "
              "time on this machine, shared with other jobs):", "",
              "| lines | ms per estimate |", "| ---: | ---: |"]
    lines += [f"| {n} | {ms:.2f} |" for n, ms in cost]
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
                        log.info("%-22s %-11s %d %-9s %-48s model %5.1f est %5.1f %+6.2f",
                                 kind, preset, subs, c.address_map, c.params, c.model,
                                 c.estimate, c.error)
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
