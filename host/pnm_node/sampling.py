"""Sampled simulation (issue 24 item 5): the first ``rtl_layers`` layers of every session also
live on a Verilated twin of each device, so a paper-scale step runs most layers at the model
backend's speed and a sample at RTL fidelity, as architecture simulators sample.

For a sampled layer the node allocates and writes the KV on the device and on its twin alike
(the same clusters in the same order, so the same local cluster ids), runs each ATTEND's
descriptors on both, answers with the twin's results and cycles, and holds the two to each
other as the run goes: the outputs bit for bit (a mismatch fails the request with
DEVICE_ERROR: the model and the RTL are bit-exact by design) and the model's cycles against the
RTL's (counted in ``SampleStats``, which STATUS reports; a batch whose estimate is off by more
than ``warn_error`` is logged). Layers from ``rtl_layers`` on run on the model devices alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np

from nelssa.driver.command import AttnOutput, AttnRequest
from nelssa.host.pnm_node.devices import BatchResult

log = logging.getLogger(__name__)

WARN_ERROR = 0.10
"""A batch whose model estimate is off the RTL's cycles by more than this is logged."""


@dataclass
class SampleStats:
    """What the twins have checked so far."""

    batches: int = 0
    """Device batches run on both a device and its twin."""
    descriptors: int = 0
    mismatches: int = 0
    """Descriptors whose twin result differed in a bit (the request failed)."""
    rtl_cycles: int = 0
    model_cycles: int = 0
    worst_ppm: int = 0
    """Largest |model - rtl| / rtl of one batch, in parts per million."""

    def record(self, rtl: BatchResult, model: BatchResult) -> float:
        """One device's batch on both; the estimate's relative error."""
        self.batches += 1
        self.descriptors += len(rtl.outputs)
        self.rtl_cycles += rtl.cycles
        self.model_cycles += model.cycles
        err = abs(model.cycles - rtl.cycles) / max(rtl.cycles, 1)
        self.worst_ppm = max(self.worst_ppm, min(round(err * 1e6), 0xFFFF_FFFF))
        return err

    def as_status(self, rtl_layers: int) -> dict[str, int]:
        return {"rtl_layers": rtl_layers, "batches": self.batches,
                "descriptors": self.descriptors, "mismatches": self.mismatches,
                "rtl_cycles": self.rtl_cycles, "model_cycles": self.model_cycles,
                "worst_ppm": self.worst_ppm}


def twin_requests(items: list[tuple[int, AttnRequest]], twin_region: dict[int, object]
                  ) -> list[tuple[int, AttnRequest]]:
    """A device's descriptors with each region replaced by its twin's (``twin_region`` by the
    id of the device's region)."""
    return [(g, replace(a, region=twin_region[id(a.region)])) for g, a in items]


def same_output(a: AttnOutput, b: AttnOutput) -> bool:
    """Status, O and LSE equal bit for bit."""
    if a.status != b.status:
        return False
    for x, y in ((a.o, b.o), (a.lse, b.lse)):
        if (x is None) != (y is None):
            return False
        if x is not None and not np.array_equal(np.asarray(x).view(np.uint32),
                                                np.asarray(y).view(np.uint32)):
            return False
    return True


def compare(stats: SampleStats, device: int, rtl: BatchResult, model: BatchResult) -> list[int]:
    """Hold one device's batch on the model to its twin's: the indexes of the descriptors whose
    results differ (counted), and the cycle estimate recorded (logged when far off)."""
    bad = [i for i, (r, m) in enumerate(zip(rtl.outputs, model.outputs, strict=True))
           if not same_output(r, m)]
    stats.mismatches += len(bad)
    err = stats.record(rtl, model)
    if err > WARN_ERROR:
        log.warning("device %d: the model estimated %d cycles for a batch of %d descriptors, "
                    "the RTL took %d (%+.1f %%)", device, model.cycles, len(rtl.outputs),
                    rtl.cycles, 100 * (model.cycles - rtl.cycles) / max(rtl.cycles, 1))
    return bad
