"""The analytical timing estimate: its counts on hand-made streams, and its cycles against the
cycle model (command-identical to the RTL) on patterns it was not fitted on."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.ddr5_addr import Decoded, DeviceGeometry, encode
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_estimate import (
    CALIBRATION_FILE,
    coefficients_for,
    count_subchannels,
    estimate_device,
)
from nelssa.hw.model.ddr5_patterns import benchmark_patterns, calibration_patterns
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON, PRESETS


def _addrs(geo, sub, bg, bank, row, col):
    d = Decoded(*(np.asarray(x, dtype=np.int64) for x in (sub, bg, bank, row, col)))
    return encode(d, geo)


def test_counts_of_a_hand_made_stream():
    geo = DeviceGeometry(DDR5_6400_MICRON)
    # sub-channel 2: bank (0,0) rows 5,5,6,5 -> 3 activations; bank (1,3) row 9 twice -> 1
    # sub-channel 7: one write
    a = _addrs(geo, [2, 2, 2, 2, 2, 2, 7], [0, 0, 0, 1, 1, 0, 4], [0, 0, 0, 3, 3, 0, 1],
               [5, 5, 6, 9, 9, 5, 0], [0, 1, 2, 3, 4, 5, 6])
    w = np.array([0, 0, 1, 0, 0, 0, 1], bool)
    counts = count_subchannels(a, w, geo, lines_per_cycle=1)
    assert [i for i, c in enumerate(counts) if c] == [2, 7]
    c = counts[2]
    assert (c.requests, c.writes, c.activations) == (6, 1, 4)
    assert (c.busiest_group, c.busiest_bank_acts, c.last_arrival) == (4, 3, 5)
    assert c.switches == 2  # read, read, write, read, ...
    assert counts[7].writes == 1 and counts[7].last_arrival == 6


def test_every_preset_is_calibrated():
    assert CALIBRATION_FILE.exists()
    for timing in PRESETS.values():
        assert np.any(coefficients_for(timing) != 0), timing.name


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_benchmark_patterns_within_5_percent_of_the_cycle_model(preset):
    timing = PRESETS[preset]
    geo = DeviceGeometry(timing, subchannels=1)
    rng = np.random.default_rng(2024)  # not a calibration seed
    for name, addrs in benchmark_patterns(3000, geo, rng).items():
        model = run_device(addrs, None, geo, check=False).cycles
        est = estimate_device(addrs, None, geo).cycles
        assert abs(est - model) / model < 0.05, f"{name}: estimate {est}, model {model}"


def test_device_cluster_reads_within_5_percent_of_the_cycle_model():
    geo = DeviceGeometry(DDR5_6400_MICRON)
    rng = np.random.default_rng(7)
    for size in (4096, 8192):
        per = size // 64
        base = rng.integers(0, geo.capacity_bytes // size, 12_000 // per) * size
        addrs = (base[:, None] + np.arange(per)[None, :] * 64).ravel()
        model = run_device(addrs, None, geo, check=False).cycles
        est = estimate_device(addrs, None, geo).cycles
        assert abs(est - model) / model < 0.05, f"{size} B clusters: estimate {est}, model {model}"


def test_mixed_patterns_within_8_percent_of_the_cycle_model():
    """Reads and writes, hot rows, 1-16 KB blocks: a wider net, fresh seed."""
    geo = DeviceGeometry(DDR5_6400_MICRON, subchannels=1)
    rng = np.random.default_rng(99)
    for name, (addrs, writes) in calibration_patterns(2000, geo, rng).items():
        model = run_device(addrs, writes, geo, check=False).cycles
        est = estimate_device(addrs, writes, geo).cycles
        assert abs(est - model) / model < 0.08, f"{name}: estimate {est}, model {model}"


def test_addresses_outside_the_device_are_rejected():
    geo = DeviceGeometry(DDR5_6400_MICRON)
    with pytest.raises(ValueError, match="outside the device"):
        estimate_device(np.array([0, geo.capacity_bytes]), None, geo)
