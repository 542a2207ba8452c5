"""The fleet fabric's shared switch (``fabric.switch_gbs`` of a fleet description): the bytes that
cross between decode instances, the prefill pool and the PNM nodes share its bandwidth, as a
node's devices share theirs (``pnm_nodes.py``).

What crosses it, as offered load (bytes per second):

- each decode step, every PNM-tier request's query up and its output down, every layer
  (``LatencyModel.link_bytes`` per layer and request), over the instance's latest step (a rate,
  as the devices' load is: instances stepped out of order see the same figure);
- a migration's KV (paper 4.3) to its node, spread over the migration's time;
- a PNM-tier request's KV from the prefill pool to its node, spread over its prefill (it
  streams out as the layers are made).

The model, a fluid processor sharing: while the offered loads add up to more than the switch's
bandwidth, every transfer through it goes ``f = offered / bandwidth`` times slower than its link
alone would carry it, so each transfer's link part (its bytes over its link's rate) is stretched
by ``f``; what it adds, ``(f - 1) x`` the link part, is charged where the transfer is waited for:
a decode step's PNM time (its queries must reach the nodes), a migration's end, the pooled
request's arrival at its instance. Below the bandwidth nothing is added, and without a switch
(the default) every figure is what it was.

Approximate: the decode-step bytes stretched are all the step's PNM-tier requests' (the cost
model's T_comm carries one query's link time a layer, ``LatencyModel.t_link``); the stretch
does not move the offered load it came from (the next step's rate falls as its step lengthens,
as the devices' does); a bulk transfer counts from when it is booked to its planned end (the
stretch not added to it), and instances a step apart in emulated time read each other's bulk
transfers as of their own clocks, expired once any clock passes their end.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["Switch", "SwitchPort"]


@dataclass(eq=False)
class Switch:
    """One switch of ``gbs`` GB/s that every instance's transfers to and from the PNM nodes
    share."""

    gbs: float
    load: dict[int, float] = field(init=False, default_factory=dict)
    """Each instance's decode traffic, bytes/s, as of its latest step."""
    load_sum: float = field(init=False, default=0.0)
    bulk: list[tuple[float, float]] = field(init=False, default_factory=list)
    """Bulk transfers under way: (planned end, bytes/s), a heap."""
    bulk_sum: float = field(init=False, default=0.0)
    peak_load: float = field(init=False, default=0.0)
    """The highest offered load a transfer saw, over the bandwidth (above 1: the stretch)."""

    def __post_init__(self) -> None:
        if not 0 < self.gbs < float("inf"):
            raise ValueError(f"switch_gbs must be a finite number > 0, got {self.gbs}")
        self._bps = self.gbs * 1e9

    def set_load(self, key: int, bytes_per_s: float) -> None:
        old = self.load.get(key, 0.0)
        if bytes_per_s != old:
            self.load[key] = bytes_per_s
            self.load_sum += bytes_per_s - old

    def add_bulk(self, nbytes: float, start: float, end: float) -> None:
        """``nbytes`` crossing from ``start`` to ``end`` (at least one instant)."""
        rate = nbytes / max(end - start, 1e-9)
        heapq.heappush(self.bulk, (end, rate))
        self.bulk_sum += rate

    def factor(self, t: float) -> float:
        """How many times slower than its link a transfer goes at ``t``: the offered load over
        the bandwidth, at least 1."""
        bulk = self.bulk
        while bulk and bulk[0][0] <= t:
            self.bulk_sum -= heapq.heappop(bulk)[1]
        if not bulk:
            self.bulk_sum = 0.0  # no rounding left over
        f = (self.load_sum + self.bulk_sum) / self._bps
        if f > self.peak_load:
            self.peak_load = f
        return f if f > 1.0 else 1.0

    def wait_s(self, link_s: float, t: float) -> float:
        """What the switch adds at ``t`` to a transfer whose link part alone is ``link_s``."""
        return (self.factor(t) - 1.0) * link_s

    def bulk_wait_s(self, nbytes: float, link_s: float, start: float, end: float) -> float:
        """A bulk transfer of ``nbytes`` from ``start`` to ``end`` booked, and what the switch
        adds to it (its link part alone ``link_s``), as of ``start``."""
        self.add_bulk(nbytes, start, end)
        return self.wait_s(link_s, start)


@dataclass(eq=False)
class SwitchPort:
    """One decode instance's way through the switch: its PNM-tier requests' per-step bytes and
    its link's rate."""

    switch: Switch
    key: int
    step_bytes: float
    """Bytes one PNM-tier request moves through the switch in a decode step (all layers)."""
    s_per_byte: float
    """The instance's link: seconds a byte."""

    def wait_s(self, requests: int, t: float) -> float:
        """What the switch adds at ``t`` to a decode step of ``requests`` PNM-tier requests."""
        if not requests:
            return 0.0
        return self.switch.wait_s(requests * self.step_bytes * self.s_per_byte, t)

    def book(self, requests: int, step_s: float) -> None:
        """Its decode traffic from a step of ``step_s`` with ``requests`` PNM-tier requests."""
        self.switch.set_load(self.key, requests * self.step_bytes / step_s if step_s > 0
                             else 0.0)
