"""Metrics of a run, as ``vllm bench serve`` defines them: TTFT (arrival to first token), TPOT
(per output token after the first, each request's own mean), ITL (the gaps between a request's
successive tokens, over every token of the run), end-to-end latency (arrival to last token),
their mean and chosen percentiles; request, input, output and total token throughput over the
run's duration; decode throughput (output tokens after the first, per second); goodput under an
SLO; whether the run was overloaded; and the time series (running batch, GPU KV use, pending
queue)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from nelssa.emu.policy.slo import MLPERF_SLO
from nelssa.emu.serving.config import MetricsConfig
from nelssa.emu.serving.itl import expand, pkey
from nelssa.emu.serving.sim import RequestResult, RunResult

OVERLOAD_BACKLOG = 0.1
"""An overloaded run's queue grows, over the second half of the arrivals, by more than this
share of the requests that arrived in it."""
OVERLOAD_KEEP_UP = 0.9
"""...and completes fewer than this share of them in that time."""
OVERLOAD_MIN_REQUESTS = 20
"""Fewer finished requests than this say too little to call a run overloaded."""


def _stats(values: Any, percentiles: tuple[float, ...] = (50.0, 95.0, 99.0)
           ) -> dict[str, float]:
    keys = ["mean", *map(pkey, percentiles)]
    a = np.asarray(values, dtype=float)
    if not a.size:
        return dict.fromkeys(keys, float("nan"))
    out = {"mean": float(a.mean())}
    for p, v in zip(percentiles, np.percentile(a, percentiles), strict=True):
        out[pkey(p)] = float(v)
    return out


def summarize(run: RunResult, metrics: MetricsConfig | None = None) -> dict[str, Any]:
    m = metrics or MetricsConfig()
    pct = m.all_percentiles
    res = run.results
    tpot = [r.tpot_s for r in res if r.tpot_s is not None]
    dur = run.end_s
    inp = sum(r.input_len for r in res)
    outp = sum(r.output_len for r in res)
    gaps = run.token_gaps
    return {
        "mode": run.config.mode,
        "t_input": run.t_input,
        "requests": len(res),
        "rejected": run.rejected,
        "shed": run.shed,
        "pnm_requests": sum(1 for r in res if r.tier == "pnm"),
        "duration_s": dur,
        "decode_tokens": run.decode_tokens,
        "decode_throughput_tps": run.decode_tokens / dur if dur else 0.0,
        "input_tokens": inp,
        "output_tokens": outp,
        "request_throughput_rps": len(res) / dur if dur else 0.0,
        "input_throughput_tps": inp / dur if dur else 0.0,
        "output_throughput_tps": outp / dur if dur else 0.0,
        "total_token_throughput_tps": (inp + outp) / dur if dur else 0.0,
        "ttft_s": _stats([r.ttft_s for r in res], pct),
        "tpot_s": _stats(tpot, pct),
        "itl_s": (_stats(expand([gaps[r.rid] for r in res if r.rid in gaps]), pct)
                  if gaps is not None else None),
        "e2el_s": _stats([r.finish_s - r.arrival_s for r in res], pct),
        "percentiles": list(m.percentiles),
        "preemptions": run.preemptions,
        "recompute_tokens": run.recompute_tokens,
        "migrations": run.migrations,
        "migrated_tokens": run.migrated_tokens,
        "steps": run.steps,
        "mean_running": (float(np.mean([s.running for s in run.samples]))
                         if run.samples else 0.0),
        "max_waiting": max((s.waiting for s in run.samples), default=0),
        "goodput": goodput(run, m.goodput_ttft_s, m.goodput_tpot_s, m.goodput_e2el_s),
        "overload": overload(run),
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


def slo_met(r: RequestResult, ttft_s: float | None, tpot_s: float | None,
            e2el_s: float | None) -> bool:
    """Whether request ``r`` met the SLO's parts given (``goodput``'s test)."""
    return ((ttft_s is None or r.ttft_s <= ttft_s)
            and (tpot_s is None or r.tpot_s is None or r.tpot_s <= tpot_s)
            and (e2el_s is None or r.finish_s - r.arrival_s <= e2el_s))


def goodput(run: RunResult, ttft_s: float | None = MLPERF_SLO.ttft_s,
            tpot_s: float | None = MLPERF_SLO.tpot_s, e2el_s: float | None = None
            ) -> dict[str, Any]:
    """Requests that met the SLO (TTFT <= ``ttft_s``, their own TPOT <= ``tpot_s`` (one of a
    single output token meets the TPOT part), end-to-end latency <= ``e2el_s``; a part that is
    None is not checked):
    how many, as a share of all (a request shed or rejected counts as a miss) and per second
    of the run: goodput as DistServe and ``vllm bench serve --goodput`` define it. With
    shedding the run ends sooner, so compare counts between runs of the same arrivals."""
    res = run.results
    met = sum(1 for r in res if slo_met(r, ttft_s, tpot_s, e2el_s))
    n = len(res) + run.shed + run.rejected  # a request dropped or refused missed it
    return {"met": met, "attainment": met / n if n else float("nan"),
            "goodput_rps": met / run.end_s if run.end_s else 0.0,
            "slo": {"ttft_s": ttft_s, "tpot_s": tpot_s, "e2el_s": e2el_s}}


def overload(run: RunResult) -> dict[str, Any]:
    """Whether the run's queue grew without bound: over the second half of its arrivals, the
    waiting queue's least-squares trend grew by more than ``OVERLOAD_BACKLOG`` of the requests
    that arrived then, and fewer than ``OVERLOAD_KEEP_UP`` of that many completed. A stable
    system completes about what arrives and its queue has no trend; an overloaded one's queue
    grows by (arrival rate - service rate) x time, so its latencies grow with the trace's
    length and say nothing of the system. ``overloaded`` is None where the run cannot tell
    (too few requests, or all arriving at once)."""
    res = run.results
    arrivals = sorted(r.arrival_s for r in res)
    out: dict[str, Any] = {"overloaded": None}
    if len(arrivals) < OVERLOAD_MIN_REQUESTS or arrivals[-1] <= arrivals[0]:
        return out
    t0, t1 = arrivals[0], arrivals[-1]
    mid = (t0 + t1) / 2
    window = t1 - mid
    came = sum(1 for t in arrivals if mid < t <= t1)
    done = sum(1 for r in res if mid < r.finish_s <= t1)
    pts = [(s.t_s, s.waiting) for s in run.samples if mid <= s.t_s <= t1]
    if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
        t, q = np.asarray(pts, dtype=float).T
        slope = float(np.polyfit(t, q, 1)[0])
    else:
        slope = 0.0
    growth = slope * window
    out.update(overloaded=bool(came and growth > OVERLOAD_BACKLOG * came
                               and done < OVERLOAD_KEEP_UP * came),
               window_s=[mid, t1], arrived=came, completed=done,
               arrival_rps=came / window, completion_rps=done / window,
               queue_growth=growth, queue_slope_per_s=slope)
    return out
