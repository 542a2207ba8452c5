"""The fleet emulator's side of the orchestrator (``emu/policy/orchestrator.py``): what each
instance and PNM node shows of itself once per sample interval (``FleetSignals``, plain numbers),
and the decision applied (each instance's router, its preference over its nodes). The fleet
(``fleet.py``) calls ``tick`` once per sample interval; with the ``static`` orchestrator it
builds none, so nothing here runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from nelssa.emu.policy.orchestrator import (
    Decision,
    FleetSignals,
    InstanceSignal,
    NodeSignal,
    OrchestratorConfig,
    make_orchestrator,
)
from nelssa.emu.policy.router import Router, Source
from nelssa.emu.serving.pnm_nodes import PnmNode
from nelssa.emu.serving.replay import Replay

__all__ = ["FleetOrchestration"]

log = logging.getLogger(__name__)


@dataclass
class FleetOrchestration:
    """One run's orchestrator over its instances' replays and the fleet's PNM nodes."""

    name: str
    replays: Sequence[Replay]
    nodes: Sequence[PnmNode]
    config: OrchestratorConfig | None = None
    looks: list[tuple[float, tuple[int | None, ...]]] = field(default_factory=list)
    """(time, each instance's T_input) after every look."""

    def __post_init__(self) -> None:
        self.policy = make_orchestrator(self.name, self.config)
        index = {id(n): k for k, n in enumerate(self.nodes)}
        self._reach = [tuple(index[id(n)] for n in r.nodes) if r.cfg.mode == "nelssa" else ()
                       for r in self.replays]
        self._crossover = [r.router.t_input if reach else None
                           for r, reach in zip(self.replays, self._reach, strict=True)]
        self._seen = [(0.0, 0, 0)] * len(self.replays)
        self.preferred = 0
        """Looks at which some instance's new KV preferred a node (not the static choice)."""

    def tick(self, t_s: float) -> Decision | None:
        """One look at ``t_s``: the signals to the policy, its decision applied."""
        sig = FleetSignals(t_s, tuple(NodeSignal(n.used_share, n.load_sum) for n in self.nodes),
                           tuple(self._instance(i, r) for i, r in enumerate(self.replays)))
        d = self.policy.observe(sig)
        if d is None:
            return None
        for r, t, w in zip(self.replays, d.t_input, d.node_weights, strict=True):
            if t is not None and t != r.router.t_input:
                r.router = Router(t, Source.ADAPTIVE)
            r.node_weights = w
        self.preferred += any(w is not None for w in d.node_weights)
        self.looks.append((t_s, d.t_input))
        return d

    def _instance(self, i: int, r: Replay) -> InstanceSignal:
        now = r.now
        gpu_ctx, pnm_ctxs, parts = r.decode_parts()
        t0, steps0, pre0 = self._seen[i]
        steps = r.out.steps - steps0
        step_s = (now - t0) / steps if steps and (gpu_ctx or pnm_ctxs) and now > t0 else 0.0
        self._seen[i] = (now, r.out.steps, r.out.preemptions)
        gpu_wait = r.gpu_wait()
        key = id(r)
        slowdown = max((n.slowdown(key) for n in r.nodes if n.load.get(key, 0.0) > 0.0),
                       default=1.0)
        _, waiting = r.sched.counts()
        return InstanceSignal(
            self._crossover[i], self._reach[i], r.sched.used_blocks() / r.sim.gpu_blocks,
            r.out.preemptions - pre0, waiting, max(0.0, gpu_wait), len(r.pnm_queue),
            max(0.0, now - r.pnm_queue[0][0].req.arrival_s) if r.pnm_queue else 0.0,
            step_s, parts.gpu_attn_s, parts.pnm_s, slowdown)
