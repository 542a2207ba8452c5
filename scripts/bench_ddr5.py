"""DDR5 memory-subsystem benchmark: the issue's patterns on one sub-channel on the cycle model (the
Python model, and the compiled one that the model device and scripts/ddr5_energy.py use), with
Ramulator 2's figures beside them, the device-level 8 KB cluster-read goal, and trace replay.

    .venv/bin/python scripts/bench_ddr5.py [--requests N] [--rtl]
    .venv/bin/python scripts/bench_ddr5.py --trace FILE [--device] [--command-trace OUT]
    .venv/bin/python scripts/bench_ddr5.py --ramulator-page [--requests N]

With --rtl every pattern also runs on the Verilated controllers (with their timing checkers) and
the table shows the RTL figure and how far the model's cycle count is from it; the device part
then also measures the 8-sub-channel RTL's simulation speed on one thread and on one per core.
With --ramulator-page it runs only the patterns Ramulator 2 was measured on, on the cycle model
with Ramulator's own map (mop4clxor) and with the cacheline map the earlier comparison used, and
writes docs/results/ddr5_ramulator.md. With --trace, --command-trace OUT writes the replay's DDR5
commands in DRAMPower's CSV and the part's memspec beside them (hw/model/drampower.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from nelssa.hw.model import ddr5_replay, drampower
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_device import read_loadstore_trace, run_device
from nelssa.hw.model.ddr5_patterns import RAMULATOR, benchmark_patterns, random_blocks
from nelssa.hw.model.ddr5_power import power_spec
from nelssa.hw.model.ddr5_subchannel import ControllerConfig, SubchannelModel, requests_from_lines
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON, DDR5_6400AN_RAMULATOR2, PRESETS
from nelssa.provenance import commit_label

RAMULATOR_LATENCY_NS = {"row hit": 17.2, "closed bank": 31.6, "row conflict": 45.6}
RAMULATOR_PAGE = Path(__file__).resolve().parent.parent / "docs" / "results" / "ddr5_ramulator.md"


def ramulator_page(args: argparse.Namespace) -> None:
    """Our cycle model on Ramulator 2's map and on the cacheline map, beside Ramulator's figures;
    writes RAMULATOR_PAGE."""
    maps = ("mop4clxor", "cacheline")
    rows = []
    for key in ("ddr5-6400an", "ddr5-6400"):
        timing = PRESETS[key]
        geo = DeviceGeometry(timing, subchannels=1)
        for name, ref in RAMULATOR.items():
            ref = ref.get(key) if isinstance(ref, dict) else (ref if key == "ddr5-6400an"
                                                              else None)
            if ref is None:
                continue
            pattern = benchmark_patterns(args.requests, geo, np.random.default_rng(0))[name]
            ours = {m: run_device(pattern, None, geo, m).bandwidth_fraction(timing, 1) * 100
                    for m in maps}
            rows.append((name, timing.name, ref, ours["mop4clxor"], ours["cacheline"]))
            print(f"{timing.name:28} {name:12} Ramulator {ref:5.1f}  ours mop4clxor "
                  f"{ours['mop4clxor']:5.1f}  cacheline {ours['cacheline']:5.1f}")
    lat = unloaded(PRESETS["ddr5-6400an"])
    command = "python scripts/bench_ddr5.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        "# DDR5: our cycle model against Ramulator 2, on the same address map",
        "",
        # the commit, so stale_pages.py dates the figures by the code, not by the page's edit
        f"Written by `{command}` at {commit_label()}.",
        "",
        "One sub-channel, FR-FCFS, open page, refresh on, "
        f"{args.requests} reads per pattern (% of 25.6 GB/s).",
        "The Ramulator 2 column is the earlier measurement (Ramulator 2.1, DDR5_6400AN, MOP4CLXOR",
        "map, 1M reads; random lines also with nRRD_S=8, nFAW=32), carried in",
        "`scripts/bench_ddr5.py`: Ramulator 2 was not rerun, since it cannot be built on this",
        "machine (its source and the libraries its build fetches are out of reach). Our side",
        "used the cacheline map before, so the two ran on different maps; it now also runs on",
        "`mop4clxor` (`hw/model/ddr5_addr.py`, Ramulator's MOP4CLXOR bit for bit, tested on",
        "literal addresses in `tests/test_ddr5_addr.py`), which makes the comparison like for",
        "like. `moved` is mop4clxor minus cacheline, in points.",
        "",
        "| pattern | preset | Ramulator 2 (MOP4CLXOR, earlier) | ours, mop4clxor | ours, "
        "cacheline (before) | moved | ours minus Ramulator |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        *(f"| {n} | {p} | {r:.1f} % | {m:.1f} % | {c:.1f} % | {m - c:+.1f} | {m - r:+.1f} |"
          for n, p, r, m, c in rows),
        "",
        "Why our controller reads more on the 4 KB blocks (it hits open rows more often than "
        "Ramulator's): docs/results/ddr5_energy.md, its row-guard experiment.",
        "",
        "Unloaded read latency (DDR5_6400AN; independent of the map): "
        + ", ".join(f"{k} {v:.2f} ns (Ramulator 2: {RAMULATOR_LATENCY_NS[k]} ns)"
                    for k, v in lat.items()) + ".",
        "",
    ])
    RAMULATOR_PAGE.write_text(text)
    print(f"wrote {RAMULATOR_PAGE}")


def unloaded(timing) -> dict[str, float]:
    out = {}
    for name, (bg2, row2) in {"row hit": (0, 5), "closed bank": (1, 5),
                              "row conflict": (0, 6)}.items():
        reqs = requests_from_lines(np.array([0, bg2]), np.array([0, 0]), np.array([5, row2]),
                                   np.array([0, 1]), arrival=np.array([0, 1000]))
        model = SubchannelModel(timing, ControllerConfig(close_idle=10**9), refresh=False)
        out[name] = model.run(reqs).latencies_tck[1] * timing.tck_ps / 1000
    return out


def rtl_device(tmg, addrs: np.ndarray, model_cycles: int, args: argparse.Namespace) -> None:
    """The 8-sub-channel RTL on the same reads (its cycles against the model's), then its
    simulation speed on a longer run of the same kind, alternating the thread counts so that
    the machine's noise falls on all of them alike."""
    from nelssa.hw.sim.ddr5 import RtlMemory

    key = next(k for k, v in PRESETS.items() if v is tmg)
    counts = sorted({1, min(8, os.cpu_count() or 1)})
    mems = {t: RtlMemory(key, subchannels=8, threads=t) for t in counts}
    r = mems[counts[-1]].run(addrs)
    if r.violations:
        raise SystemExit(f"device: {r.violations} timing violations in the RTL")
    print(f"  RTL: {r.bandwidth_fraction(tmg, 8) * 100:.1f} % "
          f"(model-RTL {(model_cycles - r.cycles) / r.cycles * 100:+.2f} %)")
    geo = DeviceGeometry(tmg)
    long = random_blocks(args.speed_lines, 8192, geo, np.random.default_rng(1))
    rates: dict[int, list[float]] = {t: [] for t in counts}
    for _ in range(args.repeat):
        for t in counts:
            r = mems[t].run(long)
            if r.violations:
                raise SystemExit(f"device: {r.violations} timing violations in the RTL")
            rates[t].append(r.simulated_cycles / r.sim_seconds)
    for t in counts:
        v = sorted(rates[t])
        print(f"  RTL speed, {len(long)} lines ({r.simulated_cycles} cycles), {t} thread(s): "
              f"median {v[len(v) // 2]:,.0f} device cycles/s, {v[0]:,.0f} to {v[-1]:,.0f} over "
              f"{len(v)} runs (goal 1,000,000)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per pattern")
    parser.add_argument("--preset", choices=sorted(PRESETS), action="append")
    parser.add_argument("--trace", help="replay a Ramulator 2 LoadStoreTrace file instead")
    parser.add_argument("--device", action="store_true", help="replay on all 8 sub-channels")
    parser.add_argument("--command-trace", type=Path, metavar="OUT",
                        help="with --trace: write the DDR5 commands (DRAMPower CSV) and memspec")
    parser.add_argument("--map", default="cacheline",
                        help="address map (cacheline, row, mop4, mop4clxor)")
    parser.add_argument("--ramulator-page", action="store_true",
                        help="compare with Ramulator 2 on its map and write "
                             "docs/results/ddr5_ramulator.md")
    parser.add_argument("--rtl", action="store_true", help="also run the RTL controllers")
    parser.add_argument("--speed-lines", type=int, default=400_000,
                        help="lines of the RTL simulation-speed run (8 KB cluster reads)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of the RTL speed run")
    args = parser.parse_args()
    if args.command_trace is not None:
        if not args.trace:
            parser.error("--command-trace needs --trace")
        try:
            drampower.check_writable(args.command_trace)
        except ValueError as e:
            parser.error(str(e))
    rng = np.random.default_rng(0)
    if args.ramulator_page:
        ramulator_page(args)
        return

    if args.trace:
        timing = PRESETS[(args.preset or ["ddr5-6400an"])[0]]
        geo = DeviceGeometry(timing, subchannels=8 if args.device else 1)
        try:
            addrs, writes = read_loadstore_trace(args.trace)
        except ValueError as e:  # a missing or malformed file (InputFileError, TraceFormatError)
            parser.error(f"--trace: {e}")
        t0 = time.perf_counter()
        run = run_device(addrs % geo.capacity_bytes, writes, geo, args.map)
        wall = time.perf_counter() - t0
        print(f"{args.trace}: {len(addrs)} requests on {geo.subchannels} sub-channel(s), "
              f"{timing.name}: {run.bandwidth_fraction(timing, geo.subchannels) * 100:.1f} % of "
              f"peak, {run.cycles} controller cycles, {run.cycles / wall:,.0f} cycles/s")
        t0 = time.perf_counter()
        runs = ddr5_replay.replay_device_runs(addrs % geo.capacity_bytes, writes, geo, args.map,
                                              log=args.command_trace is not None)
        wall = time.perf_counter() - t0
        cycles = max(r.cycles for r in runs)
        print(f"  compiled model: {cycles} cycles ({(cycles - run.cycles) / run.cycles * 100:+.2f}"
              f" %), {cycles / wall:,.0f} cycles/s")
        if args.command_trace:
            key = (args.preset or ["ddr5-6400an"])[0]
            wrote = drampower.write_run(args.command_trace, power_spec(key), timing, [
                (r.log.tolist(), sum(r.residency.values()) * 4) for r in runs])
            print("  wrote " + ", ".join(map(str, wrote)))
        return

    for key in args.preset or ["ddr5-6400an", "ddr5-6400"]:
        timing = PRESETS[key]
        geo = DeviceGeometry(timing, subchannels=1)
        print(f"\n{timing.name}, one sub-channel, {args.requests} reads per pattern "
              f"(% of {timing.peak_bytes_per_s / 1e9:.1f} GB/s; refresh ceiling "
              f"{timing.refresh_efficiency * 100:.1f} %)")
        rtl = None
        if args.rtl:
            from nelssa.hw.sim.ddr5 import RtlMemory

            rtl = RtlMemory(key, subchannels=1)
        extra = f" {'RTL':>7} {'model-RTL':>10} {'RTL cyc/s':>10}" if rtl else ""
        print(f"  {'pattern':<16} {'ours':>7} {'Ramulator 2':>12} {'cycles/s':>10} "
              f"{'compiled':>9} {'comp-model':>10} {'comp cyc/s':>12}{extra}")
        for name, addrs in benchmark_patterns(args.requests, geo, rng).items():
            t0 = time.perf_counter()
            run = run_device(addrs, None, geo, args.map)
            wall = time.perf_counter() - t0
            t0 = time.perf_counter()
            est = max(ddr5_replay.replay_device(addrs, None, geo, args.map))
            est_wall = time.perf_counter() - t0
            ref = RAMULATOR.get(name)
            ref = ref.get(key) if isinstance(ref, dict) else ref
            ref_s = f"{ref:.1f}" if ref is not None else "-"
            line = (f"  {name:<16} {run.bandwidth_fraction(timing, 1) * 100:>6.1f}% "
                    f"{ref_s:>12} {run.cycles / wall:>10,.0f} "
                    f"{len(addrs) * timing.burst_cycles / (est * 4) * 100:>8.1f}% "
                    f"{(est - run.cycles) / run.cycles * 100:>+9.2f}% "
                    f"{est / est_wall:>12,.0f}")
            if rtl:
                r = rtl.run(addrs, None, args.map)
                if r.violations:
                    raise SystemExit(f"{name}: {r.violations} timing violations in the RTL")
                line += (f" {r.bandwidth_fraction(timing, 1) * 100:>6.1f}% "
                         f"{(run.cycles - r.cycles) / r.cycles * 100:>+9.2f}% "
                         f"{r.simulated_cycles / r.sim_seconds:>10,.0f}")
            print(line)
        for name, ns in unloaded(timing).items():
            print(f"  unloaded {name:<13} {ns:>5.2f} ns (Ramulator 2: "
                  f"{RAMULATOR_LATENCY_NS[name]} ns)")

    timing = DDR5_6400_MICRON
    geo = DeviceGeometry(timing)
    n = args.requests * 4
    per = 8192 // 64
    base = rng.integers(0, geo.capacity_bytes // 8192, n // per) * 8192
    addrs = (base[:, None] + np.arange(per)[None, :] * 64).ravel()
    for tmg in (DDR5_6400_MICRON, DDR5_6400AN_RAMULATOR2):
        geo = DeviceGeometry(tmg)
        t0 = time.perf_counter()
        run = run_device(addrs, None, geo, "cacheline")
        wall = time.perf_counter() - t0
        frac = run.bandwidth_fraction(tmg, 8)
        print(f"\ndevice, 8 sub-channels, {tmg.name}, random 8 KB cluster reads ({len(addrs)} "
              f"lines): {frac * 100:.1f} % of {8 * tmg.peak_bytes_per_s / 1e9:.1f} GB/s "
              f"(goal 89 %); cycle model {run.cycles / wall:,.0f} device cycles/s")
        t0 = time.perf_counter()
        est = max(ddr5_replay.replay_device(addrs, None, geo))
        est_wall = time.perf_counter() - t0
        print(f"  compiled model: {est} cycles "
              f"(compiled-model {(est - run.cycles) / run.cycles * 100:+.2f} %), "
              f"{est / est_wall:,.0f} device cycles/s")
        if args.rtl:
            rtl_device(tmg, addrs, run.cycles, args)

if __name__ == "__main__":
    main()
