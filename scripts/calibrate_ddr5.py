"""Fit the memory timing estimate (hw/model/ddr5_estimate.py) to the cycle model, per preset,
and write hw/model/ddr5_calibration.json with the fit's error on every pattern.

    .venv/bin/python scripts/calibrate_ddr5.py [--requests N] [--generated N]

The patterns: the calibration set of hw/model/ddr5_patterns.py on 1 and 8 sub-channels, and
``--generated`` patterns of every kind on every address map (ddr5_patterns.generated_pattern,
seeds from 50,000 on, apart from the check script's, 0 to 6,999, and the property test's,
drawn by hypothesis). The cycle model is command-identical to the RTL
controller (tests/rtl/test_ddr5_ctrl.py and `scripts/bench_ddr5.py --rtl` show it), so fitting
to it fits to the RTL.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from nelssa.hw.model.ddr5_addr import ALL_ADDRESS_MAPS, DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_estimate import (
    CALIBRATION_FILE,
    NUM_COEFFICIENTS,
    activation_tck,
    bank_side_tck,
    busy_tck,
    count_subchannels,
    data_bus_tck,
    features,
    subchannel_cycles,
)
from nelssa.hw.model.ddr5_patterns import PATTERN_KINDS, calibration_patterns, generated_pattern
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.ddr5_timing import PRESETS

MAPS = ALL_ADDRESS_MAPS
"""Every map the device has, the row map (a 4 KB row in one bank) included."""


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


def _fit_rows(cases, timing):
    """Per pattern, the sub-channel that sets its time, where the data bus is what binds it (its
    bound at least 85 % of the cycle model's busy time and no other bound above that time): its
    features and the loss factor the cycle model needs (its busy time, refresh and the last
    request's latency taken out, over the bus bound). The other patterns the factor cannot
    move, nor those the read path times (ddr5_read_path.read_path)."""
    zero = np.zeros(NUM_COEFFICIENTS)
    rows, need = [], []
    tail = timing.nRCD + timing.nCL + timing.burst_cycles
    for subs, counts, n, model_fraction in cases:
        peak = subs * timing.burst_bytes * TCK_PER_CYCLE / timing.burst_cycles
        target = n * timing.burst_bytes / (model_fraction * peak) * TCK_PER_CYCLE - tail
        target -= timing.nRFC * np.floor(target / timing.nREFI)  # the refreshes inside it
        c = max(counts, key=lambda c: busy_tck(c, timing, zero))
        if c.read_path_tck:  # timed request by request: the factor is not used
            continue
        bus = data_bus_tck(c, timing)
        others = max(bank_side_tck(c, timing), activation_tck(c, timing),
                     c.queue_tck - timing.nRCD)
        if bus < 0.85 * target or others > target:
            continue
        rows.append(features(c, timing))
        need.append(target / bus - 1.0)
    return rows, need


def fit(cases_by_preset) -> np.ndarray:
    """The data bus's loss coefficients, by linear least squares over the patterns of every
    preset together: the presets differ in the ACT rate, which the bounds carry, and one fit over
    twice the patterns follows them less closely than one per preset would."""
    rows, need = [], []
    for timing, cases in cases_by_preset:
        r, y = _fit_rows(cases, timing)
        rows += r
        need += y
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(need), rcond=None)
    return coef


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200, help="lines per sub-channel")
    parser.add_argument("--generated", type=int, default=16,
                        help="generated patterns of each kind")
    args = parser.parse_args()
    if min(args.requests, args.generated) < 1:
        parser.error("--requests and --generated must be positive")
    result = {}
    measured = []
    for key, timing in PRESETS.items():
        cases, names = [], []
        for subs, name, amap, addrs, writes in patterns(timing, args.requests, args.generated):
            geo = DeviceGeometry(timing, subs)
            run = run_device(addrs, writes, geo, amap, check=False)
            counts = [c for c in count_subchannels(addrs, writes, geo, amap) if c]
            cases.append((subs, counts, len(addrs), run.bandwidth_fraction(timing, subs)))
            names.append(f"{subs} sub-channel(s), {amap}, {name}")
        measured.append((key, timing, cases, names))
    coef = fit([(timing, cases) for _, timing, cases, _ in measured])
    for key, timing, cases, names in measured:
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
