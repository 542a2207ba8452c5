"""The fleet's global dispatcher: which decode instance an arriving request goes to (paper 10's
cluster orchestrator routes requests between instances; each instance then runs its own
scheduler). Policies are chosen by name from ``DISPATCHERS``:

- ``round-robin``: instances in turn;
- ``least-work``: the instance with the fewest tokens still to serve (prompt tokens not yet
  computed and output tokens not yet made, of the requests it holds), ties to the lower index;
- ``length-aware``: a request the instance's router places on the PNM tier goes to the
  instance whose PNM nodes have the most room (tokens free); the others as ``least-work``.

A policy sees each instance through ``InstanceLoad`` (plain numbers), never the instance, and
asks only for the loads it reads (round robin reads none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["DISPATCHERS", "Dispatcher", "InstanceLoad", "make_dispatcher"]


@dataclass(frozen=True)
class InstanceLoad:
    """What the dispatcher reads of one instance when a request arrives."""

    outstanding_tokens: int
    """Prompt tokens not yet computed plus output tokens not yet made, of its requests."""
    pnm_room_tokens: int
    """Tokens free on the PNM nodes it may place KV on (the most on any one of them)."""
    long: bool
    """Its router places the arriving request on the PNM tier."""


Loads = Callable[[int], InstanceLoad]
"""Instance index -> its load when the request arrives."""


class Dispatcher(Protocol):
    def choose(self, n: int, load: Loads) -> int:
        """The index, of ``n`` instances, of the one that takes the request."""
        ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def choose(self, n: int, load: Loads) -> int:
        i = self._next % n
        self._next = i + 1
        return i


class LeastWork:
    def choose(self, n: int, load: Loads) -> int:
        return min(range(n), key=lambda i: (load(i).outstanding_tokens, i))


class LengthAware:
    def choose(self, n: int, load: Loads) -> int:
        loads = [load(i) for i in range(n)]
        if any(x.long for x in loads):
            return min(range(n), key=lambda i: (not loads[i].long, -loads[i].pnm_room_tokens,
                                                loads[i].outstanding_tokens, i))
        return min(range(n), key=lambda i: (loads[i].outstanding_tokens, i))


DISPATCHERS: dict[str, Callable[[], Dispatcher]] = {
    "round-robin": RoundRobin,
    "least-work": LeastWork,
    "length-aware": LengthAware,
}
"""Dispatch policies by name (a fleet description's ``dispatch``)."""


def make_dispatcher(name: str) -> Dispatcher:
    if name not in DISPATCHERS:
        raise ValueError(f"unknown dispatch policy {name!r}; choose one of "
                         f"{', '.join(DISPATCHERS)}")
    return DISPATCHERS[name]()
