"""The adaptive routing threshold against the static crossover (issue 26 item 2): goodput
(requests per second meeting TTFT and TPOT: ``emu/policy/slo.py``, MLPerf's Llama 3.1 405B
server scenario) on the Mooncake conversation and synthetic traces, their Poisson resamplings at
rising rates past the static design's saturation, injected bursts of long requests, a
memory-tight GPU, and the long-fraction sweep of the paper's Figure 16. Per point also: the
best static T_input of a small grid (what routing alone could give), the TPOT-held token
budget (``emu/policy/budget.py``, a scheduling knob reported apart) alone and with the adaptive
threshold, why the static run's requests missed the SLO, and the goodput under MLPerf's
Llama 3.1 8B SLO. Writes docs/results/adaptive.md and its plots (adaptive_*.png).

    .venv/bin/python scripts/adaptive_eval.py              # our scheduler, a few minutes
    .venv/bin/python scripts/adaptive_eval.py --vllm       # and vLLM's at three points
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from nelssa.emu.latency.hardware import DEFAULT_MODEL, DEFAULT_PNM, HardwareCatalog
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK
from nelssa.emu.policy.budget import TpotBudget
from nelssa.emu.policy.slo import MLPERF_8B_SLO, MLPERF_SLO, Slo
from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.cost import Chunk
from nelssa.emu.serving.metrics import goodput, summarize
from nelssa.emu.serving.results import RunResult
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.sweeps import FRACTIONS, static_vs_adaptive, step_makeup
from nelssa.emu.serving.workload import inject_burst, load_trace, long_fraction_mix, poisson
from nelssa.experiments.pages import render
from nelssa.options import POSITIVE_INT, Parser

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
GPU, DEVICES = "h100-nvl", 4
RATES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
LONG = 32768
"""Figure 16's long requests: prompts of at least this many tokens."""
TOLERANCE = 0.01
"""The goal: never more than 1 % lower goodput."""
MODES = {"static": {}, "adaptive": {"adaptive": True}, "budget": {"tpot_budget": True},
         "both": {"adaptive": True, "tpot_budget": True},
         "shed": {"adaptive": True, "tpot_budget": True, "shed_late": True}}
"""The runs at each point: the static crossover; the adaptive threshold; the TPOT-held token
budget with the static crossover; both; both and shedding the requests past their TTFT SLO
(``emu/policy/shed.py``)."""
GRID = (0.5, 0.75, 1.5, 2.0, 3.0)
"""Static thresholds tried besides the crossover, as multiples of it (the routing oracle)."""


def _latency() -> LatencyModel:
    cat = HardwareCatalog.load()
    return LatencyModel(cat.get("gpus", GPU), cat.get("pnm", DEFAULT_PNM),
                        cat.get("models", DEFAULT_MODEL), Sparsity(),
                        cat.get("links", DEFAULT_GPU_PNM_LINK))


def _change(new: float, old: float) -> float:
    return (new - old) / old if old else (0.0 if new == old else float("inf"))


def _fails(run: RunResult, slo: Slo = MLPERF_SLO) -> str:
    """Shares of the requests that missed the TTFT only, the TPOT only, both."""
    res = run.results
    ttft = [r.ttft_s > slo.ttft_s for r in res]
    tpot = [r.tpot_s is not None and r.tpot_s > slo.tpot_s for r in res]
    n = len(res) or 1
    parts = (sum(a and not b for a, b in zip(ttft, tpot, strict=True)),
             sum(b and not a for a, b in zip(ttft, tpot, strict=True)),
             sum(a and b for a, b in zip(ttft, tpot, strict=True)))
    return "/".join(f"{100 * x / n:.0f}" for x in parts)


def _oracle(lm: LatencyModel, reqs: list, config: ServingConfig, crossover: int,
            static: RunResult) -> tuple[float, float, RunResult]:
    """The best static T_input of the grid (its factor, its goodput, its run), the crossover's
    included."""
    best = (1.0, goodput(static)["goodput_rps"], static)
    for f in GRID:
        sim = ServingSim(lm, replace(config, mode="nelssa", t_input=max(1, round(crossover * f))))
        run = sim.run(reqs)
        g = goodput(run)["goodput_rps"]
        if g > best[1]:
            best = (f, g, run)
    return best


def _queues(run: RunResult) -> str:
    """Requests meeting the SLO on the GPU tier / the PNM tier; mean requests waiting for the
    GPU / for the PNM tier's memory (over the samples)."""
    met = [r.tier for r in run.results if MLPERF_SLO.meets(r.ttft_s, r.tpot_s)]
    n = len(run.samples) or 1
    gpu = sum(x.waiting - x.pnm_waiting for x in run.samples) / n
    pnm = sum(x.pnm_waiting for x in run.samples) / n
    return f"{met.count('gpu')} / {met.count('pnm')} | {gpu:.0f} / {pnm:.0f}"


def _row(workload: str, load: str, n: int, res: dict[str, dict[str, Any]],
         oracle: tuple[float, float] | None) -> dict[str, Any]:
    s, a = res["static"], res["adaptive"]
    gs, ga = s["goodput_rps"], a["goodput_rps"]
    memory = any(t in ("gpu-kv", "pnm-mem") for t in s["saturated"])
    no_loss = ga >= (1 - TOLERANCE) * gs
    tpot = summarize(s["run"])["tpot_s"]["p50"]
    routable = oracle is not None and oracle[1] > (1 + TOLERANCE) * gs
    return {"workload": workload, "load": load, "requests": n, "static": gs, "adaptive": ga,
            "tpot_ms": tpot * 1e3, "change": _change(ga, gs),
            "budget": _change(res["budget"]["goodput_rps"], gs),
            "both": _change(res["both"]["goodput_rps"], gs), "both_rps": res["both"]["goodput_rps"],
            "shed": _change(res["shed"]["goodput_rps"], gs), "shed_rps": res["shed"]["goodput_rps"],
            "met": (goodput(s["run"])["met"], goodput(res["shed"]["run"])["met"]),
            "dropped": res["shed"]["run"].shed,
            "oracle": oracle, "routable": routable,
            "queues": (_queues(s["run"]), _queues(oracle[2])) if routable and oracle else None,
            "fails": _fails(s["run"]), "fails_both": _fails(res["both"]["run"]),
            "slo8b": (goodput(s["run"], MLPERF_8B_SLO.ttft_s, MLPERF_8B_SLO.tpot_s)["goodput_rps"],
                      goodput(a["run"], MLPERF_8B_SLO.ttft_s, MLPERF_8B_SLO.tpot_s)["goodput_rps"],
                      goodput(res["both"]["run"], MLPERF_8B_SLO.ttft_s,
                              MLPERF_8B_SLO.tpot_s)["goodput_rps"]),
            "saturated": ",".join(s["saturated"]) or "-", "moves": a["moves"],
            "t_range": _t_range(a["run"]),
            "goal": ("met" if no_loss and (ga > gs or not memory) else
                     "LOSS" if not no_loss else
                     "no gain, routing could" if routable else "no gain, none by routing")}


def _t_range(run: RunResult) -> str:
    ts = [x.t_input for x in run.samples if x.t_input is not None]
    return f"{min(ts):,}..{max(ts):,}" if ts else "-"


def points(scale: float) -> list[tuple[str, str, Any, ServingConfig]]:
    """Every point of the evaluation, in the page's order: workload, load, a function making
    its requests (called only for the points run), configuration."""
    cfg = ServingConfig(mode="nelssa", devices=DEVICES)
    traces: dict[str, list] = {}

    def trace(name: str) -> list:
        if name not in traces:
            traces[name] = load_trace(TRACES / f"mooncake_{name}_trace.jsonl", hash_ids=True)
        return traces[name]

    head = max(100, round(1200 * scale))
    out: list[tuple[str, str, Any, ServingConfig]] = []
    for name in ("conversation", "synthetic"):
        out.append((f"{name}, whole", "trace timestamps", lambda n=name: trace(n), cfg))
        for rate in RATES:
            out.append((f"{name}, first {head}", f"Poisson {rate:g}/s",
                        lambda n=name, r=rate: poisson(trace(n)[:head], r), cfg))
    tight = replace(cfg, gpu_mem_util=0.5)
    for rate in (1.0, 1.5, 2.0, 3.0):
        out.append((f"conversation, first {head}, GPU memory 0.5", f"Poisson {rate:g}/s",
                    lambda r=rate: poisson(trace("conversation")[:head], r), tight))

    def burst(count: int, tokens: int) -> list:
        base = poisson(trace("conversation")[:head], 1.0)
        return inject_burst(base, 0.3 * base[-1].arrival_s, count, tokens, 512)

    for count, tokens in ((10, 65536), (20, 65536), (40, 32768)):
        out.append((f"conversation, first {head}, burst", f"1/s + {count} x {tokens // 1024}K",
                    lambda c=count, t=tokens: burst(c, t), cfg))
    for frac in FRACTIONS:
        out.append(("long-fraction (Fig. 16)", f"{frac:.0%} long, 2/s",
                    lambda f=frac: poisson(long_fraction_mix(trace("conversation"), f, LONG,
                                                             head, seed=0), 2.0), cfg))
    # the paper's Prefill Node (section 5): the decode GPU's steps are decode only, so its
    # memory and attention, which routing moves, are what binds
    for devices in (1, 2):
        dis = replace(cfg, devices=devices, prefill="disaggregated", prefill_gpus=8)
        for rate in (2.0, 4.0, 8.0):
            out.append((f"conversation, first {head}, disaggregated (8 prefill GPUs), "
                        f"{devices} PNM", f"Poisson {rate:g}/s",
                        lambda r=rate: poisson(trace("conversation")[:head], r), dis))
        for rate in (2.0, 4.0, 8.0):
            out.append((f"long-fraction 24 %, disaggregated (8 prefill GPUs), {devices} PNM",
                        f"Poisson {rate:g}/s",
                        lambda r=rate: poisson(long_fraction_mix(
                            trace("conversation"), 0.24, LONG, head, seed=0), r), dis))
    return out


def label(workload: str, load: str) -> str:
    """A point's name, as ``--points`` matches it."""
    return f"{workload} at {load}"


def select(pts: list, filters: list[str] | None) -> list:
    """The points whose name holds one of ``filters`` (case-insensitive), all without any; a
    filter that matches no point raises ``ValueError`` naming it."""
    if not filters:
        return pts
    names = [label(w, ld).lower() for w, ld, _, _ in pts]
    unknown = [f for f in filters if not any(f.lower() in n for n in names)]
    if unknown:
        raise ValueError(f"--points {', '.join(map(repr, unknown))} matches no point (names are "
                         f"'WORKLOAD at LOAD', e.g. {label(*pts[0][:2])!r})")
    return [p for p, n in zip(pts, names, strict=True) if any(f.lower() in n for f in filters)]


def evaluate(lm: LatencyModel, pts: list, log: list[str]) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    keep: dict[str, Any] = {}
    for workload, load, make, config in pts:
        t0 = time.perf_counter()
        reqs = make()
        res = static_vs_adaptive(lm, reqs, config, modes=MODES)
        s = res["static"]
        oracle = (_oracle(lm, reqs, config, s["sim"].t_input, s["run"])
                  if s["saturated"] else None)
        rows.append(_row(workload, load, len(reqs), res, oracle))
        if rows[-1]["static"] == 0:  # what sets TPOT where nothing meets the SLO
            rows[-1]["makeup"] = step_makeup(lm, reqs, config)
        keep[f"{workload}|{load}"] = res
        r = rows[-1]
        log.append(f"{label(workload, load)}: static {r['static']:.3f}, adaptive "
                   f"{r['adaptive']:.3f}, budget {_pct(r['budget'])}, both {_pct(r['both'])}, "
                   f"shed {r['shed_rps']:.3f} ({_pct(r['shed'])}, met {r['met'][0]} -> "
                   f"{r['met'][1]}, {r['dropped']} dropped), "
                   f"static TPOT P50 {r['tpot_ms']:.0f} ms, fails static {r['fails']}, both "
                   f"{r['fails_both']} ({time.perf_counter() - t0:.1f} s)")
        logger.info("%s", log[-1])
    return rows, keep


def vllm_check(lm: LatencyModel, scale: float) -> list[str]:
    """A few points through vLLM's own scheduler: do the differences hold?"""
    conv = load_trace(TRACES / "mooncake_conversation_trace.jsonl", hash_ids=True)
    head = max(100, round(300 * scale))
    base = ServingConfig(mode="nelssa", devices=DEVICES)
    dis = replace(base, devices=1, prefill="disaggregated", prefill_gpus=8)
    mix = long_fraction_mix(conv, 0.24, LONG, head, seed=0)
    modes = {k: MODES[k] for k in ("static", "adaptive", "both", "shed")}
    out = []
    for name, rate, cfg, reqs in (
            ("colocated, 4 PNM", 1.0, base, conv[:head]),
            ("colocated, 4 PNM", 2.0, base, conv[:head]),
            ("disaggregated, 1 PNM", 8.0, dis, conv[:head]),
            ("long-fraction 24 %, disaggregated, 2 PNM", 8.0, replace(dis, devices=2), mix)):
        reqs = poisson(reqs, rate)
        theirs = static_vs_adaptive(lm, reqs, replace(cfg, scheduler=SchedulerKind.VLLM),
                                    modes=modes)
        ours = static_vs_adaptive(lm, reqs, cfg, modes=modes)
        out.append(f"| {name} | {head} | {rate:g}/s | "
                   + " | ".join(f"{r[m]['goodput_rps']:.3f}" for r in (theirs, ours)
                                for m in modes) + " |")
    return out


def plot_run(res: dict[str, dict[str, Any]], path: Path, window_s: float = 20.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    for mode, style in (("static", "-"), ("adaptive", "--"), ("both", ":"), ("shed", "-.")):
        run: RunResult = res[mode]["run"]
        s = run.samples
        t = [x.t_s for x in s]
        ax[0].plot(t, [x.t_input for x in s], style, label=mode)
        ax[1].plot(t, [x.waiting - x.pnm_waiting for x in s], style, label=f"GPU, {mode}")
        ax[1].plot(t, [x.pnm_waiting for x in s], style, label=f"PNM, {mode}")
        ax[2].plot(t, [x.gpu_kv_used for x in s], style, label=f"GPU KV, {mode}")
        ax[2].plot(t, [x.pnm_mem_used for x in s], style, label=f"PNM memory, {mode}")
        met = sorted(r.finish_s for r in run.results if MLPERF_SLO.meets(r.ttft_s, r.tpot_s))
        edges = [i * window_s for i in range(int(run.end_s // window_s) + 1)]
        ax[3].step(edges, [sum(1 for f in met if e <= f < e + window_s) / window_s
                           for e in edges], style, where="post", label=mode)
    ax[0].set_ylabel("T_input (tokens)")
    ax[1].set_ylabel("requests waiting")
    ax[2].set_ylabel("memory in use")
    ax[3].set_ylabel(f"goodput (req/s, {window_s:g} s)")
    ax[3].set_xlabel("emulated time (s)")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_rates(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, name in zip(axes, ("conversation", "synthetic"), strict=True):
        pts = [r for r in rows if re.fullmatch(rf"{name}, first \d+", r["workload"])]
        rates = [float(r["load"].split()[1].rstrip("/s")) for r in pts]
        ax.plot(rates, [r["static"] for r in pts], "o-", label="static crossover")
        ax.plot(rates, [r["adaptive"] for r in pts], "s--", label="adaptive T_input")
        ax.plot(rates, [r["both_rps"] for r in pts], "^:",
                label="adaptive T_input + TPOT-held budget")
        ax.plot(rates, [r["shed_rps"] for r in pts], "v-.",
                label="... + shedding past the TTFT SLO")
        ax.set_title(f"{name} trace, Poisson")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("goodput (req/s)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _pct(x: float) -> str:
    return "n/a" if x == float("inf") else f"{x:+.1%}"


def _table_rows(rows: list[dict]) -> str:
    out = ""
    for r in rows:
        o = r["oracle"]
        best = "-" if o is None else f"{o[1]:.3f} ({o[0]:g}x, {_pct(_change(o[1], r['static']))})"
        out += (f"\n| {r['workload']} | {r['load']} | {r['requests']} | {r['static']:.3f} "
                f"| {r['adaptive']:.3f} | {_pct(r['change'])} | {best} | "
                f"{_pct(r['budget'])} | {_pct(r['both'])} | {r['shed_rps']:.3f} "
                f"({_pct(r['shed'])}) | {r['met'][0]} -> {r['met'][1]} ({r['dropped']}) | "
                f"{r['saturated']} | {r['tpot_ms']:.0f} | {r['fails']} | {r['fails_both']} | "
                + "/".join(f"{x:.3f}" for x in r["slo8b"])
                + f" | {r['moves']} | {r['t_range']} | {r['goal']} |")
    return out


def _names(rs: list[dict]) -> str:
    return "; ".join(f"{r['workload']} at {r['load']}" for r in rs) or "none"


def _reading(rows: list[dict], memory: list[dict], zero: list[dict], chunk: tuple[int, float],
             capped: tuple[int, float]) -> str:
    def span(key: str, fmt: str) -> str:
        if not zero:
            return "-"
        vals = [r["makeup"][key] for r in zero]
        lo, hi = format(min(vals), fmt), format(max(vals), fmt)
        return lo if lo == hi else f"{lo}-{hi}"

    return render(
        "adaptive.md", "reading", zero=_names(zero), chunk_share=span("chunk_share", ".1%"),
        step_ms=span("step_ms", ".0f"), pnm_ms=span("pnm_ms", ".1f"),
        attn_ms=span("gpu_attn_ms", ".1f"), chunk=f"{chunk[0]:,}",
        chunk_ms=f"{chunk[1] * 1e3:.0f}", capped=f"{capped[0]:,}",
        capped_ms=f"{capped[1] * 1e3:.0f}",
        none=_names([r for r in memory if r["goal"] == "no gain, none by routing"]),
        lower8=_names([r for r in rows if r["slo8b"][2] < (1 - TOLERANCE) * r["slo8b"][0]]))


def page(rows: list[dict], vllm: list[str], wall_s: float, argv: list[str],
         chunk: tuple[int, float], capped: tuple[int, float]) -> str:
    """docs/results/adaptive.md (templates/adaptive.md filled) but its last line (the runs
    plotted, which ``main`` appends)."""
    memory = [r for r in rows if any(t in r["saturated"] for t in ("gpu-kv", "pnm-mem"))]
    won = [r for r in memory if r["adaptive"] > r["static"]]
    routable = [r for r in memory if r["routable"]]
    missed = [r for r in routable if r not in won]
    zero = [r for r in rows if r["static"] == 0]
    lost = {key: [r for r in rows if r[key] < -TOLERANCE] for key in ("both", "budget", "shed")}
    losses = [r for r in rows if r["goal"] == "LOSS"]

    def where(rs: list[dict], key: str, head: str = ": ") -> str:
        return head + "; ".join(f"{r['workload']} at {r['load']} ({_pct(r[key])})"
                                for r in rs) if rs else ""

    queues = "".join(f"\n| {r['workload']} | {r['load']} | {r['oracle'][0]:g}x | "
                     f"{r['queues'][0]} | {r['queues'][1]} |"
                     for r in rows if r["queues"] and r["goal"] == "no gain, routing could")
    makeup = render("adaptive.md", "makeup", rows="".join(
        f"\n| {r['workload']} | {r['load']} | {m['step_ms']:.0f} | {m['chunk_share']:.1%} | "
        f"{m['pnm_ms']:.1f} | {m['gpu_attn_ms']:.1f} |"
        for r in zero for m in [r["makeup"]])) if zero else ""
    return render(
        "adaptive.md", "page", command=f"python scripts/adaptive_eval.py {' '.join(argv)}",
        wall_s=f"{wall_s:.0f}", load=f"{os.getloadavg()[0]:.1f}", gpu=GPU, devices=DEVICES,
        pnm=DEFAULT_PNM, model=DEFAULT_MODEL, link=DEFAULT_GPU_PNM_LINK,
        ttft_s=f"{MLPERF_SLO.ttft_s:g}", tpot_ms=f"{MLPERF_SLO.tpot_s * 1e3:g}",
        grid=", ".join(f"{f:g}x" for f in GRID), chunk=f"{chunk[0]:,}",
        capped=f"{capped[0]:,}", capped_ms=f"{capped[1] * 1e3:.0f}",
        chunk_ms=f"{chunk[1] * 1e3:.0f}", ttft8_s=f"{MLPERF_8B_SLO.ttft_s:g}",
        tpot8_ms=f"{MLPERF_8B_SLO.tpot_s * 1e3:g}", tolerance=f"{TOLERANCE:.0%}",
        won=len(won), memory=len(memory), losses=len(losses), rows=len(rows),
        losses_where=where(losses, "change"), unroutable=len(memory) - len(routable),
        routable=len(routable), routable_won=len(routable) - len(missed),
        missed_where=where(missed, "change", " (not at: ") + (")" if missed else ""),
        both_won=sum(r["both"] > 0 for r in memory), both_lost=len(lost["both"]),
        both_lost_where=where(lost["both"], "both"), budget_lost=len(lost["budget"]),
        budget_lost_where=where(lost["budget"], "budget"),
        shed_won=sum(r["shed"] > 0 for r in memory), shed_lost=len(lost["shed"]),
        shed_lost_where=where(lost["shed"], "shed"), zero_count=len(zero),
        zero_shed=", ".join(f"{r['shed_rps']:.2f}/s" for r in zero), table=_table_rows(rows),
        queues=queues, makeup=makeup, reading=_reading(rows, memory, zero, chunk, capped),
        vllm=render("adaptive.md", "vllm", rows="".join(f"\n{v}" for v in vllm))
        if vllm else "")


def write(rows: list[dict], vllm: list[str], out: Path, wall_s: float, argv: list[str],
          chunk: tuple[int, float], capped: tuple[int, float]) -> None:
    out.write_text(page(rows, vllm, wall_s, argv, chunk, capped))


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for adaptive.md and its plots (docs/results)")
    ap.add_argument("--percent", type=POSITIVE_INT, default=100,
                    help="size of the trace heads, in percent of the default (1200 requests)")
    ap.add_argument("--vllm", action="store_true",
                    help="also compare at four points through vLLM's scheduler (.venv-vllm)")
    ap.add_argument("--points", nargs="+", metavar="TEXT",
                    help="run only the points whose 'WORKLOAD at LOAD' holds one of these "
                         "(case-insensitive), print their rows and write no page unless --out "
                         "is given")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        pts = select(points(args.percent / 100), args.points)
    except ValueError as e:
        ap.error(str(e))
    lm = _latency()
    t0 = time.perf_counter()
    log: list[str] = []
    rows, keep = evaluate(lm, pts, log)
    if args.points and args.out is None:
        return 0
    out = Path(args.out or ROOT / "docs/results")
    out.mkdir(parents=True, exist_ok=True)
    best = max(keep, key=lambda k: (keep[k]["adaptive"]["goodput_rps"]
                                    - keep[k]["static"]["goodput_rps"]))
    plot_run(keep[best], out / "adaptive_run.png")
    zero = [k for k in keep if keep[k]["static"]["goodput_rps"] == 0] or list(keep)
    most = max(zero, key=lambda k: (keep[k]["shed"]["goodput_rps"]
                                    - keep[k]["static"]["goodput_rps"]))
    plot_run(keep[most], out / "adaptive_shed_run.png")
    plot_rates(rows, out / "adaptive_rates.png")
    vllm = vllm_check(lm, args.percent / 100) if args.vllm else []
    sim = keep[best]["static"]["sim"]
    budget = sim.cfg.max_batched_tokens
    capped = TpotBudget(budget, lambda n: sim.cost.step_s(0, [], [Chunk(0, n)])).capped
    write(rows, vllm, out / "adaptive.md", time.perf_counter() - t0,
          sys.argv[1:] if argv is None else argv,
          (budget, sim.cost.step_s(0, [], [Chunk(0, budget)])),
          (capped, sim.cost.step_s(0, [], [Chunk(0, capped)])))
    with (out / "adaptive.md").open("a") as f:
        f.write(render("adaptive.md", "plotted", best=best.replace("|", ", "),
                       most=most.replace("|", ", ")) + "\n")
    print(f"wrote {out / 'adaptive.md'}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
