"""The Verilated sub-channel controllers (hw/sim/ddr5.py) against the cycle model over runs long
enough for the controller's wrapping tCK registers, at their synthesis width of 20 bits, to wrap
and to be scrubbed, and the harness's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_timing import PRESETS

pytestmark = pytest.mark.rtl

WRAP_CYCLES = 2**20 // 4  # controller cycles after which its tCK registers wrap


@pytest.fixture(scope="module")
def rtl_one():
    from nelssa.hw.sim.ddr5 import RtlMemory

    return RtlMemory("ddr5-6400", subchannels=1, tck_bits=20)


def bursts(rng, starts, per_burst, geo):
    """Bursts of random reads and writes (few rows, so row hits, conflicts and same-line
    orderings all occur) at the given cycles, several per cycle."""
    lines = geo.capacity_bytes // 64
    addrs, writes, arrival = [], [], []
    for start in starts:
        hot = rng.integers(0, lines // 4096, 3) * 4096
        line = hot[rng.integers(0, 3, per_burst)] + rng.integers(0, 256, per_burst)
        addrs.append(line * 64)
        writes.append(rng.random(per_burst) < 0.3)
        arrival.append(start + np.arange(per_burst) // 2)
    return np.concatenate(addrs), np.concatenate(writes), np.concatenate(arrival)


def test_rtl_equals_model_across_tck_wrap_and_long_idle(rtl_one):
    timing = PRESETS["ddr5-6400"]
    geo = DeviceGeometry(timing, subchannels=1)
    rng = np.random.default_rng(7)
    # a gap longer than the scrub horizon (2^18 tCK), bursts on both sides of the wrap, and a
    # last one past a second wrap of the low bits of the cycle
    starts = [0, 3_000, 90_000, WRAP_CYCLES - 40, WRAP_CYCLES + 5_000, 2 * WRAP_CYCLES + 17]
    addrs, writes, arrival = bursts(rng, starts, 120, geo)
    model = run_device(addrs, writes, geo, arrival=arrival)
    rtl = rtl_one.run(addrs, writes, arrival=arrival)
    assert rtl.violations == 0
    assert rtl.simulated_cycles > 2 * WRAP_CYCLES
    assert rtl.served == [len(addrs)]
    assert rtl.cycles == model.cycles


def test_arrival_must_be_ordered_and_match(rtl_one):
    addrs = np.arange(4) * 64
    with pytest.raises(ValueError, match="non-decreasing"):
        rtl_one.run(addrs, arrival=np.array([0, 5, 3, 9]))
    with pytest.raises(ValueError, match="shape"):
        rtl_one.run(addrs, arrival=np.array([0, 1]))


@pytest.fixture(scope="module")
def rtl_device():
    from nelssa.hw.sim.ddr5 import RtlMemory

    return {t: RtlMemory("ddr5-6400", subchannels=8, threads=t) for t in (1, 2, 3)}


def test_device_rtl_equals_model_on_any_thread_count(rtl_device):
    """Eight sub-channel models, each clocked on its own (on 1, 2 or 3 threads, so unevenly
    shared too), serve 8 KB cluster reads mixed with writes in exactly the model's cycles."""
    from nelssa.hw.model.ddr5_addr import decode
    from nelssa.hw.model.ddr5_patterns import random_blocks

    geo = DeviceGeometry(PRESETS["ddr5-6400"])
    rng = np.random.default_rng(11)
    addrs = random_blocks(40 * 128, 8192, geo, rng)
    writes = rng.random(len(addrs)) < 0.2
    model = run_device(addrs, writes, geo)
    per_sub = np.bincount(decode(addrs, geo, "cacheline").subchannel, minlength=8).tolist()
    runs = {t: mem.run(addrs, writes) for t, mem in rtl_device.items()}
    for t, run in runs.items():
        assert run.violations == 0, t
        assert run.served == per_sub, t
        assert run.cycles == model.cycles, t
    assert len({(r.cycles, r.simulated_cycles) for r in runs.values()}) == 1


def test_thread_count_and_register_width_are_checked():
    from nelssa.hw.sim.ddr5 import RtlMemory

    for bad in (0, 65):
        with pytest.raises(ValueError, match="threads"):
            RtlMemory("ddr5-6400", subchannels=8, threads=bad)
    for bad in (19, 33):
        with pytest.raises(ValueError, match="tck_bits"):
            RtlMemory("ddr5-6400", tck_bits=bad)


def test_harness_refuses_a_bad_request_file(rtl_one):
    from nelssa.hw.sim.ddr5 import DDR5_IN
    from nelssa.hw.sim.verilator import run_harness

    good = dict(num_sub=1, num_requests=0, ncl=1, ncwl=1, burst=8, threads=1, max_cycles=10)
    header = bytearray(DDR5_IN.build(good))
    header[4] = 1  # version 1, the format before one model per sub-channel
    with pytest.raises(RuntimeError, match="version-2"):
        run_harness(rtl_one.exe, bytes(header), "memory")
    with pytest.raises(RuntimeError, match="threads"):
        run_harness(rtl_one.exe, DDR5_IN.build({**good, "threads": 0}), "memory")
    # a request for a sub-channel the file does not have
    req = np.zeros(1, dtype=[("sub", "u1"), ("rest", "u1", 11)])
    req["sub"] = 3
    with pytest.raises(RuntimeError, match="missing sub-channel"):
        run_harness(rtl_one.exe, DDR5_IN.build({**good, "num_requests": 1}) + req.tobytes(),
                    "memory")
    # a header that claims far more requests than follow it (nothing is allocated for them)
    req["sub"] = 0
    with pytest.raises(RuntimeError, match="request 1 truncated"):
        run_harness(rtl_one.exe, DDR5_IN.build({**good, "num_requests": 2**32 - 1}) +
                    req.tobytes(), "memory")


def test_a_violation_stops_the_run_and_names_rule_cycle_and_bank():
    """The DDR5-6400 controller (nRRD_S 8, nFAW 32) checked against DDR5_6400AN's timings
    (nRRD_S 16, nFAW 64): random lines need ACTs back to back, and the first one too close
    ends the run with the checker's message, on any thread."""
    from nelssa.hw.sim.ddr5 import RtlMemory

    rtl = RtlMemory("ddr5-6400", subchannels=8, threads=2, check_preset="ddr5-6400an")
    geo = DeviceGeometry(PRESETS["ddr5-6400"])
    addrs = np.random.default_rng(5).integers(0, geo.capacity_bytes // 64, 4000) * 64
    with pytest.raises(RuntimeError, match=r"(tRRD_S|tFAW) violated at cycle \d+, "
                                           r"bank group \d bank \d: (ACT to ACT|fifth ACT)"):
        rtl.run(addrs)
    with pytest.raises(KeyError, match="ddr5-9999"):
        RtlMemory("ddr5-6400", check_preset="ddr5-9999")
