"""Regenerate the paper's comparisons with the latency model and the serving emulator and write
a markdown table: paper figure, paper value, our value (and the command's settings).

Figures: 3 (crossover against PNM count), 10 (decode throughput at 128K-1M contexts against 1x
and 2x H100 NVL), 14/15 (TPOT percentiles under mixed traffic: the Mooncake conversation trace
resampled as Poisson arrivals), 16 (throughput against the long-request fraction).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.serving import sweeps
from nelssa.emu.serving.metrics import summarize
from nelssa.emu.serving.sim import SchedulerKind, ServingConfig, ServingSim
from nelssa.emu.serving.workload import growing, load_trace, long_fraction_mix, poisson

TRACE = Path(__file__).resolve().parents[2] / "shared/traces/mooncake_conversation_trace.jsonl"
PREFILL_GPUS = 8
LINK = "roce-400g"
WHY_10 = ("the ratio follows the PNM tier's capacity (batch) and bandwidth; the paper does not "
          "state its device count and bandwidth here: this row is {devices} `{pnm}` devices "
          "({bw:g} GB/s and {cap:g} GB each); {alt}")
ALT_PNM, ALT_DEVICES = "projection-512g", 8
"""The larger PNM tier Figure 10's row is also measured on, in the same run."""
WHY_14 = ("the ratio depends steeply on load: below memory saturation both tiers decode fast; "
          "once the GPU-only run preempts long requests by recompute, its tail grows by seconds. "
          "These rows replay the whole trace at rising rates; the paper's own setting (8.3: "
          "short requests at RPS=10 with bursts of long ones, a swap-preemption baseline) is in "
          "docs/results/paper_hol.md (scripts/paper_hol.py)")


FIG10_GPUS = (("h100-nvl", "up to 5.5x"), ("2x-h100-nvl", "up to 3.6x"))


def fig10_best(sweep: dict, gpu: str) -> float:
    """The largest NELSSA over GPU-only throughput ratio, each mode at its largest batch."""
    best = 0.0
    for ctx in sweeps.CONTEXTS:
        g, n = sweep[f"gpu/{gpu}"][ctx], sweep[f"nelssa/{gpu}"][ctx]
        tg, tn = g.get(max(g, default=0), 0.0), n.get(max(n, default=0), 0.0)
        if tg:
            best = max(best, tn / tg)
    return best


def fig10(sweep: dict, pnm: str, devices: int, hw, alt: str) -> list[str]:
    """Table rows from ``sweeps.context_batch``: each mode at its largest batch."""
    why = WHY_10.format(devices=devices, pnm=pnm, bw=hw.bw_eff_gbs, cap=hw.capacity_gb,
                        alt=alt)
    rows = []
    for gpu, paper in FIG10_GPUS:
        parts, best = [], fig10_best(sweep, gpu)
        for ctx in sweeps.CONTEXTS:
            g, n = sweep[f"gpu/{gpu}"][ctx], sweep[f"nelssa/{gpu}"][ctx]
            bg, bn = max(g, default=0), max(n, default=0)
            tg, tn = g.get(bg, 0.0), n.get(bn, 0.0)
            if tg:
                parts.append(f"{ctx >> 10}K: x{tn / tg:.1f} (batch {bn} vs {bg})")
            else:
                parts.append(f"{ctx >> 10}K: GPU cannot hold one request; NELSSA {tn:.0f} tok/s "
                             f"(batch {bn})")
        rows.append(f"| 10 | decode throughput, NELSSA / {gpu} at max batch | {paper} | "
                    f"x{best:.1f} at most ({'; '.join(parts)}) | {why} |")
    return rows


SCHEDULER = SchedulerKind.VLLM
"""Whose scheduler replays: vLLM's own, as the paper's baseline (8.3); --scheduler ours."""


def _cfg(mode: str, devices: int, t_input: int | None = None) -> ServingConfig:
    # the paper's layout: prefill on separate GPUs, the decode GPU receives the KV
    return ServingConfig(mode=mode, devices=devices, t_input=t_input,
                         prefill="disaggregated", prefill_gpus=PREFILL_GPUS,
                         scheduler=SCHEDULER)


def mixed(cat: HardwareCatalog, pnm: str, devices: int, rate: float, limit: int,
          t_input: int | None) -> tuple[dict, dict]:
    lm = LatencyModel(cat.gpus["h100-nvl"], cat.pnm[pnm], cat.models["llama-3-8b"],
                          link=cat.links[LINK])
    reqs = poisson(load_trace(TRACE, limit, hash_ids=True), rate, seed=0)
    g = summarize(ServingSim(lm, _cfg("gpu", devices)).run(reqs))
    n = summarize(ServingSim(lm, _cfg("nelssa", devices, t_input)).run(reqs))
    return g, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pnm", default="prototype")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--rates", type=float, nargs="+", default=[2.5, 3.0, 3.5, 4.0],
                        help="Poisson rates (requests/s) for Fig. 14/15 and 16")
    parser.add_argument("--limit", type=int, default=1500, help="trace requests for Fig. 14/15")
    parser.add_argument("--out", default="docs/reproduction.md")
    parser.add_argument("--scheduler", choices=[k.value for k in SchedulerKind], default="vllm",
                        help="the baseline's scheduler: vLLM's own (make vllm) or ours")
    args = parser.parse_args()
    global SCHEDULER
    SCHEDULER = SchedulerKind(args.scheduler)
    t0 = time.perf_counter()
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.gpus["h100-nvl"], cat.pnm[args.pnm], cat.models["llama-3-8b"],
                          link=cat.links[LINK])
    xs = [lm.t_input(n) for n in range(1, 9)]
    rows = ["| paper figure | what | paper | ours | why ours differ |",
            "| --- | --- | --- | --- | --- |",
            "| 3 | crossover length against PNM devices N = 1..8 (h100-nvl) | falls as N grows; "
            "N = 1 beyond practical lengths | "
            + ", ".join(str(x) if x is not None else "none" for x in xs)
            + " tokens | the same shape; values follow T_comm (one round trip per layer) |"]
    models = {g: LatencyModel(cat.gpus[g], cat.pnm[args.pnm], cat.models["llama-3-8b"],
                              link=cat.links[LINK]) for g in ("h100-nvl", "2x-h100-nvl")}
    sweep = sweeps.context_batch(models, _cfg("gpu", args.devices))
    alt_hw = cat.pnm[ALT_PNM]
    alt_models = {g: LatencyModel(cat.gpus[g], alt_hw, cat.models["llama-3-8b"],
                                  link=cat.links[LINK]) for g, _ in FIG10_GPUS}
    alt_sweep = sweeps.context_batch(alt_models, _cfg("gpu", ALT_DEVICES))
    alt = (f"{ALT_DEVICES} `{ALT_PNM}` ({alt_hw.bw_eff_gbs:g} GB/s, {alt_hw.capacity_gb:g} GB) "
           "give " + " and ".join(f"x{fig10_best(alt_sweep, g):.1f}" for g, _ in FIG10_GPUS)
           + " in this run")
    rows += fig10(sweep, args.pnm, args.devices, cat.pnm[args.pnm], alt)
    sweeps.plot_context_batch(sweep, Path(args.out).with_name("fig10.png"))
    for rate in args.rates:
        for label, t_input in (("the crossover", None), ("32K", 32768)):
            g, n = mixed(cat, args.pnm, args.devices, rate, args.limit, t_input)
            p95 = g["tpot_s"]["p95"] / n["tpot_s"]["p95"]
            p99 = g["tpot_s"]["p99"] / n["tpot_s"]["p99"]
            rows.append(
                f"| 14/15 | TPOT, GPU-only / NELSSA, {args.limit} trace requests at {rate:g}/s, "
                f"T_input {label} ({n['t_input']}) | P95 6x, P99 15x | P95 x{p95:.2f}, P99 "
                f"x{p99:.2f} (GPU-only P99 {g['tpot_s']['p99'] * 1e3:.0f} ms, "
                f"{g['preemptions']} preemptions; NELSSA {n['tpot_s']['p99'] * 1e3:.0f} ms); "
                f"throughput x{n['decode_throughput_tps'] / g['decode_throughput_tps']:.2f} | "
                f"{WHY_14} |")
    trace = load_trace(TRACE, hash_ids=True)
    rate = max(args.rates)
    parts = []
    for frac in (0.0, 0.08, 0.16, 0.24):
        reqs = poisson(long_fraction_mix(trace, frac, 32768, 1000, seed=1), rate, seed=1)
        g = summarize(ServingSim(lm, _cfg("gpu", args.devices)).run(reqs))
        n = summarize(ServingSim(lm, _cfg("nelssa", args.devices, 32768)).run(reqs))
        parts.append(f"{frac:.0%}: x{n['decode_throughput_tps'] / g['decode_throughput_tps']:.2f}"
                     f" (P99 TPOT x{g['tpot_s']['p99'] / n['tpot_s']['p99']:.1f})")
    rows.append("| 16 | throughput NELSSA / GPU-only against the share of requests >= 32K "
                f"(1000 requests at {rate:g}/s, T_input 32K) | the gap widens with the share | "
                + ", ".join(parts) + " | the same trend |")
    # Figure 17: requests that grow (input:output 1:2), migration against recompute preemption
    grow = poisson(growing(400, 2000, 9000, 2.0, seed=0), 1.0, seed=0)
    runs = {mig: ServingSim(lm, replace(_cfg("nelssa", args.devices, 10000), migration=mig)
                            ).run(grow) for mig in (False, True)}
    off, on = summarize(runs[False]), summarize(runs[True])
    rows.append(
        "| 17 | throughput with background migration / without (400 requests of 2-9K tokens, "
        "outputs 2x, 1/s, T_input 10K) | +29 % | "
        f"x{on['decode_throughput_tps'] / off['decode_throughput_tps']:.2f} "
        f"({off['decode_throughput_tps']:,.0f} -> {on['decode_throughput_tps']:,.0f} tokens/s; "
        f"preemptions {off['preemptions']} -> {on['preemptions']}, recomputed tokens "
        f"{off['recompute_tokens']:,} -> {on['recompute_tokens']:,}; {on['migrations']} "
        f"migrations moving {on['migrated_tokens']:,} tokens) | without migration these "
        "short-starting requests all stay on the GPU, which thrashes by recompute here; the "
        "paper's setup is milder |")
    # Figure 18: what a preempted request costs to recompute against what migrating it costs
    sim = ServingSim(lm, _cfg("nelssa", args.devices, 10000))
    parts = []
    for ctx in (8192, 32768, 131072):
        parts.append(f"{ctx >> 10}K: recompute {sim.prefill_s(ctx) * 1e3:.0f} ms, migrate "
                     f"{sim.migration_s(ctx) * 1e3:.1f} ms in the background")
    rows.append("| 18 | recompute cost against incremental clustering / transfer cost as context "
                "grows (h100-nvl, RoCE 400G) | recompute grows much faster | "
                + "; ".join(parts) + " | the same trend: prefill attention is quadratic, "
                "clustering and transfer are linear and off the critical path |")
    text = "\n".join(rows)
    Path(args.out).write_text(f"Settings: PNM {args.pnm} x {args.devices}, Llama-3-8B, prefill "
                              f"on {PREFILL_GPUS} separate GPUs, {SCHEDULER.value} scheduler "
                              "(vLLM 0.33.0's own v1 scheduler unless `ours`), prefix caching "
                              "on, GPU efficiencies of `hardware.json`; "
                              f"`scripts/reproduce_paper.py --scheduler {SCHEDULER.value}` "
                              f"({time.perf_counter() - t0:.0f} s).\n\n{text}\n")
    print(text)
    print(f"wrote {args.out} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
