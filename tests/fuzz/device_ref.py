"""The Python reference a device is held to: a plain memory, and what one descriptor must
complete with, restated from the documentation of driver/formats.py (the check order of
``DescStatus``, the layouts of the descriptor, the directory entry and the output), not from
the model's code; the arithmetic is the engine model's (hw/model/engine.py), which the RTL
matches bit for bit."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from nelssa.driver.formats import (
    CLUSTER_ENTRY_BYTES,
    COMPLETION,
    LINE_BYTES,
    MAX_IDS,
    DescOpcode,
    DescStatus,
)
from nelssa.hw.model.engine import EngineParams, attend

_ENTRY = struct.Struct("<QH6x")


class RefMemory:
    """Device memory as a dict of 64-byte lines (absent lines read as zeros). Written here
    again, not borrowed from the model's SparseMemory: a reference shares no code with what it
    judges."""

    def __init__(self) -> None:
        self.lines: dict[int, bytearray] = {}

    def write(self, addr: int, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            line, off = divmod(addr + pos, LINE_BYTES)
            take = min(LINE_BYTES - off, len(data) - pos)
            self.lines.setdefault(line, bytearray(LINE_BYTES))[off:off + take] = \
                data[pos:pos + take]
            pos += take

    def write_line(self, addr: int, data: bytes, byte_enable: int) -> None:
        """A CXL.mem write of the line at ``addr``: the bytes whose enable bit is set."""
        buf = self.lines.setdefault(addr // LINE_BYTES, bytearray(LINE_BYTES))
        for b in range(LINE_BYTES):
            if byte_enable >> b & 1:
                buf[b] = data[b]

    def read(self, addr: int, n: int) -> bytes:
        out = bytearray(n)
        pos = 0
        while pos < n:
            line, off = divmod(addr + pos, LINE_BYTES)
            take = min(LINE_BYTES - off, n - pos)
            buf = self.lines.get(line)
            if buf is not None:
                out[pos:pos + take] = buf[off:off + take]
            pos += take
        return bytes(out)

    def image(self) -> dict[int, bytes]:
        """Every line that is not all zero, by address."""
        return {k * LINE_BYTES: bytes(v) for k, v in sorted(self.lines.items()) if any(v)}


@dataclass(frozen=True)
class Caps:
    """What the device reports in CAPS (driver/regs.py)."""

    head_dims: tuple[int, ...]
    max_qheads: int
    max_cluster_tokens: int


def _out_bytes(q_heads: int, head_dim: int) -> int:
    """O (fp32, q_heads x head_dim) then LSE (fp32, q_heads) padded to a line."""
    return q_heads * head_dim * 4 + -(-q_heads * 4 // LINE_BYTES) * LINE_BYTES


def expected_status(d: dict, mem: RefMemory, region: tuple[int, int], mem_bytes: int,
                    caps: Caps) -> tuple[DescStatus, list[tuple[int, int]]]:
    """The status a descriptor (fields as DESCRIPTOR names them) must complete with, and for
    OK the (kv_addr, tokens) of each selected cluster in selection order."""
    if d["opcode"] == DescOpcode.NOP:
        return DescStatus.OK, []  # "completes with OK; touches no memory"
    if d["opcode"] != DescOpcode.ATTN:
        return DescStatus.ERR_OPCODE, []
    if d["flags"] or d["reserved0"] or any(d["reserved1"]):
        return DescStatus.ERR_RESERVED, []
    hd, qh = d["head_dim"], d["q_heads"]
    if hd not in caps.head_dims:
        return DescStatus.ERR_HEAD_DIM, []
    if not 1 <= qh <= caps.max_qheads:
        return DescStatus.ERR_QHEADS, []
    if not 1 <= d["num_ids"] <= MAX_IDS or d["num_clusters"] == 0:
        return DescStatus.ERR_COUNT, []
    addrs = (d["q_addr"], d["dir_addr"], d["ids_addr"], d["out_addr"])
    if any(a % LINE_BYTES for a in addrs):
        return DescStatus.ERR_ALIGN, []
    lo, hi = region[0], min(region[1], mem_bytes)

    def outside(a: int, n: int) -> bool:
        return a < lo or a + n > hi

    spans = ((d["q_addr"], qh * hd * 2), (d["dir_addr"], d["num_clusters"] * CLUSTER_ENTRY_BYTES),
             (d["ids_addr"], d["num_ids"] * 4), (d["out_addr"], _out_bytes(qh, hd)))
    if any(outside(a, n) for a, n in spans):
        return DescStatus.ERR_REGION, []
    ids = struct.unpack(f"<{d['num_ids']}I", mem.read(d["ids_addr"], d["num_ids"] * 4))
    if any(i >= d["num_clusters"] for i in ids):
        return DescStatus.ERR_CLUSTER_ID, []
    entries = [_ENTRY.unpack(mem.read(d["dir_addr"] + i * CLUSTER_ENTRY_BYTES,
                                      CLUSTER_ENTRY_BYTES)) for i in ids]
    if any(not 1 <= t <= caps.max_cluster_tokens for _, t in entries):
        return DescStatus.ERR_CLUSTER_LEN, []
    for kv, t in entries:
        if kv % LINE_BYTES:
            return DescStatus.ERR_ALIGN, []
        if outside(kv, 2 * t * hd * 2):
            return DescStatus.ERR_REGION, []
    return DescStatus.OK, entries


def expected_output(d: dict, mem: RefMemory, clusters: list[tuple[int, int]],
                    params: EngineParams) -> bytes:
    """What an OK ATTN descriptor writes at out_addr: O then LSE, fp32, LSE padded."""
    hd, qh = d["head_dim"], d["q_heads"]
    q = np.frombuffer(mem.read(d["q_addr"], qh * hd * 2), dtype="<u2").reshape(qh, hd)
    keys, values = [], []
    for kv, t in clusters:
        raw = np.frombuffer(mem.read(kv, 2 * t * hd * 2), dtype="<u2")
        keys.append(raw[:t * hd].reshape(t, hd))
        values.append(raw[t * hd:].reshape(t, hd))
    scale = np.uint32(d["scale"]).view(np.float32)
    res = attend(params, q.astype(np.uint16), keys, values, scale)
    lse = res.lse.astype("<u4").tobytes()
    return res.o.astype("<u4").tobytes() + lse + bytes(-len(lse) % LINE_BYTES)


def completion(desc_id: int, status: DescStatus, fetched: int, ring: int) -> bytes:
    """The completion record of the ``fetched``-th descriptor fetched since the rings were set
    up (1 for the first) on a completion ring of ``ring`` entries: its phase is 1 on the first
    pass over the ring, then 0, 1, ...; ``sq_head`` is what driver/formats.py documents."""
    phase = 1 - ((fetched - 1) // ring) % 2
    return COMPLETION.build({"desc_id": desc_id, "status": status, "phase": phase,
                             "sq_head": sq_head_field(fetched, ring)})


def sq_head_field(fetched: int, ring: int) -> int:
    """COMPLETION.sq_head as driver/formats.py documents it: "submission entries fetched so
    far (mod 65536)"."""
    return fetched % 65536
