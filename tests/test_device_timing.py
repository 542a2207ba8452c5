"""The model device's timing held to the RTL (issue 23 item 3): on random batches (head_dim,
GQA group, cluster lengths, selections, several descriptors in flight over the four units,
Memory API traffic alongside in some; hw/model/timing_workloads.py) the model's busy cycles
against the Verilated device's, the model rung in at the cycle the RTL's submission ended at,
so that both meet DDR5 refresh at the same points. The workloads are the first ten of
scripts/device_timing_check.py's (seeds 100-109), not those the calibration was fitted on
(scripts/calibrate_device.py: seeds 0-23).

Bounds: the median within 2.5 %, eight of ten within 5 %, every workload within 8 % (were 3 %
and 10 % while each descriptor's DDR5 time came from the counted bounds; with the replay,
hw/model/ddr5_replay.py, the clusters' wait at full load and the calibration refit on them
these ten are at a median of 1.9 %, worst -7.3 %). The issue's goal is every workload within
5 %; the misses (docs/results/device_timing.md) are short batches of small clusters, four
units at once near DDR5's rate, where the RTL's units still slow more than the model says,
and a refresh window met by one side only where the model's round ends a little early.
"""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload

pytestmark = pytest.mark.rtl

SEEDS = range(100, 110)


def test_model_cycles_follow_the_rtl_on_random_batches():
    from nelssa.hw.sim.device import RtlDevice

    rtl = RtlDevice()
    errors = {}
    try:
        for seed in SEEDS:
            w = TimingWorkload.draw(seed, min_selected=32, min_tokens=16)
            r = run_workload(rtl, w)
            m = run_workload(ModelDevice(), w, start_at=r["started"])
            assert r["descriptors"] == m["descriptors"] and r["bytes"] == m["bytes"]
            errors[w] = (m["cycles"] - r["cycles"]) / r["cycles"] * 100
    finally:
        rtl.close()
    worst = max(errors, key=lambda w: abs(errors[w]))
    size = np.abs(list(errors.values()))
    assert np.median(size) <= 2.5, errors
    assert (size <= 5.0).sum() >= 8, errors
    assert abs(errors[worst]) <= 8.0, f"{worst}: {errors[worst]:+.2f} %"
    # the batches span the shapes the check is about
    assert {w.head_dim for w in errors} == {64, 128}
    assert any(w.traffic_bytes for w in errors) and any(not w.traffic_bytes for w in errors)
    assert any(w.requests > 4 for w in errors)  # more descriptors than units
