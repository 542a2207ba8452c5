"""What a request's tokens are, for automatic prefix caching, and the KV block pool of our
scheduler.

Mooncake traces name each 512-token block of a prompt by a hash id (``hash_ids``); two prompts
that share a prefix share its ids. vLLM hashes blocks of its own size from token ids, so the
replay through vLLM gives it token ids made from the hash ids (token ``i`` of hash block ``h``
is ``h * 512 + i``), and our scheduler keys its blocks by the same identity: a full block inside
the prompt by the chain of hash ids up to it and its place in the hash block; every other block
(one that holds generated tokens, a prompt without hash ids, a PNM-tier request's GPU-resident
window) is the request's own. The two therefore see the same hits.

The pool follows vLLM's BlockPool (``vllm/v1/core/block_pool.py``) and its
FreeKVCacheBlockQueue:

- block 0 is vLLM's null block, never free, so ``blocks - 1`` can be handed out;
- a request's blocks are freed tail first; those without a hash go to the front of the free
  queue (reused first), those with one to its back (least recently freed evicted first);
- a full block is cached (given its key) when it is scheduled; it keeps its key until it is
  allocated again; a hit on a free cached block takes it out of the free queue.

Since uncached blocks only ever enter the free queue at its front and cached ones at its back,
the queue is always the uncached free blocks followed by the cached ones; which uncached block is
handed out changes nothing, so they are a plain stack here and only the cached ones keep vLLM's
order (an insertion-ordered dict, first evicted first).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from itertools import compress, count, repeat

from nelssa.emu.serving.workload import HASH_BLOCK_TOKENS

# token-id ranges of the replay through vLLM, far above any hash id's tokens (2^40 > ids * 512)
_OWN_PROMPT = 1 << 40
_RESIDENT = 2 << 40
_OUTPUT = 3 << 40

_MASK64 = (1 << 64) - 1
_OWN_SPAN = 1 << 40
"""Own keys of one job: ``-(uid * 2^40) - 1 - k`` for block ``k`` (shared keys are >= 0)."""


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
    """Key of each block of one job, for our pool (equal keys: equal token prefixes), as ints:
    the prompt's full blocks under hash ids (``shared``, >= 0, one chain hash per hash id and the
    block's place in it) then the job's own blocks (< 0)."""

    __slots__ = ("ncached", "own", "shared")

    def __init__(self, content: Content, prompt_tokens: int, block_tokens: int) -> None:
        self.ncached = 0
        """The job's first blocks that are cached in the pool (its hits, then those it
        filled); the pool keeps it."""
        uid = 2 * content.rid + (content.kind is Kind.RESIDENT)
        self.own = -uid * _OWN_SPAN - 1
        self.shared: list[int] = []
        if content.kind is Kind.PROMPT and content.hash_ids is not None:
            if HASH_BLOCK_TOKENS % block_tokens:
                raise ValueError(f"block_tokens {block_tokens} must divide "
                                 f"{HASH_BLOCK_TOKENS} for prefix caching over hash ids")
            per_hash = HASH_BLOCK_TOKENS // block_tokens
            shift = per_hash.bit_length()
            n = prompt_tokens // block_tokens
            keys = self.shared
            h = 0
            for hid in content.hash_ids[:-(-n // per_hash)]:
                h = hash((h, hid))
                base = (h & _MASK64) << shift
                keys.extend(range(base, base + per_hash))
            del keys[n:]

    def __getitem__(self, k: int) -> int:
        shared = self.shared
        return shared[k] if k < len(shared) else self.own - k

    def range(self, first: int, last: int) -> list[int]:
        """Keys of blocks ``first`` .. ``last - 1``."""
        shared = self.shared
        ns = len(shared)
        if last <= ns:
            return shared[first:last]
        own = self.own
        out = shared[first:] if first < ns else []
        out.extend(range(own - max(first, ns), own - last, -1))
        return out


class _Refs:
    """``pool.ref[b]`` for a cached block ``b``: how many jobs hold it (0 when it is free)."""

    __slots__ = ("pool",)

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool

    def __getitem__(self, b: int) -> int:
        pool = self.pool
        return 0 if b in pool.evictable else 1 + pool.shared.get(b, 0)


class BlockPool:
    """vLLM's block pool in miniature: the free queue (uncached blocks, then cached ones in
    eviction order), cached full blocks by key, the holders of the cached blocks that more than
    one job holds. A job's first ``keys.ncached`` blocks are the cached ones (its hits, then
    those it filled); a block held by one job (nearly all) costs no bookkeeping but its key's
    entry, and a freed job's cached blocks enter the queue as one segment. Bulk operations run
    in the dict, set and list builtins."""

    __slots__ = ("cached", "evictable", "ndup", "queue", "shared", "stale", "uncached")

    def __init__(self, blocks: int) -> None:
        self.uncached: list[int] = list(range(blocks - 1, 0, -1))
        """Free blocks without a key (a stack; block 0 is the null block)."""
        self.queue: deque[list] = deque()
        """The free cached blocks, the first to be evicted first: segments ``[blocks, keys,
        n, done]``, a freed job's first ``n`` blocks tail first (``blocks``), their keys
        ``keys[n - 1 - i]``, ``done`` of them gone. Entries of blocks that were held when
        freed, or that a hit took out of the queue since, are stale (``stale``)."""
        self.evictable: set[int] = set()
        """The free cached blocks."""
        self.stale: dict[int, int] = {}
        """Block -> its entries in ``queue`` that are stale (always its oldest)."""
        self.shared: dict[int, int] = {}
        """Held cached block -> holders beyond the first (only blocks held by two or more)."""
        self.cached: dict[int, int | list[int]] = {}
        """Key -> the block (or blocks, oldest first) cached under it."""
        self.ndup = 0
        """Keys cached in more than one block (list values of ``cached``)."""

    @property
    def ref(self) -> _Refs:
        return _Refs(self)

    def free_blocks(self) -> int:
        return len(self.uncached) + len(self.evictable)

    def hits(self, keys: BlockKeys, max_blocks: int) -> list[int]:
        """The cached blocks of the longest cached prefix (at most ``max_blocks``)."""
        return self.lookup(keys, max_blocks)[0]

    def lookup(self, keys: BlockKeys, max_blocks: int) -> tuple[list[int], int]:
        """``hits``, and how many of them are free (vLLM's evictable count: a hit takes them
        out of the free queue, so the admission gate counts them)."""
        get = self.cached.get
        out: list[int] = []
        first, step = 0, 16
        while first < max_blocks:  # in growing chunks: hits stop at the first miss
            last = min(first + step, max_blocks)
            got = list(map(get, keys.range(first, last)))
            if None in got:
                out += got[:got.index(None)]
                break
            out += got
            first, step = last, 4 * step
        if self.ndup:
            out = [b[0] if b.__class__ is list else b for b in out]
        return out, sum(map(self.evictable.__contains__, out))

    def touch(self, blocks: list[int]) -> None:
        """A job takes ``blocks`` (hits): free ones leave the free queue."""
        ev, sh, stale = self.evictable, self.shared, self.stale
        for b in blocks:
            if b in ev:
                ev.remove(b)
                stale[b] = stale.get(b, 0) + 1
            else:
                sh[b] = sh.get(b, 0) + 1

    def allocate(self, n: int) -> list[int]:
        """``n`` free blocks (they are known to be there), uncached ones first, then cached
        ones in eviction order (losing their keys)."""
        u = self.uncached
        if n <= len(u):
            out = u[-n:]
            del u[-n:]
            return out
        out = u[:]
        u.clear()
        queue, stale = self.queue, self.stale
        m = n - len(out)
        if m < 8:  # one by one
            ev, cached = self.evictable, self.cached
            while m:
                seg = queue[0]
                bl, keys, nc, done = seg
                b = bl[done]
                if done + 1 == len(bl):
                    queue.popleft()
                else:
                    seg[3] = done + 1
                c = stale.get(b)
                if c:
                    if c > 1:
                        stale[b] = c - 1
                    else:
                        del stale[b]
                    continue
                ev.remove(b)
                k = keys[nc - 1 - done]
                w = cached.pop(k)
                if w.__class__ is list:
                    self._unlist(k, w, (b,))
                out.append(b)
                m -= 1
            return out
        while m:
            seg = queue[0]
            bl, keys, nc, done = seg
            take = min(m, len(bl) - done)
            bs = bl[done:done + take]
            ks = keys.range(nc - done - take, nc - done)[::-1]
            if done + take == len(bl):
                queue.popleft()
            else:
                seg[3] = done + take
            if stale and not stale.keys().isdisjoint(bs):  # drop stale entries, oldest first
                keep = [True] * len(bs)
                for i in compress(count(), map(stale.__contains__, bs)):
                    b = bs[i]
                    c = stale.get(b)
                    if c:
                        keep[i] = False
                        if c > 1:
                            stale[b] = c - 1
                        else:
                            del stale[b]
                bs = list(compress(bs, keep))
                ks = list(compress(ks, keep))
            if bs:
                m -= len(bs)
                self._evict(bs, ks)
                out += bs
        return out

    def _evict(self, bs: list[int], ks: list[int]) -> None:
        self.evictable.difference_update(bs)
        cached = self.cached
        where = list(map(cached.pop, ks, repeat(None)))
        if self.ndup:  # a key of several blocks keeps those not evicted
            gone = set(bs)
            for k, w in zip(ks, where, strict=True):
                if w.__class__ is list:
                    self._unlist(k, w, gone)

    def _unlist(self, k: int, blocks: list[int], gone: Collection[int]) -> None:
        """Key ``k`` of several ``blocks`` (taken out of ``cached``) keeps those not gone."""
        rest = [b for b in blocks if b not in gone]
        if len(rest) > 1:
            self.cached[k] = rest
        else:
            self.ndup -= 1
            if rest:
                self.cached[k] = rest[0]

    def cache(self, blocks: list[int], keys: BlockKeys, first: int, last: int) -> None:
        """Register blocks ``first`` .. ``last - 1`` of a job (all full) under their keys (those
        it has cached already keep theirs)."""
        first = max(first, keys.ncached)
        if last <= first:
            return
        keys.ncached = last
        cached = self.cached
        if last == first + 1:
            k = keys[first]
            w = cached.get(k)
            if w is None:
                cached[k] = blocks[first]
            elif w.__class__ is list:
                w.append(blocks[first])
            else:
                cached[k] = [w, blocks[first]]
                self.ndup += 1
            return
        bl = blocks[first:last]
        ks = keys.range(first, last)
        if cached.keys().isdisjoint(ks):
            cached.update(zip(ks, bl, strict=True))
            return
        for b, k in zip(bl, ks, strict=True):  # keys cached already, in other blocks
            w = cached.get(k)
            if w is None:
                cached[k] = b
            elif w.__class__ is list:
                w.append(b)
            else:
                cached[k] = [w, b]
                self.ndup += 1

    def release(self, blocks: list[int], keys: BlockKeys) -> None:
        """Free a job's blocks, tail first: uncached ones to the front of the free queue,
        cached ones whose last holder this was to its back."""
        nc = keys.ncached
        keys.ncached = 0
        self.uncached += blocks[nc:]
        if not nc:
            return
        rb = blocks[nc - 1::-1]
        ev = self.evictable
        ev.update(rb)
        sh = self.shared
        if sh:
            held = [b for b in rb if b in sh]
            if held:  # still held by others: their entries are stale from the start
                ev.difference_update(held)
                stale = self.stale
                for b in held:
                    c = sh[b]
                    if c > 1:
                        sh[b] = c - 1
                    else:
                        del sh[b]
                    stale[b] = stale.get(b, 0) + 1
        self.queue.append([rb, keys, nc, 0])
