"""The model device's timing against the RTL's on random workloads (issue 23 item 3): batches
of random head_dim, GQA group, cluster lengths and selections, cut over the units, with
Memory API traffic alongside in some (hw/model/timing_workloads.py); prints each workload's
cycles on both and the error, then the distribution.

    .venv/bin/python scripts/device_timing_check.py [--workloads 20] [--min-selected 32]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--min-selected", type=int, default=32,
                        help="fewest clusters a request selects")
    parser.add_argument("--min-tokens", type=int, default=16,
                        help="smallest largest-cluster length drawn")
    args = parser.parse_args()
    from nelssa.hw.sim.device import RtlDevice

    rtl = RtlDevice()
    errors = []
    t0 = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.workloads):
        w = TimingWorkload.draw(seed, min_selected=args.min_selected,
                                min_tokens=args.min_tokens)
        r, m = run_workload(rtl, w), run_workload(ModelDevice(), w)
        err = (m["cycles"] - r["cycles"]) / r["cycles"] * 100
        errors.append(err)
        print(f"seed {seed}: hd {w.head_dim}, {w.q_heads} q heads, {w.requests} requests x "
              f"{w.selected} of {w.clusters} clusters (1..{w.max_tokens} tokens), "
              f"{w.traffic_bytes >> 10} KiB traffic, {r['descriptors']} descriptors: rtl "
              f"{r['cycles']:,}, model {m['cycles']:,} cycles ({err:+.2f} %)")
    e = np.abs(np.array(errors))
    print(f"{len(e)} workloads in {time.perf_counter() - t0:.0f} s: |error| median "
          f"{np.median(e):.2f} %, 90th percentile {np.percentile(e, 90):.2f} %, worst "
          f"{e.max():.2f} %; within 5 %: {(e <= 5).sum()} of {len(e)}")


if __name__ == "__main__":
    main()
