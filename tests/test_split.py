"""The unit split (driver/split.py): a batch cut into descriptors that fill a device's units.

Properties over random batches: every selected cluster lands in exactly one part of its own
request, parts fit a descriptor, the count is a whole number of rounds of the units, the work
is balanced, and parts come largest first. On the model device, the split and LSE-merged result
stays within the engine's float64 bound and the split fills four units (about half the cycles
of one descriptor per KV head).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import MAX_IDS
from nelssa.driver.memory import KvRegion, MemoryApi
from nelssa.driver.port import DDR5_COUNTERS
from nelssa.driver.split import PART_OVERHEAD_WORK, _makespan, _plan, split_batch
from nelssa.host.pnm_node.aggregate import merge_partials
from nelssa.hw.model import fp
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.reference import attend_f64

HEAD_DIM = 64


def _region(tokens: list[int]) -> KvRegion:
    return KvRegion(0, 0, 0, HEAD_DIM, len(tokens), 0, 0, 0,
                    clusters=[(0, t) for t in tokens])


def _request(tokens: list[int], ids: list[int]) -> AttnRequest:
    return AttnRequest(_region(tokens), np.zeros((1, HEAD_DIM), np.uint16), ids)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 7))
    out = []
    for _ in range(n):
        tokens = draw(st.lists(st.integers(1, 255), min_size=1, max_size=60))
        # unique ids, so that a run of them has one place (repeats: the test below)
        ids = draw(st.lists(st.integers(0, len(tokens) - 1), min_size=1, max_size=80,
                            unique=True))
        out.append(_request(tokens, ids))
    return out


def _work(r: AttnRequest) -> int:
    return sum(r.region.clusters[c][1] for c in r.cluster_ids)


def _ids_work(r: AttnRequest) -> np.ndarray:
    return np.array([r.region.clusters[c][1] * HEAD_DIM for c in r.cluster_ids])


@settings(max_examples=300, deadline=None)
@given(batches(), st.integers(1, 8), st.integers(1, 50))
def test_parts_cover_each_request_once_fit_and_fill_whole_rounds(reqs, units, max_ids):
    parts = split_batch(reqs, units, max_ids)
    by_request: dict[int, list] = {}
    for p in parts:
        assert 1 <= len(p.attn.cluster_ids) <= max_ids
        assert p.attn.region is reqs[p.request].region and p.attn.q is reqs[p.request].q
        by_request.setdefault(p.request, []).append(p.attn)
    for i, r in enumerate(reqs):
        mine = by_request[i]
        assert Counter(c for a in mine for c in a.cluster_ids) == Counter(r.cluster_ids)
        # a request's parts are contiguous runs of its ids: in order they spell the ids
        runs = sorted((list(a.cluster_ids) for a in mine), key=lambda ids: _find(r, ids))
        assert [c for run in runs for c in run] == list(r.cluster_ids)
        assert len(mine) >= -(-len(r.cluster_ids) // max_ids)
    first = -(-len(reqs) // units) * units
    at_least = sum(-(-len(r.cluster_ids) // max_ids) for r in reqs)
    most = sum(len(r.cluster_ids) for r in reqs)
    assert len(parts) >= max(at_least, min(first, most))
    works = [_work(p.attn) * HEAD_DIM for p in parts]
    assert works == sorted(works, reverse=True)  # largest first
    # never later than the first whole round of the units would finish
    fewest = [w for w, _ in _plan(reqs, [_ids_work(r) for r in reqs], first, max_ids)]
    assert _makespan(works, units) <= _makespan(fewest, units)


def _find(r: AttnRequest, run: list) -> int:
    ids = list(r.cluster_ids)
    for at in range(len(ids) - len(run) + 1):
        if ids[at:at + len(run)] == run:
            return at
    raise AssertionError(f"{run} is not a run of {ids}")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=4, max_size=300), st.integers(2, 8))
def test_one_request_is_cut_into_near_equal_shares(tokens, units):
    r = _request(tokens, list(range(len(tokens))))
    # one round: a part per unit, each cut at the cluster nearest its share, so a part is off
    # by at most one cluster
    one = [p for _, p in _plan([r], [np.array(tokens) * HEAD_DIM], units, MAX_IDS)]
    assert len(one) == min(units, len(tokens))
    share = _work(r) / len(one)
    for p in one:
        assert abs(_work(p.attn) - share) <= max(tokens) * len(one)
    # the split takes whole rounds (or a part per cluster when there are fewer), and finishes
    # no later than the one round
    parts = split_batch([r], units)
    assert len(parts) % units == 0 or len(parts) == len(tokens)
    assert sorted(c for p in parts for c in p.attn.cluster_ids) == list(range(len(tokens)))
    spans = [_makespan([_work(p.attn) * HEAD_DIM for p in ps], units) for ps in (parts, one)]
    assert spans[0] <= spans[1]


def test_repeated_ids_are_kept_as_often_as_given():
    r = _request([3, 5], [0, 1, 0, 0, 1])
    parts = split_batch([r], 4, max_ids=2)
    assert Counter(c for p in parts for c in p.attn.cluster_ids) == Counter([0, 0, 0, 1, 1])
    assert len(parts) == 4


def test_a_batch_that_fills_the_units_is_not_cut():
    reqs = [_request([16] * 10, list(range(10))) for _ in range(4)]
    parts = split_batch(reqs, 4)
    assert sorted(p.request for p in parts) == [0, 1, 2, 3]
    assert all(p.attn is reqs[p.request] for p in parts)


@pytest.mark.parametrize("heads, parts", [(1, 4), (2, 4), (3, 12), (4, 4), (5, 16), (8, 8)])
def test_equal_heads_on_four_units_are_cut_into_even_rounds(heads, parts):
    reqs = [_request([16] * 40, list(range(40))) for _ in range(heads)]
    works = [_work(p.attn) * HEAD_DIM for p in split_batch(reqs, 4)]
    assert len(works) == parts
    # every unit busy in every round: the work over the units plus one overhead per round
    rounds = -(-len(works) // 4)
    assert _makespan(works, 4) <= sum(works) / 4 + rounds * PART_OVERHEAD_WORK


def test_six_heads_on_four_units_make_two_even_rounds():
    reqs = [_request([16] * 40, list(range(40))) for _ in range(6)]
    works = [_work(p.attn) for p in split_batch(reqs, 4)]
    assert len(works) == 8 and works[:4] == [640] * 4 and works[4:] == [320] * 4


@pytest.mark.parametrize("call, message", [
    (lambda: split_batch([_request([4], [0])], 0), "units must be >= 1, got 0"),
    (lambda: split_batch([_request([4], [0])], 2, max_ids=0), "max_ids must be >= 1"),
    (lambda: split_batch([_request([4], [])], 2), "request 0 selects no cluster"),
    (lambda: split_batch([_request([4], [0]), _request([4, 4], [1, 2])], 2),
     r"request 1: cluster id 2 not in the region \(0..1\)"),
])
def test_bad_batches_are_refused_naming_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _device(engines: int = 4):
    dev = Device(ModelDevice(DeviceConfig(engines=engines)))
    mem = MemoryApi(dev, 1 << 20, 1 << 30)
    return dev, mem, CommandQueue(mem, entries=16)


def test_the_driver_refuses_a_unit_count_the_device_does_not_have():
    _, _, cq = _device(engines=4)
    with pytest.raises(ValueError, match=r"units 5: the device has 4 attention units \(CAPS "
                       r"engines\), so a batch splits over 1..4"):
        cq.split([], units=5)
    with pytest.raises(ValueError, match="units 0: the device has 4"):
        cq.split([], units=0)


def test_split_and_merged_result_is_within_the_float64_bound_and_fills_four_units():
    rng = np.random.default_rng(3)
    dev, mem, cq = _device()
    reqs, data = [], []
    for h in range(2):
        tokens = rng.integers(4, 33, 40).tolist()
        keys = [fp.f32_to_bf16_bits(rng.standard_normal((t, HEAD_DIM)).astype(np.float32))
                for t in tokens]
        values = [fp.f32_to_bf16_bits(rng.standard_normal((t, HEAD_DIM)).astype(np.float32))
                  for t in tokens]
        region = mem.alloc_kv(0, 0, h, HEAD_DIM, len(tokens), sum(tokens))
        mem.write_clusters(region, keys, values)
        q = fp.f32_to_bf16_bits(rng.standard_normal((4, HEAD_DIM)).astype(np.float32))
        ids = sorted(rng.choice(40, 24, replace=False).tolist())
        reqs.append(AttnRequest(region, q, ids))
        data.append((q, [keys[i] for i in ids], [values[i] for i in ids]))
    cycles = {}
    refresh = DDR5_COUNTERS.index("REFRESH")
    for units in (1, 4):
        parts = cq.split(reqs, units)
        busy = dev.reg_read64("PERF_BUSY")  # the device's own count, not the host's polling
        counts = dev.port.ddr5_counts()
        done = cq.wait(cq.submit([p.attn for p in parts]))
        # less the cycles the DDR5 spent refreshing: a 1,000-cycle batch holds a refresh
        # (about 236 cycles every 3,120) or not depending on where the earlier traffic left
        # the refresh timer (one host poll more or less moves it), not on the split
        refreshing = max(b[refresh] - a[refresh]
                         for a, b in zip(counts, dev.port.ddr5_counts(), strict=True))
        cycles[units] = dev.reg_read64("PERF_BUSY") - busy - refreshing
        assert len(parts) == (2 if units == 1 else 4)
        for r, (q, keys, values) in enumerate(data):
            o, lse = merge_partials([(x.o, x.lse) for x, p in zip(done.values(), parts,
                                                                  strict=True) if p.request == r])
            o64, lse64 = attend_f64(q, keys, values, np.float32(1 / np.sqrt(HEAD_DIM)))
            vmax = max(float(np.abs(fp.as_f32(fp.bf16_to_f32_bits(v))).max()) for v in values)
            assert np.abs(o.astype(np.float64) - o64).max() <= 1e-3 * vmax
            assert np.abs(lse.astype(np.float64) - lse64).max() <= 1e-3
    # two KV heads: two units busy unsplit, four split
    assert cycles[4] < 0.65 * cycles[1], cycles
