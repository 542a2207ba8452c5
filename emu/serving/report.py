"""What a serving run reports: its summary line, the comparison of NELSSA with the GPU-only
baseline, ``results.json`` (strict JSON: NaN and infinities as null) and the plots of
throughput, queue and TPOT. The command line (``nelssa serve-sim``) prints and writes these."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from nelssa.emu.policy.slo import MLPERF_SLO


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``x1.23``, or ``undefined`` where either is missing or ``b`` is 0."""
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return "undefined"
    return f"x{a / b:.2f}"


def tpot_ms(stats: dict[str, float], keys: tuple[str, ...]) -> str:
    """Percentiles ``keys`` of a TPOT summary as ``a/b/c ms``."""
    vals = [stats[k] for k in keys]
    if not all(math.isfinite(v) for v in vals):
        return "undefined (no request has a second output token)"
    return "/".join(f"{v * 1e3:.1f}" for v in vals) + " ms"


def run_line(s: dict[str, Any], wall_s: float) -> str:
    """One run's summary (``metrics.summarize``) in a line."""
    return (f"{s['requests']} requests ({s['pnm_requests']} on the PNM tier, "
            + (f"{s['shed']} more dropped past the TTFT SLO, " if s.get("shed") else "") +
            f"T_input {s['t_input']}) in {s['duration_s']:.0f} s emulated, {wall_s:.1f} s wall; "
            f"decode {s['decode_throughput_tps']:,.0f} tokens/s; TPOT p50/p95/p99 "
            f"{tpot_ms(s['tpot_s'], ('p50', 'p95', 'p99'))}; TTFT p50/p99 "
            f"{s['ttft_s']['p50']:.2f}/{s['ttft_s']['p99']:.2f} s; preemptions "
            f"{s['preemptions']} (recomputing "
            f"{s['recompute_tokens']:,} tokens); migrations {s['migrations']} "
            f"({s['migrated_tokens']:,} tokens); mean batch {s['mean_running']:.1f}; goodput "
            f"{s['goodput']['goodput_rps']:.3f}/s ({s['goodput']['attainment']:.1%} meet TTFT <= "
            f"{MLPERF_SLO.ttft_s:g} s and TPOT <= {MLPERF_SLO.tpot_s * 1e3:g} ms)"
            + (f"; T_input moved {s['t_input_moves']} times within "
               f"{s['t_input_range'][0]:,}..{s['t_input_range'][1]:,}"
               if s['t_input_moves'] else ""))


def comparison_line(gpu: dict[str, Any], nelssa: dict[str, Any]) -> str:
    """NELSSA against GPU-only from the two summaries: above 1 is NELSSA better."""
    return (f"throughput {ratio(nelssa['decode_throughput_tps'], gpu['decode_throughput_tps'])}"
            f"; TPOT P95 {ratio(gpu['tpot_s']['p95'], nelssa['tpot_s']['p95'])}, P99 "
            f"{ratio(gpu['tpot_s']['p99'], nelssa['tpot_s']['p99'])} (above 1: NELSSA better)")


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


def plot_runs(results: dict, out: Path) -> None:
    """``out/throughput_queue.png`` and ``out/tpot.png`` of the runs by mode."""
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
