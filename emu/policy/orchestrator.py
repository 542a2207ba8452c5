"""The fleet's orchestrator (paper 10: "a cluster orchestrator can monitor queueing delays and
node utilization in real time ... dynamically adjusting the routing threshold (T_input) when
resource saturation is anticipated"; issue 42 item 4). Once per sample interval it reads what a
real orchestrator can see of the fleet (``FleetSignals``: each PNM node's memory held and device
load, each instance's GPU KV use, preemptions, queues, waits and decode steps) and decides, for
every instance, its T_input and which of its PNM nodes new KV should prefer (``Decision``).
Plain data in, decisions out: no simulator here (``emu/serving/orchestration.py`` wires it to
the fleet emulator). Policies by name from ``ORCHESTRATORS``:

- ``static``: nothing moves: each instance keeps the T_input of its configuration (the
  crossover for its home node's devices, or ``--t-input``), new KV goes to the node with the
  largest share of its memory free (``pnm_nodes.place``). The fleet emulator does not even
  call it, so its figures are those of a fleet without an orchestrator, bit for bit.
- ``fleet-adaptive``: each instance's T_input is the policy core's adaptive threshold
  (``emu/policy/adaptive.py``: GPU KV use and preemptions, the PNM tier's memory and its
  queue's wait, decode steps against the TPOT SLO, with its hysteresis, cooldown, bisection and
  guarded raise), fed the fleet's signals instead of one instance's: the memory of the nodes it
  reaches as the others fill it, the oldest wait of every instance queued for those nodes (a
  request of another instance waiting for room there means the room is gone for this one
  too), the nodes' device load (the other instances' attention queues ahead of its own: the
  tier is short of compute though its memory has room, ``TierLoad.pnm_load``) and its own PNM
  part of a step stretched by that contention (so the per-step rule sees the PNM tier set a
  step it sets). The node choice: where the nodes an instance reaches differ in device load,
  one of them saturated (``load_hot``) and another with room (``load_cool``), new KV prefers
  the one with room (``node_weights``: a node's share of memory free counts divided by one plus
  its smoothed load above the least loaded one's); otherwise the static choice.

The TPOT-held token budget (``emu/policy/budget.py``) and shedding (``emu/policy/shed.py``)
stay each instance's knobs (``--tpot-budget``, ``--shed-late``): they act on a step's prefill
chunk and on requests already late, which no fleet signal changes; the orchestrator reads the
decode steps they shape (``step_s``) and the prefill wait they react to (``gpu_wait_s``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from nelssa.emu.policy.adaptive import AdaptiveConfig, AdaptiveThreshold, Move, TierLoad

__all__ = ["ORCHESTRATORS", "Decision", "FleetAdaptive", "FleetSignals", "InstanceSignal",
           "NodeSignal", "Orchestrator", "OrchestratorConfig", "OrchestratorKind",
           "make_orchestrator"]


class OrchestratorKind(enum.Enum):
    STATIC = "static"
    """T_input and node choice as configured (no orchestrator)."""
    FLEET_ADAPTIVE = "fleet-adaptive"
    """T_input per instance and node preference moved by the fleet's signals."""


@dataclass(frozen=True)
class NodeSignal:
    """One PNM node as the orchestrator sees it."""

    used_share: float
    """Share of its memory held (reserved KV)."""
    device_load: float
    """Its devices' load: the offered loads of the instances using it added up (1 = the
    devices always busy; above 1 their attention queues)."""


@dataclass(frozen=True)
class InstanceSignal:
    """One decode instance as the orchestrator sees it."""

    crossover: int | None
    """The T_input it was configured with (its static threshold); None: no PNM tier."""
    nodes: tuple[int, ...]
    """Indices (in ``FleetSignals.nodes``) of the PNM nodes its requests may use."""
    gpu_kv_used: float
    """Share of its GPU's KV blocks in use."""
    preempted: int
    """Requests preempted since the last look."""
    waiting: int
    """Requests in its scheduler's waiting queue."""
    gpu_wait_s: float
    """The oldest wait for a first token on its GPU (its compute queue)."""
    pnm_queued: int
    """Its requests queued for room on the PNM tier."""
    pnm_wait_s: float
    """The oldest of them's wait (0: none)."""
    step_s: float
    """Its decode steps since the last look, averaged (prefill chunks included); 0: none."""
    gpu_attn_s: float
    """The GPU's attention in one decode step of its running batch."""
    pnm_s: float
    """The PNM tier's part of that step alone on its node (sparse attention, T_comm)."""
    pnm_slowdown: float = 1.0
    """What the other instances' load on its nodes stretches its attention by (1: none)."""


@dataclass(frozen=True)
class FleetSignals:
    t_s: float
    nodes: tuple[NodeSignal, ...]
    instances: tuple[InstanceSignal, ...]


@dataclass(frozen=True)
class Decision:
    """What the fleet applies until the next look."""

    t_input: tuple[int | None, ...]
    """Each instance's T_input (None: it has no PNM tier)."""
    node_weights: tuple[tuple[float, ...] | None, ...]
    """Each instance's preference over its nodes (in its ``nodes`` order; larger: preferred),
    None: the static choice (largest share of memory free)."""


@dataclass(frozen=True)
class OrchestratorConfig:
    """Levels of the ``fleet-adaptive`` orchestrator (each instance's threshold takes the
    policy core's ``AdaptiveConfig``)."""

    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    """Bounds, steps, hysteresis and levels of each instance's adaptive threshold."""
    load_hot: float = 1.0
    """A node's smoothed device load at or above this: saturated (its attention queues)."""
    load_cool: float = 0.7
    """... at or below this: it has room for more attention."""
    load_tau_s: float = 5.0
    """Time constant of the device load's smoothing (exponential, per look)."""
    prefer_nodes: bool = True
    """Steer new KV away from a saturated node to one with room."""

    def __post_init__(self) -> None:
        for name in ("load_hot", "load_cool", "load_tau_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not 0 <= self.load_cool < self.load_hot or not self.load_tau_s > 0:
            raise ValueError(f"need 0 <= load_cool < load_hot and load_tau_s > 0, got "
                             f"{self.load_cool}, {self.load_hot}, {self.load_tau_s}")


class Orchestrator(Protocol):
    def observe(self, signals: FleetSignals) -> Decision | None:
        """Take one look at the fleet; the decision to apply (None: keep the current one)."""
        ...


class Static:
    """Nothing moves (the fleet emulator does not call it)."""

    def __init__(self, config: OrchestratorConfig | None = None) -> None:
        self.config = config or OrchestratorConfig()

    def observe(self, signals: FleetSignals) -> Decision | None:
        return None


class FleetAdaptive:
    """Each instance's adaptive threshold fed fleet signals, and node preference by device load
    (module doc)."""

    def __init__(self, config: OrchestratorConfig | None = None) -> None:
        self.config = config or OrchestratorConfig()
        self.thresholds: list[AdaptiveThreshold | None] = []
        self._load: list[float] = []
        self._seen_at = -math.inf
        self.moves = 0
        """T_input moves made, all instances together."""
        self.preferring = 0
        """Looks at which some instance preferred a node (not the static choice)."""

    def _start(self, signals: FleetSignals) -> None:
        self.thresholds = [AdaptiveThreshold(x.crossover, self.config.adaptive)
                           if x.crossover is not None else None for x in signals.instances]
        self._load = [n.device_load for n in signals.nodes]

    def _smooth(self, signals: FleetSignals) -> list[float]:
        dt = signals.t_s - self._seen_at if math.isfinite(self._seen_at) else math.inf
        a = 1.0 - math.exp(-dt / self.config.load_tau_s) if dt < math.inf else 1.0
        self._load = [x + a * (n.device_load - x) for x, n in zip(self._load, signals.nodes,
                                                                    strict=True)]
        return self._load

    def observe(self, signals: FleetSignals) -> Decision | None:
        if not self.thresholds:
            self._start(signals)
        load = self._smooth(signals)
        self._seen_at = signals.t_s
        nodes = signals.nodes
        # each node's queue: the oldest wait of any instance queued for room on it
        node_wait = [0.0] * len(nodes)
        for x in signals.instances:
            for k in x.nodes:
                node_wait[k] = max(node_wait[k], x.pnm_wait_s)
        t_input: list[int | None] = []
        weights: list[tuple[float, ...] | None] = []
        for x, th in zip(signals.instances, self.thresholds, strict=True):
            if th is None or not x.nodes:
                t_input.append(x.crossover)
                weights.append(None)
                continue
            w = self._weights([load[k] for k in x.nodes])
            weights.append(w)
            # the node its new KV goes to: the roomiest, by the weights when there are some
            room = [(1 - nodes[k].used_share) * (w[i] if w else 1.0)
                    for i, k in enumerate(x.nodes)]
            best = x.nodes[max(range(len(room)), key=room.__getitem__)]
            tier = TierLoad(
                signals.t_s, x.gpu_kv_used, x.preempted, min(nodes[k].used_share for k in x.nodes),
                max(node_wait[k] for k in x.nodes), gpu_wait_s=x.gpu_wait_s,
                gpu_attn_s=x.gpu_attn_s, pnm_s=x.pnm_s * max(1.0, x.pnm_slowdown),
                step_s=x.step_s, pnm_load=load[best])
            if th.observe(tier) is not Move.HOLD:
                self.moves += 1
            t_input.append(th.t_input)
        self.preferring += any(w is not None for w in weights)
        return Decision(tuple(t_input), tuple(weights))

    def _weights(self, loads: list[float]) -> tuple[float, ...] | None:
        """Preference over an instance's nodes by their smoothed loads; None: the static
        choice (no node saturated, or none with room)."""
        c = self.config
        if not c.prefer_nodes or len(loads) < 2:
            return None
        low = min(loads)
        if max(loads) < c.load_hot or low > c.load_cool:
            return None
        return tuple(1.0 / (1.0 + (x - low)) for x in loads)


ORCHESTRATORS: dict[str, Callable[[OrchestratorConfig | None], Orchestrator]] = {
    OrchestratorKind.STATIC.value: Static,
    OrchestratorKind.FLEET_ADAPTIVE.value: FleetAdaptive,
}
"""Orchestrators by name (a fleet description's ``orchestrator``)."""


def make_orchestrator(name: str, config: OrchestratorConfig | None = None) -> Orchestrator:
    if name not in ORCHESTRATORS:
        raise ValueError(f"unknown orchestrator {name!r}; choose one of "
                         f"{', '.join(ORCHESTRATORS)}")
    return ORCHESTRATORS[name](config)
