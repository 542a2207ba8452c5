"""Fit the memory timing estimate (hw/model/ddr5_estimate.py) to the cycle model, per preset,
and write hw/model/ddr5_calibration.json with the fit's error on every pattern.

    .venv/bin/python scripts/calibrate_ddr5.py [--requests N] [--generated N] [--steps N]

The patterns: the calibration set of hw/model/ddr5_patterns.py on 1 and 8 sub-channels, and
``--generated`` patterns of every kind (ddr5_patterns.generated_pattern, seeds from 50,000 on,
apart from the check script's and the tests'). The cycle model is command-identical to the RTL
controller (tests/rtl/test_ddr5_ctrl.py and `scripts/bench_ddr5.py --rtl` show it), so fitting
to it fits to the RTL.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_estimate import (
    CALIBRATION_FILE,
    NUM_COEFFICIENTS,
    count_subchannels,
    subchannel_cycles,
)
from nelssa.hw.model.ddr5_patterns import PATTERN_KINDS, calibration_patterns, generated_pattern
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.ddr5_timing import PRESETS

MAPS = ("cacheline", "mop4", "mop4clxor")


def patterns(timing, requests: int, generated: int):
    """(sub-channels, name, map, addresses, writes) of every pattern fitted on."""
    for subs in (1, 8):
        geo = DeviceGeometry(timing, subs)
        rng = np.random.default_rng(100 + subs)
        for name, (addrs, writes) in calibration_patterns(requests * subs, geo, rng).items():
            yield subs, name, "cacheline", addrs, writes
    for i in range(generated):
        for k, kind in enumerate(PATTERN_KINDS):
            subs = 8 if i % 4 == 3 else 1
            geo = DeviceGeometry(timing, subs)
            rng = np.random.default_rng(50_000 + 100 * k + i)
            amap = MAPS[int(rng.integers(0, len(MAPS)))]
            (addrs, writes), params = generated_pattern(kind, requests * min(subs, 2), geo,
                                                        rng, amap)
            yield subs, f"{kind}: {params}", amap, addrs, writes


def points(cases, timing, coefficients) -> np.ndarray:
    """Estimate minus cycle model, in points of peak bandwidth, per case."""
    out = []
    for subs, counts, n, model_fraction in cases:
        cycles = max(subchannel_cycles(c, timing, coefficients) for c in counts)
        peak = subs * timing.burst_bytes * TCK_PER_CYCLE / timing.burst_cycles
        out.append((n * timing.burst_bytes / (cycles * peak) - model_fraction) * 100)
    return np.array(out)


def fit(cases, timing, steps: int) -> np.ndarray:
    """Coefficients that minimise the squared point errors, by a seeded random search from the
    ideal controller (all zeros)."""
    rng = np.random.default_rng(0)
    best = np.zeros(NUM_COEFFICIENTS)
    score = np.linalg.norm(points(cases, timing, best))
    scale = 0.2
    for i in range(steps):
        trial = best + rng.normal(0, scale, best.size) * (rng.random(best.size) < 0.5)
        s = np.linalg.norm(points(cases, timing, trial))
        if s < score:
            best, score = trial, s
        if i % max(1, steps // 4) == max(1, steps // 4) - 1:
            scale /= 2
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200, help="lines per sub-channel")
    parser.add_argument("--generated", type=int, default=8,
                        help="generated patterns of each kind")
    parser.add_argument("--steps", type=int, default=400, help="random-search steps")
    args = parser.parse_args()
    if min(args.requests, args.generated, args.steps) < 1:
        parser.error("--requests, --generated and --steps must be positive")
    result = {}
    for key, timing in PRESETS.items():
        cases, names = [], []
        for subs, name, amap, addrs, writes in patterns(timing, args.requests, args.generated):
            geo = DeviceGeometry(timing, subs)
            run = run_device(addrs, writes, geo, amap, check=False)
            counts = [c for c in count_subchannels(addrs, writes, geo, amap) if c]
            cases.append((subs, counts, len(addrs), run.bandwidth_fraction(timing, subs)))
            names.append(f"{subs} sub-channel(s), {amap}, {name}")
        coef = fit(cases, timing, args.steps)
        errors = {n: round(float(e), 2) for n, e in zip(names, points(cases, timing, coef),
                                                        strict=True)}
        for n, e in errors.items():
            print(f"{timing.name:26} {n[:90]:90} {e:+.2f} points")
        worst = max(abs(e) for e in errors.values())
        print(f"{timing.name}: coefficients {np.round(coef, 5).tolist()}, worst error "
              f"{worst:.2f} points of peak\n")
        result[timing.name] = {"preset": key, "coefficients": coef.tolist(),
                               "requests_per_subchannel": args.requests,
                               "generated_per_kind": args.generated,
                               "error_points_of_peak": errors, "worst_error_points": worst}
    CALIBRATION_FILE.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {CALIBRATION_FILE}")


if __name__ == "__main__":
    main()
