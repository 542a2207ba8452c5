"""An adaptive routing threshold (the paper's next step, section 10; issue 26): an orchestrator
that watches what a real one can see of each tier and moves T_input when one tier is about to
saturate while the other has room, and back toward the static crossover once neither is short.

What it reacts to, each ``interval_s`` of (emulated) time, and why:

- the GPU tier: the share of its KV blocks in use, and how long its oldest waiting request has
  waited. A full KV pool means the next admissions wait or preempt; a long wait is the TTFT an
  SLO sees. Either one high: the GPU is saturating, so a lower T_input sends more requests to
  the PNM tier (the shortest of the long ones first: those just above the new threshold).
- the PNM tier: its utilization (running requests over what its devices hold) and the wait of
  its oldest queued request. Either one high: a higher T_input keeps more on the GPU.

A move needs one tier hot and the other cool (two thresholds per signal: a dead band, so a load
near one threshold does not flip the decision), and the threshold holds for ``cooldown_s``
after each move so the effect of a move is seen before the next. A move against the previous
one halves the step (as a bisection does): after a step change of load the threshold settles
on a value instead of cycling, since the steps shrink geometrically and stop below
``min_step``. After ``reset_s`` without a move the step is whole again, for the next change.
The bounds keep the threshold within ``lo_factor``..``hi_factor`` of the static crossover.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AdaptiveConfig:
    """Bounds, step and hysteresis of the adaptive threshold."""

    lo_factor: float = 0.25
    """The lowest threshold, as a share of the static crossover."""
    hi_factor: float = 4.0
    """The highest threshold, as a multiple of the static crossover."""
    step: float = 1.5
    """A move multiplies or divides the threshold by this (halved, as a log, on reversal)."""
    min_step: float = 1.02
    """A step this small or smaller is not taken: the threshold has settled."""
    interval_s: float = 1.0
    """How often the tiers are observed."""
    cooldown_s: float = 5.0
    """The threshold holds this long after a move."""
    reset_s: float = 60.0
    """After this long without a move, the step is whole again."""
    gpu_kv_hot: float = 0.92
    gpu_kv_cool: float = 0.75
    """Share of the GPU's KV blocks in use: hot at or above, cool at or below."""
    wait_hot_s: float = 2.0
    wait_cool_s: float = 0.5
    """Wait of a tier's oldest queued request: hot at or above, cool at or below."""
    pnm_util_hot: float = 0.95
    pnm_util_cool: float = 0.75
    """PNM tier utilization (running over capacity): hot at or above, cool at or below."""

    def __post_init__(self) -> None:
        def finite(*names: str) -> None:
            for n in names:
                v = getattr(self, n)
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ValueError(f"{n} must be a finite number, got {v!r}")
        finite(*(f.name for f in self.__dataclass_fields__.values()))  # type: ignore[attr-defined]
        if not 0 < self.lo_factor <= 1 <= self.hi_factor:
            raise ValueError(f"need 0 < lo_factor <= 1 <= hi_factor, got {self.lo_factor}, "
                             f"{self.hi_factor}")
        if not 1 < self.min_step < self.step:
            raise ValueError(f"need 1 < min_step < step, got {self.min_step}, {self.step}")
        for cool, hot in (("gpu_kv_cool", "gpu_kv_hot"), ("wait_cool_s", "wait_hot_s"),
                          ("pnm_util_cool", "pnm_util_hot")):
            if not 0 <= getattr(self, cool) < getattr(self, hot):
                raise ValueError(f"need 0 <= {cool} < {hot}, got {getattr(self, cool)}, "
                                 f"{getattr(self, hot)}")
        if not 0 < self.interval_s <= self.cooldown_s <= self.reset_s:
            raise ValueError("need 0 < interval_s <= cooldown_s <= reset_s")


@dataclass(frozen=True)
class TierLoad:
    """What an orchestrator observes of the two tiers at one moment."""

    t_s: float
    gpu_kv_used: float
    """Share of the GPU's KV blocks in use."""
    gpu_wait_s: float
    """How long the GPU tier's oldest waiting request has waited (0: none waits)."""
    pnm_utilization: float
    """PNM-tier requests running over what its devices hold."""
    pnm_wait_s: float
    """How long the PNM tier's oldest queued request has waited (0: none waits)."""


class Move(enum.IntEnum):
    DOWN = -1
    """T_input lowered: more requests to the PNM tier."""
    HOLD = 0
    UP = 1
    """T_input raised: more requests stay on the GPU."""


class AdaptiveThreshold:
    """T_input moved by the load of the tiers (module doc); starts at the static crossover."""

    def __init__(self, crossover: int, config: AdaptiveConfig | None = None) -> None:
        if isinstance(crossover, bool) or not isinstance(crossover, int) or crossover < 1:
            raise ValueError(f"crossover must be an integer >= 1 token, got {crossover!r}")
        self.config = c = config or AdaptiveConfig()
        self.crossover = crossover
        self.lo = max(1, math.floor(crossover * c.lo_factor))
        self.hi = math.ceil(crossover * c.hi_factor)
        self._value = float(crossover)
        self._log_step = math.log(c.step)
        self._last: Move = Move.HOLD
        self._moved_at = -math.inf
        self.history: list[tuple[float, int, Move]] = []
        """(time, threshold after, move) of each move."""

    @property
    def t_input(self) -> int:
        return round(self._value)

    def observe(self, load: TierLoad) -> Move:
        """Take one observation; the move made (the new threshold is ``t_input``)."""
        c = self.config
        if load.t_s - self._moved_at < c.cooldown_s:
            return Move.HOLD
        if load.t_s - self._moved_at >= c.reset_s:
            self._log_step, self._last = math.log(c.step), Move.HOLD
        gpu_hot = load.gpu_kv_used >= c.gpu_kv_hot or load.gpu_wait_s >= c.wait_hot_s
        gpu_cool = load.gpu_kv_used <= c.gpu_kv_cool and load.gpu_wait_s <= c.wait_cool_s
        pnm_hot = load.pnm_utilization >= c.pnm_util_hot or load.pnm_wait_s >= c.wait_hot_s
        pnm_cool = load.pnm_utilization <= c.pnm_util_cool and load.pnm_wait_s <= c.wait_cool_s
        homing = False
        if gpu_hot and pnm_cool:
            move = Move.DOWN
        elif pnm_hot and gpu_cool:
            move = Move.UP
        elif gpu_cool and pnm_cool and self.t_input != self.crossover:
            move = Move.UP if self._value < self.crossover else Move.DOWN
            homing = True  # neither tier short: back toward the crossover, not past it
        else:
            return Move.HOLD
        step = self._log_step / 2 if self._last not in (Move.HOLD, move) else self._log_step
        if step < math.log(c.min_step):
            return Move.HOLD  # settled
        target = self._value * math.exp(move * step)
        if homing:
            target = (min(target, self.crossover) if move == Move.UP
                      else max(target, self.crossover))
        new = min(max(target, self.lo), self.hi)
        if round(new) == self.t_input:
            return Move.HOLD  # at a bound
        self._value, self._last, self._moved_at = new, move, load.t_s
        self._log_step = step  # a reversal halved it (a bisection)
        self.history.append((load.t_s, self.t_input, move))
        return move
