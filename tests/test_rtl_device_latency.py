"""The RTL device built with pipelined arithmetic units (the latencies a device description's
fp_latency gives, passed down nelssa_device_sim -> nelssa_device -> every nelssa_attn_unit's
engine): its ATTEND results are the model device's bit for bit, and its busy cycles are what the
model device's cycle model (CycleTiming.for_engine, from hw/model/engine_cycles.py) gives for
the same latencies, within test_device_timing.py's bound for a workload without host traffic.
The smallest device (one unit) at -O0: a short simulation, a cheaper build."""

from __future__ import annotations

import pytest

from nelssa.driver.formats import DescStatus
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.engine import EngineParams, FpLatency
from nelssa.hw.model.engine_cycles import EngineTiming
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload

pytestmark = pytest.mark.rtl

LATENCY = FpLatency(add=3, mul=2, exp2=1, recip=2)
WORKLOAD = TimingWorkload(seed=7, head_dim=128, q_heads=2, requests=2, clusters=24,
                          selected=20, max_tokens=16, traffic_bytes=0)
"""Two ATTEND descriptors on the one unit, one after the other."""
QUIET_BOUND = 5.0
"""Percent: test_device_timing.py's bound for a workload without host traffic."""


def _model(latency: FpLatency) -> ModelDevice:
    return ModelDevice(DeviceConfig(engines=1, engine=EngineParams(latency=latency)))


def test_a_pipelined_rtl_device_matches_the_model_in_bits_and_cycles():
    from nelssa.hw.sim.device import RtlDevice

    rtl = RtlDevice(units=1, optimize=False, latency=LATENCY)
    try:
        rtl_out: list = []
        r = run_workload(rtl, WORKLOAD, outputs=rtl_out)
        assert rtl.violations == 0
    finally:
        rtl.close()
    model_out: list = []
    m = run_workload(_model(LATENCY), WORKLOAD, start_at=r["started"], outputs=model_out)
    assert [o[0] for o in rtl_out] == [DescStatus.OK] * 2
    assert rtl_out == model_out
    assert (r["descriptors"], r["bytes"]) == (m["descriptors"], m["bytes"])
    error = (m["cycles"] - r["cycles"]) / r["cycles"] * 100
    assert abs(error) <= QUIET_BOUND, f"model {m['cycles']} cycles, rtl {r['cycles']}"
    # the latencies are what the agreement is about: the combinational model misses them by
    # the engine's latency cost, far beyond the bound
    comb = run_workload(_model(FpLatency()), WORKLOAD, start_at=r["started"])
    params = EngineParams(latency=LATENCY)
    cost = EngineTiming.of(params).over_combinational(params)
    assert cost.kv_turn > 0
    assert (r["cycles"] - comb["cycles"]) / r["cycles"] * 100 > 3 * QUIET_BOUND, (r, comb)
