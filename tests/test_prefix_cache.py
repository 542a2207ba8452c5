"""Our block pool (``prefix.py``) against vLLM's BlockPool and FreeKVCacheBlockQueue (0.33.0,
``vllm/v1/core/block_pool.py``, ``kv_cache_utils.py``): a hand-built case whose eviction order
follows vLLM's rules step by step, and random use against a plain transcription of those rules
(a linked free queue in vLLM's order, reference counts, a block per key, the first cached
first)."""

from __future__ import annotations

import random
from collections import OrderedDict

from nelssa.emu.policy.prefix import BlockKeys, BlockPool, Content, Kind
from nelssa.emu.policy.schedule import JobSpec
from nelssa.emu.policy.v1_scheduler import V1Scheduler


class VllmPool:
    """vLLM's BlockPool, transcribed: block 0 the null block; ``free_blocks`` walks the freed
    blocks tail first, prepending those without a hash (reused first) and appending those with
    one (evicted least recently freed first); ``get_new_blocks`` pops the front, evicting the
    hash it held; ``touch`` takes a free cached block out of the queue; a hash maps to its
    blocks, the first cached first (``get_one_block``)."""

    def __init__(self, blocks: int) -> None:
        self.queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, blocks))
        self.ref = [0] * blocks
        self.hash: list[int | None] = [None] * blocks
        self.cached: dict[int, dict[int, None]] = {}

    def lookup(self, keys: BlockKeys, max_blocks: int) -> tuple[list[int], int]:
        out = []
        for k in range(max_blocks):
            where = self.cached.get(keys[k])
            if not where:
                break
            out.append(next(iter(where)))
        return out, sum(1 for b in out if self.ref[b] == 0)

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.queue[b]
            self.ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            b = self.queue.popitem(last=False)[0]
            h = self.hash[b]
            if h is not None:
                del self.cached[h][b]
                if not self.cached[h]:
                    del self.cached[h]
                self.hash[b] = None
            self.ref[b] = 1
            out.append(b)
        return out

    def cache(self, blocks: list[int], keys: BlockKeys, first: int, last: int) -> None:
        for k in range(first, last):
            b = blocks[k]
            if self.hash[b] is None:
                self.hash[b] = keys[k]
                self.cached.setdefault(keys[k], {})[b] = None

    def release(self, blocks: list[int]) -> None:
        front = []
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.hash[b] is None:
                    front.append(b)
                else:
                    self.queue[b] = None
        for b in reversed(front):
            self.queue[b] = None
            self.queue.move_to_end(b, last=False)

    def free_blocks(self) -> int:
        return len(self.queue)

    def cached_keys(self) -> dict[tuple[int, int], int]:
        return {k: len(v) for k, v in self.cached.items()}


def _cached_keys(pool: BlockPool) -> dict[tuple[int, int], int]:
    return pool.cached_keys()


def _keys(rid: int, hash_ids: tuple[int, ...] | None, tokens: int, bt: int) -> BlockKeys:
    return Content(rid, Kind.PROMPT, hash_ids).block_keys(tokens, bt)


def test_eviction_order_of_a_hand_built_case() -> None:
    bt = 256  # two blocks per Mooncake hash id
    pool = BlockPool(9)  # block 0 is the null block: 8 to hand out
    assert pool.free_blocks() == 8
    a = _keys(0, (1, 2), 1024, bt)  # four cached blocks: (1, 0) (1, 1) (2, 0) (2, 1)
    ab = pool.allocate(5)
    pool.cache(ab, a, 0, 4)  # the fifth holds its own tokens: never cached
    assert pool.free_blocks() == 3
    b = _keys(1, (1, 3), 1024, bt)  # shares hash id 1 with A
    hits, free = pool.lookup(b, 3)
    assert hits == ab[:2] and free == 0  # held by A: not free
    pool.touch(hits)
    bb = hits + pool.allocate(1)
    b.ncached = 2
    pool.cache(bb, b, 2, 3)
    # A finishes: its uncached tail to the front, its cached blocks not held by B to the back,
    # tail first
    pool.release(ab, a)
    assert pool.free_blocks() == 2 + 1 + 2
    got = pool.allocate(3)  # two never used, then A's uncached tail: no key is lost
    assert ab[4] in got and _cached_keys(pool) == dict.fromkeys([a[0], a[1], a[2], a[3], b[2]],
                                                                 1)
    assert pool.allocate(1) == [ab[3]]  # then A's last cached block, the least recently freed
    assert a[3] not in pool.cached_keys()
    hits, free = pool.lookup(a, 3)
    assert hits == ab[:3] and free == 1  # (2, 0) is free, hash id 1's blocks are B's
    pool.release(bb, b)  # B's blocks after A's in the queue: (2, 0) goes first, B's tail next
    assert pool.allocate(2) == [ab[2], bb[2]]
    assert pool.lookup(b, 3) == (ab[:2], 2)


def _differential(seed: int) -> None:
    rng = random.Random(seed)
    bt, blocks = 16, 120
    ours, theirs = BlockPool(blocks), VllmPool(blocks)
    prefixes = [tuple(rng.randrange(6) for _ in range(3)) for _ in range(3)]
    live: dict[int, tuple[BlockKeys, BlockKeys, list[int], list[int], int]] = {}
    for rid in range(400):
        if live and (rng.random() < 0.45 or ours.free_blocks() < 30):
            r = rng.choice(sorted(live))  # a job finishes (or is preempted)
            ka, kb, ba, bb, _ = live.pop(r)
            ours.release(ba, ka)
            theirs.release(bb)
        elif live and rng.random() < 0.3:
            r = rng.choice(sorted(live))  # a job grows by a block (or a chunk of them)
            ka, kb, ba, bb, n = live[r]
            g = rng.choice((1, 1, 12))
            if ours.free_blocks() >= g:
                ba += ours.allocate(g)
                bb += theirs.allocate(g)
                ours.cache(ba, ka, ka.ncached, n + g)
                theirs.cache(bb, kb, 0, n + g)
                live[r] = (ka, kb, ba, bb, n + g)
        else:  # a job is admitted with what it finds in the cache
            ids = rng.choice(prefixes) + tuple(rng.randrange(8) for _ in range(rng.randrange(3)))
            tokens = rng.randrange(100, 512 * len(ids) + 1)
            hid = ids if rng.random() < 0.85 else None
            ka, kb = _keys(rid, hid, tokens, bt), _keys(rid, hid, tokens, bt)
            top = (tokens - 1) // bt
            ha, fa = ours.lookup(ka, top)
            hb, fb = theirs.lookup(kb, top)
            assert (len(ha), fa) == (len(hb), fb)
            need = rng.randrange(1, 40)
            if need + fa > ours.free_blocks():
                continue
            ours.touch(ha)
            theirs.touch(hb)
            ba, bb = ha + ours.allocate(need), hb + theirs.allocate(need)
            n = min(len(ba), tokens // bt)
            ka.ncached = len(ha)
            ours.cache(ba, ka, len(ha), n)
            theirs.cache(bb, kb, len(hb), n)
            live[rid] = (ka, kb, ba, bb, n)
        assert ours.free_blocks() == theirs.free_blocks()
        assert _cached_keys(ours) == theirs.cached_keys()
        for ka, kb, *_ in live.values():  # every job would find as long a prefix, as free
            (ha, fa), (hb, fb) = ours.lookup(ka, 40), theirs.lookup(kb, 40)
            assert (len(ha), fa) == (len(hb), fb)


def test_random_use_matches_vllms_rules() -> None:
    for seed in range(6):
        _differential(seed)


def test_the_null_block_is_never_free() -> None:
    for caching in (False, True):
        s = V1Scheduler(10, 16, 8, 64, prefix_caching=caching)
        assert s.used_blocks() == 1  # as vLLM's pool counts it
        s.add(JobSpec("a", 16 * 9, 1, Content(0, Kind.PROMPT)))
        plan = s.schedule()
        assert [(p.jid, p.start, p.tokens) for p in plan.scheduled] == [("a", 0, 64)]
        assert s.used_blocks() == 5
        s.add(JobSpec("b", 16 * 10, 1, Content(1, Kind.PROMPT)))  # 10 blocks: never fits
        s.update(plan)
        assert [p.jid for p in s.schedule().scheduled] == ["a"]
