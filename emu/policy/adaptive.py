"""An adaptive routing threshold (the paper's next step, section 10; issue 26): an orchestrator
that watches what a real one can see of each tier and moves T_input when a tier is short of
something routing can give it, and back toward the static crossover once neither is.

Routing decides only where a request's KV lives and whose bandwidth its attention reads. It
cannot relieve the GPU's compute (every prefill and every GEMM stays there), so a wait for the
GPU's token budget is no reason to move: the first version reacted to queue waits and gained
nothing (compute-bound waits). What it reacts to now, each ``interval_s`` of (emulated) time:

- **GPU memory.** The share of its KV blocks in use, and preemptions since the last look. A
  full pool preempts (recompute: the GPU does the prefill again) or holds admissions back.
  Lower T_input: the shortest long requests (those just above the new threshold) keep only
  their window and centroids on the GPU.
- **PNM memory.** The share of the PNM tier's capacity held, and the wait of the oldest
  request queued for it (it waits for memory only). After a lowering, a full PNM tier brings
  the threshold back toward the crossover. Past the crossover a full PNM tier raises it only
  while the GPU is clear of pressure (``raise_on_pnm_memory``): its KV use at or below
  ``raise_kv_room``, no preemption, no queue for its compute, decode steps at or below
  ``step_cool`` of the SLO, all held ``raise_hold_s`` since the last move, and by at most
  ``raise_step``; at the first sign of GPU pressure (KV hot, a preemption, slow steps, a compute
  queue) it comes back toward the crossover. The first, unguarded version (a raise whenever
  the GPU's KV had room) lost goodput (``scripts/adaptive_eval.py``): with colocated prefill
  by 33 % (the long-fraction sweep at 20 %), where it rose in the short gaps between prefill
  chunks and the GPU's compute was what bound, and with disaggregated prefill by 23 % (2 PNM
  devices, 8/s), where it ratcheted to 4x with nothing to bring it down and the GPU preempted
  (a static 3x already does). Guarded, the latter gains (docs/results/adaptive.md). Routing
  again the requests already queued for the PNM tier (not started) lost too: they crowd the
  GPU's queue at once.
- **Per-step time.** The steps the decoding requests saw against the TPOT SLO
  (``emu/policy/slo.py``). When they near it, the tier whose attention sets the decode step
  (the two overlap: the longer one) gives requests to the other: the GPU's dense attention
  over its contexts, or the PNM tier's sparse attention and its T_comm. When neither sets it
  (the GEMMs, prefill chunks: compute), the GPU has no room (its dense attention would add
  to the step), while the PNM tier has if its memory does (its attention overlaps the
  GPU's). Steps ``overload`` times the SLO or more: compute is overloaded, every decoding
  request misses its TPOT whatever the split, and nothing moves (measured: moving there only
  reshuffled who failed, and lost).

A move needs one tier short and the other with room (two levels per signal, a dead band, so a
load near one level does not flip the decision); the threshold holds for ``cooldown_s`` after
each move so the effect of a move is seen before the next. A move against the previous one
halves the step (as a bisection does): after a step change of load the threshold settles on a
value instead of cycling, since the steps shrink geometrically and stop below ``min_step``.
After ``reset_s`` without a move the step is whole again, for the next change. It goes back
toward the crossover only after both tiers have had room for ``home_s`` (and not past it).
The bounds keep the threshold within ``lo_factor``..``hi_factor`` of the static crossover.
"""

from __future__ import annotations

import enum
import math
from dataclasses import KW_ONLY, dataclass

from nelssa.emu.policy.slo import MLPERF_SLO


@dataclass(frozen=True)
class AdaptiveConfig:
    """Bounds, step and hysteresis of the adaptive threshold, and the levels it reacts at."""

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
    home_s: float = 30.0
    """Both tiers with room this long: the threshold steps back toward the crossover."""
    gpu_kv_hot: float = 0.92
    gpu_kv_cool: float = 0.75
    """Share of the GPU's KV blocks in use: short at or above (or any preemption), room at or
    below (and no preemption)."""
    pnm_mem_hot: float = 0.95
    pnm_mem_cool: float = 0.80
    """Share of the PNM tier's memory held: short at or above, room at or below."""
    wait_hot_s: float = 2.0
    wait_cool_s: float = 0.5
    """Wait of the oldest request queued for the PNM tier's memory: short at or above, room at
    or below. The GPU's compute queue at or above ``wait_hot_s``: no room to take more."""
    pnm_load_hot: float = 1.0
    pnm_load_cool: float = 0.7
    """The PNM tier's device load (``TierLoad.pnm_load``: the offered loads of the instances
    sharing its devices added up, 1 = always busy; a fleet's orchestrator reports it, a single
    instance reports 0): full at or above (its attention queues behind the others' work), room
    at or below."""
    raise_on_pnm_memory: bool = True
    """Raise the threshold when the PNM tier's memory is full, guarded (module doc): only while
    the GPU has clear room, by ``raise_step``, and back toward the crossover at the first sign
    of GPU pressure."""
    raise_step: float = 1.2
    """A raise on a full PNM tier multiplies the threshold by at most this."""
    raise_hold_s: float = 10.0
    """... and the GPU's clear room held this long without a break, and since the last move (a
    raise's requests take their KV over their decode: the next is taken once that shows)."""
    raise_kv_room: float = 0.5
    """A raise on a full PNM tier needs the GPU's KV use at or below this share (and no
    preemption, no compute queue at ``wait_hot_s``, decode steps at or below ``step_cool``)."""
    tpot_s: float = MLPERF_SLO.tpot_s
    """The TPOT SLO a decode step is held to."""
    step_hot: float = 0.8
    step_cool: float = 0.2
    """A decode step at or above this share of ``tpot_s`` is slow, at or below it has room."""
    overload: float = 2.0
    """Steps this many times ``tpot_s`` or more: the GPU's compute is overloaded (prefill
    chunks), every decoding request misses its TPOT whatever the split, and nothing moves."""
    lead: float = 1.25
    attn_share: float = 0.2
    """A tier sets the step when its attention takes at least ``lead`` times the other's, and
    the difference is at least ``attn_share`` of the step (else the step is the GEMMs' and
    the prefill chunks', which routing does not move)."""

    def __post_init__(self) -> None:
        def finite(*names: str) -> None:
            for n in names:
                v = getattr(self, n)
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ValueError(f"{n} must be a finite number, got {v!r}")
        finite(*(f.name for f in self.__dataclass_fields__.values()  # type: ignore[attr-defined]
                 if f.name != "raise_on_pnm_memory"))
        if not 0 < self.lo_factor <= 1 <= self.hi_factor:
            raise ValueError(f"need 0 < lo_factor <= 1 <= hi_factor, got {self.lo_factor}, "
                             f"{self.hi_factor}")
        if not 1 < self.min_step < self.step or not 1 < self.min_step < self.raise_step:
            raise ValueError(f"need 1 < min_step < step and min_step < raise_step, got "
                             f"{self.min_step}, {self.step}, {self.raise_step}")
        if not 0 < self.raise_kv_room <= self.gpu_kv_cool:
            raise ValueError(f"need 0 < raise_kv_room <= gpu_kv_cool, got {self.raise_kv_room}")
        for cool, hot in (("gpu_kv_cool", "gpu_kv_hot"), ("wait_cool_s", "wait_hot_s"),
                          ("pnm_mem_cool", "pnm_mem_hot"), ("step_cool", "step_hot"),
                          ("pnm_load_cool", "pnm_load_hot")):
            if not 0 <= getattr(self, cool) < getattr(self, hot):
                raise ValueError(f"need 0 <= {cool} < {hot}, got {getattr(self, cool)}, "
                                 f"{getattr(self, hot)}")
        if not 0 < self.interval_s <= self.cooldown_s <= self.reset_s:
            raise ValueError("need 0 < interval_s <= cooldown_s <= reset_s")
        if (not self.home_s >= 0 or not self.raise_hold_s >= 0 or not self.tpot_s > 0
                or not self.lead >= 1 or not self.overload > self.step_hot):
            raise ValueError(f"need home_s >= 0, raise_hold_s >= 0, tpot_s > 0, lead >= 1 and "
                             f"overload > step_hot, got {self.home_s}, {self.raise_hold_s}, "
                             f"{self.tpot_s}, {self.lead}, {self.overload}")


@dataclass(frozen=True)
class TierLoad:
    """What an orchestrator observes of the two tiers at one moment."""

    t_s: float
    gpu_kv_used: float
    """Share of the GPU's KV blocks in use."""
    gpu_preempted: int
    """Requests preempted (GPU KV full) since the last observation."""
    pnm_mem_used: float
    """Share of the PNM tier's memory held."""
    pnm_wait_s: float
    """How long the oldest request queued for the PNM tier's memory has waited (0: none)."""
    _: KW_ONLY
    gpu_wait_s: float = 0.0
    """How long the oldest request waiting for the GPU (its prefill) has waited: compute, which
    routing cannot give; it only keeps the threshold from rising (more GPU-tier requests would
    not wait for memory on the PNM tier, but for compute here)."""
    gpu_attn_s: float = 0.0
    """The GPU's attention in one decode step of the running batch (GPU-tier contexts, PNM-tier
    windows)."""
    pnm_s: float = 0.0
    """The PNM tier's part of that step (its sparse attention, T_comm), overlapping the GPU's."""
    step_s: float = 0.0
    """A step as the decoding requests see it (the mean since the last observation, prefill
    chunks included: their TPOT); 0: nothing decodes."""
    pnm_load: float = 0.0
    """The PNM tier's device load where several instances share its devices (1 = always busy;
    ``emu/policy/orchestrator.py``); 0 where nobody else loads them (a single instance)."""


class Move(enum.IntEnum):
    DOWN = -1
    """T_input lowered: more requests to the PNM tier."""
    HOLD = 0
    UP = 1
    """T_input raised: more requests stay on the GPU."""


@dataclass(frozen=True)
class Pressure:
    """One observation read against the levels: which tier is short, which has room."""

    gpu_short: bool
    gpu_room: bool
    pnm_short: bool
    pnm_room: bool
    pnm_full: bool = False
    """The PNM tier's memory full, or its queue's oldest waiting at ``wait_hot_s``."""
    gpu_clear: bool = False
    """The GPU has clear room for more requests (``raise_kv_room``, no preemption, no compute
    queue, calm decode steps): a full PNM tier may raise the threshold."""
    gpu_strain: bool = False
    """Any sign of pressure on the GPU (its KV hot or a preemption, slow decode steps, a compute
    queue at ``wait_hot_s``): a threshold above the crossover comes back."""

    @classmethod
    def of(cls, load: TierLoad, c: AdaptiveConfig) -> Pressure:
        slow = load.step_s >= c.step_hot * c.tpot_s
        calm = load.step_s <= c.step_cool * c.tpot_s
        # the overlapped attention routing can shorten: the longer side, by what it leads by
        gap = abs(load.gpu_attn_s - load.pnm_s) >= c.attn_share * load.step_s
        gpu_sets = gap and load.gpu_attn_s >= c.lead * load.pnm_s
        pnm_sets = gap and load.pnm_s >= c.lead * load.gpu_attn_s
        preempts = load.gpu_preempted > 0
        return cls(
            gpu_short=load.gpu_kv_used >= c.gpu_kv_hot or preempts or (slow and gpu_sets),
            gpu_room=(load.gpu_kv_used <= c.gpu_kv_cool and not preempts
                      and load.gpu_wait_s < c.wait_hot_s and (calm or pnm_sets)),
            pnm_short=slow and pnm_sets,
            pnm_room=(load.pnm_mem_used <= c.pnm_mem_cool and load.pnm_wait_s <= c.wait_cool_s
                      and load.pnm_load <= c.pnm_load_cool and (calm or not pnm_sets)),
            pnm_full=(load.pnm_mem_used >= c.pnm_mem_hot or load.pnm_wait_s >= c.wait_hot_s
                      or load.pnm_load >= c.pnm_load_hot),
            gpu_clear=(load.gpu_kv_used <= c.raise_kv_room and not preempts and calm
                       and load.gpu_wait_s < c.wait_hot_s),
            gpu_strain=(load.gpu_kv_used >= c.gpu_kv_hot or preempts or slow
                        or load.gpu_wait_s >= c.wait_hot_s))


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
        self._seen_at = -math.inf
        self._calm_since: float | None = None
        self._clear_since: float | None = None
        self.history: list[tuple[float, int, Move]] = []
        """(time, threshold after, move) of each move."""

    @property
    def t_input(self) -> int:
        return round(self._value)

    def due(self, t_s: float) -> bool:
        """An observation is due at ``t_s`` (one each ``interval_s``)."""
        return t_s - self._seen_at >= self.config.interval_s

    def observe(self, load: TierLoad) -> Move:
        """Take one observation; the move made (the new threshold is ``t_input``)."""
        c = self.config
        self._seen_at = load.t_s
        p = Pressure.of(load, c)
        calm = p.gpu_room and p.pnm_room
        if not calm:
            self._calm_since = None
        elif self._calm_since is None:
            self._calm_since = load.t_s
        if not p.gpu_clear:
            self._clear_since = None
        elif self._clear_since is None:
            self._clear_since = load.t_s
        if load.t_s - self._moved_at < c.cooldown_s:
            return Move.HOLD
        if load.t_s - self._moved_at >= c.reset_s:
            self._log_step, self._last = math.log(c.step), Move.HOLD
        if load.step_s >= c.overload * c.tpot_s:
            return Move.HOLD  # compute-bound far past the SLO: routing only reshuffles who fails
        homing, cap = False, self._log_step
        above = self._value > self.crossover
        if p.gpu_short and p.pnm_room:
            move = Move.DOWN
        elif p.pnm_short and p.gpu_room:
            move = Move.UP
        elif above and p.gpu_strain:
            move, homing = Move.DOWN, True  # a raise met GPU pressure: back, to the crossover
        elif p.pnm_full and self._value < self.crossover and not p.gpu_short:
            move, homing = Move.UP, True  # it lowered too far: back, up to the crossover
        elif (c.raise_on_pnm_memory and p.pnm_full and self._clear_since is not None
              and load.t_s - max(self._clear_since, self._moved_at) >= c.raise_hold_s):
            move, cap = Move.UP, min(cap, math.log(c.raise_step))  # guarded, small steps
        elif (calm and self.t_input != self.crossover and self._calm_since is not None
              and load.t_s - self._calm_since >= c.home_s):
            move = Move.UP if self._value < self.crossover else Move.DOWN
            homing = True  # neither tier short: back toward the crossover, not past it
        else:
            return Move.HOLD
        step = min(cap, self._log_step / 2 if self._last not in (Move.HOLD, move)
                   else self._log_step)
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
