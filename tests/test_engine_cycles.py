"""The engine's cycle model (hw/model/engine_cycles.py) and what the device models take from it:
the latency cost of a command is its pipelined cycles less its combinational ones, latency 0
changes nothing, and both the cycle model and the fluid schedule of the model device slow by that
cost when their engines' units are pipelined. tests/rtl/test_attn_engine.py holds the formula to
the RTL engine (cycle_counts, at latency 0 and pipelined)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_cycle import CycleTiming
from nelssa.hw.model.device_timing import UnitTiming
from nelssa.hw.model.engine import EngineParams, FpLatency
from nelssa.hw.model.engine_cycles import EngineTiming, command_cycles

PIPELINED = FpLatency(bf16_mul=1, add=3, mul=2, exp2=4, log2=4, recip=4)
SLOW_ADDER = FpLatency(add=6, mul=1)
"""An adder slower than a row at both head_dims: every V row waits."""
NARROW = {"compute_lanes": 4}
"""A narrow datapath: a K or V beat takes 8 cycles, a result beat 4."""


@pytest.mark.parametrize(("lat", "lanes"),
                         [(PIPELINED, {}), (SLOW_ADDER, {}), (FpLatency(), NARROW),
                          (PIPELINED, NARROW), (SLOW_ADDER, {"compute_lanes": 16})],
                         ids=["pipelined", "slow_adder", "narrow", "narrow_pipelined",
                              "16_lanes_slow_adder"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_latency_cost_is_the_difference_of_the_cycles(lat, lanes, head_dim):
    rng = np.random.default_rng(head_dim)
    comb = EngineParams()
    piped = replace(comb, latency=lat, **lanes)
    cost = EngineTiming.of(piped).over_combinational(piped)
    for _ in range(20):
        heads = int(rng.integers(1, 9))
        lens = rng.integers(1, 65, rng.integers(1, 9)).tolist()
        extra = command_cycles(piped, head_dim, heads, lens) - command_cycles(
            comb, head_dim, heads, lens)
        assert extra == cost.cycles(head_dim, len(lens), sum(lens), heads) > 0


def test_the_phases():
    t = EngineTiming.of(EngineParams())
    assert (t.kv_turn, t.drain, t.final_wait, t.out_fill, t.row_period) == (2, 0, 0, 0, (2, 4))
    t = EngineTiming.of(EngineParams(latency=PIPELINED))
    # turn: 1 + dot (1 + 5 * 3) + fold (3 * 3) + scale (2), then set-up: 3 + 4 + 1
    assert t.kv_turn == 1 + 16 + 9 + 2 + 8
    assert (t.drain, t.final_wait, t.out_fill, t.row_period) == (5, 9, 3, (3, 4))
    # the fold is the engine's (HeadDim), not the command's: 1 add at HeadDim 64
    small = EngineTiming.of(EngineParams(head_dim=64, latency=PIPELINED))
    assert small.kv_turn == t.kv_turn - 2 * 3
    # 4 lanes: 8 cycles a K or V beat, 4 a result beat (through the result FIFO); the turn
    # counts from the last chunk, so it does not change
    t = EngineTiming.of(EngineParams(latency=PIPELINED, **NARROW))
    assert (t.beat, t.out_beat, t.row_period, t.out_fill) == (8, 4, (16, 32), 3)
    assert t.kv_turn == 1 + 16 + 9 + 2 + 8
    t = EngineTiming.of(EngineParams(compute_lanes=1))
    assert (t.beat, t.out_beat, t.row_period, t.out_fill) == (32, 16, (64, 128), 1)
    assert EngineTiming.of(EngineParams(compute_lanes=16)).out_fill == 0  # whole result beats


def test_latency_0_changes_no_timing():
    p = EngineParams()
    for timing in (UnitTiming.load(), CycleTiming.load()):
        assert timing.for_engine(p) is timing
    with pytest.raises(ValueError, match=r"fp latency add: an integer in 0\.\.15 cycles, got 16"):
        FpLatency(add=16)
    for bad in (0, 3, 64, True):
        with pytest.raises(ValueError, match=r"compute_lanes must be one of \(1, 2, 4, 8, 16, "):
            EngineParams(compute_lanes=bad)


def _busy(config: DeviceConfig) -> int:
    """PERF_BUSY of one request (32 clusters of 16 tokens, head_dim 128, 4 query heads)."""
    model = ModelDevice(config)
    dev = Device(model)
    mem = MemoryApi(dev, 1 << 20, 1 << 32)
    cq = CommandQueue(mem, entries=16)
    rng = np.random.default_rng(0)
    region = mem.alloc_kv(0, 0, 0, 128, 32, 32 * 16)
    rows = [fp.f32_to_bf16_bits(rng.standard_normal((16, 128)).astype(np.float32))] * 32
    mem.write_clusters(region, rows, rows)
    q = fp.f32_to_bf16_bits(rng.standard_normal((4, 128)).astype(np.float32))
    cq.wait(cq.submit([AttnRequest(region, q, list(range(32)))]))
    return dev.reg_read64("PERF_BUSY")


@pytest.mark.parametrize("timer", ["cycle", "fluid"])
@pytest.mark.parametrize(("lat", "lanes"), [(PIPELINED, {}), (SLOW_ADDER, {}),
                                            (FpLatency(), NARROW)],
                         ids=["pipelined", "slow_adder", "narrow"])
def test_the_device_models_slow_by_the_latency_cost(timer, lat, lanes):
    """Not to the cycle: the longer run meets DDR5 refresh elsewhere (the fluid schedule gave
    9 % more for the slow adder, a refresh window), and the cycle model's engine waits overlap
    waits for data the combinational one had (it gave 8 % less for PIPELINED's turns)."""
    base = DeviceConfig(timer=timer)
    piped = replace(base, engine=replace(base.engine, latency=lat, **lanes))
    cost = EngineTiming.of(piped.engine).over_combinational(piped.engine).cycles(128, 32, 512,
                                                                                 4)
    got = _busy(piped) - _busy(base)
    assert abs(got - cost) <= 0.12 * cost, f"{timer}: {got} more cycles, the engine's {cost}"


def test_adding_to_zero_is_the_folds_first_step():
    """The pipelined fold takes ``0 + b_0`` as ``b_0`` with -0 made +0 (docs/numerics.md): true
    of every value an adder gives (no subnormal, canonical NaN), which a beat sum is."""
    from nelssa.hw.model.fp import fadd

    rng = np.random.default_rng(7)
    a = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    b = np.where(rng.random(a.size) < 0.5, a ^ np.uint32(0x8000_0000),
                 rng.integers(0, 2**32, a.size, dtype=np.uint64).astype(np.uint32))
    sums = fadd(a, b)  # every kind of adder result: cancellations to +-0, NaN, Inf, normals
    assert {0, 0x8000_0000, 0x7FC0_0000, 0x7F80_0000} <= set(sums.tolist())
    want = np.where(sums == 0x8000_0000, np.uint32(0), sums)
    assert np.array_equal(fadd(np.zeros_like(sums), sums), want)
