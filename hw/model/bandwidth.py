"""A device's effective read bandwidth, measured: one layer of sparse attention (a batch of
ATTN descriptors over a long clustered context, ``scripts/bench_device.py``'s workload) run on a
model device of a given configuration, timed by its cycle model (``device_cycle.py``), bytes
read (PERF_BYTES_READ) over busy cycles (PERF_BUSY) at the device's clock.

Measurements are cached on disk by a hash of what decides them (the device configuration, the
workload point and the sources of the cycle model and its calibration), each with its
provenance: what ran, on which code, when. ``$NELSSA_BUILD_CACHE`` (else ``build/``) holds the
cache, as it holds the compiled cycle model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from nelssa import __version__
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import CLUSTER_ENTRY, cluster_bytes
from nelssa.driver.memory import MemoryApi
from nelssa.emu.files import read_text
from nelssa.hw.model import fp
from nelssa.hw.model.ddr5_replay import HEADERS, REPO_ROOT, SOURCES
from nelssa.hw.model.device_timing import CALIBRATION_FILE

log = logging.getLogger(__name__)
CACHE_VERSION = 1
"""Bumped when what a cache entry means changes."""


@dataclass(frozen=True)
class Workload:
    """The workload point of a measurement: one layer of one device."""

    context: int = 131072
    """Tokens per KV head."""
    selection: float = 0.04
    """Share of the clusters read."""
    cluster_tokens: int = 16
    """Mean tokens per cluster (clusters of cluster_tokens/2 .. 3*cluster_tokens/2 tokens)."""
    kv_heads: int = 2
    """KV heads on the device (one descriptor each, split over the units)."""
    q_heads: int = 4
    """Query heads per KV head."""
    head_dim: int = 128
    """Head width."""
    seed: int = 0
    """Seed of the cluster sizes, the selection and the data."""

    def describe(self) -> str:
        return (f"{self.kv_heads} KV heads x {self.q_heads} query heads, head_dim "
                f"{self.head_dim}, {self.context:,} tokens per KV head in clusters of "
                f"{self.cluster_tokens // 2}-{self.cluster_tokens * 3 // 2} tokens, "
                f"{self.selection:.0%} selected, split over the units, seed {self.seed}")


@dataclass
class WorkloadRun:
    """One run of the workload on a port: what was submitted and what it took."""

    dev: Device
    mem: MemoryApi
    cq: CommandQueue
    requests: list[AttnRequest]
    parts: list
    ids: list[int]
    outputs: dict
    cycles: int
    """Busy cycles (PERF_BUSY) of the batch."""
    bytes: int
    """Bytes the batch read (PERF_BYTES_READ)."""
    wall_s: float
    setup_s: float


def _bf16(rng: np.random.Generator, shape) -> np.ndarray:
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def run_workload(port, w: Workload, split: bool = True) -> WorkloadRun:
    """``w`` on ``port`` (any device port): the KV regions and directories written, only the
    selected clusters' K and V (the others are never read), the descriptors split over the
    units (or one per KV head) and run to completion."""
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, min(1 << 34, dev.mem_bytes - (1 << 20)))
    cq = CommandQueue(mem, entries=64)
    rng = np.random.default_rng(w.seed)
    n_clusters = w.context // w.cluster_tokens
    lo, hi = w.cluster_tokens // 2, w.cluster_tokens * 3 // 2
    requests = []
    t0 = time.perf_counter()
    for kv_head in range(w.kv_heads):
        tokens = rng.integers(lo, hi + 1, n_clusters)
        region = mem.alloc_kv(0, 0, kv_head, w.head_dim, n_clusters, int(tokens.sum()))
        sizes = [cluster_bytes(int(t), w.head_dim) for t in tokens]
        addrs = region.data_addr + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        directory = b"".join(CLUSTER_ENTRY.build({"kv_addr": int(a), "tokens": int(t)})
                             for a, t in zip(addrs, tokens, strict=True))
        dev.mem_write(region.dir_addr, directory)
        sel = np.sort(rng.choice(n_clusters, max(1, round(w.selection * n_clusters)),
                                 replace=False))
        for c in sel:
            dev.mem_write(int(addrs[c]), _bf16(rng, (2 * int(tokens[c]), w.head_dim)).tobytes())
        region.clusters = list(zip(addrs.tolist(), tokens.tolist(), strict=True))
        region.data_used = int(sum(sizes))
        requests.append(AttnRequest(region, _bf16(rng, (w.q_heads, w.head_dim)), sel.tolist()))
    setup = time.perf_counter() - t0
    parts = cq.split(requests, None if split else 1)
    busy0, bytes0 = dev.reg_read64("PERF_BUSY"), dev.reg_read64("PERF_BYTES_READ")
    t0 = time.perf_counter()
    ids = cq.submit([p.attn for p in parts])
    out = cq.wait(ids, timeout_cycles=100_000_000)
    wall = time.perf_counter() - t0
    return WorkloadRun(dev, mem, cq, requests, parts, ids, out,
                       dev.reg_read64("PERF_BUSY") - busy0,
                       dev.reg_read64("PERF_BYTES_READ") - bytes0, wall, setup)


@dataclass(frozen=True)
class Measurement:
    """A measured bandwidth and where it comes from."""

    gbs: float
    """Bytes read over busy time, GB/s."""
    cycles: int
    bytes: int
    clock_hz: int
    timer: str
    """What timed the device (the cycle model, or the fluid schedule where it cannot build)."""
    code: str
    """The code that measured: nelssa's version, the cycle model's source hash and the
    calibration file's."""
    measured_at: str
    """UTC time of the run."""
    wall_s: float
    workload: str
    device: str

    def provenance(self) -> str:
        """One line on what was run, on which code, when."""
        return (f"measured by the {self.timer} on a model device ({self.device}): "
                f"{self.bytes / 1e6:.2f} MB in {self.cycles:,} cycles at "
                f"{self.clock_hz / 1e6:g} MHz; workload {self.workload}; code {self.code}; "
                f"{self.measured_at}")


def _digest(paths: tuple[Path, ...]) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in paths if p.exists())).hexdigest()[:12]


def code_version() -> str:
    """What decides a measurement besides its inputs (and keys the cache): the cycle model's
    sources, its calibration, the device model and this module."""
    here = Path(__file__).parent
    cycle = _digest((*SOURCES, *HEADERS, *(here / n for n in (
        "device_cycle.py", "device.py", "device_exec.py", "bandwidth.py"))))
    calib = _digest((CALIBRATION_FILE,))
    return f"nelssa {__version__}, cycle model {cycle}, calibration {calib}"


def _commit() -> str:
    """The checkout's commit (for the provenance; a tree with changes says so)."""
    try:
        git = ["git", "-C", str(REPO_ROOT)]
        sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return f", commit {sha}{' with changes' if dirty.strip() else ''}"


def _cache_dir() -> Path:
    env = os.environ.get("NELSSA_BUILD_CACHE")
    return (Path(env) if env else REPO_ROOT / "build") / "bandwidth"


def _describe(config) -> str:
    t = config.timing
    return (f"{config.engines} units, {t.name}, {config.subchannels} sub-channels "
            f"({config.subchannels * t.peak_bytes_per_s / 1e9:g} GB/s peak)")


def measure(config, w: Workload | None = None, cache: bool = True) -> Measurement:
    """The effective bandwidth of a model device of ``config`` (a DeviceConfig) at ``w``
    (default: the 128K-token, 4 % point the prototype's 177.2 GB/s was measured at on the RTL);
    from the cache when this code measured the same point before."""
    from nelssa.hw.model.device import ModelDevice
    from nelssa.hw.model.device_cycle import CycleSchedule

    w = w or Workload()
    code = code_version()
    key = hashlib.sha256(json.dumps([CACHE_VERSION, asdict(config), asdict(w), code],
                                    sort_keys=True, default=str).encode()).hexdigest()[:20]
    path = _cache_dir() / f"{key}.json"
    if cache and path.exists():
        try:
            return Measurement(**json.loads(read_text(path, "bandwidth cache entry")))
        except (OSError, ValueError, TypeError):
            log.warning("ignoring an unreadable bandwidth cache entry %s", path)
    log.info("measuring the bandwidth of a %s device at %s", _describe(config), w.describe())
    port = ModelDevice(config)
    t0 = time.perf_counter()
    r = run_workload(port, w)
    timer = ("cycle model" if isinstance(port.schedule, CycleSchedule)
             else "fluid schedule (no cycle model: no C++ compiler or too many units)")
    m = Measurement(gbs=r.bytes / (r.cycles / config.clock_hz) / 1e9, cycles=r.cycles,
                    bytes=r.bytes, clock_hz=config.clock_hz, timer=timer,
                    code=code + _commit(),
                    measured_at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    wall_s=round(time.perf_counter() - t0, 2), workload=w.describe(),
                    device=_describe(config))
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(asdict(m), indent=1))
            tmp.replace(path)
        except OSError as e:  # a read-only cache: measured again next time
            log.warning("bandwidth cache %s not written: %s", path, e)
    return m
