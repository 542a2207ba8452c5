"""Shedding requests that have already missed their TTFT (issue 26): an admission knob of the
adaptive orchestrator, apart from T_input and from the token budget, and off by default.

Under deep compute overload (the synthetic trace at its timestamps or at 2.5/s and more, on
4 PNM devices) the GPU's prefill queue grows without bound: in FCFS order every request waits
past the TTFT SLO, and every step carries a full prefill chunk, so the requests that do decode
miss their TPOT too (``scripts/adaptive_eval.py``: 97-99 % of them miss both, goodput 0; the
PNM tier's attention is a few ms of a ~280 ms step, the rest is the chunk). No threshold
helps (every prefill is the GPU's) and the token budget alone cannot either (the queue's wait
lifts it). What a serving system does there is drop what can no longer meet its SLO, as
Mooncake's overload scheduling rejects requests early (Qin et al., FAST 2025) and clients time
out: a request still waiting for its first token ``ttft_share`` of the TTFT SLO after it
arrived has missed it (``ttft_share`` 1: a certain miss, whatever follows), so its prefill is
work for nothing and it is aborted, whichever tier it was routed to; the GPU's compute goes to
requests that can still meet it.

It needs nothing an orchestrator cannot see: each request's arrival and whether it has made
its first token. A request that made it is never dropped (its TPOT is not known to be lost
until its last token). Both schedulers take it the same way (``emu/serving/replay.py`` aborts
the jobs through the scheduler interface at each sample). With disaggregated prefill the first
token comes from a prefill GPU before the decode GPU sees the request, so there is nothing to
shed there; the co-simulation (``host/gpu``) replays decode steps only, nor there.

What sets TPOT at those points was measured before choosing this (``scripts/adaptive_eval.py``,
its step make-up table): not the PNM tier's per-step attention, which grows with the context
it decodes at once (a PNM-tier decode admission held to the TPOT SLO was the other candidate),
nor the GPU's decode batch, but the prefill chunks of an overloaded GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from nelssa.emu.policy.slo import MLPERF_SLO

T = TypeVar("T")


@dataclass(frozen=True)
class ShedConfig:
    """When a request waiting for its first token is dropped."""

    ttft_share: float = 1.0
    """Dropped once it has waited this share of ``ttft_s`` without a first token (1: it has
    missed the SLO; below 1 it drops requests that might still have met it)."""
    ttft_s: float = MLPERF_SLO.ttft_s
    """The TTFT SLO."""

    def __post_init__(self) -> None:
        for name in ("ttft_share", "ttft_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v!r}")


class Shedder:
    """Which of the requests waiting for their first token to drop (module doc)."""

    def __init__(self, config: ShedConfig | None = None) -> None:
        self.config = config or ShedConfig()
        self.dropped = 0
        """Requests dropped so far."""

    def late(self, now: float, waiting: Iterable[tuple[float, T]]) -> Iterator[T]:
        """Of ``waiting`` (each an arrival time and a request without its first token), those
        past their deadline at ``now``."""
        c = self.config
        limit = c.ttft_share * c.ttft_s
        for arrival_s, item in waiting:
            if now - arrival_s >= limit:
                self.dropped += 1
                yield item
