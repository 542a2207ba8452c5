"""Inter-token latency: when each request's output tokens are made, as ``vllm bench serve``
measures it (ITL, the gaps between a request's successive tokens).

``TimedReplay`` is the replay (``replay.Replay``) watching where tokens are credited: a step's
decodes (its end), the scheduler's token events (first tokens, prefill chunks that sample,
requests that finish) and runs of pure decode steps taken many at a time (``fastpath.py``).
A run's steps end where the replay priced them (``Replay.run_times``, a fleet's planned run's
as well), so every gap is the replay's own step time. A gap that spans a preemption
or a migration is one long gap, as a client streaming the request sees it. The gaps of a
request add up to its time from first token to last: their mean is its TPOT.

Per request they are kept as one array of seconds, 8 bytes a token.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Sequence
from operator import sub
from typing import TYPE_CHECKING, Any

import numpy as np

from nelssa.emu.serving.replay import Replay
from nelssa.emu.serving.results import RunResult

if TYPE_CHECKING:
    from nelssa.emu.serving.sim import ServingSim
    from nelssa.emu.serving.workload import TraceRequest


class TimedReplay(Replay):
    """A replay that records each request's gaps between its output tokens (``token_gaps``
    of its RunResult)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._gaps: dict[int, array] = {}
        """Each request's gaps by rid (the arrays its ``_Req.gaps`` holds)."""
        super().__init__(*args, **kwargs)
        self.out.token_gaps = self._gaps  # type: ignore[assignment]

    def pop_gaps(self, rid: int) -> array | None:
        """A finished request's gaps, no longer kept (a streamed run writes them out)."""
        return self._gaps.pop(rid, None)

    def _gap(self, rq: Any, t: float) -> None:
        """A token of ``rq`` at ``t``, after its first (the gaps start from its first token:
        its latest token's time until it has a gap)."""
        gaps = rq.gaps
        if gaps is None:
            gaps = rq.gaps = self._gaps[rq.req.rid] = array("d", (t - rq.first_token_s,))
        else:
            gaps.append(t - rq.last_s)
        rq.last_s = t

    def _step_cost(self, plan: Any) -> float:
        cost = super()._step_cost(plan)
        t = self.now + cost  # the step's decodes sample at its end
        for rq in self.decoded:  # (_gap, inlined: every step of a busy replay comes here)
            gaps = rq.gaps
            if gaps is None:
                gaps = rq.gaps = self._gaps[rq.req.rid] = array("d", (t - rq.first_token_s,))
            else:
                gaps.append(t - rq.last_s)
            rq.last_s = t
        return cost

    def _on_tokens(self, events: list[tuple[str, bool]], now: float) -> int:
        jobs = self.jobs
        for jid, _ in events:
            rq = jobs[jid].rq
            if rq.first_token_s is not None:  # (its first token starts the gaps)
                self._gap(rq, now)
        return super()._on_tokens(events, now)

    def _jobs_took(self, k: int, now: float) -> None:
        start = self._run_work[0]  # (when the run started)
        ends = self.run_times[:k]
        # (_gap, inlined: the run's gaps after each request's first are the same; the first
        # step's end as start plus that step, the sum stepping makes, not ends[0])
        first_end, tail = start + (ends[0] - start), array("d", map(sub, ends[1:], ends))
        all_gaps = self._gaps
        for job in self.run_jobs:
            job.outputs += k
            rq = job.rq
            rq.generated += k
            gaps = rq.gaps
            if gaps is None:
                gaps = rq.gaps = all_gaps[rq.req.rid] = array("d", (first_end
                                                                    - rq.first_token_s,))
            else:
                gaps.append(first_end - rq.last_s)
            gaps.extend(tail)
            rq.last_s = now


def timed_replay(sim: ServingSim, requests: list[TraceRequest],
                 progress: Callable[[float], None] | None = None, fast: bool = True
                 ) -> RunResult:
    """``replay.replay`` recording inter-token gaps."""
    t0, c0 = time.perf_counter(), time.process_time()
    run = TimedReplay(sim, requests, fast).run(progress)
    run.wall_s, run.cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return run


def request_itl(gaps: Sequence[float] | None, percentiles: tuple[float, ...]
                ) -> dict[str, float]:
    """One request's ITL: mean, max and ``percentiles`` of its gaps (linear interpolation
    between the closest ranks, numpy's default; empty with none)."""
    stats = itl_stats(gaps, percentiles)
    if stats is None:
        return {}
    mean, top, at = stats
    out = {"mean": mean, "max": top}
    for p, v in zip(percentiles, at, strict=True):
        out[pkey(p)] = v
    return out


def itl_stats(gaps: Sequence[float] | None, percentiles: tuple[float, ...]
              ) -> tuple[float, float, list[float]] | None:
    """``request_itl``'s figures as mean, max and the percentiles in order (None without
    gaps). Sorted by numpy, stably (equal gaps in their order, as Python's ``sorted`` keeps
    them; its runs of decode steps are sorted already), only the ranks the percentiles read
    taken back; the mean is ``math.fsum``'s, exact in any order."""
    if gaps is None or not len(gaps):
        return None
    values = (np.frombuffer(gaps, dtype=np.float64).copy()
              if isinstance(gaps, array) and gaps.typecode == "d"
              else np.array(gaps, dtype=np.float64))
    values.sort(kind="stable")
    last = len(values) - 1
    floor = math.floor
    ranks: list[int] = []
    fracs: list[float] = []
    for p in percentiles:
        x = p / 100 * last
        lo = floor(x)
        ranks += (lo, lo + 1 if lo < last else last)
        fracs.append(x - lo)
    at = list(map(values.item, ranks))
    return (math.fsum(gaps) / len(values), float(values[last]),
            [at[2 * i] + (at[2 * i + 1] - at[2 * i]) * f for i, f in enumerate(fracs)])


def expand(gaps: list[Sequence[float]]) -> np.ndarray:
    """Every gap of ``gaps`` (requests' gap arrays) as one array."""
    if not gaps:
        return np.empty(0)
    return np.concatenate([np.asarray(g, dtype=float) for g in gaps])


def pkey(p: float) -> str:
    """A percentile's key in a summary: ``p50``, ``p99.9``."""
    return f"p{p:g}"
