"""The model device's cycle model (hw/model/device_cycle.py, device_cycle.cpp) on its own: a
recorded run replays to the same cycles, a look ahead leaves the device where it was, the
host's CXL.mem answers wait for the memory while units run, refresh is periodic from reset
however long the device idled, a unit streams no faster than a line a cycle, and the fluid
schedule stands in where the cycle model is switched off. tests/test_device_timing.py holds
the whole to the RTL."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver import cxl
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_cycle import CycleSchedule, CycleTiming, replay
from nelssa.hw.model.device_timing import Refresh, Schedule, UnitTiming
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload

PERIOD = Refresh.of(PRESETS[DeviceConfig().preset], UnitTiming()).period


def _workload(seed: int, traffic: int | None = None) -> TimingWorkload:
    w = TimingWorkload.draw(seed, min_selected=32, min_tokens=16)
    if traffic is not None:
        w = TimingWorkload(**{**w.__dict__, "traffic_bytes": traffic})
    return w


def test_the_model_device_runs_on_the_timer_its_config_names():
    assert DeviceConfig().timer == "cycle"
    assert isinstance(ModelDevice().schedule, CycleSchedule)
    assert isinstance(ModelDevice(DeviceConfig(engines=6)).schedule, CycleSchedule)
    # more units than the RTL's front end has ports for: the fluid timer, unless named
    assert DeviceConfig(engines=8).timer == "fluid"
    assert isinstance(ModelDevice(DeviceConfig(engines=8)).schedule, Schedule)
    with pytest.raises(ValueError, match=r"the cycle timer times 1\.\.6 units, not 8"):
        DeviceConfig(engines=8, timer="cycle")
    with pytest.raises(ValueError, match=r"1\.\.6 units, not 8"):
        CycleSchedule(ModelDevice().geometry, 8)
    assert isinstance(ModelDevice(DeviceConfig(timer="fluid")).schedule, Schedule)
    with pytest.raises(ValueError, match=r"timer 'exact' is unknown; known: cycle, fluid"):
        DeviceConfig(timer="exact")


def test_a_missing_compiler_is_named_not_worked_around(monkeypatch, tmp_path):
    """g++ is required: without it the model device is not made, and the error names it."""
    from nelssa.hw.model import ddr5_replay

    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setenv("NELSSA_BUILD_CACHE", str(tmp_path))
    ddr5_replay._library.cache_clear()
    try:
        for timer in ("cycle", "fluid"):
            with pytest.raises(RuntimeError, match=r"needs the compiled DDR5 cycle model: no "
                                                   r"C\+\+ compiler: no-such-compiler-here"):
                ModelDevice(DeviceConfig(timer=timer))
    finally:
        ddr5_replay._library.cache_clear()


@pytest.mark.parametrize("seed, traffic", [(105, 1 << 18), (3, 0)])
def test_a_recorded_run_replays_to_the_same_cycles(seed, traffic):
    model = ModelDevice()
    model.schedule.recording = []
    got = run_workload(model, _workload(seed, traffic), start_at=7000)
    geometry = model.geometry
    assert replay(model.schedule.recording, model.schedule.timing, geometry) == got["cycles"]
    # another timing gives other cycles: the replay takes it
    slower = CycleTiming(**{**model.schedule.timing.as_dict(), "read_latency": 30})
    assert replay(model.schedule.recording, slower, geometry) > got["cycles"]


def _submitted(model: ModelDevice, clusters: int = 64) -> tuple[CommandQueue, list[int]]:
    """One attention request of ``clusters`` clusters of 16 tokens on ``model``, submitted."""
    dev = Device(model)
    mem = MemoryApi(dev, 1 << 20, 1 << 32)
    cq = CommandQueue(mem, entries=16)
    rng = np.random.default_rng(0)
    region = mem.alloc_kv(0, 0, 0, 128, clusters, clusters * 16)
    rows = [fp.f32_to_bf16_bits(rng.standard_normal((16, 128)).astype(np.float32))] * clusters
    mem.write_clusters(region, rows, rows)
    q = fp.f32_to_bf16_bits(rng.standard_normal((4, 128)).astype(np.float32))
    return cq, cq.submit([AttnRequest(region, q, list(range(clusters)))])


def test_the_look_ahead_leaves_the_device_where_it_was():
    model = ModelDevice()
    cq, ids = _submitted(model)
    first = model.next_completion()
    assert first is not None and first > model.cycle
    assert model.next_completion() == first  # asking again moves nothing
    model.advance(first - 1 - model.cycle)
    assert model.receive() == [] and model.next_completion() == first
    model.advance(1)
    assert model.schedule.idle or model.next_completion() > first
    cq.wait(ids)


def test_host_answers_wait_for_the_memory_while_units_run():
    model = ModelDevice()
    cq, ids = _submitted(model)
    assert model.has_work
    model.send(cxl.mem_wr(0x1234, 1 << 33, bytes(range(64))))
    assert model.receive() == []  # the units hold the memory: not taken yet
    got = []
    for _ in range(64):
        model.advance(16)
        got += model.receive()
        if got:
            break
    assert [cxl.parse_message(m).body.tag for m in got] == [0x1234]
    assert model.dma_read(1 << 33, 64) == bytes(range(64))
    # a line still waiting when the units finish is work: run_until_idle answers it
    model.send(cxl.mem_rd(0x77, 1 << 33))
    model.run_until_idle(1_000_000)
    assert not model.has_work
    tags = [cxl.parse_message(m).body.tag for m in model.receive()]
    assert 0x77 in tags
    cq.wait(ids)
    # idle: answered at once
    model.send(cxl.mem_wr(0x99, 1 << 33, bytes(64)))
    assert [cxl.parse_message(m).body.tag for m in model.receive()] == [0x99]


def test_refresh_is_periodic_from_reset_however_long_the_device_idled():
    w = _workload(12, 0)
    one = run_workload(ModelDevice(), w, start_at=int(PERIOD) + 700)
    later = run_workload(ModelDevice(), w, start_at=int(7 * PERIOD) + 700)
    other = run_workload(ModelDevice(), w, start_at=int(7 * PERIOD) + 2200)
    assert later["cycles"] == one["cycles"]
    assert other["cycles"] != one["cycles"]  # another phase meets the windows elsewhere


def test_a_unit_streams_at_most_a_line_a_cycle():
    w = TimingWorkload(seed=1, head_dim=128, q_heads=2, requests=1, clusters=40, selected=40,
                       max_tokens=64, traffic_bytes=0)
    got = run_workload(ModelDevice(), w)
    lines = got["bytes"] // 64
    per_unit = lines / got["descriptors"]  # the parts run side by side on the units
    assert got["cycles"] >= per_unit
    assert got["cycles"] <= 1.6 * per_unit + 600


def test_cycle_timing_loads_the_calibration():
    t = CycleTiming.load()
    assert set(t.as_dict()) == {f for f in CycleTiming.__dataclass_fields__}
    assert all(v >= 0 for v in t.as_dict().values())
