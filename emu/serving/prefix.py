"""What a request's tokens are, for automatic prefix caching, and the KV block pool of our
scheduler.

Mooncake traces name each 512-token block of a prompt by a hash id (``hash_ids``); two prompts
that share a prefix share its ids. vLLM hashes blocks of its own size from token ids, so the
replay through vLLM gives it token ids made from the hash ids (token ``i`` of hash block ``h``
is ``h * 512 + i``), and our scheduler keys its blocks by the same identity: a full block inside
the prompt by the chain of hash ids up to it and its place in the hash block; every other block
(one that holds generated tokens, a prompt without hash ids, a PNM-tier request's GPU-resident
window) is the request's own. The two therefore see the same hits.

The pool follows vLLM's BlockPool: free blocks in least-recently-freed order, a freed request's
blocks appended tail first (so its tail is evicted first), cached blocks kept until their block
is allocated again, a hit on a free cached block taking it out of the free queue.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

HASH_BLOCK_TOKENS = 512
"""Tokens per Mooncake hash id."""

# token-id ranges of the replay through vLLM, far above any hash id's tokens (2^40 > ids * 512)
_OWN_PROMPT = 1 << 40
_RESIDENT = 2 << 40
_OUTPUT = 3 << 40


class Kind(enum.Enum):
    PROMPT = "prompt"
    """The request's prompt (with its trace hash ids, if any)."""
    RESIDENT = "resident"
    """A PNM-tier request's GPU-resident window and centroids, taken in as a placeholder."""


@dataclass(frozen=True)
class Content:
    """The tokens of one job: whose, what kind, and the prompt's hash ids if it has them."""

    rid: int
    kind: Kind
    hash_ids: tuple[int, ...] | None = None

    def token_ids(self, prompt_tokens: int) -> list[int]:
        """Prompt token ids for vLLM."""
        if self.kind is Kind.RESIDENT:
            return [_RESIDENT + self.rid] * prompt_tokens
        if self.hash_ids is None:
            return [_OWN_PROMPT + self.rid] * prompt_tokens
        ids = self.hash_ids
        return [ids[i // HASH_BLOCK_TOKENS] * HASH_BLOCK_TOKENS + i % HASH_BLOCK_TOKENS
                for i in range(prompt_tokens)]

    def output_token_id(self) -> int:
        return _OUTPUT + self.rid

    def block_keys(self, prompt_tokens: int, block_tokens: int) -> BlockKeys:
        return BlockKeys(self, prompt_tokens, block_tokens)


class BlockKeys:
    """Key of each block of one job, for our pool (equal keys: equal token prefixes)."""

    def __init__(self, content: Content, prompt_tokens: int, block_tokens: int) -> None:
        self.own = (content.kind, content.rid)
        self.shared_blocks = 0
        self.chain: list[int] = []
        if content.kind is Kind.PROMPT and content.hash_ids is not None:
            if HASH_BLOCK_TOKENS % block_tokens:
                raise ValueError(f"block_tokens {block_tokens} must divide "
                                 f"{HASH_BLOCK_TOKENS} for prefix caching over hash ids")
            self.per_hash = HASH_BLOCK_TOKENS // block_tokens
            self.shared_blocks = prompt_tokens // block_tokens
            h = 0
            for hid in content.hash_ids[:-(-self.shared_blocks // self.per_hash)]:
                h = hash((h, hid))
                self.chain.append(h)

    def __getitem__(self, k: int) -> object:
        if k < self.shared_blocks:
            return (self.chain[k // self.per_hash], k % self.per_hash)
        return (self.own, k)


class BlockPool:
    """vLLM's block pool in miniature: reference counts, an LRU free queue, cached full blocks."""

    def __init__(self, blocks: int) -> None:
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, blocks))
        self.ref = [0] * blocks
        self.key: list[object | None] = [None] * blocks
        self.cached: dict[object, dict[int, None]] = {}

    def free_blocks(self) -> int:
        return len(self.free)

    def hits(self, keys: BlockKeys, max_blocks: int) -> list[int]:
        """The cached blocks of the longest cached prefix (at most ``max_blocks``)."""
        out = []
        for k in range(max_blocks):
            where = self.cached.get(keys[k])
            if not where:
                break
            out.append(next(iter(where)))
        return out

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            b, _ = self.free.popitem(last=False)
            k = self.key[b]
            if k is not None:  # evicted from the cache
                where = self.cached[k]
                del where[b]
                if not where:
                    del self.cached[k]
                self.key[b] = None
            self.ref[b] = 1
            out.append(b)
        return out

    def cache(self, blocks: list[int], keys: BlockKeys, first: int, last: int) -> None:
        """Register blocks ``first`` .. ``last - 1`` of a job (all full) under their keys."""
        for k in range(first, last):
            b = blocks[k]
            if self.key[b] is None:
                key = keys[k]
                self.key[b] = key
                self.cached.setdefault(key, {})[b] = None

    def release(self, blocks: list[int]) -> None:
        first = []
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.key[b] is None:
                    first.append(b)
                else:
                    self.free[b] = None
        for b in reversed(first):
            self.free[b] = None
            self.free.move_to_end(b, last=False)
