"""PNM nodes as the serving emulator holds them: the tokens of KV each can hold, the ones
reserved, and what its devices' attention costs a step. One replay has one node (its
``devices``); a fleet's instances share the nodes of the fleet description.

Contention: the instances that share a node share its devices, and the node serves their
requests first come, first served in emulated time (its clock domains, host/pnm_node/domains.py).
The other instances' device work during a step (their offered loads, each the devices' work
per second of that instance's latest step, times the step) fits into the time the step's own
GPU work leaves the devices idle; only what does not fit queues ahead of the step's attention
(``contention_s``). Instances below the devices' capacity interleave and wait for nothing once
their steps fall into place (what the co-simulation of K GPU decode nodes shows:
docs/results/fleet_cosim.md); past it the devices set the pace. The loads are rates, so
instances stepped out of order (a run of pure decode steps is taken at once) see the same
figure. T_comm (host software, the link) is not shared here; the fabric's switch, where a
fleet has one, is (``fabric.py``).

A PNM-tier request's KV lives on one node, head-wise over its devices (as the PNM node
partitions it, ``host/pnm_node/partition.py``); a request is placed on the node with the most
room among those its instance reaches (``place``), and a migration likewise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from nelssa.emu.serving.cost import CostModel

__all__ = ["PnmNode", "contention_s", "place", "pnm_terms", "pnm_time", "terms_max"]


def contention_s(attn_s: float, step_s: float, others_load: float) -> float:
    """What sharing adds to a step of ``step_s`` whose attention on the node takes ``attn_s``
    alone: the others' work in that time, less the gap its own GPU work leaves the devices."""
    return max(0.0, others_load * step_s - (step_s - attn_s))


@dataclass(eq=False)
class PnmNode:
    """One PNM node: its capacity in tokens of KV and its attention cost per step."""

    name: str
    tokens: int
    """KV tokens its devices hold in all."""
    cost: CostModel
    """Prices its devices' sparse attention (``CostModel.pnm_s``) for its device count."""
    devices: int = 1
    free: int = field(init=False)
    peak_used: int = field(init=False, default=0)
    placed: int = field(init=False, default=0)
    """Requests placed on it (arrivals and migrations)."""
    freed_at: float = field(init=False, default=0.0)
    """Emulated time its last reservation was given back (a waiting instance admits then)."""
    users: int = field(init=False, default=0)
    """Instances that may place KV on it: above one, their steps share its devices."""
    load: dict[int, float] = field(init=False, default_factory=dict)
    """Each instance's offered load: its devices' work per second of its steps, as of its
    latest step."""
    load_sum: float = field(init=False, default=0.0)
    tally: list[int] | None = field(default=None, repr=False)
    """A count shared with other nodes, one up for every reservation given back (a fleet
    reads one number for all its nodes)."""

    def __post_init__(self) -> None:
        self.free = self.tokens
        # the cost model's PNM line, read in every planned run of every instance (a node
        # without a cost model only places KV)
        self.s_per_token = self.cost.pnm_s_per_token if self.cost is not None else 0.0
        self.t_comm_s = self.cost.t_comm_s if self.cost is not None else 0.0

    def reserve(self, tokens: int) -> None:
        self.free -= tokens
        self.placed += 1
        self.peak_used = max(self.peak_used, self.tokens - self.free)

    def release(self, tokens: int, now: float) -> None:
        self.free += tokens
        self.freed_at = max(self.freed_at, now)
        if self.tally is not None:
            self.tally[0] += 1

    def others_load(self, key: int) -> float:
        return max(0.0, self.load_sum - self.load.get(key, 0.0))

    def slowdown(self, key: int) -> float:
        """``contention_s`` as a factor on the attention of instance ``key``'s step, its step
        taken as its latest (its attention over its load); 1 before it has booked one."""
        rho = self.load.get(key, 0.0)
        if rho <= 0.0:
            return 1.0
        return 1.0 + max(0.0, 1.0 - (1.0 - self.others_load(key)) / rho)

    def set_load(self, key: int, rho: float) -> None:
        old = self.load.get(key, 0.0)
        if rho != old:
            self.load[key] = rho
            self.load_sum += rho - old

    @property
    def used_share(self) -> float:
        return 1 - self.free / self.tokens if self.tokens else 0.0


def place(need: int, nodes: Sequence[PnmNode],
          weights: Sequence[float] | None = None) -> PnmNode | None:
    """Of the nodes that can hold ``need`` tokens, the one with the largest share of its
    memory free (then the most tokens free, then the first): nodes fill in proportion to
    their size, so a node of twice the devices takes twice the requests. With ``weights`` (an
    orchestrator's preference, one per node, ``emu/policy/orchestrator.py``) the share free
    counts times its node's weight. None if none can."""
    if len(nodes) == 1:
        return nodes[0] if nodes[0].free >= need else None
    best, key = None, (-1.0, -1)
    for i, n in enumerate(nodes):
        if n.free >= need:
            k = (n.free / n.tokens * (weights[i] if weights is not None else 1.0), n.free)
            if k > key:
                best, key = n, k
    return best


# -- a step's PNM time over several nodes (the replay of a fleet's instance) -----------------
def pnm_terms(sums: list[tuple[PnmNode, int, int]], key: int | None,
              steps: int) -> list[tuple[int, int, float, float, float]]:
    """``pnm_time``'s terms for a run of up to ``steps`` steps, node by node (the nodes'
    loads do not move while a run is planned): (context, requests, seconds per token,
    slowdown, T_comm); the step ``ahead`` on costs ``max((c + ahead * k) * per_token * f +
    comm)``, as ``CostModel.pnm_s`` computes it. Each term is a line in ``ahead``: those that
    the line highest at the run's start or at its end stays above over the whole run (by
    more than rounding) can never be the slowest node's, and are left out."""
    last = steps - 1
    terms, start, end = [], [], []
    j0 = j1 = 0  # the first of the highest starts, of the highest ends
    s0 = e1 = -math.inf
    for n, c, k in sums:  # (PnmNode.slowdown inlined: every planned run of a fleet comes here)
        f = 1.0
        if key is not None:
            rho = n.load.get(key, 0.0)
            if rho > 0.0:
                others = n.load_sum - rho
                x = 1.0 - (1.0 - (others if others > 0.0 else 0.0)) / rho
                f = 1.0 + (x if x > 0.0 else 0.0)
        p = n.s_per_token
        t = n.t_comm_s if k else 0.0
        terms.append((c, k, p, f, t))
        a = c * p * f + t
        e = (c + last * k) * p * f + t
        if a > s0:
            s0, j0 = a, len(start)
        if e > e1:
            e1, j1 = e, len(end)
        start.append(a)
        end.append(e)
    if len(terms) < 2:
        return terms
    tol = 1e-9 * e1
    a0, a1, b0, b1 = s0, end[j0], start[j1], e1
    return [x for x, s, e in zip(terms, start, end, strict=True)
            if not ((a0 > s + tol and a1 > e + tol) or (b0 > s + tol and b1 > e + tol))]


def terms_max(terms: list[tuple[int, int, float, float, float]], ahead: int) -> float:
    """The slowest node's PNM time ``ahead`` steps on (``pnm_terms``)."""
    if len(terms) == 1:
        c, k, p, f, t = terms[0]
        return (c + ahead * k) * p * f + t
    return max(((c + ahead * k) * p * f + t for c, k, p, f, t in terms), default=0.0)


def pnm_time(sums: list[tuple[PnmNode, int, int]], ahead: int = 0,
             key: int | None = None) -> float:
    """The PNM tier's time of a step, ``ahead`` steps on (each context a token longer a step):
    the slowest node's, as the nodes work in parallel; with ``key`` (an instance whose nodes
    others share), each node's attention stretched by what the others' load queues ahead of
    it (``contention_s``). (``CostModel.pnm_s`` and ``PnmNode.slowdown`` inlined, from
    the node's copies of the cost model's line: every step of a fleet's instance comes here.)"""
    top = 0.0
    first = True
    for n, c, k in sums:
        f = 1.0
        if key is not None:
            rho = n.load.get(key, 0.0)
            if rho > 0.0:
                others = n.load_sum - rho
                f = 1.0 + max(0.0, 1.0 - (1.0 - (others if others > 0.0 else 0.0)) / rho)
        t = (c + ahead * k) * n.s_per_token * f + (n.t_comm_s if k else 0.0)
        if first or t > top:  # (max's choice: the first of the largest)
            top, first = t, False
    return top
