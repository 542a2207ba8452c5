"""The model device's timing held to the RTL (issue 23 item 3): on random batches (head_dim,
GQA group, cluster lengths, selections, several descriptors in flight over the four units,
Memory API traffic alongside in some; hw/model/timing_workloads.py) the model's busy cycles
against the Verilated device's, the model rung in at the cycle the RTL's submission ended at,
so that both meet DDR5 refresh at the same points. The workloads are
scripts/device_timing_check.py's twenty (seeds 100-119, docs/results/device_timing.md), not
those the calibration was fitted on (scripts/calibrate_device.py: seeds 0-59).

Bounds: the median within 2.5 %, eighteen of twenty within 5 %, every workload within 8 %
(with the command queue reading a descriptor only for a free unit, as nelssa_cmdq does, and
the sharing terms refit on seeds 0-59, these twenty are at a median of 1.7 %, worst -7.4 %,
18 within 5 %; they were 1.8 %, 8.4 % and 17 with the ring read ahead). The issue's goal is
every workload within 5 %. What is left is mostly where a refresh window falls: run from
four phases of the refresh period each (``device_timing_check.py --phases 4``), seeds 100-119
are 78 of 80 within 5 %, seeds 0-59 225 of 240 and 300-359 228 of 240, and a batch whose end
lies within about a hundred cycles of a window is counted a window more or less by one side
(up to 18 % of a 1,400-cycle batch); the rest is a bias of batches with host traffic at
head_dim 64, whose host lines cost DDR5 more than at 128.
"""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload

pytestmark = pytest.mark.rtl

SEEDS = range(100, 120)


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
    assert (size <= 5.0).sum() >= 18, errors
    assert abs(errors[worst]) <= 8.0, f"{worst}: {errors[worst]:+.2f} %"
    # the batches span the shapes the check is about
    assert {w.head_dim for w in errors} == {64, 128}
    assert any(w.traffic_bytes for w in errors) and any(not w.traffic_bytes for w in errors)
    assert any(w.requests > 4 for w in errors)  # more descriptors than units
