"""The Verilated sub-channel controllers (hw/sim/ddr5.py) against the cycle model over runs long
enough for the controller's wrapping 20-bit tCK registers to wrap and to be scrubbed, and the
harness's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_timing import PRESETS

WRAP_CYCLES = 2**20 // 4  # controller cycles after which its tCK registers wrap


@pytest.fixture(scope="module")
def rtl_one():
    from nelssa.hw.sim.ddr5 import RtlMemory

    return RtlMemory("ddr5-6400", subchannels=1)


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
