"""The fleet orchestrator against static placement (issue 42 item 4, paper 10): fleets where one
tier saturates (the PNM tier's memory and devices, one node's devices, the GPU tier's memory)
and ordinary fleets, each run with ``orchestrator: static`` and ``fleet-adaptive`` over the same
arrivals; writes docs/results/orchestrator.md and its plots (``scripts/orchestrator_eval.py``
is the command line)."""

from __future__ import annotations

import argparse
import logging
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.policy.slo import MLPERF_SLO
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.fleet import FleetResult, FleetSim
from nelssa.emu.serving.metrics import goodput
from nelssa.emu.serving.workload import TraceRequest, load_trace, poisson
from nelssa.experiments.pages import render

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1].parent
PAGE = ROOT / "docs/results/orchestrator.md"
TRACES = ROOT.parent / "shared/traces"
ORCHESTRATORS = ("static", "fleet-adaptive")

POOL4 = {"count": 4, "prefill": "pool"}


@dataclass(frozen=True)
class Case:
    """One fleet and its load."""

    name: str
    saturates: str
    """What the fleet is built to saturate ("" for an ordinary fleet)."""
    trace: str
    limit: int
    rate: float
    fleet: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)


CASES = (
    Case("4 instances, 1 node of 2 devices", "PNM tier (memory, devices)", "conversation",
         4000, 32.0, dict(instances=[POOL4], prefill_pool={"gpus": 32},
                          pnm_nodes=[{"name": "n", "devices": 2}], dispatch="least-work")),
    Case("4 instances, nodes of 64 GB and 512 GB devices", "one node's devices", "conversation",
         3000, 32.0, dict(instances=[POOL4], prefill_pool={"gpus": 32},
                          pnm_nodes=[{"name": "proto", "devices": 2},
                                     {"name": "dense", "devices": 2, "pnm": "projection-512g"}],
                          dispatch="least-work")),
    Case("4 instances, 4 nodes of 1 device", "GPU tier (memory)", "conversation", 4000, 16.0,
         dict(instances=[POOL4], prefill_pool={"gpus": 32},
              pnm_nodes=[{"name": "n", "count": 4, "devices": 1}], dispatch="least-work")),
    Case("4 instances, 2 nodes of 4 devices, T_input 32,768", "GPU tier (memory)",
         "conversation", 4000, 32.0, dict(instances=[POOL4], prefill_pool={"gpus": 32},
                                          pnm_nodes=[{"name": "n", "count": 2, "devices": 4}],
                                          dispatch="least-work"), {"t_input": 32768}),
    Case("4 instances, 2 nodes of 4 devices", "", "conversation", 2000, 16.0,
         dict(instances=[POOL4], prefill_pool={"gpus": 32},
              pnm_nodes=[{"name": "n", "count": 2, "devices": 4}], dispatch="least-work")),
    Case("4 instances, 4 nodes of 4 devices", "", "conversation", 4000, 48.0,
         dict(instances=[POOL4], prefill_pool={"gpus": 48},
              pnm_nodes=[{"name": "n", "count": 4, "devices": 4}], dispatch="least-work")),
    Case("4 instances, 2 nodes of 4 devices", "", "synthetic", 3000, 16.0,
         dict(instances=[POOL4], prefill_pool={"gpus": 32},
              pnm_nodes=[{"name": "n", "count": 2, "devices": 4}], dispatch="least-work")),
    Case("8 instances in 2 groups, one reaching both nodes", "", "conversation", 4000, 24.0,
         dict(instances=[POOL4, {**POOL4, "pnm_nodes": ["b"]}], prefill_pool={"gpus": 32},
              pnm_nodes=[{"name": "a", "devices": 4}, {"name": "b", "devices": 4}])),
    *(Case("4 colocated instances, 1 node of 4 devices", "", "conversation", 1500, rate,
           dict(instances=[{"count": 4}], pnm_nodes=[{"name": "n", "devices": 4}],
                dispatch="least-work")) for rate in (2.0, 4.0, 6.0)),
    Case("4 colocated instances, 1 node of 4 devices, TPOT budget and shedding", "",
         "conversation", 1500, 6.0, dict(instances=[{"count": 4}],
                                         pnm_nodes=[{"name": "n", "devices": 4}],
                                         dispatch="least-work"),
         {"tpot_budget": True, "shed_late": True}),
    Case("docs/examples/fleet.yaml", "", "conversation", 1500, 6.0,
         dict(dispatch="length-aware", instances=[
             {"count": 4}, {"count": 2, "tp": 2, "prefill": "pool", "pnm_nodes": ["big"]}],
              prefill_pool={"gpus": 2},
              pnm_nodes=[{"name": "small", "count": 2, "devices": 4}, {"name": "big",
                                                                      "devices": 8}])),
)


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def figures(res: FleetResult) -> dict[str, Any]:
    """What the page reports of one run."""
    run = res.merged()
    g = goodput(run)
    ttft = [r.ttft_s for r in run.results]
    tpot = [r.tpot_s for r in run.results if r.tpot_s is not None]
    looks = [t for _, ts in res.t_inputs for t in ts if t is not None]
    return {"met": g["met"], "goodput": g["goodput_rps"], "n": len(run.results) + run.shed,
            "ttft_p99": _quantile(ttft, 0.99), "tpot_p99": _quantile(tpot, 0.99),
            "tpot_p50": _quantile(tpot, 0.5),
            "pnm": sum(r.tier == "pnm" for r in run.results), "preempt": run.preemptions,
            "shed": run.shed, "peak_mem": max((n.peak_used_tokens / n.tokens
                                               for n in res.nodes), default=0.0),
            "max_load": max((max(x) for _, _, x in res.node_samples if x), default=0.0),
            "t_range": (min(looks), max(looks)) if looks else None, "end": run.end_s}


def saturated(f: dict[str, Any]) -> str:
    """What the static run ran out of."""
    out = []
    if f["peak_mem"] >= 0.99:
        out.append("pnm-mem")
    if f["max_load"] >= 1.0:
        out.append("pnm-dev")
    if f["preempt"]:
        out.append("gpu-kv")
    return ",".join(out) or "-"


def verdict(case: Case, s: dict[str, Any], o: dict[str, Any]) -> str:
    """``beats`` (more requests meet the SLO, or as many with P99 TPOT or TTFT 1 % lower),
    ``within 1 %`` (at most 1 % fewer and goodput per second at most 1 % lower), or
    ``WORSE``."""
    better_tail = (o["tpot_p99"] < 0.99 * s["tpot_p99"] or o["ttft_p99"] < 0.99 * s["ttft_p99"])
    if o["met"] > s["met"] or (o["met"] == s["met"] and better_tail):
        return "beats"
    if o["met"] >= 0.99 * s["met"] and o["goodput"] >= 0.99 * s["goodput"]:
        return "within 1 %"
    return "WORSE"


def study(cases: tuple[Case, ...], traces: Path) -> list[dict[str, Any]]:
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                      cat.get("models", "llama-3-8b"), link=cat.get("links", "roce-400g"))
    loaded: dict[tuple[str, int], list[TraceRequest]] = {}
    rows = []
    for case in cases:
        key = (case.trace, case.limit)
        if key not in loaded:
            loaded[key] = load_trace(traces / f"mooncake_{case.trace}_trace.jsonl", case.limit,
                                     hash_ids=True)
        reqs = poisson(loaded[key], case.rate, 0)
        cfg = ServingConfig(mode="nelssa", **case.config)
        row: dict[str, Any] = {"case": case}
        for name in ORCHESTRATORS:
            t = time.process_time()
            res = FleetSim(FleetSpec(**case.fleet, orchestrator=name), cat, lm, cfg).run(reqs)
            row[name], row[f"{name}_run"] = figures(res), res
            log.info("%s @ %g/s, %s: %d met (%.1f s CPU)", case.name, case.rate, name,
                     row[name]["met"], time.process_time() - t)
        rows.append(row)
    return rows


def _pct(a: float, b: float) -> str:
    return f"{(b - a) / a * 100:+.1f}%" if a else "n/a"


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| fleet | load | built to saturate | static saturated | met static -> "
           "orchestrator (of) | change | goodput /s | TTFT P99 s | TPOT P99 ms | PNM-tier "
           "requests | T_input range | verdict |",
           "|---|---|---|---|---|---:|---|---|---|---|---|---|"]
    for r in rows:
        c, s, o = r["case"], r["static"], r["fleet-adaptive"]
        tr = (f"{o['t_range'][0]:,}..{o['t_range'][1]:,}" if o["t_range"] else "-")
        out.append(
            f"| {c.name} | {c.trace} {c.limit:,} at {c.rate:g}/s | {c.saturates or '-'} | "
            f"{saturated(s)} | {s['met']:,} -> {o['met']:,} ({s['n']:,}) | "
            f"{_pct(s['met'], o['met'])} | {s['goodput']:.2f} -> {o['goodput']:.2f} | "
            f"{s['ttft_p99']:.1f} -> {o['ttft_p99']:.1f} | {s['tpot_p99'] * 1e3:,.0f} -> "
            f"{o['tpot_p99'] * 1e3:,.0f} | {s['pnm']:,} -> {o['pnm']:,} | {tr} | "
            f"{verdict(c, s, o)} |")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], summary_png: Path, runs_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    labels = [f"{i + 1}" for i in range(len(rows))]
    ch = [(r["fleet-adaptive"]["met"] - r["static"]["met"]) / max(1, r["static"]["met"]) * 100
          for r in rows]
    tp = [(r["fleet-adaptive"]["tpot_p99"] / r["static"]["tpot_p99"] - 1) * 100
          if r["static"]["tpot_p99"] else 0.0 for r in rows]
    x = range(len(rows))
    colour = ["tab:red" if r["case"].saturates else "tab:gray" for r in rows]
    ax.bar([i - 0.2 for i in x], ch, 0.4, color=colour, label="requests meeting the SLO")
    ax.bar([i + 0.2 for i in x], [max(-100.0, v) for v in tp], 0.4, color="tab:blue",
           alpha=0.5, label="P99 TPOT")
    for i, v in enumerate(ch):
        ax.text(i - 0.2, max(v, 0.0) + 0.5, f"{v:+.1f}%", ha="center", fontsize=7)
    ax.axhspan(-1, 1, color="green", alpha=0.15, label="within 1 %")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(list(x), labels)
    ax.set_xlabel("fleet (the table's rows; red: built to saturate a tier)")
    ax.set_ylabel("fleet-adaptive against static (%)")
    ax.set_title("The fleet orchestrator against static placement")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(summary_png, dpi=110)
    plt.close(fig)

    shown = [r for r in rows if r["case"].saturates][:4]
    fig, axes = plt.subplots(3, len(shown), figsize=(4.2 * len(shown), 9), sharex="col",
                             squeeze=False)
    for j, r in enumerate(shown):
        st, orch = r["static_run"], r["fleet-adaptive_run"]
        col = axes[:, j]
        ts = [t for t, _ in orch.t_inputs]
        for k in range(len(orch.instances)):
            col[0].plot(ts, [v[k] or 0 for _, v in orch.t_inputs], lw=0.8)
        col[0].set_title(f"{r['case'].name}\n({r['case'].saturates})", fontsize=8)
        for res, style, what in ((st, "--", "static"), (orch, "-", "fleet-adaptive")):
            t = [x for x, _, _ in res.node_samples]
            for k, n in enumerate(res.nodes):
                col[1].plot(t, [x[k] for _, _, x in res.node_samples], style, lw=0.7,
                            label=f"{what} {n.name}")
            m = res.merged()
            col[2].plot([s.t_s for s in m.samples], [s.gpu_kv_used for s in m.samples], style,
                        lw=0.8, label=what)
        col[1].axhline(1.0, color="black", lw=0.5)
        col[1].legend(fontsize=6)
        col[2].legend(fontsize=6)
        col[2].set_xlabel("emulated time (s)")
    axes[0, 0].set_ylabel("T_input per instance (tokens)")
    axes[1, 0].set_ylabel("PNM node device load")
    axes[2, 0].set_ylabel("GPU KV in use (mean share)")
    fig.tight_layout()
    fig.savefig(runs_png, dpi=100)
    plt.close(fig)


def page(rows: list[dict[str, Any]], command: str, seconds: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT, check=False).stdout.strip() or "?"
    sat = [r for r in rows if r["case"].saturates]
    ordinary = [r for r in rows if not r["case"].saturates]
    v = [verdict(r["case"], r["static"], r["fleet-adaptive"]) for r in rows]
    worse = [r["case"].name for r, x in zip(rows, v, strict=True) if x == "WORSE"]
    summary = (f"Built to saturate a tier: the orchestrator beats static placement at "
               f"{sum(v[i] == 'beats' for i, r in enumerate(rows) if r['case'].saturates)} "
               f"of {len(sat)} fleets. Ordinary fleets: within 1 % or better at "
               f"{sum(v[i] != 'WORSE' for i, r in enumerate(rows) if not r['case'].saturates)}"
               f" of {len(ordinary)}."
               + (f" Worse by more than 1 %: {', '.join(worse)}." if worse else
                  " Worse by more than 1 % nowhere."))
    return render("orchestrator.md", "page", command=command, commit=commit,
                  machine=f"{platform.machine()}, Python {platform.python_version()}",
                  seconds=f"{seconds:.0f}", ttft=f"{MLPERF_SLO.ttft_s:g}",
                  tpot=f"{MLPERF_SLO.tpot_s * 1e3:.0f}", summary=summary,
                  table=table(rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--traces", type=Path, default=TRACES,
                   help="folder of the Mooncake traces (mooncake_<name>_trace.jsonl)")
    p.add_argument("--only", type=int, nargs="*", help="only these fleets (1-based rows)")
    p.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)} "
                   "and its plots")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cases = CASES if not args.only else tuple(CASES[i - 1] for i in args.only)
    t0 = time.perf_counter()
    rows = study(cases, Path(args.traces))
    argv_shown = sys.argv[1:] if argv is None else argv
    text = page(rows, " ".join(["python scripts/orchestrator_eval.py", *argv_shown]),
                time.perf_counter() - t0)
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
        plot(rows, PAGE.with_name("orchestrator.png"), PAGE.with_name("orchestrator_runs.png"))
    return 0


__all__ = ["CASES", "Case", "figures", "main", "study", "verdict"]
