"""`nelssa serve-sim`: replay a request trace through the GPU-only baseline and/or NELSSA in
emulated time; JSON results and PNG plots (throughput and queue over time, TPOT percentiles)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def cmd_serve_sim(args: argparse.Namespace) -> int:
    from nelssa.emu.latency.hardware import HardwareCatalog
    from nelssa.emu.latency.model import LatencyModel, Sparsity
    from nelssa.emu.serving.metrics import series, summarize
    from nelssa.emu.serving.sim import SchedulerKind, ServingConfig, ServingSim
    from nelssa.emu.serving.vllm_env import VllmEnvError, vllm_python
    from nelssa.emu.serving.workload import inject_burst, load_trace, poisson
    from nelssa.progress import Progress

    scheduler = SchedulerKind(args.scheduler)
    caching = args.prefix_caching == "on"
    if args.burst:
        at, count, inp, outp = args.burst
        if not (math.isfinite(at) and at >= 0) or any(
                not (v >= 1 and float(v).is_integer()) for v in (count, inp, outp)):
            print(f"error: --burst: AT_S must be a finite time >= 0 and COUNT, INPUT, OUTPUT "
                  f"integers >= 1, got {' '.join(f'{v:g}' for v in args.burst)}",
                  file=sys.stderr)
            return 2
    if scheduler is SchedulerKind.VLLM:
        try:
            vllm_python()
        except VllmEnvError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    cat = HardwareCatalog.load(*args.hardware)
    lm = LatencyModel(cat.get("gpus", args.gpu), cat.get("pnm", args.pnm),
                      cat.get("models", args.model), Sparsity(args.selection),
                      cat.get("links", args.link))
    reqs = load_trace(args.trace, args.limit, hash_ids=caching)
    if args.rate:
        reqs = poisson(reqs, args.rate, args.seed)
    if args.burst:
        at, count, inp, outp = args.burst
        reqs = inject_burst(reqs, at, int(count), int(inp), int(outp))
    modes = ["gpu", "nelssa"] if args.mode == "both" else [args.mode]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"serve-sim: {len(reqs)} requests from {args.trace}"
          f"{f' at {args.rate:g}/s (Poisson)' if args.rate else ' by timestamp'}; "
          f"{args.model} on {args.gpu}; PNM: {args.devices} x {args.pnm}; {scheduler.value} "
          f"scheduler, prefix caching {args.prefix_caching}")
    results = {}
    runs = {}
    for mode in modes:
        cfg = ServingConfig(mode=mode, devices=args.devices, t_input=args.t_input,
                            preemption=args.preemption, max_running=args.max_running,
                            prefill=args.prefill, prefill_gpus=args.prefill_gpus,
                            migration=args.migration and mode == "nelssa",
                            migrate_at=args.migrate_at, prefix_caching=caching,
                            scheduler=scheduler)
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
        bar.close()
        wall = time.perf_counter() - t0
        s = summarize(run)
        s["wall_s"] = wall
        results[mode] = {"summary": s, "series": series(run)}
        runs[mode] = run
        ms = 1e3
        print(f"  {mode:>6}: {s['requests']} requests ({s['pnm_requests']} on the PNM tier, "
              f"T_input {s['t_input']}) in {s['duration_s']:.0f} s emulated, {wall:.1f} s wall; "
              f"decode {s['decode_throughput_tps']:,.0f} tokens/s; TPOT p50/p95/p99 "
              f"{s['tpot_s']['p50'] * ms:.1f}/{s['tpot_s']['p95'] * ms:.1f}/"
              f"{s['tpot_s']['p99'] * ms:.1f} ms; TTFT p50/p99 {s['ttft_s']['p50']:.2f}/"
              f"{s['ttft_s']['p99']:.2f} s; preemptions {s['preemptions']} (recomputing "
              f"{s['recompute_tokens']:,} tokens); migrations {s['migrations']} "
              f"({s['migrated_tokens']:,} tokens); mean batch {s['mean_running']:.1f}")
    if len(modes) == 2:
        g, n = results["gpu"]["summary"], results["nelssa"]["summary"]
        ratio = n["decode_throughput_tps"] / g["decode_throughput_tps"]
        p95 = g["tpot_s"]["p95"] / n["tpot_s"]["p95"]
        p99 = g["tpot_s"]["p99"] / n["tpot_s"]["p99"]
        print(f"  NELSSA / GPU-only: throughput x{ratio:.2f}; TPOT P95 x{p95:.2f}, P99 x{p99:.2f} "
              "(above 1: NELSSA better)")
    if args.sweeps:
        from dataclasses import replace

        from nelssa.emu.serving import sweeps

        base = ServingConfig(devices=args.devices, preemption=args.preemption,
                             max_running=args.max_running, prefill=args.prefill,
                             prefill_gpus=args.prefill_gpus, prefix_caching=caching,
                             scheduler=scheduler)
        gpus = {g: replace(lm, gpu=cat.get("gpus", g)) for g in dict.fromkeys(
            [args.gpu, "2x-h100-nvl"])}
        cb = sweeps.context_batch(gpus, base)
        sweeps.plot_context_batch(cb, out / "fig10_context_batch.png")
        threshold = args.t_input or 32768
        lf = sweeps.long_fraction(lm, load_trace(args.trace, hash_ids=caching), base,
                                  args.rate or 4.0,
                                  min(1000, len(reqs)), threshold, args.seed)
        sweeps.plot_long_fraction(lf, out / "fig16_long_fraction.png")
        results["sweeps"] = {"context_batch": {k: {str(c): {str(b): t for b, t in r.items()}
                                                   for c, r in v.items()}
                                               for k, v in cb.items()},
                             "long_fraction": {str(k): v for k, v in lf.items()}}
        for frac, v in lf.items():
            print(f"  long share {frac:>4.0%}: throughput x{v['nelssa_tps'] / v['gpu_tps']:.2f}, "
                  f"P99 TPOT {v['gpu_tpot_p99'] * 1e3:.0f} -> {v['nelssa_tpot_p99'] * 1e3:.0f} ms")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    _plots({k: v for k, v in results.items() if k != "sweeps"}, out)
    print(f"wrote {out / 'results.json'}, {out / 'throughput_queue.png'}, {out / 'tpot.png'}"
          + (", fig10_context_batch.png, fig16_long_fraction.png" if args.sweeps else ""))
    return 0


def _plots(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    import numpy as np

    for mode, r in results.items():
        s = r["series"]
        tput = np.asarray(s["throughput_tps"])
        k = min(30, max(1, len(tput) // 20))  # a moving average over k samples
        smooth = np.convolve(tput, np.ones(k) / k, mode="same") if len(tput) else tput
        a.plot(s["t_s"], smooth, lw=0.9, label=f"{mode} ({k}-sample mean)")
        b.plot(s["t_s"], s["waiting"], lw=0.8, label=mode)
    a.set_ylabel("decode tokens/s")
    b.set_ylabel("pending requests")
    b.set_xlabel("emulated time (s)")
    a.legend()
    fig.tight_layout()
    fig.savefig(out / "throughput_queue.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = ["p50", "p95", "p99"]
    width = 0.8 / max(len(results), 1)
    for i, (mode, r) in enumerate(results.items()):
        vals = [r["summary"]["tpot_s"][k] * 1e3 for k in keys]
        ax.bar([j + i * width for j in range(3)], vals, width, label=mode)
    ax.set_xticks([j + width * (len(results) - 1) / 2 for j in range(3)], keys)
    ax.set_ylabel("TPOT (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tpot.png", dpi=110)
    plt.close(fig)


def add_serving_parser(sub: argparse._SubParsersAction) -> None:
    from nelssa.emu.serving.config import SchedulerKind

    p = sub.add_parser("serve-sim", help="trace-driven serving emulator: GPU-only vs NELSSA")
    p.add_argument("--trace", required=True, help="Mooncake-format JSONL trace")
    p.add_argument("--mode", choices=("gpu", "nelssa", "both"), default="both")
    p.add_argument("--gpu", default="h100-nvl")
    p.add_argument("--pnm", default="prototype")
    p.add_argument("--scheduler", choices=[k.value for k in SchedulerKind], default="ours",
                   help="ours: this emulator's scheduler, which follows vLLM v1's (fast); vllm: "
                   "vLLM's own v1 scheduler, unmodified, in its environment (make vllm)")
    p.add_argument("--prefix-caching", choices=("on", "off"), default="on",
                   help="automatic prefix caching over the trace's hash_ids (vLLM's default: "
                   "on; a trace without hash_ids needs off)")
    p.add_argument("--devices", type=_positive_int, default=4)
    p.add_argument("--model", default="llama-3-8b")
    p.add_argument("--link", default="roce-400g")
    p.add_argument("--hardware", action="append", default=[], help="extra hardware JSON")
    p.add_argument("--selection", type=_positive_float, default=0.04)
    p.add_argument("--t-input", type=_positive_int,
                   help="routing threshold in tokens (default: the crossover)")
    p.add_argument("--rate", type=_positive_float,
                   help="resample arrivals as Poisson at this rate (/s)")
    p.add_argument("--limit", type=_positive_int, help="only the first N requests")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute")
    p.add_argument("--max-running", type=_positive_int, default=256)
    p.add_argument("--prefill", choices=("colocated", "disaggregated"), default="colocated",
                   help="prefill on the decode GPU, or on separate prefill GPUs (the paper's)")
    p.add_argument("--prefill-gpus", type=_positive_int, default=1,
                   help="prefill GPUs when disaggregated")
    p.add_argument("--burst", nargs=4, type=float, metavar=("AT_S", "COUNT", "INPUT", "OUTPUT"),
                   help="inject COUNT long requests of INPUT/OUTPUT tokens at AT_S seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--migration", action="store_true",
                   help="NELSSA: migrate grown requests to the PNM tier under memory pressure")
    p.add_argument("--migrate-at", type=_positive_float, default=0.95,
                   help="share of GPU KV in use from which migration starts")
    p.add_argument("--sweeps", action="store_true",
                   help="also the Figure-10 (context x batch) and Figure-16 (long share) sweeps")
    p.add_argument("--out", default="serve-sim", help="folder for results.json and plots")
    p.set_defaults(func=cmd_serve_sim)
