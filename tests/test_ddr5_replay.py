"""The compiled cycle model (hw/model/ddr5_replay.cpp) against the Python one
(hw/model/ddr5_subchannel.py, command-identical to the RTL controller): the same cycles and the
same commands, command stream and bank-state residencies on every kind of generated pattern,
every preset, with arrivals spread and bunched, refresh on and off; the row guards only it
has."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nelssa.hw.model import ddr5_replay as replay
from nelssa.hw.model.ddr5_addr import ALL_ADDRESS_MAPS, DeviceGeometry, decode
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_patterns import PATTERN_KINDS, generated_pattern
from nelssa.hw.model.ddr5_subchannel import SubchannelModel, requests_from_lines
from nelssa.hw.model.ddr5_timing import PRESETS


def test_the_replay_builds_from_its_source(tmp_path, monkeypatch):
    """A fresh build cache: the library is compiled from ddr5_replay.cpp and loads."""
    monkeypatch.setenv("NELSSA_BUILD_CACHE", str(tmp_path))
    replay._library.cache_clear()
    try:
        assert replay.available()
        assert list(tmp_path.glob("ddr5_replay-*/libddr5_replay.so"))
    finally:
        replay._library.cache_clear()


@settings(max_examples=20, derandomize=True, deadline=None, database=None)
@given(kind=st.sampled_from(PATTERN_KINDS), preset=st.sampled_from(sorted(PRESETS)),
       amap=st.sampled_from(ALL_ADDRESS_MAPS), spread=st.sampled_from([0, 1, 3]),
       refresh=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_the_replay_issues_what_the_cycle_model_issues(kind, preset, amap, spread, refresh,
                                                        seed):
    """Cycles and command counts equal; ``spread``: 0, four requests a cycle, else random
    arrivals over ``spread`` cycles a request (idle gaps: rows closed idle, refreshes met
    with the queues empty). 1,200 requests: several refresh intervals at the wider spreads."""
    geo = DeviceGeometry(PRESETS[preset], 1)
    rng = np.random.default_rng(seed)
    (addrs, writes), params = generated_pattern(kind, 1200, geo, rng, amap)
    d = decode(addrs, geo, amap)
    n = d.row.size
    arrival = (np.arange(n) // 4 if not spread
               else np.sort(rng.integers(0, spread * n, n)))
    w = np.zeros(n, bool) if writes is None else writes
    model = SubchannelModel(geo.timing, check=False, refresh=refresh)
    model.trace = []
    ref = model.run(requests_from_lines(d.bank_group, d.bank, d.row, d.column, w, arrival))
    run = replay.replay_run(geo.timing, d.bank_group, d.bank, d.row, d.column, w, arrival,
                            refresh=refresh, log=True)
    cycles, commands = run.cycles, run.commands
    assert commands["RD"] + commands["WR"] == n
    what = f"{kind} ({params}, {amap}, spread {spread}, refresh {refresh})"
    assert (cycles, commands) == (ref.cycles, {k: ref.commands[k] for k in commands}), what
    # the bank-state residencies (what energy is counted from) and the command stream too
    assert run.residency == ref.residency, what
    assert sum(run.residency.values()) >= ref.cycles - geo.timing.nCL // 4 - 3, what
    assert run.log.tolist() == [[t, int(c), g, k, r] for t, c, g, k, r in model.trace], what


def test_replay_rejects_what_the_cycle_model_cannot_serve():
    t = PRESETS["ddr5-6400"]
    with pytest.raises(ValueError, match="non-decreasing"):
        replay.replay_subchannel(t, [0, 0], [0, 0], [1, 1], [0, 1], None, [3, 2])
    with pytest.raises(ValueError, match="differ in length"):
        replay.replay_subchannel(t, [0, 0], [0], [1, 1], [0, 1], None, [0, 0])


@settings(max_examples=10, derandomize=True, deadline=None, database=None)
@given(kind=st.sampled_from(PATTERN_KINDS), preset=st.sampled_from(sorted(PRESETS)),
       amap=st.sampled_from(ALL_ADDRESS_MAPS), subchannels=st.sampled_from([1, 8]),
       seed=st.integers(0, 2**32 - 1))
def test_a_device_replay_is_the_cycle_models(kind, preset, amap, subchannels, seed):
    """replay_device (the model device's timers' time source) and replay_device_runs: every
    sub-channel's cycles as run_device's (the Python model's)."""
    geo = DeviceGeometry(PRESETS[preset], subchannels)
    (addrs, writes), params = generated_pattern(kind, 800, geo, np.random.default_rng(seed),
                                                amap)
    model = run_device(addrs, writes, geo, amap, check=False)
    cycles = replay.replay_device(addrs, writes, geo, amap)
    runs = replay.replay_device_runs(addrs, writes, geo, amap)
    assert [c for c in cycles if c] == [s.cycles for s in model.per_subchannel], (
        f"{kind} ({params}, {amap}, {subchannels} sub)")
    assert [r.cycles for r in runs] == cycles


def test_the_row_guards_close_rows_the_queue_still_wants():
    """On 4 KB blocks (four lines per row on MOP4CLXOR) Ramulator 2's guard (OPENER) and none
    at all cost row hits that ours (QUEUE, the RTL's) keeps; the Python model, like the RTL,
    has ours only."""
    from nelssa.hw.model.ddr5_patterns import benchmark_patterns
    from nelssa.hw.model.ddr5_subchannel import ControllerConfig, RowGuard

    geo = DeviceGeometry(PRESETS["ddr5-6400an"], 1)
    addrs = benchmark_patterns(4000, geo, np.random.default_rng(0))["random 4 KB"]
    acts = {g: replay.replay_device_runs(addrs, None, geo, "mop4clxor",
                                         config=ControllerConfig(row_guard=g))[0].commands["ACT"]
            for g in RowGuard}
    assert acts[RowGuard.QUEUE] < acts[RowGuard.OPENER] <= acts[RowGuard.NONE]
    with pytest.raises(ValueError, match="QUEUE guard and the CYCLE arbiter only"):
        SubchannelModel(geo.timing, ControllerConfig(row_guard=RowGuard.OPENER))


@pytest.mark.parametrize("kind", ["random 4 KB", "mixed"])
def test_the_ramulator_like_arbiter_keeps_every_timing(kind):
    """One command a tCK, the oldest ready request first (Ramulator 2's FR-FCFS), with its
    guard and open-row policy: every command passes the JEDEC timing checker (reads and
    writes, write drains, refresh), every request is served, and on 4 KB blocks it opens more
    rows than ours."""
    from nelssa.hw.model.ddr5_checker import DDR5TimingChecker, DramCmd
    from nelssa.hw.model.ddr5_patterns import benchmark_patterns
    from nelssa.hw.model.ddr5_subchannel import Arbiter, ControllerConfig, RowGuard

    geo = DeviceGeometry(PRESETS["ddr5-6400an"], 1)
    rng = np.random.default_rng(5)
    if kind == "mixed":
        (addrs, writes), _ = generated_pattern("mixed reads and writes", 4000, geo, rng,
                                               "mop4clxor")
    else:
        addrs, writes = benchmark_patterns(4000, geo, rng)[kind], None
    like = ControllerConfig(row_guard=RowGuard.OPENER, arbiter=Arbiter.TCK, close_idle=10**9)
    run = replay.replay_device_runs(addrs, writes, geo, "mop4clxor", config=like, log=True)[0]
    assert run.commands["RD"] + run.commands["WR"] == len(addrs)
    assert run.commands["REF"] >= 1
    checker = DDR5TimingChecker(geo.timing)  # strict: the first violation raises
    for t, c, g, k, row in sorted(run.log.tolist(), key=lambda x: x[0]):
        checker.issue(t, DramCmd(c), g, k, row)
    if kind == "random 4 KB":
        ours = replay.replay_device_runs(addrs, None, geo, "mop4clxor")[0]
        assert run.commands["ACT"] > ours.commands["ACT"]
