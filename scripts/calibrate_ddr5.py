"""Fit the memory timing estimate (hw/model/ddr5_estimate.py) to the cycle model, per preset,
and write hw/model/ddr5_calibration.json with the fit's error on every pattern.

    .venv/bin/python scripts/calibrate_ddr5.py [--requests N]

The cycle model is command-identical to the RTL controller (tests/rtl/test_ddr5_ctrl.py and
`scripts/bench_ddr5.py --rtl` show it), so fitting to it fits to the RTL.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_estimate import (
    CALIBRATION_FILE,
    bound_tck,
    count_subchannels,
    estimate_device,
    features,
)
from nelssa.hw.model.ddr5_patterns import calibration_patterns
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.ddr5_timing import PRESETS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="lines per sub-channel")
    args = parser.parse_args()
    result = {}
    for key, timing in PRESETS.items():
        rows, targets, runs = [], [], []
        for subs in (1, 8):
            geo = DeviceGeometry(timing, subs)
            rng = np.random.default_rng(100 + subs)
            for name, (addrs, writes) in calibration_patterns(args.requests * subs, geo,
                                                              rng).items():
                run = run_device(addrs, writes, geo, check=False)
                counts = [c for c in count_subchannels(addrs, writes, geo) if c]
                for c, stats in zip(counts, run.per_subchannel, strict=True):
                    tail = timing.nRCD + timing.nCL + timing.burst_cycles
                    busy = stats.cycles * TCK_PER_CYCLE - tail
                    bound = bound_tck(c, timing)
                    if bound > c.last_arrival * TCK_PER_CYCLE:  # rules, not arrivals, bind
                        rows.append(features(c))
                        targets.append(busy / bound - 1.0)
                runs.append((subs, name, addrs, writes, run.cycles))
        coef, *_ = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)
        errors = {}
        for subs, name, addrs, writes, cycles in runs:
            est = estimate_device(addrs, writes, DeviceGeometry(timing, subs),
                                  coefficients=coef).cycles
            errors[f"{subs} sub-channel(s), {name}"] = round((est - cycles) / cycles * 100, 2)
            print(f"{timing.name:28} {subs} sub  {name:32} model {cycles:>7} "
                  f"estimate {est:>7}  {errors[f'{subs} sub-channel(s), {name}']:+.2f} %")
        worst = max(abs(e) for e in errors.values())
        print(f"{timing.name}: coefficients {np.round(coef, 5).tolist()}, worst error "
              f"{worst:.2f} %\n")
        result[timing.name] = {"preset": key, "coefficients": coef.tolist(),
                               "requests_per_subchannel": args.requests,
                               "error_percent": errors, "worst_error_percent": worst}
    CALIBRATION_FILE.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {CALIBRATION_FILE}")


if __name__ == "__main__":
    main()
