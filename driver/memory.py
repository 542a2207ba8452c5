"""Memory API: KV regions in device memory per (session, layer, KV head), written through
CXL.mem directly (paper 5.1: ingestion bypasses the compute pipeline).

A region is a cluster directory (one entry per cluster: where its K rows then V rows lie and how
many tokens it has) and a data area the clusters fill in order; appending a chunk of new clusters
(paper 4.3) adds directory entries and data behind the existing ones.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from nelssa.driver.device import Device
from nelssa.driver.formats import (
    CLUSTER_ENTRY,
    CLUSTER_ENTRY_BYTES,
    CLUSTER_ENTRY_DTYPE,
    LINE_BYTES,
    cluster_bytes,
)

log = logging.getLogger(__name__)


class KvCapacityError(ValueError):
    """A region or the device has no room for what was asked."""


def _align(n: int, to: int = LINE_BYTES) -> int:
    return -(-n // to) * to


def kv_region_sizes(head_dim: int, max_clusters: int, max_tokens: int) -> tuple[int, int]:
    """(directory, data) bytes of a KV region: an entry per cluster; the tokens' K and V with
    each cluster starting on a line (the worst case pads every cluster)."""
    return (max_clusters * CLUSTER_ENTRY_BYTES,
            cluster_bytes(max_tokens, head_dim) + max_clusters * 2 * LINE_BYTES)


def directory_entries(kv_addrs: npt.ArrayLike, tokens: npt.ArrayLike) -> np.ndarray:
    """A KV region's cluster-directory entries as device memory holds them (CLUSTER_ENTRY_DTYPE,
    one per cluster: where its K and V rows start, its tokens); ``.tobytes()`` is what
    ``MemoryApi.write_packed`` writes at the region's directory."""
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    entries = np.zeros(tokens.size, CLUSTER_ENTRY_DTYPE)
    entries["kv_addr"], entries["tokens"] = kv_addrs, tokens
    return entries


def kv_region_bytes(head_dim: int, max_clusters: int, max_tokens: int) -> int:
    """Device memory a KV region takes (both blocks, as the allocator rounds them)."""
    return sum(_align(max(n, 1)) for n in kv_region_sizes(head_dim, max_clusters, max_tokens))


class Allocator:
    """First-fit allocator of line-aligned blocks in [base, limit); frees merge neighbours."""

    def __init__(self, base: int, limit: int) -> None:
        if base % LINE_BYTES or limit <= base:
            raise ValueError(f"allocator range [{base:#x}, {limit:#x}) must be non-empty and "
                             "64-byte aligned")
        self._free: list[tuple[int, int]] = [(base, limit)]  # sorted (start, end)
        self._used: dict[int, int] = {}

    def alloc(self, nbytes: int, what: str = "block") -> int:
        size = _align(max(nbytes, 1))
        for i, (start, end) in enumerate(self._free):
            if end - start >= size:
                self._free[i] = (start + size, end)
                if start + size == end:
                    del self._free[i]
                self._used[start] = size
                return start
        free = sum(e - s for s, e in self._free)
        largest = max((e - s for s, e in self._free), default=0)
        raise KvCapacityError(f"no room for {what} of {size} bytes ({free} bytes free in "
                              f"pieces of at most {largest})")

    def free(self, addr: int) -> None:
        size = self._used.pop(addr, None)
        if size is None:
            raise ValueError(f"{addr:#x} is not an allocated block")
        i = bisect.bisect(self._free, (addr, addr))
        self._free.insert(i, (addr, addr + size))
        merged: list[tuple[int, int]] = []
        for s, e in self._free:
            if merged and merged[-1][1] == s:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        self._free = merged

    @property
    def bytes_free(self) -> int:
        return sum(e - s for s, e in self._free)


@dataclass
class KvRegion:
    """The clustered KV of one (session, layer, KV head) on one device."""

    session: int
    layer: int
    kv_head: int
    head_dim: int
    max_clusters: int
    dir_addr: int
    data_addr: int
    data_bytes: int
    clusters: list[tuple[int, int]] = field(default_factory=list)
    """(kv_addr, tokens) per cluster id, as written to the directory."""
    data_used: int = 0

    @property
    def num_clusters(self) -> int:
        return len(self.clusters)


class MemoryApi:
    """KV regions and scratch buffers inside one queue's region of device memory."""

    def __init__(self, device: Device, base: int, limit: int) -> None:
        if limit > device.mem_bytes:
            raise ValueError(f"region limit {limit:#x} beyond device memory "
                             f"{device.mem_bytes:#x}")
        self.device = device
        self.base, self.limit = base, limit
        self.alloc = Allocator(base, limit)
        self.regions: dict[tuple[int, int, int], KvRegion] = {}

    def alloc_kv(self, session: int, layer: int, kv_head: int, head_dim: int,
                 max_clusters: int, max_tokens: int) -> KvRegion:
        """Reserve a directory for ``max_clusters`` and data for ``max_tokens`` tokens."""
        key = (session, layer, kv_head)
        if key in self.regions:
            raise ValueError(f"session {session} layer {layer} KV head {kv_head} already has a "
                             "region")
        if head_dim not in self.device.caps["head_dims"]:
            raise ValueError(f"head_dim {head_dim} not supported by the device "
                             f"({self.device.caps['head_dims']})")
        if max_clusters < 1 or max_tokens < 1:
            raise ValueError(f"max_clusters and max_tokens must be positive, got {max_clusters}, "
                             f"{max_tokens}")
        dir_bytes, data_bytes = kv_region_sizes(head_dim, max_clusters, max_tokens)
        dir_addr = self.alloc.alloc(dir_bytes, "a cluster directory")
        try:
            data_addr = self.alloc.alloc(data_bytes, "KV data")
        except KvCapacityError:
            self.alloc.free(dir_addr)
            raise
        region = KvRegion(session, layer, kv_head, head_dim, max_clusters, dir_addr, data_addr,
                          data_bytes)
        self.regions[key] = region
        return region

    def free_kv(self, region: KvRegion) -> None:
        self.regions.pop((region.session, region.layer, region.kv_head))
        self.alloc.free(region.dir_addr)
        self.alloc.free(region.data_addr)

    def write_clusters(self, region: KvRegion, keys: Sequence[npt.ArrayLike],
                       values: Sequence[npt.ArrayLike]) -> list[int]:
        """Append clusters (K and V as bf16 bit patterns, (tokens, head_dim) uint16 each);
        returns their cluster ids. Checks everything before writing anything."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} key clusters but {len(values)} value clusters")
        max_tokens = self.device.caps["max_cluster_tokens"]
        hd = region.head_dim
        ks, vs = [], []
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            ka, va = np.asarray(k), np.asarray(v)
            if ka.dtype != np.uint16 or va.dtype != np.uint16:
                raise TypeError(f"cluster {i}: K and V must be bf16 bits (uint16), got "
                                f"{ka.dtype}, {va.dtype}")
            if ka.shape != va.shape or ka.ndim != 2 or ka.shape[1] != hd:
                raise ValueError(f"cluster {i}: K {ka.shape} and V {va.shape} must both be "
                                 f"(tokens, {hd})")
            if not 1 <= ka.shape[0] <= max_tokens:
                raise ValueError(f"cluster {i}: {ka.shape[0]} tokens; the device takes 1.."
                                 f"{max_tokens}")
            ks.append(ka)
            vs.append(va)
        if not ks:
            return []
        tokens = np.array([k.shape[0] for k in ks], dtype=np.int64)
        parts = [a.reshape(-1) for kv in zip(ks, vs, strict=True) for a in kv]
        return self.write_packed(region, tokens, np.concatenate(parts).astype("<u2", copy=False))

    def write_packed(self, region: KvRegion, tokens: npt.ArrayLike,
                     data: bytes | memoryview | np.ndarray) -> list[int]:
        """Append clusters given as their token counts and their K then V rows back to back
        (bf16 bits, little-endian: what a WRITE_KV message carries); returns their cluster ids.
        Checks everything before writing anything. The bytes go to the device in one transfer
        (no copy when no cluster needs padding to a line, as with head_dim 64 or 128)."""
        hd = region.head_dim
        max_tokens = self.device.caps["max_cluster_tokens"]
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        raw = memoryview(data).cast("B")
        if tokens.size == 0:
            if len(raw):
                raise ValueError(f"no clusters but {len(raw)} bytes of K and V")
            return []
        bad = np.flatnonzero((tokens < 1) | (tokens > max_tokens))
        if bad.size:
            raise ValueError(f"cluster {int(bad[0])}: {int(tokens[bad[0]])} tokens; the device "
                             f"takes 1..{max_tokens}")
        lengths = tokens * hd * 4  # K and V
        if len(raw) != int(lengths.sum()):
            raise ValueError(f"{tokens.size} clusters of {int(tokens.sum())} tokens x head_dim "
                             f"{hd} need {int(lengths.sum())} bytes of K and V, got {len(raw)}")
        if region.num_clusters + tokens.size > region.max_clusters:
            raise KvCapacityError(f"region holds {region.max_clusters} clusters; "
                                  f"{region.num_clusters} written, {tokens.size} more asked")
        sizes = -(-lengths // LINE_BYTES) * LINE_BYTES  # each cluster starts on a line
        need = int(sizes.sum())
        if region.data_used + need > region.data_bytes:
            raise KvCapacityError(f"region data full: {region.data_bytes - region.data_used} "
                                  f"bytes left, {need} asked")
        start = region.data_addr + region.data_used
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        if need != len(raw):  # pad each cluster to a line
            padded = np.zeros(need, dtype=np.uint8)
            src = np.frombuffer(raw, dtype=np.uint8)
            for dst, s, n in zip(offsets.tolist(), (np.cumsum(lengths) - lengths).tolist(),
                                 lengths.tolist(), strict=True):
                padded[dst:dst + n] = src[s:s + n]
            raw = memoryview(padded)
        entries = directory_entries(start + offsets, tokens)
        placed = list(zip((start + offsets).tolist(), tokens.tolist(), strict=True))
        # data first, then the directory entries that point at it
        self.device.mem_write(start, raw)
        self.device.mem_write(region.dir_addr + region.num_clusters * CLUSTER_ENTRY_BYTES,
                              entries.tobytes())
        ids = list(range(region.num_clusters, region.num_clusters + len(placed)))
        region.clusters += placed
        region.data_used += need
        return ids

    append_chunk = write_clusters
    """Append a chunk of newly clustered tokens (same operation)."""

    def read_cluster(self, region: KvRegion, cluster_id: int) -> tuple[np.ndarray, np.ndarray]:
        """K and V of one cluster, read back from device memory."""
        if not 0 <= cluster_id < region.num_clusters:
            raise IndexError(f"cluster {cluster_id} not in region (0..{region.num_clusters - 1})")
        raw = self.device.mem_read(region.dir_addr + cluster_id * CLUSTER_ENTRY_BYTES,
                                   CLUSTER_ENTRY_BYTES)
        e = CLUSTER_ENTRY.parse(raw)
        blob = np.frombuffer(self.device.mem_read(e.kv_addr, cluster_bytes(e.tokens,
                                                                           region.head_dim)),
                             dtype="<u2")
        n = e.tokens * region.head_dim
        return (blob[:n].reshape(e.tokens, region.head_dim).copy(),
                blob[n:].reshape(e.tokens, region.head_dim).copy())
