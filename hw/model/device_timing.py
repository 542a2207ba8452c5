"""How long an attention unit of the RTL device takes for one descriptor, as a linear function
of what the descriptor makes it do, with coefficients fitted to RTL runs by
``scripts/calibrate_device.py`` (stored in ``device_calibration.json`` with the fit's error).

Features: 1 (fetch, checks, memory latency of each phase, completion), selected clusters (a
directory read each, the id reads, and the engine's two stall cycles at each K-to-V turn),
stream beats (Q and every selected cluster's K and V rows, about one per cycle), and result
beats written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nelssa.driver.formats import DescOpcode

CALIBRATION_FILE = Path(__file__).with_name("device_calibration.json")
FEATURES = ("fixed", "clusters", "stream_beats", "result_beats")
DEFAULT = (150.0, 3.0, 1.0, 1.0)
"""Before calibration: one cycle per line moved plus a fixed cost."""


def features(d, lines_read: int) -> np.ndarray:
    """The feature vector of a descriptor (parsed DESCRIPTOR) that read ``lines_read`` lines."""
    if d.opcode != DescOpcode.ATTN or lines_read == 0:
        return np.array([1.0, 0.0, 0.0, 0.0])
    id_lines = -(-d.num_ids * 4 // 64)
    dir_reads = min(d.num_ids, max(0, lines_read - id_lines))
    stream = max(0, lines_read - id_lines - dir_reads)
    result = d.q_heads * d.head_dim // 16 + 1 if stream else 0
    return np.array([1.0, dir_reads, stream, result], dtype=np.float64)


@dataclass(frozen=True)
class UnitTiming:
    coefficients: tuple[float, ...] = DEFAULT

    @classmethod
    def load(cls) -> UnitTiming:
        if not CALIBRATION_FILE.exists():
            return cls()
        data = json.loads(CALIBRATION_FILE.read_text())
        return cls(tuple(float(c) for c in data["coefficients"]))

    def cycles(self, d, lines_read: int) -> int:
        return round(float(np.dot(features(d, lines_read), self.coefficients)))
