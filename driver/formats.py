"""Descriptor, completion and KV-layout formats of a PNM device (construct structs, little
endian): the one source of truth for software, the model device and the generated SV package.

Memory a descriptor refers to (all in device memory, 64-byte aligned, inside the queue's region):

* ``q_addr``: the query rows, bf16, ``q_heads`` rows of ``head_dim`` (padded to 64 bytes each:
  head_dim 64 and 128 are whole lines already);
* ``dir_addr``: the cluster directory of one (session, layer, KV head): ``num_clusters`` entries
  of :data:`CLUSTER_ENTRY` (where a cluster's K rows then V rows lie, and its token count);
* ``ids_addr``: the selected cluster ids, ``num_ids`` u32;
* ``out_addr``: where the device writes O (fp32, ``q_heads`` x ``head_dim``) then LSE (fp32,
  ``q_heads``, padded to a line).

A completion record goes to the completion ring for every descriptor fetched, in fetch order.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from construct import Bytes, Const, Int8ul, Int16ul, Int32ul, Int64ul, Padding, Struct

LINE_BYTES = 64
"""CXL.mem line / DDR5 burst."""
DESC_BYTES = 64
COMPLETION_BYTES = 16
CLUSTER_ENTRY_BYTES = 16
MAX_IDS = 4096
"""Most clusters one descriptor may select."""


class DescOpcode(IntEnum):
    """What a descriptor asks for."""

    NOP = 0
    """Completes with OK; touches no memory (a fence for the host)."""
    ATTN = 1
    """Sparse attention of one GQA group over selected clusters."""


class DescStatus(IntEnum):
    """Completion status of a descriptor (8 bits). The device checks in this order and reports
    the first failure: opcode, reserved fields, head_dim, query heads, counts, alignment of the
    descriptor's addresses, their region (the output also clear of both rings, so that no
    descriptor can overwrite entries the device has still to fetch or forge completions); then
    every selected id; then every selected cluster's token count; then, cluster by cluster, its
    alignment and region. An output that overlaps memory another descriptor in flight reads
    stays inside the region, but what that one reads then depends on timing: hosts must not
    do it (the backends agree bit for bit only without it)."""

    OK = 0
    ERR_OPCODE = 1
    ERR_HEAD_DIM = 2
    ERR_QHEADS = 3
    ERR_COUNT = 4
    ERR_CLUSTER_ID = 5
    ERR_CLUSTER_LEN = 6
    ERR_ALIGN = 7
    ERR_REGION = 8
    ERR_RESERVED = 9


STATUS_MEANING = {
    DescStatus.OK: "done; O and LSE written at out_addr",
    DescStatus.ERR_OPCODE: "unknown opcode",
    DescStatus.ERR_HEAD_DIM: "head_dim not supported by the device",
    DescStatus.ERR_QHEADS: "q_heads is 0 or above the device's maximum",
    DescStatus.ERR_COUNT: "num_ids is 0 or above MAX_IDS, or num_clusters is 0",
    DescStatus.ERR_CLUSTER_ID: "a selected cluster id is not below num_clusters",
    DescStatus.ERR_CLUSTER_LEN: "a selected cluster has 0 tokens or more than the device's maximum",
    DescStatus.ERR_ALIGN: "an address (of the descriptor or a selected cluster) is not 64-byte "
                          "aligned",
    DescStatus.ERR_REGION: "memory the descriptor names lies outside the queue's region, or its "
                           "output overlaps the submission or completion ring",
    DescStatus.ERR_RESERVED: "a reserved field is not zero",
}
"""What each status means (documentation and error messages)."""


DESCRIPTOR = Struct(
    "opcode" / Int8ul,
    "flags" / Int8ul,          # reserved, 0
    "head_dim" / Int16ul,
    "q_heads" / Int8ul,
    "reserved0" / Int8ul,      # 0
    "num_ids" / Int16ul,
    "desc_id" / Int32ul,       # the host's cookie, echoed in the completion
    "num_clusters" / Int32ul,  # entries in the directory (bounds the ids)
    "q_addr" / Int64ul,
    "dir_addr" / Int64ul,
    "ids_addr" / Int64ul,
    "out_addr" / Int64ul,
    "scale" / Int32ul,         # fp32 bits of the softmax scale (1/sqrt(head_dim) usually)
    "reserved1" / Bytes(12),   # 0
)
"""One submission-ring entry (64 bytes)."""

COMPLETION = Struct(
    "desc_id" / Int32ul,
    "status" / Int8ul,
    "phase" / Int8ul,          # 1 on the first pass over the ring, then 0, 1, ...
    "sq_head" / Int16ul,       # submission entries fetched so far (mod 65536), see below
    "reserved" / Const(b"\0" * 8),
)
"""One completion-ring entry (16 bytes). It carries no timing, so that the memory image is the
same on every backend; time is read from the performance counters.

``sq_head`` counts the submission entries the device has fetched since SQ_SIZE was written, this
descriptor's included, modulo 65536: a free-running 16-bit queue pointer, as corundum's mqnic
keeps its queue pointers (the driver masks them with the ring size to index the ring). Ring
sizes are powers of two up to 65536, so ``sq_head & (SQ_SIZE - 1)`` is the ring index after this
entry (what NVMe's SQHD carries), and unlike that index the count also tells how many laps the
device has made: a driver can free exactly the entries before it, even with a full ring."""

CLUSTER_ENTRY = Struct(
    "kv_addr" / Int64ul,       # K rows (tokens x head_dim bf16), then V rows, 64-byte aligned
    "tokens" / Int16ul,
    Padding(6),
)
"""One cluster-directory entry (16 bytes)."""

assert DESCRIPTOR.sizeof() == DESC_BYTES
assert COMPLETION.sizeof() == COMPLETION_BYTES
assert CLUSTER_ENTRY.sizeof() == CLUSTER_ENTRY_BYTES
CLUSTER_ENTRY_DTYPE = np.dtype([("kv_addr", "<u8"), ("tokens", "<u2"), ("pad", "V6")])
"""CLUSTER_ENTRY as a numpy record, for directories written or read in bulk (the same bytes:
tests/test_formats.py)."""
assert CLUSTER_ENTRY_DTYPE.itemsize == CLUSTER_ENTRY_BYTES


def out_bytes(q_heads: int, head_dim: int) -> int:
    """Bytes of a descriptor's output: O then LSE, each padded to whole lines."""
    o = q_heads * head_dim * 4
    lse = -(-q_heads * 4 // LINE_BYTES) * LINE_BYTES
    return o + lse


def cluster_bytes(tokens: int, head_dim: int) -> int:
    """Bytes of one cluster's K and V rows."""
    return 2 * tokens * head_dim * 2
