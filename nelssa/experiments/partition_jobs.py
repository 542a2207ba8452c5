"""The partitioning study's measurement (scripts/partition_study.py runs it and writes the page):
the workload of one Llama-3-8B layer per request, its placement by the node's partitioner, the
descriptors on one simulated device (rtl or model) with their directory lines written by
backdoor, and the replay of each device's read stream through the DDR5 cycle model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import (
    CLUSTER_ENTRY_BYTES,
    DESC_BYTES,
    DESCRIPTOR,
    LINE_BYTES,
    DescStatus,
)
from nelssa.driver.memory import MemoryApi, directory_entries
from nelssa.host.pnm_node.partition import HeadKv, Shard, head_devices, shard_tokens
from nelssa.host.pnm_node.protocol import Partition
from nelssa.hw.model import device_exec, fp
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_device import run_device as ddr5_replay
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import SIM_CLOCK_HZ, DeviceConfig, ModelDevice
from nelssa.hw.model.engine import AttnResult, AttnStatus

log = logging.getLogger("partition_study")

KV_HEADS, GROUP, HEAD_DIM = 8, 4, 128
"""Llama-3-8B: 8 KV heads of 4 query heads each, head_dim 128."""
CLUSTER_TOKENS = (8, 24)
"""Tokens per cluster, uniform (mean 16), as scripts/bench_device.py draws them."""
GEOMETRY = DeviceGeometry(PRESETS[DeviceConfig.preset])
PEAK = GEOMETRY.subchannels * GEOMETRY.timing.peak_bytes_per_s
"""One device's DDR5 peak (8 sub-channels of 25.6 GB/s)."""
RTL_ADDRESS_MAP = "cacheline"
"""The map the simulated device is built with (hw/sim/device.py, RtlDevice.image)."""
RUN_LIMIT_CYCLES = 1 << 31
BASE = 1 << 20
"""Where each device's queue region starts (as scripts/bench_device.py)."""


# -- workload and placement -----------------------------------------------------------------------
@dataclass(frozen=True)
class HeadWork:
    """One KV head of one request: its clusters' token counts and the ids selected."""

    tokens: np.ndarray
    selected: np.ndarray
    """Sorted cluster ids."""


def head_work(seed: int, context: int, request: int, head: int, selection: float) -> HeadWork:
    """The same draw for a (context, request, head) whatever the partitioning and device count,
    so configurations differ only in where the work goes."""
    rng = np.random.default_rng([seed, context, request, head])
    n = max(1, context // 16)
    tokens = rng.integers(CLUSTER_TOKENS[0], CLUSTER_TOKENS[1] + 1, n)
    k = max(1, round(selection * n))
    return HeadWork(tokens, np.sort(rng.choice(n, k, replace=False)))


@dataclass(frozen=True)
class ShardJob:
    """What one device holds and reads of one KV head of one request."""

    request: int
    head: int
    tokens: np.ndarray
    """Token counts of the shard's clusters, by local id (the order they were written)."""
    selected: np.ndarray
    """Local ids of the selected clusters in the shard (empty: the shard is not read)."""
    max_clusters: int
    max_tokens: int


def plan(partition: Partition, devices: int, works: dict[tuple[int, int], HeadWork],
         max_cluster_tokens: int) -> list[list[ShardJob]]:
    """Each device's shard jobs, in the order the node allocates them (request, then KV head)."""
    per_device: list[list[ShardJob]] = [[] for _ in range(devices)]
    for (r, h), w in sorted(works.items()):
        devs = head_devices(partition, h, list(range(devices)))
        max_tokens = shard_tokens(partition, int(w.tokens.sum()), devices, max_cluster_tokens)
        if len(devs) == 1:
            where = np.zeros(len(w.tokens), dtype=np.int64)
        else:  # the node's placement: each cluster to the shard with the fewest tokens
            head = HeadKv([Shard(d, None) for d in devs])  # type: ignore[arg-type]
            where = np.asarray(head.place(w.tokens.tolist()), dtype=np.int64)
        for i, d in enumerate(devs):
            mine = where == i
            local = np.cumsum(mine) - 1
            sel = w.selected[mine[w.selected]]
            per_device[d].append(ShardJob(r, h, w.tokens[mine], local[sel], len(w.tokens),
                                          max_tokens))
    return per_device


# -- the device side ------------------------------------------------------------------------------
class Store:
    """Direct writes into a device's memory (the rtl DRAM store through its C interface, the
    model's sparse memory), for set-up that is not measured."""

    def __init__(self, port) -> None:
        self.port = port
        self.model = isinstance(port, ModelDevice)  # else an RtlDevice: its DRAM store

    def clear(self) -> None:
        if not self.model:
            self.port.store_clear()

    def write_lines(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """Whole 64-byte lines: ``data`` (n, 64) uint8 at line addresses ``addrs``."""
        if self.model:
            for a, line in zip(addrs.tolist(), data, strict=True):
                self.port.mem.write(a, line.tobytes())
            return
        self.port.store_write_lines(addrs, data)




def directory_lines(dir_addr: int, addrs: np.ndarray, tokens: np.ndarray,
                     selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The directory lines holding the selected entries (whole lines, every entry in them
    right): line addresses and (n, 64) bytes."""
    raw = directory_entries(addrs, tokens).view(np.uint8)
    raw = np.concatenate([raw, np.zeros(-len(raw) % LINE_BYTES, np.uint8)]).reshape(-1, 64)
    first = dir_addr // LINE_BYTES
    assert dir_addr % LINE_BYTES == 0
    lines = np.unique(selected * CLUSTER_ENTRY_BYTES // LINE_BYTES)
    return (first + lines) * LINE_BYTES, raw[lines]


@dataclass
class ShardRun:
    """One device of one configuration."""

    cycles: int
    bytes_read: int
    descriptors: int
    clusters: int
    kv_bytes: int
    """Bytes of the selected clusters' K and V."""
    stream: np.ndarray = field(repr=False)
    """Line addresses read, in the replay's order (the units interleaved); dropped once
    replayed."""
    kv_lines: int = 0
    serial: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    """The same lines with the descriptors one after another (one unit's order)."""
    unit_fill: float = 0.0
    """How well its parts fill its units (see unit_interleave)."""

    @property
    def lines(self) -> int:
        return self.bytes_read // LINE_BYTES


def unit_interleave(streams: list[np.ndarray], units: int) -> tuple[np.ndarray, float]:
    """Descriptors' line streams in submission order on ``units`` units (each to the first free
    one, a line a cycle), interleaved by cycle; and the units' fill: the lines over units x the
    busiest unit's lines (1: the parts keep every unit busy to the end)."""
    free = [0] * units
    times, order, addrs = [], [], []
    for s in streams:
        u = min(range(units), key=lambda i: (free[i], i))
        times.append(free[u] + np.arange(len(s)))
        order.append(np.full(len(s), u))
        addrs.append(s)
        free[u] += len(s)
    if not addrs:
        return np.zeros(0, np.int64), 0.0
    t, u, a = np.concatenate(times), np.concatenate(order), np.concatenate(addrs)
    return a[np.lexsort((u, t))], sum(free) / (units * max(free))


def run_jobs(port, store: Store, jobs: list[ShardJob], rng: np.random.Generator,
             write_kv: bool = False) -> ShardRun:
    """Allocate, fill and run one device's descriptors; its counters and read stream."""
    store.clear()
    dev = Device(port)
    mem = MemoryApi(dev, BASE, dev.mem_bytes)
    cq = CommandQueue(mem, entries=256)
    requests, cluster_addr = [], {}
    kv_bytes = clusters = 0
    for j in jobs:
        region = mem.alloc_kv(j.request, 0, j.head, HEAD_DIM, j.max_clusters, j.max_tokens)
        sizes = 2 * j.tokens.astype(np.int64) * HEAD_DIM * 2  # K and V rows, whole lines
        addrs = region.data_addr + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        region.clusters = list(zip(addrs.tolist(), j.tokens.tolist(), strict=True))
        region.data_used = int(sizes.sum())
        if not len(j.selected):
            continue  # nothing selected in this shard: the node sends it no descriptor
        store.write_lines(*directory_lines(region.dir_addr, addrs, j.tokens, j.selected))
        if write_kv:
            for c in j.selected.tolist():
                n = int(sizes[c]) // LINE_BYTES
                kv = fp.f32_to_bf16_bits(rng.standard_normal(n * 32).astype(np.float32))
                store.write_lines(addrs[c] + LINE_BYTES * np.arange(n),
                                  kv.view(np.uint8).reshape(n, 64))
        for c in j.selected.tolist():
            cluster_addr[(region.dir_addr, c)] = (int(addrs[c]), int(sizes[c]))
        kv_bytes += int(sizes[j.selected].sum())
        clusters += len(j.selected)
        q = fp.f32_to_bf16_bits(rng.standard_normal((GROUP, HEAD_DIM)).astype(np.float32))
        requests.append(AttnRequest(region, q, j.selected.tolist()))
    if not requests:
        return ShardRun(0, 0, 0, 0, 0, np.zeros(0, np.int64), unit_fill=1.0)
    parts = cq.split(requests)
    busy0, bytes0 = dev.reg_read64("PERF_BUSY"), dev.reg_read64("PERF_BYTES_READ")
    ids = cq.submit([p.attn for p in parts])
    port.run_until_idle(RUN_LIMIT_CYCLES)
    out = cq.wait(ids)
    bad = [o.status.name for o in out.values() if o.status != DescStatus.OK]
    if bad:
        raise RuntimeError(f"{len(bad)} descriptors failed ({bad[0]}): the set-up is wrong")
    cycles = dev.reg_read64("PERF_BUSY") - busy0
    nbytes = dev.reg_read64("PERF_BYTES_READ") - bytes0
    streams, kv_lines = [], 0
    for i, p in enumerate(parts):  # lines in the device's order: ids, directory, Q, clusters
        # the ring still holds the descriptors (read after the run: no traffic during it)
        d = DESCRIPTOR.parse(dev.mem_read(cq.sq_addr + i * DESC_BYTES, DESC_BYTES))
        cids = np.asarray(p.attn.cluster_ids, dtype=np.int64)
        lines = [np.arange(d.ids_addr, d.ids_addr + d.num_ids * 4, LINE_BYTES)]
        entry = d.dir_addr + cids * CLUSTER_ENTRY_BYTES
        lines.append(entry - entry % LINE_BYTES)
        lines.append(np.arange(d.q_addr, d.q_addr + d.q_heads * d.head_dim * 2, LINE_BYTES))
        for c in cids.tolist():
            a, n = cluster_addr[(d.dir_addr, c)]
            lines.append(np.arange(a, a + n, LINE_BYTES))
            kv_lines += n // LINE_BYTES
        streams.append(np.concatenate(lines).astype(np.int64))
    stream, fill = unit_interleave(streams, dev.caps["engines"])
    if len(stream) * LINE_BYTES != nbytes:  # the accounting below rests on it
        raise RuntimeError(f"the device read {nbytes} bytes, its descriptors' lines come to "
                           f"{len(stream) * LINE_BYTES}")
    return ShardRun(cycles, nbytes, len(ids), clusters, kv_bytes, stream, kv_lines,
                     np.concatenate(streams), fill)


def _no_arithmetic(params, q, keys, values, scale) -> AttnResult:
    """The model engine's place on the timing-only model runs: zeros (the model's time comes
    from the descriptor and its lines, never from the values)."""
    h, d = np.asarray(q).shape
    return AttnResult(AttnStatus.OK, np.zeros((h, d), np.uint32), np.zeros(h, np.uint32))


def run_model(jobs: list[ShardJob], seed: int) -> ShardRun:
    """The same device on the model backend (a fresh one), its arithmetic skipped."""
    real = device_exec.attend
    device_exec.attend = _no_arithmetic
    try:
        port = ModelDevice(DeviceConfig())
        return run_jobs(port, Store(port), jobs, np.random.default_rng(seed))
    finally:
        device_exec.attend = real


# -- DDR5 replay ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ddr5Replay:
    lines: int
    clusters: float
    """Cluster reads the replayed lines amount to (KV lines over lines per cluster)."""
    acts: int
    reads: int
    cycles: int


def replay(run: ShardRun, max_lines: int, serial: bool = False) -> Ddr5Replay | None:
    """The first ``max_lines`` of the device's stream (``serial``: its descriptors one after
    another instead) through the DDR5 cycle model."""
    stream = run.serial if serial else run.stream
    if not len(stream) or max_lines <= 0:
        return None
    s = stream[:max_lines]
    r = ddr5_replay(s, None, GEOMETRY, RTL_ADDRESS_MAP, check=False)
    acts = sum(x.commands.get("ACT", 0) for x in r.per_subchannel)
    reads = sum(x.commands.get("RD", 0) for x in r.per_subchannel)
    kv_share = run.kv_lines / run.lines
    clusters = len(s) * kv_share / (run.kv_lines / run.clusters)
    return Ddr5Replay(len(s), clusters, acts, reads, r.cycles)


# -- one configuration --------------------------------------------------------------------------
@dataclass
class Config:
    partition: Partition
    context: int
    requests: int
    devices: int
    rtl: list[ShardRun] = field(default_factory=list)
    model: list[ShardRun] = field(default_factory=list)
    replays: list[Ddr5Replay | None] = field(default_factory=list)
    serial_replay: Ddr5Replay | None = None
    """Device 0's stream with its descriptors one after another, for comparison."""
    jobs: list[list[ShardJob]] = field(default_factory=list, repr=False)

    @property
    def measured(self) -> list[ShardRun]:
        return self.rtl or self.model

    def summary(self) -> dict[str, object]:
        runs = self.measured
        cycles = np.array([r.cycles for r in runs], dtype=np.float64)
        nbytes = np.array([r.bytes_read for r in runs], dtype=np.float64)
        busy = cycles > 0
        gbs = np.where(busy, nbytes / np.maximum(cycles, 1) * SIM_CLOCK_HZ, 0.0)
        layer = cycles.max()
        reps = [x for x in self.replays if x is not None]
        clusters = sum(x.clusters for x in reps)
        out = {
            "partition": self.partition.name.lower(), "context": self.context,
            "requests": self.requests, "devices": self.devices,
            "cycles": [r.cycles for r in runs], "bytes": [r.bytes_read for r in runs],
            "kv_bytes": [r.kv_bytes for r in runs], "clusters": [r.clusters for r in runs],
            "descriptors": [r.descriptors for r in runs],
            "gbs": gbs.tolist(), "mean_gbs": float(gbs[busy].mean()),
            "unit_fill": [r.unit_fill for r in runs],
            "imbalance": float(layer / cycles.mean()), "layer_cycles": int(layer),
            "layer_us": layer / SIM_CLOCK_HZ * 1e6,
            "node_gbs": float(nbytes.sum() / layer * SIM_CLOCK_HZ),
            "acts_per_cluster": sum(x.acts for x in reps) / clusters if clusters else None,
            "hits_per_cluster": (sum(x.reads - x.acts for x in reps) / clusters
                                 if clusters else None),
            "replayed_lines": sum(x.lines for x in reps),
            "serial_acts_per_cluster": (self.serial_replay.acts / self.serial_replay.clusters
                                        if self.serial_replay else None),
            "device0_acts_per_cluster": (self.replays[0].acts / self.replays[0].clusters
                                         if self.replays and self.replays[0] else None),
            "backend": "rtl" if self.rtl else "model",
        }
        if self.rtl and self.model:
            m = max(r.cycles for r in self.model)
            out["model_layer_cycles"] = m
            out["model_vs_rtl"] = (m - layer) / layer
        return out


def run_config(cfg: Config, rtl_port, store: Store | None, with_model: bool, seed: int,
               ddr5_lines: int) -> None:
    """Every device of one configuration, in turn (on the rtl port when given, on a fresh model
    device when ``with_model``), and the DDR5 replay of each one's stream."""
    for d, jobs in enumerate(cfg.jobs):
        measured = None
        if rtl_port is not None:
            t0 = time.perf_counter()
            measured = run_jobs(rtl_port, store, jobs, np.random.default_rng([seed, d]))
            cfg.rtl.append(measured)
            log.info("  device %d: %d cycles in %.1f s", d, measured.cycles,
                     time.perf_counter() - t0)
        if with_model:
            cfg.model.append(run_model(jobs, seed))
            measured = measured or cfg.model[-1]
        assert measured is not None, "no backend to run on"
        cfg.replays.append(replay(measured, ddr5_lines))
        if d == 0:
            cfg.serial_replay = replay(measured, ddr5_lines, serial=True)
        for run in (*cfg.rtl[-1:], *cfg.model[-1:]):  # the streams are large: replayed, dropped
            run.stream = run.serial = np.zeros(0, np.int64)


def data_check(rtl_port, store: Store, jobs: list[ShardJob], seed: int) -> dict[str, int]:
    """One device's jobs again with K and V unwritten and with random bf16 K and V."""
    zero = run_jobs(rtl_port, store, jobs, np.random.default_rng(seed))
    rand = run_jobs(rtl_port, store, jobs, np.random.default_rng(seed), write_kv=True)
    return {"unwritten": zero.cycles, "random": rand.cycles, "clusters": zero.clusters}


