"""A step's token budget held to the TPOT SLO while requests decode (issue 26 item 2): a scheduling
knob of the adaptive orchestrator, separate from T_input and reported apart from it.

With chunked prefill every step carries the decode batch and, while prompts wait, a prefill
chunk as large as the token budget (vLLM's ``max_num_batched_tokens``, 8,192 by default). By the
cost model a step carrying a full 8,192-token chunk takes about 235 ms on an H100 NVL with
llama-3-8b: more than the TPOT SLO (175 ms) by itself, so under a prefill backlog every decoding
request misses its TPOT whatever T_input is. Routing cannot relieve it (every prefill is the
GPU's); the size of the chunk can. The rule is Sarathi-Serve's (Agrawal et al., OSDI 2024): the
token budget is the largest one whose step stays within a share of the time-between-tokens SLO,
found from the step's cost (here the cost model; in a deployment a profile). A chunk's own step
grows about linearly with its tokens from a few hundred on (the GEMMs are compute-bound); what a
smaller chunk costs is the decode batch's part of each step, spread over fewer prefill tokens,
so prefill throughput falls while many requests decode.

So it applies only while some request decodes (with nobody decoding no TPOT is at stake) and
while the oldest request waiting for its first token has waited less than the TTFT SLO
(``ttft_share``): past it TTFT is at stake instead, and the whole budget drains the prefill
queue. Measured without that lift (``scripts/adaptive_eval.py`` with ``ttft_share`` very large),
the cap lost goodput under deep overload (the conversation head at 3/s: -63 %, the whole trace
at its timestamps: -85 %, the long-fraction sweep at 20 %: -23 %) while it gained at moderate
load; a lift at half the TTFT SLO gained less at moderate load than one at the SLO.
The lift at the SLO alone came late where the queue was falling behind (the conversation head
at 3/s: -2.1 %, its oldest prefill wait climbing for tens of seconds before it reached 6 s), so
the cap is lifted too while that wait has risen steadily over the last few seconds from a
quarter of the SLO (``rise_share``, ``rise_rate``, ``trend_s``): there +6.6 %, with every
colocated point still gaining (``scripts/adaptive_eval.py``, docs/results/adaptive.md).

Both schedulers take it the same way (``emu/serving/replay.py`` sets the budget before each
step: ours through its ``budget``, vLLM's through its scheduler's ``max_num_scheduled_tokens``;
the prefill wait is observed each sample, as the adaptive threshold's). With disaggregated
prefill the decode GPU's steps carry no prefill chunks (a request's KV arrives, counted in the
budget at no cost), so it is off there: capped, it only slowed those arrivals (in the same
measurement, -2 to -3 % at the disaggregated points with one PNM device). The co-simulation
(``host/gpu``) replays decode steps only, so the knob has nothing to act on there either.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from nelssa.emu.policy.slo import MLPERF_SLO


@dataclass(frozen=True)
class BudgetConfig:
    """How the token budget is held to the TPOT SLO while requests decode."""

    share: float = 0.5
    """A step carrying a whole budget of prefill takes at most this share of ``tpot_s`` (the
    rest is left to the decode batch's own part of the step and to steps of more than one
    chunk)."""
    floor: int = 256
    """The smallest budget it goes down to (a step's fixed cost, its weights read, dominates
    below a few hundred tokens)."""
    ttft_share: float = 1.0
    """The cap is lifted while the oldest request waiting for its first token has waited this
    share of ``ttft_s`` or more: TTFT is then at stake, and the whole budget drains the prefill
    queue (each step's decode batch is then spread over more prefill tokens)."""
    rise_share: float = 0.25
    rise_rate: float = 0.5
    trend_s: float = 5.0
    """The cap is lifted too while that wait is at least ``rise_share`` of ``ttft_s`` and has
    grown by ``rise_rate`` seconds a second or more over the last ``trend_s`` (the prefill
    queue falling behind: the cap would only bring its TTFT misses on later)."""
    tpot_s: float = MLPERF_SLO.tpot_s
    """The TPOT SLO a step is held to."""
    ttft_s: float = MLPERF_SLO.ttft_s
    """The TTFT SLO the prefill queue is held to."""

    def __post_init__(self) -> None:
        for name in ("share", "ttft_share", "rise_share", "rise_rate", "trend_s", "tpot_s",
                     "ttft_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not 0 < self.share <= 1 or not self.tpot_s > 0 or not self.ttft_s > 0:
            raise ValueError(f"need 0 < share <= 1, tpot_s > 0 and ttft_s > 0, got "
                             f"{self.share}, {self.tpot_s}, {self.ttft_s}")
        for name in ("ttft_share", "rise_share", "rise_rate", "trend_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if isinstance(self.floor, bool) or not isinstance(self.floor, int) or self.floor < 1:
            raise ValueError(f"floor must be an integer >= 1 token, got {self.floor!r}")


class TpotBudget:
    """The token budget of a step: the largest of ``full``, ``full / 2``, ... (down to
    ``floor``) whose prefill chunk's step, ``chunk_s``, is within ``share`` of the TPOT SLO
    while requests decode and the prefill queue is within ``ttft_share`` of the TTFT SLO;
    ``full`` otherwise."""

    def __init__(self, full: int, chunk_s: Callable[[int], float],
                 config: BudgetConfig | None = None) -> None:
        if isinstance(full, bool) or not isinstance(full, int) or full < 1:
            raise ValueError(f"full must be an integer >= 1 token, got {full!r}")
        self.config = c = config or BudgetConfig()
        self.full = full
        limit = c.share * c.tpot_s
        tokens = full
        while tokens > c.floor and chunk_s(tokens) > limit:
            tokens = max(c.floor, tokens // 2)
        self.capped = tokens
        """The budget while requests decode."""
        self._waits: deque[tuple[float, float]] = deque()
        self.rising = False
        """The prefill queue's wait was rising at the last observation."""

    def observe(self, now: float, wait_s: float) -> None:
        """The oldest prefill wait at ``now`` (observed each sample): whether it is rising."""
        c = self.config
        waits = self._waits
        waits.append((now, wait_s))
        while len(waits) > 1 and now - waits[1][0] >= c.trend_s:
            waits.popleft()
        t0, w0 = waits[0]
        self.rising = (now - t0 >= c.trend_s and wait_s >= c.rise_share * c.ttft_s
                       and wait_s - w0 >= c.rise_rate * (now - t0))

    def tokens(self, decoding: bool, wait_s: float = 0.0) -> int:
        """The budget of the next step; ``decoding``: some request is decoding; ``wait_s``: how
        long the oldest request waiting for its first token has waited (as last observed)."""
        c = self.config
        return (self.capped if decoding and wait_s < c.ttft_share * c.ttft_s and not self.rising
                else self.full)
