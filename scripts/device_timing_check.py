"""The model device's timing against the RTL's on random workloads (issue 23 item 3): batches
of random head_dim, GQA group, cluster lengths and selections, cut over the units, with
Memory API traffic alongside in some (hw/model/timing_workloads.py); prints each workload's
cycles on both and the error, then the distribution; ``--write`` puts the table in
docs/results/device_timing.md.

The model runs each batch from the cycle the RTL's submission ended at, so that both meet
DDR5 refresh at the same points (it is due at fixed cycles from reset); the column "phase
not aligned" runs the model from its own cycle instead, which shows what a refresh met or
missed is worth to a short batch. ``--phases N`` also runs every workload from N points
spread over the refresh period (on both, aligned), which shows how the error depends on where
the windows fall rather than on the one phase each workload meets in the run above.

    .venv/bin/python scripts/device_timing_check.py [--workloads 20] [--first-seed 100]
        [--phases 4] [--write]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_timing import CALIBRATION_FILE, Refresh, UnitTiming
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload, start_at_phase

PAGE = Path(__file__).resolve().parents[1] / "docs" / "results" / "device_timing.md"

TIMER_SOURCES = {
    "cycle": "the cycle model of the device's memory side (`hw/model/device_cycle.py`)",
    "fluid": "the fluid schedule (`hw/model/device_timing.py`)",
}
"""How the page names each timer of hw/model/device_timers.TIMERS."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--min-selected", type=int, default=32,
                        help="fewest clusters a request selects")
    parser.add_argument("--min-tokens", type=int, default=16,
                        help="smallest largest-cluster length drawn")
    parser.add_argument("--phases", type=int, default=0,
                        help="also run each workload from this many points of the refresh "
                             "period (0: not)")
    parser.add_argument("--timer", choices=sorted(TIMER_SOURCES), default=DeviceConfig().timer,
                        help="the model device's timer (hw/model/device_timers.py)")
    parser.add_argument("--write", action="store_true", help=f"write {PAGE.name}")
    args = parser.parse_args()
    config = DeviceConfig(timer=args.timer)
    if args.workloads < 1 or args.min_selected < 1 or args.min_tokens < 1 or args.phases < 0:
        print("device_timing_check: --workloads, --min-selected and --min-tokens must be "
              "positive, --phases not negative", file=sys.stderr)
        sys.exit(2)
    from nelssa.hw.sim.device import RtlDevice

    rtl = RtlDevice()
    rows, errors, unaligned = [], [], []
    t0 = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.workloads):
        w = TimingWorkload.draw(seed, min_selected=args.min_selected,
                                min_tokens=args.min_tokens)
        r = run_workload(rtl, w)
        m = run_workload(ModelDevice(config), w, start_at=r["started"])
        u = run_workload(ModelDevice(config), w)
        err = (m["cycles"] - r["cycles"]) / r["cycles"] * 100
        err_u = (u["cycles"] - r["cycles"]) / r["cycles"] * 100
        errors.append(err)
        unaligned.append(err_u)
        shape = (f"hd {w.head_dim}, {w.q_heads} q heads, {w.requests} requests x {w.selected} "
                 f"of {w.clusters} clusters (1..{w.max_tokens} tokens), "
                 f"{w.traffic_bytes >> 10} KiB traffic")
        rows.append(f"| {seed} | {shape} | {r['descriptors']} | {r['cycles']:,} | "
                    f"{m['cycles']:,} | {err:+.2f} % | {err_u:+.2f} % |")
        print(f"seed {seed}: {shape}, {r['descriptors']} descriptors: rtl {r['cycles']:,}, "
              f"model {m['cycles']:,} cycles ({err:+.2f} %; phase not aligned {err_u:+.2f} %)",
              flush=True)
    eu = np.abs(np.array(unaligned))
    summary = (f"{len(errors)} workloads in {time.perf_counter() - t0:.0f} s: "
               f"{_distribution(errors)}")
    summary_u = (f"phase not aligned: median {np.median(eu):.2f} %, worst {eu.max():.2f} %; "
                 f"within 5 %: {(eu <= 5).sum()} of {len(eu)}")
    print(summary)
    print(summary_u)
    summary_p = phase_sweep(rtl, args, config) if args.phases else None
    if summary_p:
        print(summary_p)
    if args.write:
        command = "python scripts/device_timing_check.py " + " ".join(sys.argv[1:])
        timing_source = TIMER_SOURCES[args.timer]
        PAGE.write_text("\n".join([
            "# The model device's cycles against the RTL's",
            "",
            f"Written by `{command}`. The model times itself with "
            f"{timing_source}, calibrated in `hw/model/{CALIBRATION_FILE.name}` (`make "
            "calibrate-device`, fitted on other seeds). Each row: one batch of attention "
            "requests cut over the four units "
            "(`hw/model/timing_workloads.py`), busy cycles (PERF_BUSY) on the Verilated "
            "device and on the model, the model run from the cycle the RTL's submission "
            "ended at (DDR5 refresh is due at fixed cycles from reset, so both meet it at "
            "the same points). The last column runs the model from its own cycle instead: "
            "what a refresh met or missed is worth to a short batch.",
            "",
            "| seed | batch | descriptors | rtl cycles | model cycles | error | phase not "
            "aligned |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            f"{summary}.",
            "",
            f"{summary_u}.",
            "",
            *([f"{summary_p}.", ""] if summary_p else [])]))
        print(f"wrote {PAGE}")


def phase_sweep(rtl, args, config: DeviceConfig) -> str:
    """Every workload again from ``args.phases`` points spread over the refresh period (the
    model from the RTL's cycle each time); the distribution of the errors."""
    period = Refresh.of(PRESETS[DeviceConfig().preset], UnitTiming()).period
    errors = []
    for seed in range(args.first_seed, args.first_seed + args.workloads):
        w = TimingWorkload.draw(seed, min_selected=args.min_selected,
                                min_tokens=args.min_tokens)
        for i in range(args.phases):
            r = run_workload(rtl, w, start_at=start_at_phase(rtl.cycle, i / args.phases,
                                                             period))
            m = run_workload(ModelDevice(config), w, start_at=r["started"])
            errors.append((m["cycles"] - r["cycles"]) / r["cycles"] * 100)
    return (f"at {args.phases} phases of the refresh period ({period:,.0f} cycles) each, "
            f"{len(errors)} runs: {_distribution(errors)}")


def _distribution(errors: list[float]) -> str:
    """The spread of errors in per cent, as the page gives it."""
    e = np.abs(np.array(errors))
    return (f"|error| median {np.median(e):.2f} %, 90th percentile {np.percentile(e, 90):.2f} "
            f"%, worst {e.max():.2f} %; within 5 %: {(e <= 5).sum()} of {len(e)}")


if __name__ == "__main__":
    main()
