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
order (a queue of freed jobs' blocks, first evicted first). Keys are kept a hash block (a group
of blocks) at a time, so that a prompt's thousand blocks cost a few dozen dict operations.
"""

from __future__ import annotations

import enum
import functools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import compress, count
from operator import itemgetter

HASH_BLOCK_TOKENS = 512
"""Tokens per hash id of a trace's prompt (Mooncake traces hash 512-token blocks)."""


# token-id ranges of the replay through vLLM, far above any hash id's tokens (2^40 > ids * 512)
_OWN_PROMPT = 1 << 40
_RESIDENT = 2 << 40
_OUTPUT = 3 << 40

_MASK64 = (1 << 64) - 1
_OWN_SPAN = 1 << 40
"""Own key groups of one job: ``-(uid * 2^40) - 1 - g`` for group ``g`` (shared ones are >= 0)."""


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
    """Key of each block of one job, for our pool (equal keys: equal token prefixes). Keys come
    in groups of ``per`` blocks (one 512-token hash block): block ``k`` is position ``k % per``
    of group ``k // per``, and the pool keeps a group's blocks in one list. The prompt's full
    blocks under hash ids (the first ``nshared``) are in groups keyed by the chain hash of the
    hash ids up to theirs (``chain``, >= 0); every other block is the job's own, in groups keyed
    ``own - g`` (< 0)."""

    __slots__ = ("chain", "ncached", "nshared", "own", "per")

    def __init__(self, content: Content, prompt_tokens: int, block_tokens: int) -> None:
        self.ncached = 0
        """The job's first blocks that are cached in the pool (its hits, then those it
        filled); the pool keeps it."""
        uid = 2 * content.rid + (content.kind is Kind.RESIDENT)
        self.own = -uid * _OWN_SPAN - 1
        self.per = max(1, HASH_BLOCK_TOKENS // block_tokens)
        self.chain: list[int] = []
        self.nshared = 0
        if content.kind is Kind.PROMPT and content.hash_ids is not None:
            if HASH_BLOCK_TOKENS % block_tokens:
                raise ValueError(f"block_tokens {block_tokens} must divide "
                                 f"{HASH_BLOCK_TOKENS} for prefix caching over hash ids")
            n = prompt_tokens // block_tokens
            h = 0
            for hid in content.hash_ids[:-(-n // self.per)]:
                h = hash((h, hid))
                self.chain.append(h & _MASK64)
            self.nshared = min(n, len(self.chain) * self.per)

    def at(self, k: int) -> tuple[int, int]:
        """Group and position of block ``k``."""
        g, p = divmod(k, self.per)
        return (self.chain[g] if k < self.nshared else self.own - g), p

    __getitem__ = at

    def spans(self, first: int, last: int) -> Iterator[tuple[int, int, int]]:
        """Blocks ``first`` .. ``last - 1`` as pieces ``(group, p0, p1)`` of one group each,
        in order (made as they are asked for)."""
        per, ns = self.per, self.nshared
        k = first
        while k < last:
            g = k // per
            end = (g + 1) * per
            if end > last:
                end = last
            if k < ns:
                if end > ns:
                    end = ns
                gk = self.chain[g]
            else:
                gk = self.own - g
            p = k - g * per
            yield gk, p, p + end - k
            k = end


@functools.lru_cache(maxsize=8)
def _block_ids(blocks: int) -> tuple[int, ...]:
    """Block ids ``blocks - 1`` down to 1, int objects that every pool of that size shares:
    a fleet's instances hash and compare the same ones (32 bytes a block), not a copy each
    that all compete for the processor's caches."""
    return tuple(range(blocks - 1, 0, -1))


class BlockPool:
    """vLLM's block pool in miniature: the free queue (uncached blocks, then cached ones in
    eviction order), cached full blocks by key, the holders of the cached blocks that more than
    one job holds. A job's first ``keys.ncached`` blocks are the cached ones (its hits, then
    those it filled); a block held by one job (nearly all) costs no bookkeeping but its slot in
    its key's group, and a freed job's cached blocks enter the queue as one segment. Bulk
    operations run in the dict, set and list builtins, a group of keys at a time."""

    __slots__ = ("cached", "dups", "evictable", "free_cached", "queue", "shared",
                 "stale", "uncached")

    def __init__(self, blocks: int) -> None:
        self.uncached: list[int] = list(_block_ids(blocks))
        """Free blocks without a key (a stack; block 0 is the null block)."""
        self.queue: deque[list] = deque()
        """The free cached blocks, the first to be evicted first: segments ``[blocks, keys,
        n, done]``, a freed job's first ``n`` blocks tail first (``blocks``: block ``i`` is
        the job's block ``n - 1 - i``), ``done`` of them gone. Entries of blocks that were held
        when freed, or that a hit took out of the queue since, are stale (``stale``)."""
        self.free_cached = bytearray(blocks)
        """1 for a free cached block, by block id. A flag a block, not a set: a fleet's
        full pools then take 1 byte a block, not the 30-60 of a set's slots and spare room,
        and their bookkeeping stays in the processor's caches (issue 42: 64 instances' sets
        were 64 MB, and the cost per request grew by a third as they filled)."""
        self.evictable = 0
        """How many blocks are free cached ones (flagged in ``free_cached``)."""
        self.stale: dict[int, int] = {}
        """Block -> its entries in ``queue`` that are stale (always its oldest)."""
        self.shared: dict[int, int] = {}
        """Held cached block -> holders beyond the first (only blocks held by two or more)."""
        self.cached: dict[int, list] = {}
        """Group key -> the block cached at each position (None: none; a list, oldest first,
        for a key cached in several blocks)."""
        self.dups: dict[int, int] = {}
        """Group key -> its positions cached in several blocks (only groups with some)."""

    def free_blocks(self) -> int:
        return len(self.uncached) + self.evictable

    def _flag(self, bs: list[int], v: int) -> None:
        """Set the free flag of blocks ``bs`` to ``v`` (one by one: numpy's indexing with a
        list converts it first, which costs more than the loop)."""
        f = self.free_cached
        for b in bs:
            f[b] = v

    def cached_keys(self) -> dict[tuple[int, int], int]:
        """Blocks cached under each key."""
        return {(gk, p): len(w) if w.__class__ is list else 1
                for gk, slots in self.cached.items() for p, w in enumerate(slots)
                if w is not None}

    def hits(self, keys: BlockKeys, max_blocks: int) -> list[int]:
        """The cached blocks of the longest cached prefix (at most ``max_blocks``)."""
        return self.lookup(keys, max_blocks)[0]

    def lookup(self, keys: BlockKeys, max_blocks: int) -> tuple[list[int], int]:
        """``hits``, and how many of them are free (vLLM's evictable count: a hit takes them
        out of the free queue, so the admission gate counts them)."""
        get = self.cached.get
        out: list[int] = []
        for gk, p0, p1 in keys.spans(0, max_blocks):  # hits stop at the first miss
            slots = get(gk)
            if slots is None:
                break
            part = slots[p0:p1]
            if None in part:
                out += part[:part.index(None)]
                break
            out += part
        if self.dups:
            out = [b[0] if b.__class__ is list else b for b in out]
        if len(out) > 1:
            return out, itemgetter(*out)(self.free_cached).count(1)
        return out, self.free_cached[out[0]] if out else 0

    def touch(self, blocks: list[int]) -> None:
        """A job takes ``blocks`` (hits): free ones leave the free queue."""
        ev, sh, stale = self.free_cached, self.shared, self.stale
        took = 0
        for b in blocks:
            if ev[b]:
                ev[b] = 0
                took += 1
                stale[b] = stale.get(b, 0) + 1
            else:
                sh[b] = sh.get(b, 0) + 1
        self.evictable -= took

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
            ev, cached = self.free_cached, self.cached
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
                ev[b] = 0
                self.evictable -= 1
                # (keys.at and _drop inlined for a key of one block: a full pool evicts
                # here for every block a decode step starts)
                k = nc - 1 - done
                g, p = divmod(k, keys.per)
                gk = keys.chain[g] if k < keys.nshared else keys.own - g
                slots = cached[gk]
                if slots[p].__class__ is list:
                    self._drop(b, gk, p)
                else:
                    slots[p] = None
                    if slots.count(None) == len(slots):
                        del cached[gk]
                out.append(b)
                m -= 1
            return out
        while m:
            seg = queue[0]
            bl, keys, nc, done = seg
            take = min(m, len(bl) - done)
            bs = bl[done:done + take]
            if done + take == len(bl):
                queue.popleft()
            else:
                seg[3] = done + take
            top = nc - done  # bs are the job's blocks top - 1 down to top - take
            if stale and not stale.keys().isdisjoint(bs):  # stale entries are passed over
                held = []
                for i in compress(count(), map(stale.__contains__, bs)):
                    b = bs[i]
                    c = stale[b]
                    if c > 1:
                        stale[b] = c - 1
                    else:
                        del stale[b]
                    held.append(i)
                held.append(take)
                kept: list[int] = []
                at = 0
                for i in held:  # the runs between them are evicted
                    if i > at:
                        run = bs[at:i]
                        self._evict(run, keys, top - i, top - at)
                        kept += run
                    at = i + 1
                bs = kept
            else:
                self._evict(bs, keys, top - take, top)
            m -= len(bs)
            out += bs
        return out

    def _evict(self, bs: list[int], keys: BlockKeys, lo: int, hi: int) -> None:
        """Free cached blocks ``bs``, a job's blocks ``hi - 1`` down to ``lo``, lose their
        keys."""
        self._flag(bs, 0)
        self.evictable -= len(bs)
        cached, dups = self.cached, self.dups
        for gk, p0, p1 in keys.spans(lo, hi):
            if dups and gk in dups:  # a key of several blocks keeps those not evicted
                for p in range(p0, p1):
                    self._drop(bs[hi - 1 - (lo + p - p0)], gk, p)
            elif p1 - p0 == keys.per:  # the whole group is this job's
                del cached[gk]
            else:
                slots = cached[gk]
                slots[p0:p1] = [None] * (p1 - p0)
                if slots.count(None) == len(slots):
                    del cached[gk]
            lo += p1 - p0

    def _drop(self, b: int, gk: int, p: int) -> None:
        """Block ``b`` loses its key, position ``p`` of group ``gk``."""
        slots = self.cached[gk]
        w = slots[p]
        if w.__class__ is list:
            w.remove(b)
            if len(w) == 1:
                slots[p] = w[0]
                c = self.dups[gk] - 1
                if c:
                    self.dups[gk] = c
                else:
                    del self.dups[gk]
        else:
            slots[p] = None
            if slots.count(None) == len(slots):
                del self.cached[gk]

    def _put(self, b: int, gk: int, p: int, per: int) -> None:
        """Cache block ``b`` at position ``p`` of group ``gk``."""
        slots = self.cached.get(gk)
        if slots is None:
            slots = self.cached[gk] = [None] * per
        w = slots[p]
        if w is None:
            slots[p] = b
        elif w.__class__ is list:
            w.append(b)
        else:
            slots[p] = [w, b]
            self.dups[gk] = self.dups.get(gk, 0) + 1

    def cache(self, blocks: list[int], keys: BlockKeys, first: int, last: int) -> None:
        """Register blocks ``first`` .. ``last - 1`` of a job (all full) under their keys (those
        it has cached already keep theirs)."""
        first = max(first, keys.ncached)
        if last <= first:
            return
        keys.ncached = last
        per = keys.per
        if last == first + 1:
            self._put(blocks[first], *keys.at(first), per)
            return
        cached = self.cached
        k = first
        for gk, p0, p1 in keys.spans(first, last):
            n = p1 - p0
            slots = cached.get(gk)
            if slots is None:
                if n == per:
                    cached[gk] = blocks[k:k + n]
                else:
                    slots = cached[gk] = [None] * per
                    slots[p0:p1] = blocks[k:k + n]
            elif slots[p0:p1].count(None) == n:
                slots[p0:p1] = blocks[k:k + n]
            else:  # keys cached already, in other blocks
                for i in range(n):
                    self._put(blocks[k + i], gk, p0 + i, per)
            k += n

    def release(self, blocks: list[int], keys: BlockKeys) -> None:
        """Free a job's blocks, tail first: uncached ones to the front of the free queue,
        cached ones whose last holder this was to its back."""
        nc = keys.ncached
        keys.ncached = 0
        self.uncached += blocks[nc:]
        if not nc:
            return
        rb = blocks[nc - 1::-1]
        self._flag(rb, 1)
        self.evictable += len(rb)
        sh = self.shared
        held = (sh.keys() & rb) if sh else None
        if held:  # still held by others: not free, their entries are stale from the start
            self._flag(list(held), 0)
            self.evictable -= len(held)
            stale = self.stale
            for b in held:
                c = sh[b]
                if c > 1:
                    sh[b] = c - 1
                else:
                    del sh[b]
                stale[b] = stale.get(b, 0) + 1
        self.queue.append([rb, keys, nc, 0])
