"""Our scheduler held to vLLM's: the same replays through both, the figures side by side.

Each regime is one replay (a workload and a configuration); ``compare`` runs it through our
scheduler here and through vLLM's in the vLLM environment (all regimes in one process there),
and reports each figure's relative difference against its goal. The benchmark
(``scripts/bench_vllm.py``) runs them at full size, the tests at a small one.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nelssa.emu.latency.hardware import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_PNM, HardwareCatalog
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK
from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.metrics import summarize
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.workload import TraceRequest, growing, load_trace, poisson

GOALS = {"decode_tps": 0.02, "tpot_p50": 0.05, "tpot_p99": 0.05, "preemptions": 0.10,
         "steps": 0.01}
"""Largest relative difference, ours against vLLM, per figure."""


@dataclass(frozen=True)
class Regime:
    name: str
    what: str
    config: ServingConfig
    requests: tuple[TraceRequest, ...]


def latency_model(gpu: str = DEFAULT_GPU) -> LatencyModel:
    cat = HardwareCatalog.load()
    return LatencyModel(cat.get("gpus", gpu), cat.get("pnm", DEFAULT_PNM),
                        cat.get("models", DEFAULT_MODEL), Sparsity(),
                        cat.get("links", DEFAULT_GPU_PNM_LINK))


def regimes(trace: Path, scale: float = 1.0) -> list[Regime]:
    """The regimes of the agreement table; ``scale`` shrinks their request counts."""
    def n(k: int) -> int:
        return max(20, int(k * scale))

    conv = load_trace(trace, n(2000), hash_ids=True)
    off = ServingConfig(prefix_caching=False)
    grow = poisson(growing(n(400), 2000, 9000, 2.0, seed=0), 1.0, seed=0)
    fig17 = replace(off, mode="nelssa", t_input=10000, prefill="disaggregated", prefill_gpus=8)
    return [
        Regime("light", "conversation trace by its timestamps, GPU only", off,
               tuple(conv[:n(400)])),
        Regime("saturated", "conversation trace at 8 requests/s (Poisson), GPU only", off,
               tuple(poisson(conv, 8.0, seed=1))),
        Regime("recompute", "Figure 17 setup: requests that grow (1:2), recompute preemption",
               fig17, tuple(grow)),
        Regime("mixed", "conversation trace at 8/s, NELSSA at T_input 32K (long ones on PNM)",
               replace(off, mode="nelssa", t_input=32768), tuple(poisson(conv, 8.0, seed=1))),
        Regime("migration", "Figure 17 setup with background migration",
               replace(fig17, migration=True), tuple(grow)),
        Regime("prefix", "conversation trace at 8/s, GPU only, prefix caching on",
               replace(off, prefix_caching=True), tuple(poisson(conv, 8.0, seed=1))),
    ]


def figures(run: Any) -> dict[str, float]:
    s = summarize(run)
    return {"decode_tps": s["decode_throughput_tps"], "tpot_p50": s["tpot_s"]["p50"],
            "tpot_p99": s["tpot_s"]["p99"], "preemptions": s["preemptions"],
            "steps": s["steps"], "wall_s": run.wall_s, "cpu_s": run.cpu_s}


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(b), 1e-12)


def compare(regs: list[Regime], lm: LatencyModel | None = None,
            repeat: int = 1) -> list[dict[str, Any]]:
    """Each regime through both schedulers: figures, relative differences, goals met. With
    ``repeat`` above 1, ours replays every regime once before vLLM's replays and ``repeat - 1``
    times after them, and its wall and CPU times are the medians (a busy machine's bursts then
    weigh on ours no more than on vLLM's one long run); its figures must be the same each
    time."""
    from nelssa.emu.serving.vllm_env import run_many_in_vllm_env

    lm = lm or latency_model()

    def ours_once() -> list[Any]:
        return [ServingSim(lm, r.config).run(list(r.requests)) for r in regs]

    runs = [ours_once()]
    theirs = run_many_in_vllm_env([
        (ServingSim(lm, replace(r.config, scheduler=SchedulerKind.VLLM)), list(r.requests))
        for r in regs])
    runs += [ours_once() for _ in range(repeat - 1)]
    ours = []
    for each in zip(*runs, strict=True):
        first = each[0]
        same = [{k: v for k, v in x.to_json().items() if k not in ("wall_s", "cpu_s")}
                for x in each]
        if any(x != same[0] for x in same):
            raise RuntimeError("our scheduler gave different figures for the same replay")
        first.wall_s = statistics.median(x.wall_s for x in each)
        first.cpu_s = statistics.median(x.cpu_s for x in each)
        ours.append(first)
    rows = []
    for r, a, b in zip(regs, ours, theirs, strict=True):
        fa, fb = figures(a), figures(b)
        diff = {k: _rel(fa[k], fb[k]) for k in GOALS}
        rows.append({"regime": r.name, "what": r.what, "requests": len(r.requests),
                     "ours": fa, "vllm": fb, "diff": diff,
                     "met": {k: diff[k] <= g for k, g in GOALS.items()},
                     "speedup": fb["wall_s"] / max(fa["wall_s"], 1e-9),
                     "cpu_speedup": fb["cpu_s"] / max(fa["cpu_s"], 1e-9)})
    return rows
