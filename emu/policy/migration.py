"""Migration (paper 4.3): when the GPU's KV is short, the running GPU-tier request with the
longest context, once that context has grown past T_input, moves its KV to the PNM tier in the
background and continues there (one way). One transfer at a time goes over the link; a request
whose migration failed is not tried again (the caller leaves it out of the candidates)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from nelssa.emu.policy.router import Router

T = TypeVar("T")


@dataclass(frozen=True)
class MigrationPolicy:
    migrate_at: float = 0.95
    """Share of the GPU's KV capacity in use from which a migration starts."""

    def __post_init__(self) -> None:
        if not 0 < self.migrate_at <= 1:
            raise ValueError(f"migrate_at must be in (0, 1], got {self.migrate_at}")

    def pressure(self, used: int, capacity: int) -> bool:
        """GPU KV short enough to migrate (``used`` and ``capacity`` in the same unit)."""
        return used >= self.migrate_at * capacity

    @staticmethod
    def longest(candidates: Iterable[tuple[int, T]]) -> tuple[int, T] | None:
        """The candidate with the longest context, the first of equals (in the given order)."""
        best = None
        for ctx, item in candidates:
            if best is None or ctx > best[0]:
                best = (ctx, item)
        return best

    def choose(self, router: Router, busy: bool, used: int, capacity: int,
               candidates: Iterable[tuple[int, T]]) -> tuple[int, T] | None:
        """The (context, request) to migrate now, or None: nothing in flight, GPU KV under
        pressure, and the longest running GPU-tier candidate past T_input."""
        if busy or not self.pressure(used, capacity):
            return None
        best = self.longest(candidates)
        if best is None or not router.past(best[0]):
            return None
        return best
