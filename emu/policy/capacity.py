"""The GPU's KV capacity, as vLLM v1's KV cache manager counts it: blocks of ``block_tokens``,
block 0 the null block (never free, counted as used), a request holding the blocks of its
computed tokens. Admission takes a request only if the blocks of its whole sequence fit
(vLLM's ``scheduler_reserve_full_isl``); a running request that needs a block when none is free
preempts the newest running request (recompute: its blocks freed), until the block fits or it
was itself the newest.

A PNM-tier request keeps on the GPU its sink and recent tokens and one centroid (keys only) per
cluster: ``resident_tokens``."""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks that hold ``tokens``."""
    return (tokens + block_tokens - 1) // block_tokens


def resident_tokens(context: int, kept: int, compression: float) -> int:
    """GPU-resident KV of a PNM-tier request of ``context`` tokens in token-equivalents: the
    ``kept`` sink and recent tokens and a centroid per ``compression`` tokens (keys only,
    half a token's K and V)."""
    return min(context, kept) + math.ceil(context * (1.0 / compression) / 2)


class KvBlocks:
    """Blocks held per owner; ``blocks=None`` is a GPU without limit (nothing is refused or
    preempted, nothing is counted against a capacity)."""

    def __init__(self, blocks: int | None, block_tokens: int = 16) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        if blocks is not None and blocks < 2:
            raise ValueError(f"the GPU needs at least 2 KV blocks (one is the null block), "
                             f"got {blocks}")
        self.total = blocks
        self.block_tokens = block_tokens
        self.free = blocks - 1 if blocks is not None else 0
        self._held: dict[Hashable, int] = {}

    @property
    def limited(self) -> bool:
        return self.total is not None

    def blocks(self, tokens: int) -> int:
        return blocks_for(tokens, self.block_tokens)

    def used(self) -> int:
        """Blocks in use, the null block among them (vLLM's count)."""
        if self.total is None:
            return 1 + sum(self._held.values())
        return self.total - self.free

    def held(self, owner: Hashable) -> int:
        return self._held.get(owner, 0)

    def admit(self, owner: Hashable, tokens: int) -> bool:
        """Take the blocks of ``tokens`` for a request not holding any, if they all fit."""
        need = self.blocks(tokens) - self.held(owner)
        if self.total is not None and need > self.free:
            return False
        self._take(owner, need)
        return True

    def grow(self, owner: T, tokens: int, running: list[T]) -> list[T]:
        """Blocks for ``owner`` (one of ``running``) to hold ``tokens``; while they do not fit,
        the newest of ``running`` is preempted: removed from ``running``, its blocks freed.
        The preempted, in order (``owner`` last among them if it had to go)."""
        victims: list[T] = []
        need = self.blocks(tokens) - self.held(owner)
        if need <= 0:
            return victims
        while self.total is not None and need > self.free:
            victim = running.pop()
            self.release(victim)
            victims.append(victim)
            if victim == owner:
                return victims
        self._take(owner, need)
        return victims

    def release(self, owner: Hashable) -> None:
        n = self._held.pop(owner, 0)
        if self.total is not None:
            self.free += n

    def _take(self, owner: Hashable, n: int) -> None:
        if n <= 0:
            return
        self._held[owner] = self.held(owner) + n
        if self.total is not None:
            self.free -= n
