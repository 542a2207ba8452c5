"""The Verilated engine through its C++ harness (the path the demo, benchmarks and later the
device use): bit equality with the model over many random commands, back-pressure, and raw
malformed commands played past any Python validation."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver.status import AttnStatus
from nelssa.hw.model import fp
from nelssa.hw.model.engine import EngineCommand, EngineParams, attend

pytestmark = pytest.mark.rtl


@pytest.fixture(scope="module")
def engine():
    from nelssa.hw.sim.engine import RtlEngine

    return RtlEngine(EngineParams())


def _workload(rng, dim, heads, lens):
    def bf(shape):
        return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))

    return bf((heads, dim)), [bf((n, dim)) for n in lens], [bf((n, dim)) for n in lens]


def test_random_commands_bit_exact(engine):
    rng = np.random.default_rng(2024)
    for _ in range(40):
        dim = int(rng.choice([64, 128]))
        heads = int(rng.integers(1, 9))
        lens = rng.integers(1, 65, int(rng.integers(1, 12))).tolist()
        q, ks, vs = _workload(rng, dim, heads, lens)
        scale = float(rng.uniform(0.01, 0.3))
        run = engine.attend(q, ks, vs, scale)
        want = attend(engine.params, q, ks, vs, scale)
        assert run.result.status == AttnStatus.OK
        assert np.array_equal(run.result.o, want.o), f"O differs (D={dim}, H={heads}, {lens})"
        assert np.array_equal(run.result.lse, want.lse)


def test_back_pressure_changes_time_not_bits(engine):
    rng = np.random.default_rng(5)
    q, ks, vs = _workload(rng, 128, 4, [16] * 8)
    cmd = EngineCommand.from_workload(q, ks, vs, 0.088)
    free = engine.run(cmd)
    gappy = engine.run(cmd, kv_gap_period=3)
    assert np.array_equal(free.result.o, gappy.result.o)
    assert np.array_equal(free.result.lse, gappy.result.lse)
    assert gappy.kv_span > free.kv_span * 1.3


def test_cluster_turnaround_costs_two_cycles(engine):
    """head_dim 128, clusters of 16: 128 beats per cluster plus the documented 2-cycle bubble at
    each K->V turn, and one cycle for the first cluster's entry."""
    rng = np.random.default_rng(6)
    q, ks, vs = _workload(rng, 128, 4, [16] * 64)
    run = engine.run(EngineCommand.from_workload(q, ks, vs, 0.088))
    q_beats = 4 * 4
    assert run.kv_span == q_beats + 1 + 64 * (128 + 2)
    assert run.beats_per_cycle >= 0.95


def test_long_context_bit_exact_bounded_and_at_full_rate(engine):
    """4096 tokens in 256 clusters of 16, head_dim 128, 4 query heads, N(0,1) data: the model's
    bits, within the error bound against float64, and at least 0.95 beats a cycle (the device's
    engine, gated as every simulation builds it: test_attn_engine_full's instance, whose cocotb
    run of this took some 20 s of CPU at -O0)."""
    from engine_tb import Workload, assert_error_bound

    wl = Workload.random(np.random.default_rng(104), 128, 4, [16] * 256)
    run = engine.attend(wl.q, wl.keys, wl.values, wl.scale)
    want = attend(engine.params, wl.q, wl.keys, wl.values, wl.scale)
    assert run.result.status == AttnStatus.OK
    assert np.array_equal(run.result.o, want.o) and np.array_equal(run.result.lse, want.lse)
    assert_error_bound(wl, run.result.o, run.result.lse)
    assert run.kv_consumed == 4 * 4 + 256 * 2 * 16 * 4
    assert run.beats_per_cycle >= 0.95, run.beats_per_cycle


@pytest.mark.parametrize("case", ["short", "long", "zero-len", "no-clusters", "bad-dim"])
def test_raw_malformed_commands(engine, case):
    """Bypassing all Python checks, the engine itself reports the status the model predicts and
    consumes what the contract says (recovery inside one simulation is proven by the cocotb
    test malformed_streams)."""
    rng = np.random.default_rng(11)
    q, ks, vs = _workload(rng, 128, 2, [3, 4])
    good = EngineCommand.from_workload(q, ks, vs, 0.1)
    n = len(good.beats)
    cmd = {
        "short": EngineCommand(128, 2, 0.1, [3, 4], good.beats, last_index=n - 9),
        "long": EngineCommand(128, 2, 0.1, [3, 4], np.concatenate([good.beats] * 2)),
        "zero-len": EngineCommand(128, 2, 0.1, [3, 0], good.beats),
        "no-clusters": EngineCommand(128, 2, 0.1, [], good.beats[:8], num_clusters=0),
        "bad-dim": EngineCommand(32, 2, 0.1, [3, 4], good.beats),
    }[case]
    run = engine.run(cmd, max_cycles=100_000)
    assert run.result.status == cmd.expected_status(engine.params) != AttnStatus.OK
    assert run.result.o is None
    if case in ("no-clusters", "bad-dim"):
        assert run.kv_consumed == 0 and run.clu_consumed == 0
    else:
        assert run.kv_consumed == cmd.last_index + 1
        assert run.clu_consumed == cmd.num_clusters
