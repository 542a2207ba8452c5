"""KV ingestion beside decode (issue 44 item 12, nelssa/experiments/ingest_beside.py): the host's
share of the memory while units run is one number in the RTL and the model, and with it a batch
of the device benchmark slows by less than 5 % while KV is written through CXL.mem, on the model
and on the RTL (the worst point of docs/results/ingest_beside.md: one request, split)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nelssa.experiments.ingest_beside import GOAL, beside
from nelssa.hw.model.bandwidth import Workload
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.device_timing import HOST_SHARE

ROOT = Path(__file__).resolve().parents[1]


def test_host_share_is_the_rtl_parameter():
    sv = (ROOT / "rtl/top/nelssa_device.sv").read_text()
    assert int(re.search(r"parameter int unsigned HostShare\s*=\s*(\d+)", sv)[1]) == HOST_SHARE


def _slowdown(port) -> float:
    # 1 MB outlasts the batch (an eighth of a line per cycle while units run), as 4 MB does
    _, alone, shared = beside(port, Workload(), split=True, ingest_bytes=1 << 20)
    return shared / alone - 1


def test_model_batch_slows_under_the_goal():
    s = _slowdown(ModelDevice())
    assert 0 < s < GOAL, s


@pytest.mark.rtl
def test_rtl_batch_slows_under_the_goal():
    from nelssa.hw.sim.device import RtlDevice

    port = RtlDevice()
    try:
        s = _slowdown(port)
    finally:
        port.close()
    assert 0 < s < GOAL, s
