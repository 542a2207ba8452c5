"""docs/results/plan.md (issue 43, point 4): for the Mooncake conversation and synthetic traces,
the cheapest GPU-only fleet against the cheapest NELSSA fleet at three SLOs, and the share of
long requests (the Figure 16 sweep) below which NELSSA stops paying. Each plan is
``nelssa plan``'s search (``run.run_plan``) over one space of mixes; the points are kept in
``--store`` so a second run resumes (``scripts/plan.py`` is the command line)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from nelssa.config_args import field_docs
from nelssa.emu.serving.sweeps import FRACTIONS
from nelssa.options import POSITIVE_INT
from nelssa.plan import report
from nelssa.plan.prices import Prices
from nelssa.plan.run import PlanSpace, executor, run_plan
from nelssa.plan.search import CROSSOVER, PlanSettings, PlanSlo
from nelssa.provenance import code_version, file_sha256

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1].parent
PAGE = ROOT / "docs/results/plan.md"
TRACES = {"conversation": ROOT.parent / "shared/traces/mooncake_conversation_trace.jsonl",
          "synthetic": ROOT.parent / "shared/traces/mooncake_synthetic_trace.jsonl"}
SLOS = (PlanSlo(ttft_s=20.0, tpot_s=0.175, goodput=0.99),
        PlanSlo(ttft_s=20.0, tpot_s=0.100, goodput=None, percentile=99.0),
        PlanSlo(ttft_s=2.0, tpot_s=0.050, goodput=None, percentile=90.0))
"""Long-context goodput (MLPerf's TPOT; TTFT 20 s, above the longest prompts' own prefill: at
6 s or 10 s fewer than 99 % of the conversation trace's requests meet it even on an idle fleet,
so a handful of prompts, not the load, decide the rate), a P99 tail (the same TTFT, TPOT
100 ms) and an interactive P90."""
SPACE = PlanSpace(decode=(1, 2, 4), prefill_gpus=(0, 4), nodes=(0, 1), devices=(4,),
                  policies=(CROSSOVER,))
SHARES = FRACTIONS[::2]
"""Figure 16's long shares, every other one (0, 8, 16, 24 %: the page's time)."""
LONG_THRESHOLD = 32768
"""Figure 16's long request (``serve-sim --sweeps``' default T_input)."""


def plan(trace: Path, slo: PlanSlo, requests: int, long_share: float | None, store: Path,
         workers: int, prices: Prices, budget_s: float | None = None) -> dict[str, Any]:
    s = PlanSettings(str(trace.resolve()), file_sha256(str(trace.resolve())), slo,
                     requests=requests, long_share=long_share, long_threshold=LONG_THRESHOLD)
    done = run_plan(s, SPACE.mixes(), store, executor(workers, None),
                    budget_s=None if budget_s is None else max(0.0, budget_s))
    rs = report.rows(done.points, prices)
    log.info("%s %s share %s: %d searched, %.0f CPU s", trace.name, slo.label(), long_share,
             done.ran, done.cpu_s)
    return {"rows": rs, "searched": len(done.points), "gpu": report.cheapest(rs, True),
            "nelssa": report.cheapest(rs, False),
            "break_even": report.break_even_device_price(rs, prices), "ran": done.ran,
            "cpu_s": sum(p.cpu_s for p in done.points),
            "probes": sum(len(p.probes) for p in done.points), "failed": done.failed}


def _fleet(r: report.Row | None, searched: int = 1) -> str:
    if searched == 0:
        return "not searched (budget) | - | - | -"
    if r is None:
        return "none sustains a rate | - | - | -"
    return (f"{r.label} | {r.point.rate:.3g} | {r.cost.per_hour:.2f} | "
            f"{r.cost.per_million_tokens:.3f}")


def _part(res: dict[str, Any]) -> str:
    """A plan cut short by the budget says how much of the space it holds."""
    n = len(SPACE.mixes())
    return "" if res["searched"] == n else f" ({res['searched']} of {n} mixes)"


def _ratio(res: dict[str, Any]) -> str:
    g, n = res["gpu"], res["nelssa"]
    if g is None or n is None:
        return "-"
    return f"{n.cost.per_million_tokens / g.cost.per_million_tokens:.3f}"


def _be(res: dict[str, Any]) -> str:
    return "-" if res["break_even"] is None else f"{res['break_even']:.3f}"


def stops_paying(shares: dict[float, dict[str, Any]]) -> str:
    """Where along the long share NELSSA's cheapest fleet stops being cheaper than the GPU-only
    one, in words."""
    whole = len(SPACE.mixes())
    pays = {f: (r["gpu"] is not None and r["nelssa"] is not None
                and r["nelssa"].cost.per_million_tokens < r["gpu"].cost.per_million_tokens)
            for f, r in shares.items() if r.get("searched", whole) == whole}
    if not pays:
        return "no long share's plan was searched whole: no conclusion"
    order = sorted(pays)
    if all(pays.values()):
        return f"NELSSA pays at every long share tried ({order[0]:.0%} to {order[-1]:.0%})"
    if not any(pays.values()):
        return (f"NELSSA pays at none of the long shares tried ({order[0]:.0%} to "
                f"{order[-1]:.0%}) at these prices")
    first = next(f for f in order if pays[f])
    if all(pays[f] for f in order if f >= first):
        below = max(f for f in order if f < first)
        return (f"NELSSA pays from a long share of {first:.0%} up; at {below:.0%} and below it "
                "stops paying")
    return ("NELSSA pays at the long shares " + ", ".join(f"{f:.0%}" for f in order if pays[f])
            + " and not at " + ", ".join(f"{f:.0%}" for f in order if not pays[f])
            + " (not one threshold)")


def _prices_table(prices: Prices) -> list[str]:
    docs = field_docs(Prices)
    out = ["| price | value | source |", "| --- | ---: | --- |"]
    for f in dataclasses.fields(Prices):
        v = getattr(prices, f.name)
        out.append(f"| `{f.name}` | {'-' if v is None else f'{v:g}'} | {docs[f.name]} |")
    return out


def plot_shares(shares: dict[float, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for kind, colour, name in (("gpu", "C0", "cheapest GPU-only"),
                               ("nelssa", "C1", "cheapest NELSSA")):
        pts = [(f * 100, r[kind].cost.per_million_tokens) for f, r in sorted(shares.items())
               if r[kind] is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color=colour, label=name)
    ax.set_xlabel(f"share of requests of >= {LONG_THRESHOLD:,} input tokens (%)")
    ax.set_ylabel("$ per million output tokens, lower is better")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page(res: dict[str, Any], prices: Prices, command: str, commit: str,
         args: argparse.Namespace) -> str:
    n_mixes = len(SPACE.mixes())
    lines = [
        "# The cheapest fleet that meets the SLO (issue 43, point 4)", "",
        f"Written by `{command}` at {commit} on {platform.machine()} ({os.cpu_count()} cores, "
        f"shared), Python {platform.python_version()}; the points' searches took "
        f"{res['cpu_s'] / 60:.1f} min of the workers' CPU ({res['probes']:,} fleet runs; the "
        "points are kept in a store, a rerun resumes).", "",
        f"Each plan is `nelssa plan` over the same {n_mixes} fleet mixes: 1, 2 or 4 decode "
        "instances of one H100 NVL each (llama-3-8b, dispatch round robin), prefilled on "
        "their own GPU or on a shared pool of 4 (`+4p`), with no PNM node (the GPU-only "
        "baseline) or 1 PNM node of 4 prototype devices (link roce-400g), T_input the "
        "crossover (static). Each mix's highest sustained rate is "
        "Vidur-Search's capacity search (double until the SLO fails, then bisect to "
        f"{PlanSettings('', '').granularity:.0%}); each probe is one fleet run of "
        f"{args.requests:,} requests drawn from the trace (`workload.resample`, Poisson "
        "arrivals, seed 0). A rate is sustained when it meets the SLO and the run's queue does "
        "not grow without bound. Cost: capital (hourly prices) plus energy, per million "
        "output tokens at the sustained rate (rate x the run's mean output tokens). How "
        "far the sustained rate moves with the run length: docs/results/plan_bench.md.", "",
        "## Prices", ""]
    lines += _prices_table(prices)
    lines += [
        "",
        "Energy: each tier's average power over the run at the sustained rate, from the "
        "fleet's energy model (`emu/energy.py`: the GPUs' utilisation model capped at their "
        "power limit, the PNM nodes' hosts, devices, DDR5 and links, every figure from the "
        "hardware description with its source), times PUE and the price of a kWh.", "",
        "## Cheapest fleets at three SLOs", "",
        "| trace | SLO | GPU-only: mix | rate /s | $/hour | $/M tokens | NELSSA: mix | rate /s "
        "| $/hour | $/M tokens | NELSSA / GPU-only $/M | device break-even $/hour |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in TRACES:
        for slo in SLOS:
            r = res["slos"][(name, slo.label())]
            lines.append(f"| {name} | {slo.label()}{_part(r)} | "
                         f"{_fleet(r['gpu'], r['searched'])} | "
                         f"{_fleet(r['nelssa'], r['searched'])} | {_ratio(r)} | {_be(r)} |")
    lines += [
        "",
        "Mix: `Nd` N decode GPUs; `Nd KxV policy` with K PNM nodes of V devices. Device "
        "break-even: the PNM device price ($/hour) below which some NELSSA mix costs less per "
        "million output tokens than the cheapest GPU-only one (0: none would, even with free "
        "devices).", ""]
    for name in TRACES:
        lines += [f"![{name}: cost against sustained rate](plan_{name}.png)", ""]
    sh = res["shares"]
    lines += [
        "## Share of long requests", "",
        f"The conversation trace redrawn with a given share of requests of at least "
        f"{LONG_THRESHOLD:,} input tokens (`workload.long_fraction_mix`, every other share of "
        f"Figure 16's), "
        f"SLO {SLOS[0].label()}:", "",
        "| long share | GPU-only: mix | rate /s | $/hour | $/M tokens | NELSSA: mix | rate /s | "
        "$/hour | $/M tokens | NELSSA / GPU-only $/M | device break-even $/hour |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for f in sorted(sh):
        lines.append(f"| {f:.0%}{_part(sh[f])} | {_fleet(sh[f]['gpu'], sh[f]['searched'])} | "
                     f"{_fleet(sh[f]['nelssa'], sh[f]['searched'])} | "
                     f"{_ratio(sh[f])} | {_be(sh[f])} |")
    lines += ["", f"**{stops_paying(sh)}** (at the prices above).", "",
              "![cost against the share of long requests](plan_long_share.png)", ""]
    failed = [(k, m.label(), e) for k, r in res["all"] for m, e in r["failed"]]
    if failed:
        lines += ["Failed points:", ""] + [f"- {k}: {m}: {e}" for k, m, e in failed] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=POSITIVE_INT, default=1000, help="requests per probe")
    p.add_argument("--workers", type=POSITIVE_INT, default=2)
    p.add_argument("--store", type=Path, default=Path("plan-page-store"),
                   help="folder of the plans' points (resumed if there)")
    p.add_argument("--budget-min", type=float, default=None,
                   help="start no search after this many minutes (a plan cut short says how "
                   "many of its mixes it holds; a rerun into the same --store resumes)")
    p.add_argument("--write", action="store_true", help="write the page and its plots")
    p.add_argument("--page", type=Path, default=PAGE, help="the page written (its plots beside)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    code = code_version()
    commit = str(code["commit"])[:7] + (" (modified)" if code["modified"] is True else "")
    prices = Prices()
    w0 = time.perf_counter()
    end = None if args.budget_min is None else w0 + args.budget_min * 60

    def left() -> float | None:
        return None if end is None else end - time.perf_counter()
    res: dict[str, Any] = {"slos": {}, "shares": {}, "all": []}
    for name, trace in TRACES.items():
        for slo in SLOS:
            r = plan(trace, slo, args.requests, None, args.store, args.workers, prices, left())
            res["slos"][(name, slo.label())] = r
            res["all"].append((f"{name}, {slo.label()}", r))
    for f in SHARES:
        r = plan(TRACES["conversation"], SLOS[0], args.requests, f, args.store, args.workers,
                 prices, left())
        res["shares"][f] = r
        res["all"].append((f"long share {f:.0%}", r))
    res["wall_s"] = time.perf_counter() - w0
    res["cpu_s"] = sum(r["cpu_s"] for _, r in res["all"])
    res["probes"] = sum(r["probes"] for _, r in res["all"])
    shown = sys.argv[1:] if argv is None else argv
    text = page(res, prices, " ".join(["python scripts/plan.py", *shown]), commit, args)
    sys.stdout.write(text)
    if args.write:
        out = args.page.parent
        for name in TRACES:
            report.plot(res["slos"][(name, SLOS[0].label())]["rows"], out / f"plan_{name}.png",
                        f"{name} trace, SLO {SLOS[0].label()}")
        plot_shares(res["shares"], out / "plan_long_share.png",
                    f"conversation trace, SLO {SLOS[0].label()}")
        args.page.write_text(text)
    return 0
