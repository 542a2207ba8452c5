"""`nelssa serve-sim`: replay a request trace through the GPU-only baseline and/or NELSSA in
emulated time; JSON results and PNG plots (throughput and queue over time, TPOT percentiles)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from nelssa.config_args import add_config_options, config_values
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.report import comparison_line, plot_runs, ratio, run_line, write_results
from nelssa.emu.serving.workload import RATE
from nelssa.hardware_options import add_hardware_args, load_hardware
from nelssa.options import (
    POSITIVE_INT,
    SEED,
    BurstAction,
    UsageError,
    input_file,
    number,
    output_dir,
)

SERVING_OPTIONS = ("devices", "t_input", "max_running", "prefill_gpus", "migrate_at", "adaptive",
                   "tpot_budget", "shed_late")
"""ServingConfig fields `serve-sim` takes as options (name, default and help from the field)."""
SPARSITY_OPTIONS = ("selection",)


def cmd_serve_sim(args: argparse.Namespace) -> int:
    from nelssa.emu.latency.model import LatencyModel
    from nelssa.emu.policy.vllm_scheduler import VllmEnvError, vllm_python
    from nelssa.emu.serving.metrics import series, summarize
    from nelssa.emu.serving.sim import SchedulerKind, ServingSim
    from nelssa.emu.serving.workload import TraceError, inject_burst, load_trace, poisson
    from nelssa.progress import Progress

    scheduler = SchedulerKind(args.scheduler)
    caching = args.prefix_caching == "on"
    if scheduler is SchedulerKind.VLLM:
        try:
            vllm_python()
        except VllmEnvError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    if args.fleet:
        if args.sweeps:
            raise UsageError("--fleet: --sweeps describe one instance; run them without --fleet")
        args.hardware = [*args.hardware, args.fleet]
    hw = load_hardware(args)
    cat = hw["catalog"]
    if args.fleet and cat.fleet is None:
        raise UsageError(f"--fleet {args.fleet}: the file has no 'fleet' section "
                         "(docs/serving.md, 'A fleet')")
    if args.fleet and args.adaptive and cat.fleet.orchestrator != "static":
        raise UsageError(f"--adaptive: the fleet's orchestrator ({cat.fleet.orchestrator}, "
                         f"{args.fleet}) moves each instance's T_input; drop --adaptive")
    lm = LatencyModel(hw["gpus"], hw["pnm"], hw["models"],
                      Sparsity(**config_values(args, Sparsity, SPARSITY_OPTIONS)), hw["links"])
    try:
        reqs = load_trace(args.trace, args.limit, hash_ids=caching)
    except TraceError as e:
        raise UsageError(str(e)) from None
    if args.rate:
        try:
            reqs = poisson(reqs, args.rate, args.seed)
        except ValueError as e:
            raise UsageError(f"--rate {args.rate:g}: {e}") from None
    if args.burst:
        reqs = inject_burst(reqs, *args.burst)
    modes = ["gpu", "nelssa"] if args.mode == "both" else [args.mode]
    out = Path(args.out)  # made when there is something to write in it
    print(f"serve-sim: {len(reqs)} requests from {args.trace}"
          f"{f' at {args.rate:g}/s (Poisson)' if args.rate else ' by timestamp'}; "
          f"{lm.model.name} on {lm.gpu.name}; PNM: {args.devices} x {lm.pnm.name}; "
          f"{scheduler.value} scheduler, prefix caching {args.prefix_caching}")
    print(f"  PNM bandwidth {lm.pnm.bw_eff_gbs:g} GB/s per device"
          + (f": {lm.pnm.bw_source}" if lm.pnm.bw_source else " (stated in the description)"))
    results = {}
    runs = {}
    for mode in modes:
        cfg = ServingConfig(mode=mode, preemption=args.preemption, prefill=args.prefill,
                            migration=args.migration and mode == "nelssa",
                            prefix_caching=caching, scheduler=scheduler,
                            **config_values(args, ServingConfig, SERVING_OPTIONS))
        if args.fleet:
            results[mode] = run_fleet(cat, lm, cfg, reqs, args.trace, out)
            continue
        sim = ServingSim(lm, cfg)
        bar = Progress(1000, f"{mode:>6}")
        t0 = time.perf_counter()
        try:
            run = sim.run(reqs, progress=lambda f, bar=bar: bar.advance(int(f * 1000)
                                                                         - bar.done))
        except VllmEnvError as e:
            bar.close()
            print(f"error: {e}", file=sys.stderr)
            return 2
        except ValueError as e:  # a request no tier can hold: named by the trace's file:line
            bar.close()
            raise UsageError(re.sub(r"^trace line (\d+)", lambda m: f"{args.trace}:{m[1]}",
                                    str(e))) from None
        bar.close()
        wall = time.perf_counter() - t0
        s = summarize(run)
        s["wall_s"] = wall
        results[mode] = {"summary": s, "series": series(run)}
        runs[mode] = run
        print(f"  {mode:>6}: {run_line(s, wall)}")
    if len(modes) == 2:
        g, n = results["gpu"]["summary"], results["nelssa"]["summary"]
        print(f"  NELSSA / GPU-only: {comparison_line(g, n)}")
    if args.sweeps:
        from dataclasses import replace

        from nelssa.emu.serving import sweeps

        base = ServingConfig(devices=args.devices, preemption=args.preemption,
                             max_running=args.max_running, prefill=args.prefill,
                             prefill_gpus=args.prefill_gpus, prefix_caching=caching,
                             scheduler=scheduler)
        gpus = {g: replace(lm, gpu=cat.get("gpus", g)) for g in dict.fromkeys(
            [lm.gpu.name, "2x-h100-nvl"])}
        cb = sweeps.context_batch(gpus, base)
        threshold = args.t_input or 32768
        try:
            lf = sweeps.long_fraction(lm, load_trace(args.trace, hash_ids=caching), base,
                                      args.rate or 4.0,
                                      min(1000, len(reqs)), threshold, args.seed)
        except ValueError as e:
            raise UsageError(f"--sweeps: {e}") from None
        out.mkdir(parents=True, exist_ok=True)
        sweeps.plot_context_batch(cb, out / "fig10_context_batch.png")
        sweeps.plot_long_fraction(lf, out / "fig16_long_fraction.png")
        results["sweeps"] = {"context_batch": {k: {str(c): {str(b): t for b, t in r.items()}
                                                   for c, r in v.items()}
                                               for k, v in cb.items()},
                             "long_fraction": {str(k): v for k, v in lf.items()}}
        for frac, v in lf.items():
            print(f"  long share {frac:>4.0%}: throughput {ratio(v['nelssa_tps'], v['gpu_tps'])}, "
                  f"P99 TPOT {v['gpu_tpot_p99'] * 1e3:.0f} -> {v['nelssa_tpot_p99'] * 1e3:.0f} ms")
    out.mkdir(parents=True, exist_ok=True)
    write_results(results, out)
    if args.fleet:
        print(f"wrote {out / 'results.json'}, "
              + ", ".join(str(out / f"fleet_{m}.png") for m in modes))
        return 0
    plot_runs({k: v for k, v in results.items() if k != "sweeps"}, out)
    print(f"wrote {out / 'results.json'}, {out / 'throughput_queue.png'}, {out / 'tpot.png'}"
          + (", fig10_context_batch.png, fig16_long_fraction.png" if args.sweeps else ""))
    return 0


def run_fleet(cat: Any, lm: Any, cfg: ServingConfig, reqs: list, trace: str,
              out: Path) -> dict[str, Any]:
    """One mode of ``serve-sim --fleet``: the fleet run, its lines printed, its plot written;
    the JSON of its results."""
    from nelssa.emu.policy.vllm_scheduler import VllmEnvError
    from nelssa.emu.serving.fleet import FleetSim, fleet_json, plot_fleet
    from nelssa.emu.serving.fleet_vllm import run_fleet as run_with
    from nelssa.emu.serving.metrics import series, summarize
    from nelssa.progress import Progress

    fleet = FleetSim(cat.fleet, cat, lm, cfg)
    bar = Progress(1000, f"{cfg.mode:>6}")
    try:
        res = run_with(fleet, reqs, progress=lambda f: bar.advance(int(f * 1000) - bar.done))
    except VllmEnvError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # a request no instance can hold: named by the trace's file:line
        raise UsageError(re.sub(r"^trace line (\d+)", lambda m: f"{trace}:{m[1]}",
                                str(e))) from None
    finally:
        bar.close()
    doc = fleet_json(res, summarize, series)
    doc["summary"] = doc["fleet"]
    doc["series"] = series(res.merged())
    print(f"  {cfg.mode:>6} fleet ({len(res.instances)} instances, {len(res.nodes)} PNM nodes, "
          f"dispatch {res.dispatch}, orchestrator {res.orchestrator}): "
          f"{run_line(doc['fleet'], res.wall_s)}")
    for name, d in doc["instances"].items():
        s = d["summary"]
        print(f"    {name}: {s['requests']} requests ({s['pnm_requests']} PNM), decode "
              f"{s['decode_throughput_tps']:,.0f} tokens/s, mean batch {s['mean_running']:.1f}, "
              f"max waiting {s['max_waiting']}, preemptions {s['preemptions']}")
    for n in res.nodes:
        print(f"    node {n.name}: {n.devices} devices, {n.placed} requests placed, peak "
              f"{n.peak_used_tokens / n.tokens:.1%} of {n.tokens:,} tokens, mean device load "
              f"{n.mean_device_load:.2f}")
    if res.switch_peak_load is not None:
        print(f"    switch {cat.fleet.fabric.switch_gbs:g} GB/s: peak offered load "
              f"{res.switch_peak_load:.2f} of its bandwidth (above 1, transfers stretched by "
              "it)")
    out.mkdir(parents=True, exist_ok=True)
    plot_fleet(res, out / f"fleet_{cfg.mode}.png")
    return doc


def add_serving_parser(sub: argparse._SubParsersAction) -> None:
    from nelssa.emu.serving.config import SchedulerKind

    p = sub.add_parser("serve-sim", help="trace-driven serving emulator: GPU-only vs NELSSA")
    p.add_argument("--trace", required=True, type=input_file,
                   help="Mooncake-format JSONL trace")
    p.add_argument("--mode", choices=("gpu", "nelssa", "both"), default="both")
    add_hardware_args(p)
    p.add_argument("--scheduler", choices=[k.value for k in SchedulerKind], default="ours",
                   help="ours: this emulator's scheduler, which follows vLLM v1's (fast); vllm: "
                   "vLLM's own v1 scheduler, unmodified, in its environment (make vllm)")
    p.add_argument("--prefix-caching", choices=("on", "off"), default="on",
                   help="automatic prefix caching over the trace's hash_ids (vLLM's default: "
                   "on; a trace without hash_ids needs off)")
    add_config_options(p, ServingConfig, SERVING_OPTIONS)
    add_config_options(p, Sparsity, SPARSITY_OPTIONS)
    p.add_argument("--rate", type=number(RATE),
                   help="resample arrivals as Poisson at this rate (/s)")
    p.add_argument("--limit", type=POSITIVE_INT, help="only the first N requests")
    p.add_argument("--preemption", choices=("recompute", "swap"),
                   default=ServingConfig.preemption)
    p.add_argument("--prefill", choices=("colocated", "disaggregated"),
                   default=ServingConfig.prefill,
                   help="prefill on the decode GPU, or on separate prefill GPUs (the paper's)")
    p.add_argument("--burst", action=BurstAction,
                   help="inject COUNT long requests of INPUT/OUTPUT tokens at AT_S seconds")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--migration", action="store_true",
                   help="NELSSA: migrate grown requests to the PNM tier under memory pressure")
    p.add_argument("--sweeps", action="store_true",
                   help="also the Figure-10 (context x batch) and Figure-16 (long share) sweeps")
    p.add_argument("--fleet", type=input_file, metavar="FILE",
                   help="a hardware description with a 'fleet' section: decode instances, "
                   "prefill pool, PNM nodes, fabric and dispatcher (docs/serving.md); the "
                   "trace is dispatched over the fleet")
    p.add_argument("--out", type=output_dir, default="serve-sim",
                   help="folder for results.json and plots")
    p.set_defaults(func=cmd_serve_sim)
