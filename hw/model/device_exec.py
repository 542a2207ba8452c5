"""What one descriptor does to device memory, in the model: the checks in their fixed order (the
first failing one decides the status, as in the RTL), then the engine's arithmetic. Nothing is
written unless every check passes; the output is returned for the device to write when the
descriptor completes."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from nelssa.driver.formats import (
    CLUSTER_ENTRY,
    CLUSTER_ENTRY_BYTES,
    LINE_BYTES,
    MAX_IDS,
    DescOpcode,
    DescStatus,
    cluster_bytes,
    out_bytes,
)
from nelssa.driver.status import SUPPORTED_HEAD_DIMS, AttnStatus
from nelssa.hw.model.engine import attend

Writes = list[tuple[int, bytes]]


def _lines(addr: int, n: int) -> list[int]:
    return list(range(addr, addr + n, LINE_BYTES))


class QueueBounds(NamedTuple):
    """Where a queue's descriptors may reach: [base, limit) of the region, and the rings inside
    it that no output may overlap."""

    base: int
    limit: int
    rings: tuple[tuple[int, int], ...] = ()
    """(base, bytes) of the submission and completion rings."""


def run_descriptor(d, mem, region: QueueBounds, config) -> tuple[DescStatus, Writes, list[int]]:
    """Status, the writes to make at completion, and the line addresses read (for timing)."""
    if d.opcode == DescOpcode.NOP:
        return DescStatus.OK, [], []
    if d.opcode != DescOpcode.ATTN:
        return DescStatus.ERR_OPCODE, [], []
    if d.flags or d.reserved0 or any(d.reserved1):
        return DescStatus.ERR_RESERVED, [], []
    p = config.engine
    if d.head_dim not in SUPPORTED_HEAD_DIMS or d.head_dim > p.head_dim:
        return DescStatus.ERR_HEAD_DIM, [], []
    if not 1 <= d.q_heads <= p.num_qheads:
        return DescStatus.ERR_QHEADS, [], []
    if not 1 <= d.num_ids <= MAX_IDS or d.num_clusters == 0:
        return DescStatus.ERR_COUNT, [], []
    if any(a % LINE_BYTES for a in (d.q_addr, d.dir_addr, d.ids_addr, d.out_addr)):
        return DescStatus.ERR_ALIGN, [], []
    lo, hi = region[0], min(region[1], mem.size)
    q_len = d.q_heads * d.head_dim * 2
    spans = ((d.q_addr, q_len), (d.dir_addr, d.num_clusters * CLUSTER_ENTRY_BYTES),
             (d.ids_addr, d.num_ids * 4), (d.out_addr, out_bytes(d.q_heads, d.head_dim)))
    if any(a < lo or a + n > hi for a, n in spans):
        return DescStatus.ERR_REGION, [], []
    out_end = d.out_addr + spans[3][1]
    if any(d.out_addr < base + n and base < out_end for base, n in region.rings):
        return DescStatus.ERR_REGION, [], []

    # lines read, in the RTL's order: ids, directory entries, then Q and the clusters
    lines = _lines(d.ids_addr, d.num_ids * 4)
    ids = np.frombuffer(mem.read(d.ids_addr, d.num_ids * 4), dtype="<u4")
    if np.any(ids >= d.num_clusters):
        return DescStatus.ERR_CLUSTER_ID, [], lines
    entries = []
    for cid in ids.tolist():
        addr = d.dir_addr + cid * CLUSTER_ENTRY_BYTES
        entries.append(CLUSTER_ENTRY.parse(mem.read(addr, CLUSTER_ENTRY_BYTES)))
        lines.append(addr - addr % LINE_BYTES)
    for e in entries:
        if not 1 <= e.tokens <= p.max_cluster_tokens:
            return DescStatus.ERR_CLUSTER_LEN, [], lines
    for e in entries:
        if e.kv_addr % LINE_BYTES:
            return DescStatus.ERR_ALIGN, [], lines
        if e.kv_addr < lo or e.kv_addr + cluster_bytes(e.tokens, d.head_dim) > hi:
            return DescStatus.ERR_REGION, [], lines

    hd = d.head_dim
    lines += _lines(d.q_addr, q_len)
    q = np.frombuffer(mem.read(d.q_addr, q_len), dtype="<u2").reshape(d.q_heads, hd)
    keys, values = [], []
    for e in entries:
        raw = np.frombuffer(mem.read(e.kv_addr, cluster_bytes(e.tokens, hd)), dtype="<u2")
        keys.append(raw[:e.tokens * hd].reshape(e.tokens, hd))
        values.append(raw[e.tokens * hd:].reshape(e.tokens, hd))
        lines += _lines(e.kv_addr, cluster_bytes(e.tokens, hd))
    scale = np.uint32(d.scale).view(np.float32)
    res = attend(p, q.astype(np.uint16), keys, values, scale)
    assert res.status == AttnStatus.OK  # every engine-level error was caught above
    lse = res.lse.astype("<u4").tobytes()
    lse += bytes(-len(lse) % LINE_BYTES)
    return DescStatus.OK, [(d.out_addr, res.o.astype("<u4").tobytes() + lse)], lines
