"""Metrics of a run, as vLLM's benchmark defines them: decode throughput (output tokens per
second of the run), TTFT (arrival to first token), TPOT (per output token after the first),
their mean and percentiles; and the time series (running batch, GPU KV use, pending queue)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from nelssa.emu.policy.slo import MLPERF_SLO, Slo
from nelssa.emu.serving.sim import RunResult


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": float("nan"), "p50": float("nan"), "p95": float("nan"),
                "p99": float("nan")}
    a = np.asarray(values)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)), "p99": float(np.percentile(a, 99))}


def summarize(run: RunResult) -> dict[str, Any]:
    res = run.results
    tpot = [r.tpot_s for r in res if r.tpot_s is not None]
    return {
        "mode": run.config.mode,
        "t_input": run.t_input,
        "requests": len(res),
        "shed": run.shed,
        "pnm_requests": sum(1 for r in res if r.tier == "pnm"),
        "duration_s": run.end_s,
        "decode_tokens": run.decode_tokens,
        "decode_throughput_tps": run.decode_tokens / run.end_s if run.end_s else 0.0,
        "ttft_s": _stats([r.ttft_s for r in res]),
        "tpot_s": _stats(tpot),
        "preemptions": run.preemptions,
        "recompute_tokens": run.recompute_tokens,
        "migrations": run.migrations,
        "migrated_tokens": run.migrated_tokens,
        "steps": run.steps,
        "mean_running": (float(np.mean([s.running for s in run.samples]))
                         if run.samples else 0.0),
        "max_waiting": max((s.waiting for s in run.samples), default=0),
        "goodput": goodput(run),
        "t_input_moves": sum(1 for a, b in itertools.pairwise(run.samples)
                             if a.t_input != b.t_input),
        "t_input_range": _t_input_range(run),
    }


def _t_input_range(run: RunResult) -> list[int] | None:
    """The lowest and highest routing threshold of the run (they differ with ``adaptive``)."""
    seen = [s.t_input for s in run.samples if s.t_input is not None]
    if run.t_input is not None:
        seen.append(run.t_input)
    return [min(seen), max(seen)] if seen else None


def series(run: RunResult) -> dict[str, list[float]]:
    """Time series for plots and the JSON output."""
    s = run.samples
    dt = [b.t_s - a.t_s for a, b in itertools.pairwise(s)]
    tput = [b.decode_tokens / d if d > 0 else 0.0 for b, d in zip(s[1:], dt, strict=True)]
    return {"t_s": [x.t_s for x in s[1:]], "throughput_tps": tput,
            "running": [x.running for x in s[1:]], "waiting": [x.waiting for x in s[1:]],
            "gpu_kv_used": [x.gpu_kv_used for x in s[1:]],
            "pnm_running": [x.pnm_running for x in s[1:]]}


def goodput(run: RunResult, ttft_s: float = MLPERF_SLO.ttft_s,
            tpot_s: float = MLPERF_SLO.tpot_s) -> dict[str, float]:
    """Requests that met the SLO (TTFT <= ``ttft_s`` and their own TPOT <= ``tpot_s``; one
    of a single output token meets the TPOT part): how many, as a share of all (a request
    shed counts as a miss) and per second of the run: goodput as DistServe defines it. With
    shedding the run ends sooner, so compare counts between runs of the same arrivals."""
    res = run.results
    slo = Slo(ttft_s, tpot_s)
    met = sum(1 for r in res if slo.meets(r.ttft_s, r.tpot_s))
    n = len(res) + run.shed  # a request dropped missed it
    return {"met": met, "attainment": met / n if n else float("nan"),
            "goodput_rps": met / run.end_s if run.end_s else 0.0}
