"""The model device's schedule (hw/model/device_timing.Schedule) on hand-made cases: refresh
windows at their phase, the tail a refresh spares, the command queue's serial ring reads (each
for a free unit) and its order depth, the smooth saturation of DDR5. The figures each case
expects are worked out in its comments; tests/test_device_timing.py holds the whole to the
RTL."""

from __future__ import annotations

import math

import pytest

from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_timing import Refresh, Schedule, UnitTiming

TIMING = UnitTiming(doorbell_cycles=20.0, fetch_cycles=30.0, refresh_stall=250.0,
                    refresh_tail=100.0)
WINDOWS = Refresh(period=3000.0, stall=250.0, tail=100.0)


def finish(jobs: list[float], at: float, timing: UnitTiming = TIMING,
           refresh: Refresh | None = WINDOWS, engines: int = 4,
           memory: float = 0.0) -> tuple[dict[object, float], float]:
    """Finish cycles of descriptors of these unit cycles rung in at ``at``, and the busy
    cycles counted."""
    s = Schedule(engines, timing, refresh)
    s.now = at
    for i, unit in enumerate(jobs):
        s.add(i, unit, memory)
    done = s.finish_times()
    s.sync(math.inf)
    return done, s.busy


def test_windows_repeat_every_period_from_the_first():
    assert WINDOWS.window(0.0) == (3000.0, 3250.0)  # none at reset
    assert WINDOWS.window(3100.0) == (3000.0, 3250.0)
    assert WINDOWS.window(3250.0) == (6000.0, 6250.0)
    assert WINDOWS.inside(2999.0) is None and WINDOWS.inside(3000.0) == 3250.0


def test_the_presets_refresh_every_nrefi():
    t = PRESETS[DeviceConfig().preset]
    r = Refresh.of(t, UnitTiming())
    assert r.period == t.nREFI / 4 and r.stall == t.nRFC / 4  # four tCK a device cycle


def test_a_descriptor_clear_of_windows_takes_its_unit_cycles():
    done, busy = finish([1000.0], at=100.0)
    assert done[0] == 100 + 20 + 30 + 1000  # doorbell, ring read, work
    assert busy == 1000.0  # in flight from its read's end


def test_a_window_holds_a_descriptor_that_still_reads():
    done, busy = finish([1000.0], at=2500.0)  # work from 2550; the window at 3000 holds it
    assert done[0] == 2550 + 1000 + 250
    assert busy == 1250.0


def test_a_window_in_the_tail_spares_it():
    done, _ = finish([1000.0], at=2000.0 - 50 + 80)  # 80 left at 3000: within the tail
    assert done[0] == 2080 + 1000


def test_a_ring_read_waits_out_a_window():
    done, busy = finish([1000.0], at=3000.0)  # rung in during a window: read after it
    assert done[0] == 3250 + 30 + 1000 and busy == 1000.0


def test_ring_reads_are_serial_and_the_units_start_apart():
    done, _ = finish([1000.0] * 4, at=100.0, refresh=None)
    assert [done[i] - done[0] for i in range(4)] == [0.0, 30.0, 60.0, 90.0]


def test_a_unit_is_freed_in_fetch_order():
    # the short one finishes first but holds its unit until the long one's completion; only
    # then is the third read (nelssa_cmdq reads a descriptor for a free unit only)
    done, _ = finish([3000.0, 500.0, 500.0], at=0.0, refresh=None, engines=2)
    assert done[1] == 20 + 60 + 500
    assert done[2] == done[0] + 30 + 500


def test_a_descriptor_is_read_only_for_a_free_unit():
    s = Schedule(1, TIMING, None)
    for i in range(3):
        s.add(i, 100.0, 0.0)
    assert len(s.running) + len(s.fetched) == 1 and len(s.queue) == 2
    # the first is read 20-50 and works 50-150; the second is read once its unit is free,
    # 150-180, and works 180-280; the third 280-310, 310-410
    assert s.finish_times() == {0: 150.0, 1: 280.0, 2: 410.0}


def test_no_more_than_order_depth_in_flight():
    s = Schedule(4, TIMING, None, order_depth=2)
    for i in range(3):
        s.add(i, 100.0, 0.0)
    assert len(s.running) + len(s.fetched) == 2 and len(s.queue) == 1
    # reads end at 50 and 80 and the two work to 150 and 180; the third is read once the
    # first is complete (150-180), though two units are free all along
    assert s.finish_times() == {0: 150.0, 1: 180.0, 2: 280.0}


@pytest.mark.parametrize("load, slower", [(0.5, 0.0), (0.95, 0.04), (2.0, 0.5)])
def test_saturation_is_a_smooth_min(load, slower):
    timing = UnitTiming(doorbell_cycles=0.0, fetch_cycles=0.0, softness=0.12)
    done, _ = finish([1000.0], at=0.0, timing=timing, refresh=None, memory=1000.0 * load)
    speed = 1000.0 / done[0]
    assert speed == pytest.approx((1 + load ** (1 / 0.12)) ** -0.12)
    assert 1 - speed == pytest.approx(slower, abs=0.03)


@pytest.mark.parametrize("load, done", [(1.0, 1200.0), (2.0, 2400.0),
                                        (0.5, 1000.0 * (1 + 0.2 * 0.5 ** 8))])
def test_clusters_wait_at_full_load(load, done):
    """cluster_wait 4 cycles, 50 clusters over 1000 unit cycles: 0.2 more time at full load
    (beyond it too: the wait is capped at load 1, the min(1, 1 / load) does the rest), next
    to none at half load."""
    timing = UnitTiming(doorbell_cycles=0.0, fetch_cycles=0.0, cluster_wait=4.0)
    s = Schedule(4, timing, None)
    s.add(0, 1000.0, 1000.0 * load, clusters=50.0)
    assert s.finish_times()[0] == pytest.approx(done)


def test_the_model_device_meets_refresh_by_its_own_clock():
    """The same batch from reset gives the same cycles; rung in at other phases of the
    refresh period it meets other windows, a window more or less (hw/model/timing_workloads).
    The fluid timer's (the cycle model's: tests/test_device_cycle.py)."""
    from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload

    fluid = DeviceConfig(timer="fluid")
    w = TimingWorkload.draw(3, min_selected=8)
    first = run_workload(ModelDevice(fluid), w)
    assert run_workload(ModelDevice(fluid), w) == first
    stall = Refresh.of(PRESETS[DeviceConfig().preset], UnitTiming.load()).stall
    cycles = {run_workload(ModelDevice(fluid), w, start_at=first["started"] + k * 300)["cycles"]
              for k in range(10)}
    assert len(cycles) > 1
    assert max(cycles) - min(cycles) <= stall + 10
    with pytest.raises(ValueError, match="past start_at"):
        dev = ModelDevice()
        dev.advance(10)
        run_workload(dev, w, start_at=5)
