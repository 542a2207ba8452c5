"""What a serving run reports: its summary line, the comparison of NELSSA with the GPU-only
baseline, ``results.json`` (strict JSON: NaN and infinities as null) and the plots of
throughput, queue and TPOT. The command line (``nelssa serve-sim``) prints and writes these."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from nelssa.emu.policy.slo import MLPERF_SLO


def times(a: float | None, b: float | None) -> str:
    """``a / b`` as ``1.23x``, or ``undefined`` where either is missing or ``b`` is 0."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return "undefined"
    return f"{a / b:.2f}x"


def _ms(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v * 1e3:,.1f}"


def latency_ms(stats: dict[str, float] | None, keys: list[str], what: str = "TPOT") -> str:
    """Percentiles ``keys`` of a latency summary as ``a/b/c ms``."""
    if stats is None:
        return "not recorded"
    vals = [stats.get(k, float("nan")) for k in keys]
    if not all(v is not None and math.isfinite(v) for v in vals):
        return ("undefined (no request has a second output token)" if what in ("TPOT", "ITL")
                else "undefined")
    return "/".join(_ms(v) for v in vals) + " ms"


def _keys(s: dict[str, Any]) -> tuple[list[str], str]:
    pct = s.get("percentiles") or [50, 95, 99]
    keys = [f"p{p:g}" for p in pct]
    return keys, "/".join(keys)


def run_line(s: dict[str, Any], wall_s: float) -> str:
    """One run's summary (``metrics.summarize``) in a few lines."""
    keys, names = _keys(s)
    g = s["goodput"]
    slo = g.get("slo") or {"ttft_s": MLPERF_SLO.ttft_s, "tpot_s": MLPERF_SLO.tpot_s}
    where = ("GPU only" if s["t_input"] is None else
             f"{s['pnm_requests']} on the PNM tier, T_input {s['t_input']:,} tokens")
    slo_text = " and ".join(f"{name} <= {slo[key] * 1e3:g} ms" for name, key in (
        ("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2EL", "e2el_s")) if slo.get(key)) or "no SLO"
    lines = [
        f"{s['requests']} requests ({where}"
        + (f"; {s['rejected']} rejected before the run" if s.get("rejected") else "")
        + (f"; {s['shed']} more dropped past the TTFT SLO" if s.get("shed") else "")
        + f") in {s['duration_s']:.0f} s emulated, {wall_s:.1f} s wall",
        f"throughput: {s.get('request_throughput_rps', 0.0):.3f} requests/s, output "
        f"{s.get('output_throughput_tps', 0.0):,.0f} tokens/s (decode "
        f"{s['decode_throughput_tps']:,.0f}), input {s.get('input_throughput_tps', 0.0):,.0f}"
        f" tokens/s",
        f"latency {names}: TTFT {latency_ms(s['ttft_s'], keys, 'TTFT')}; TPOT "
        f"{latency_ms(s['tpot_s'], keys)}; ITL {latency_ms(s.get('itl_s'), keys, 'ITL')}; "
        f"E2EL {latency_ms(s.get('e2el_s'), keys, 'E2EL')}",
        f"preemptions {s['preemptions']} (recomputing {s['recompute_tokens']:,} tokens); "
        f"migrations {s['migrations']} ({s['migrated_tokens']:,} tokens); mean batch "
        f"{s['mean_running']:.1f}; goodput {g['goodput_rps']:.3f} requests/s "
        f"({g['attainment']:.1%} meet {slo_text})"
        + (f"; T_input moved {s['t_input_moves']} times within "
           f"{s['t_input_range'][0]:,}..{s['t_input_range'][1]:,}"
           if s['t_input_moves'] else ""),
    ]
    o = s.get("overload") or {}
    if o.get("overloaded"):
        lines.append(
            f"OVERLOADED: over the second half of the arrivals ({o['window_s'][0]:,.0f}.."
            f"{o['window_s'][1]:,.0f} s) {o['arrived']} requests arrived "
            f"({o['arrival_rps']:.2f}/s) and {o['completed']} completed "
            f"({o['completion_rps']:.2f}/s); the waiting queue grew by {o['queue_growth']:,.0f}"
            ": its latencies grow with the trace's length (lower --rate, or add capacity)")
    return "\n          ".join(lines)


def energy_line(e: dict[str, Any] | None) -> str:
    """A run's energy (``emu/energy.TierEnergy.as_dict``): joules per output token, average
    power per tier, the Figure-11 split."""
    if e is None:
        return "energy: not reported (see the warning above)"
    jpt = e["j_per_output_token"]
    tiers = [f"{what} {e[key + '_w']:,.0f} W ({e[count]})" for what, key, count in (
        ("decode GPUs", "decode_gpu", "decode_gpus"), ("prefill GPUs", "prefill_gpu",
                                                       "prefill_gpus"),
        ("PNM nodes", "pnm_node", "pnm_nodes")) if e[count]]
    total = e["total_j"]
    split = ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in e["figure11_j"].items()
                      if total)
    return (f"energy: {'-' if jpt is None else f'{jpt:.3f}'} J per output token, "
            f"{e['total_w']:,.0f} W on average ({'; '.join(tiers)}); split: {split}")


def comparison_line(gpu: dict[str, Any], nelssa: dict[str, Any]) -> str:
    """NELSSA against GPU-only from the two summaries, each ratio with its direction."""
    tg, tn = gpu["tpot_s"], nelssa["tpot_s"]
    return (f"NELSSA's decode throughput is "
            f"{times(nelssa['decode_throughput_tps'], gpu['decode_throughput_tps'])} GPU-only's "
            f"(higher is better); its TPOT P95 is {times(tn['p95'], tg['p95'])} GPU-only's and "
            f"P99 {times(tn['p99'], tg['p99'])} (lower is better); goodput "
            f"{times(nelssa['goodput']['goodput_rps'], gpu['goodput']['goodput_rps'])} "
            "(higher is better)")


def strict_json(obj: Any) -> Any:
    """``obj`` with NaN and infinities as null: results.json stays JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    return obj


def write_results(results: dict[str, Any], out: Path) -> None:
    """``out/results.json``."""
    (out / "results.json").write_text(json.dumps(strict_json(results), indent=1,
                                                 allow_nan=False))


PLOTS = ("throughput_queue.png", "tpot.png", "ttft.png", "batch_kv.png")
"""What ``plot_runs`` writes."""


def plot_runs(results: dict, out: Path, title: str = "",
              ttft: dict[str, list[float]] | None = None) -> None:
    """``out``/PLOTS of the runs by mode, each titled ``title`` (the configuration): throughput
    and queue, TPOT percentiles, the TTFT distribution (``ttft``: each mode's requests'
    TTFTs) and the running batch and GPU KV use over time (the paper's Figure 15)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def save(fig: Any, name: str) -> None:
        fig.suptitle(title, fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)

    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
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
    save(fig, "throughput_queue.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = ["p50", "p95", "p99"]
    width = 0.8 / max(len(results), 1)
    for i, (mode, r) in enumerate(results.items()):
        vals = [(r["summary"]["tpot_s"].get(k) or float("nan")) * 1e3 for k in keys]
        ax.bar([j + i * width for j in range(3)], vals, width, label=mode)
    ax.set_xticks([j + width * (len(results) - 1) / 2 for j in range(3)], keys)
    ax.set_ylabel("TPOT (ms)")
    ax.legend()
    save(fig, "tpot.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, vals in (ttft or {}).items():
        v = np.sort(np.asarray([x for x in vals if x is not None and math.isfinite(x)]))
        if len(v):
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=mode)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("share of requests (CDF)")
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, "ttft.png")
    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for mode, r in results.items():
        s = r["series"]
        a.plot(s["t_s"], s["running"], lw=0.8, label=mode)
        b.plot(s["t_s"], np.asarray(s["gpu_kv_used"]) * 100, lw=0.8, label=mode)
    a.set_ylabel("running batch (requests)")
    b.set_ylabel("GPU KV memory used (%)")
    b.set_xlabel("emulated time (s)")
    a.legend()
    save(fig, "batch_kv.png")
