"""Random device workloads for holding the model's timing to the RTL's (issue 23 item 3):
batches of attention requests of random head_dim, GQA group, cluster lengths and selections,
cut over the units (several descriptors in flight), optionally with Memory API traffic (KV
written through CXL.mem) while they run. The same workload from the same seed on any port;
``run_workload`` returns the device's busy cycles, so the model's estimate and the RTL's
cycles compare one to one (tests/test_device_timing.py, scripts/calibrate_device.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.driver.status import SUPPORTED_HEAD_DIMS
from nelssa.hw.model import fp


@dataclass(frozen=True)
class TimingWorkload:
    """One batch on one device."""

    seed: int
    head_dim: int
    q_heads: int
    requests: int
    clusters: int
    """Clusters written per request's KV head."""
    selected: int
    """Clusters each request selects."""
    max_tokens: int
    """Cluster lengths are drawn from 1..max_tokens."""
    traffic_bytes: int
    """KV written through CXL.mem while the descriptors run (0: none)."""

    @classmethod
    def draw(cls, seed: int, max_qheads: int = 8, min_selected: int = 1,
             min_tokens: int = 4) -> TimingWorkload:
        """Random shapes; ``min_selected`` and ``min_tokens`` bound how small a request gets
        (its selected clusters, the largest cluster length drawn)."""
        rng = np.random.default_rng(seed)
        clusters = int(rng.integers(max(8, min_selected), 160))
        return cls(seed=seed, head_dim=int(rng.choice([d for d in SUPPORTED_HEAD_DIMS
                                                       if d >= 64])),
                   q_heads=int(rng.integers(1, max_qheads + 1)),
                   requests=int(rng.integers(1, 7)), clusters=clusters,
                   selected=int(rng.integers(min_selected, clusters + 1)),
                   max_tokens=int(rng.choice([t for t in (4, 16, 32, 64) if t >= min_tokens])),
                   traffic_bytes=int(rng.choice([0, 0, 1 << 18, 1 << 20])))


def _bf16(rng: np.random.Generator, shape) -> np.ndarray:
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def run_workload(port, w: TimingWorkload, start_at: int | None = None,
                 outputs: list[tuple[int, bytes, bytes]] | None = None) -> dict[str, int]:
    """Write the workload's KV, run its descriptors (and its traffic) on ``port``; the busy
    cycles, bytes read, descriptors, and ``started``: the device cycle its submission ended
    at. Same data and order on every port. ``outputs``: a list each descriptor's status, O
    and LSE (their bits) are appended to, in submission order, for scoreboards.

    ``start_at``: first run the port up to that cycle, so that the batch meets DDR5 refresh
    (due at fixed cycles from reset) where another port's did: give a model the RTL's
    ``started``. The model takes no cycle to be written or submitted to; the RTL does."""
    dev = Device(port)  # the KV by backdoor where the port has one, before the batch
    mem = MemoryApi(dev, 1 << 20, 1 << 32)
    cq = CommandQueue(mem, entries=64)
    rng = np.random.default_rng(w.seed)
    requests = []
    for h in range(w.requests):
        tokens = rng.integers(1, w.max_tokens + 1, w.clusters)
        region = mem.alloc_kv(0, 0, h, w.head_dim, w.clusters, int(tokens.sum()))
        mem.write_clusters(region, [_bf16(rng, (int(t), w.head_dim)) for t in tokens],
                           [_bf16(rng, (int(t), w.head_dim)) for t in tokens])
        ids = rng.choice(w.clusters, w.selected, replace=False).tolist()
        requests.append(AttnRequest(region, _bf16(rng, (w.q_heads, w.head_dim)), ids))
    traffic = rng.integers(0, 256, w.traffic_bytes, dtype=np.uint8).tobytes()
    scratch = mem.alloc.alloc(max(64, w.traffic_bytes), "traffic")
    parts = cq.split(requests)
    busy0, bytes0 = dev.reg_read64("PERF_BUSY"), dev.reg_read64("PERF_BYTES_READ")
    if start_at is not None:
        if port.cycle > start_at:
            raise ValueError(f"the port is at cycle {port.cycle}, past start_at={start_at}")
        port.advance(start_at - port.cycle)
    ids = cq.submit([p.attn for p in parts])
    started = port.cycle
    if traffic:
        dev.bulk = False  # every line over CXL.mem, beside the units: the point of it
        dev.mem_write(scratch, traffic)
    got = cq.wait(ids, timeout_cycles=50_000_000)
    if outputs is not None:
        outputs += [(int(got[i].status), *(b"" if a is None else a.view(np.uint32).tobytes()
                                          for a in (got[i].o, got[i].lse))) for i in ids]
    return {"cycles": dev.reg_read64("PERF_BUSY") - busy0,
            "bytes": dev.reg_read64("PERF_BYTES_READ") - bytes0, "descriptors": len(ids),
            "started": started}


def start_at_phase(cycle: int, phase: float, period: float) -> int:
    """A cycle at ``phase`` (0 to 1) of the refresh ``period``, at least 5,000 cycles after
    ``cycle`` (clear of the batch before): where to start a batch so that it meets the
    refresh windows at that point of its run."""
    at = cycle + 5000
    return at + int((phase * period - at) % period)
