"""The sub-channel controller model: exact unloaded latencies, bandwidth bounds of the issue's
patterns, zero timing violations (the strict checker raises on any), and queue behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.ddr5_subchannel import (
    ControllerConfig,
    DramAccess,
    SubchannelModel,
    requests_from_lines,
)
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON as M
from nelssa.hw.model.ddr5_timing import DDR5_6400AN_RAMULATOR2 as R

KEEP_OPEN = ControllerConfig(close_idle=10**9)


def _latency(second_row: int, second_bg: int) -> int:
    reqs = requests_from_lines(np.array([0, second_bg]), np.array([0, 0]),
                               np.array([5, second_row]), np.array([0, 1]),
                               arrival=np.array([0, 1000]))
    return SubchannelModel(M, KEEP_OPEN, refresh=False).run(reqs).latencies_tck[1]


def test_unloaded_latencies_are_the_jedec_sums():
    burst = M.burst_cycles
    assert _latency(5, 0) == M.nCL + burst  # row hit
    assert _latency(5, 1) == M.nRCD + M.nCL + burst  # closed bank
    assert _latency(6, 0) == M.nRP + M.nRCD + M.nCL + burst  # row conflict


def _sequential(n):
    line = np.arange(n)
    return requests_from_lines(line % 8, (line // 512) % 4, line // 2048, (line // 8) % 64)


def test_streaming_reads_reach_90_percent_with_refresh():
    model = SubchannelModel(M)
    stats = model.run(_sequential(12_000))
    assert stats.commands["REF"] >= 3
    assert 0.90 <= stats.bandwidth_fraction(M) <= M.refresh_efficiency


def test_one_bank_group_is_bounded_by_tccd_l():
    n = 4000
    line = np.arange(n)
    reqs = requests_from_lines(np.zeros(n, int), (line // 64) % 4, line // 256, line % 64)
    frac = SubchannelModel(M).run(reqs).bandwidth_fraction(M)
    assert frac == pytest.approx(M.nCCD_S / M.nCCD_L * M.refresh_efficiency, abs=0.03)


@pytest.mark.parametrize(("timing", "low", "high"), [(M, 0.84, 0.925), (R, 0.43, 0.50)])
def test_random_lines_are_bounded_by_rrd_and_faw(timing, low, high):
    """nRRD_S = 8 allows an ACT every burst; Ramulator's preset (nRRD_S = 16) half of that."""
    rng = np.random.default_rng(3)
    n = 3000
    reqs = requests_from_lines(rng.integers(0, 8, n), rng.integers(0, 4, n),
                               rng.integers(0, 65536, n), rng.integers(0, 64, n))
    assert low <= SubchannelModel(timing).run(reqs).bandwidth_fraction(timing) <= high


def test_writes_drain_and_mix_without_violations():
    rng = np.random.default_rng(4)
    n = 3000
    reqs = requests_from_lines(rng.integers(0, 8, n), rng.integers(0, 4, n),
                               rng.integers(0, 4, n), rng.integers(0, 64, n),
                               is_write=rng.random(n) < 0.3)
    model = SubchannelModel(M)
    stats = model.run(reqs)
    assert stats.writes == sum(r.is_write for r in reqs) and stats.reads + stats.writes == n
    assert stats.commands["WR"] == stats.writes and stats.commands["RD"] == stats.reads
    assert model.checker is not None and not model.checker.violations


def test_late_arrivals_and_bad_config():
    reqs = [DramAccess(0, False, 0, 0, 1, 0, arrival=0),
            DramAccess(1, False, 3, 1, 2, 5, arrival=500)]
    stats = SubchannelModel(M).run(reqs)
    assert stats.cycles >= 500
    with pytest.raises(ValueError, match="write_low"):
        ControllerConfig(write_low=30, write_high=24)
    with pytest.raises(ValueError, match="close_idle"):
        ControllerConfig(close_idle=0)
