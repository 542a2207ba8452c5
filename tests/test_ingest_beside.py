"""KV ingestion beside decode (issue 44 item 12, nelssa/experiments/ingest_beside.py): the host's
share of the memory while units run is one number in the RTL and the model. (A share of one
slot in 8 kept ingestion's slowdown under 5 %, but slowed a request split over four units by a
quarter, tests/test_split.py: the share stays 4 and the 5 % goal is not met.)"""

from __future__ import annotations

import re
from pathlib import Path

from nelssa.hw.model.device_timing import HOST_SHARE

ROOT = Path(__file__).resolve().parents[1]


def test_host_share_is_the_rtl_parameter():
    sv = (ROOT / "rtl/top/nelssa_device.sv").read_text()
    assert int(re.search(r"parameter int unsigned HostShare\s*=\s*(\d+)", sv)[1]) == HOST_SHARE
