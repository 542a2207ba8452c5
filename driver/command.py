"""Command API: ATTN descriptors built with construct, submitted in batches to the submission
ring in device memory, one doorbell per batch, completions polled from the completion ring and
decoded into numpy O and LSE.

The driver checks every request before it writes anything (a bad request raises naming what is
wrong); ``submit_raw`` skips the checks so tests can show that the device holds on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from construct import ConstructError

from nelssa.driver import regs
from nelssa.driver.device import Device, DeviceError
from nelssa.driver.formats import (
    COMPLETION,
    COMPLETION_BYTES,
    DESC_BYTES,
    DESCRIPTOR,
    MAX_IDS,
    DescOpcode,
    DescStatus,
    out_bytes,
)
from nelssa.driver.memory import KvRegion, MemoryApi
from nelssa.driver.split import Part, split_batch

log = logging.getLogger(__name__)


IDLE_TIMEOUT_CYCLES = 50_000_000
"""How long a device may stay busy after it was disabled (what it had fetched finishing)."""


class RingFullError(RuntimeError):
    """More descriptors than the submission ring has free entries."""


@dataclass(frozen=True)
class AttnRequest:
    """Sparse attention of one GQA group: its query rows against selected clusters of a region."""

    region: KvRegion
    q: npt.NDArray[np.uint16]
    """bf16 bits, (query heads, head_dim)."""
    cluster_ids: Sequence[int]
    scale: float | None = None
    """Softmax scale; 1/sqrt(head_dim) when None."""


@dataclass(frozen=True)
class AttnOutput:
    """What came back for one descriptor."""

    desc_id: int
    status: DescStatus
    o: npt.NDArray[np.float32] | None
    """(query heads, head_dim), None unless OK."""
    lse: npt.NDArray[np.float32] | None
    """(query heads,), natural log, None unless OK."""


@dataclass
class _Staged:
    q_heads: int
    head_dim: int
    buffers: list[int]
    out_addr: int


class CommandQueue:
    """One submission/completion ring pair inside a MemoryApi's region."""

    def __init__(self, memory: MemoryApi, entries: int = 256) -> None:
        if entries < 2 or entries & (entries - 1) or entries > 65536:
            raise ValueError(f"entries must be a power of two in 2..65536, got {entries}")
        self.memory = memory
        self.dev: Device = memory.device
        self.entries = entries
        self.sq_addr = memory.alloc.alloc(entries * DESC_BYTES, "the submission ring")
        self.cq_addr = memory.alloc.alloc(entries * COMPLETION_BYTES, "the completion ring")
        self.dev.mem_write(self.cq_addr, bytes(entries * COMPLETION_BYTES))
        d = self.dev
        rings = {"REGION_BASE": memory.base, "REGION_LIMIT": memory.limit,
                 "SQ_BASE": self.sq_addr, "SQ_SIZE": entries, "CQ_BASE": self.cq_addr,
                 "CQ_SIZE": entries}
        problem = regs.ring_problem(rings, d.mem_bytes)
        if problem is not None:  # the allocator keeps the rings inside the region
            raise ValueError(f"command queue: {problem}")
        # the ring registers take writes only while the device is disabled and idle
        d.reg_write("CONTROL", 0)
        waited = 0
        while not d.reg_read("STATUS") & 1:
            if waited >= IDLE_TIMEOUT_CYCLES:
                raise TimeoutError(f"device still busy {waited} cycles after it was disabled")
            d.port.advance(1024)
            waited += 1024
        for name in ("REGION_BASE", "REGION_LIMIT", "SQ_BASE", "CQ_BASE"):
            d.reg_write64(name, rings[name])
        d.reg_write("SQ_SIZE", entries)
        d.reg_write("CQ_SIZE", entries)
        # writing a ring's size resets its pointers (and the completion phase) to the start
        self.sq_tail = 0
        self.cq_head = 0
        self.phase = 1
        self._next_id = 1
        self._staged: dict[int, _Staged] = {}
        self._done: dict[int, AttnOutput] = {}
        d.reg_write("CONTROL", 1)
        if d.reg_read("STATUS") & 0b110 != 0b010:
            raise DeviceError("the device refused to enable the command queue "
                              f"(ERR_RING {d.reg_read('ERR_RING')}): its ring registers did "
                              "not take")

    # -- submission --------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Descriptors submitted and not yet completed."""
        return len(self._staged)

    @property
    def free_entries(self) -> int:
        """Descriptors that can be submitted now (one entry always stays empty)."""
        return self.entries - 1 - self.in_flight

    def _validate(self, r: AttnRequest) -> tuple[np.ndarray, np.ndarray]:
        caps = self.dev.caps
        q = np.asarray(r.q)
        if q.dtype != np.uint16 or q.ndim != 2:
            raise TypeError(f"q must be a 2-D array of bf16 bits (uint16), got {q.dtype} "
                            f"{q.shape}")
        if q.shape[1] != r.region.head_dim:
            raise ValueError(f"q has head_dim {q.shape[1]}, the region {r.region.head_dim}")
        if not 1 <= q.shape[0] <= caps["max_qheads"]:
            raise ValueError(f"q has {q.shape[0]} query heads; the device takes 1.."
                             f"{caps['max_qheads']}")
        ids = np.asarray(r.cluster_ids, dtype=np.int64)
        if not 1 <= ids.size <= MAX_IDS:
            raise ValueError(f"{ids.size} cluster ids; a descriptor takes 1..{MAX_IDS}")
        bad = ids[(ids < 0) | (ids >= r.region.num_clusters)]
        if bad.size:
            raise ValueError(f"cluster id {int(bad[0])} not in the region (0.."
                             f"{r.region.num_clusters - 1})")
        return q, ids

    def submit(self, requests: Sequence[AttnRequest]) -> list[int]:
        """Stage and submit a batch (one doorbell); returns the descriptor ids."""
        checked = [self._validate(r) for r in requests]
        if len(requests) > self.free_entries:
            raise RingFullError(f"{len(requests)} descriptors but {self.free_entries} ring "
                                "entries free; wait for completions first")
        descs = []
        for r, (q, ids) in zip(requests, checked, strict=True):
            h, hd = q.shape
            alloc = self.memory.alloc
            q_addr = alloc.alloc(q.nbytes, "query rows")
            ids_addr = alloc.alloc(ids.size * 4, "cluster ids")
            out_addr = alloc.alloc(out_bytes(h, hd), "the output")
            self.dev.mem_write(q_addr, q.astype("<u2").tobytes())
            self.dev.mem_write(ids_addr, ids.astype("<u4").tobytes())
            scale = np.float32(r.scale if r.scale is not None else 1.0 / np.sqrt(hd))
            desc_id = self._new_id()
            descs.append(DESCRIPTOR.build({
                "opcode": DescOpcode.ATTN, "flags": 0, "head_dim": hd, "q_heads": h,
                "reserved0": 0, "num_ids": ids.size, "desc_id": desc_id,
                "num_clusters": r.region.num_clusters, "q_addr": q_addr,
                "dir_addr": r.region.dir_addr, "ids_addr": ids_addr, "out_addr": out_addr,
                "scale": int(scale.view(np.uint32)), "reserved1": bytes(12)}))
            self._staged[desc_id] = _Staged(h, hd, [q_addr, ids_addr, out_addr], out_addr)
        self._ring(descs)
        return [DESCRIPTOR.parse(d).desc_id for d in descs]

    def split(self, requests: Sequence[AttnRequest], units: int | None = None) -> list[Part]:
        """``requests`` cut over the device's attention units (driver/split.py), or over
        ``units`` of them; submit the parts' ``attn`` and merge each request's outputs by LSE."""
        have = self.dev.caps["engines"]
        if units is None:
            units = have
        elif not 1 <= units <= have:
            raise ValueError(f"units {units}: the device has {have} attention units (CAPS "
                             "engines), so a batch splits over 1.." + str(have))
        return split_batch(requests, units)

    def submit_raw(self, descriptors: Sequence[bytes]) -> None:
        """Put descriptors on the ring as they are (no checks, no staging): for tests."""
        if len(descriptors) > self.free_entries:
            raise RingFullError(f"{len(descriptors)} descriptors, {self.free_entries} free")
        for raw in descriptors:
            if len(raw) != DESC_BYTES:
                raise ValueError(f"a descriptor is {DESC_BYTES} bytes, got {len(raw)}")
            self._staged[DESCRIPTOR.parse(raw).desc_id] = _Staged(0, 0, [], 0)
        self._ring(list(descriptors))

    def _new_id(self) -> int:
        while self._next_id in self._staged or self._next_id in self._done:
            self._next_id = self._next_id % 0xFFFF_FFFF + 1
        desc_id = self._next_id
        self._next_id = self._next_id % 0xFFFF_FFFF + 1
        return desc_id

    def _ring(self, descs: list[bytes]) -> None:
        if not descs:
            return
        first = self.sq_tail
        split = min(len(descs), self.entries - first)  # the part before the ring wraps
        self.dev.mem_write(self.sq_addr + first * DESC_BYTES, b"".join(descs[:split]))
        if split < len(descs):
            self.dev.mem_write(self.sq_addr, b"".join(descs[split:]))
        self.sq_tail = (first + len(descs)) % self.entries
        self.dev.reg_write("SQ_TAIL", self.sq_tail)

    # -- completion --------------------------------------------------------------------------------
    def poll(self) -> list[AttnOutput]:
        """Every completion not handed out yet (the device's new ones decoded); the caller owns
        them: they are not kept (a long-running node would otherwise hold every output)."""
        out = [*self._done.values(), *self._collect()]
        self._done.clear()
        return out

    def _collect(self) -> list[AttnOutput]:
        """Consume the completions the device has written; decode outputs."""
        out = []
        while True:
            raw = self.dev.mem_read(self.cq_addr + self.cq_head * COMPLETION_BYTES,
                                    COMPLETION_BYTES)
            try:
                c = COMPLETION.parse(raw)
            except ConstructError as e:  # reserved bytes set: not what a device writes
                raise DeviceError(f"completion ring entry {self.cq_head} at "
                                  f"{self.cq_addr + self.cq_head * COMPLETION_BYTES:#x} is "
                                  f"corrupt: {e}") from None
            if c.phase != self.phase:
                break
            out.append(self._finish(c.desc_id, DescStatus(c.status)))
            self.cq_head = (self.cq_head + 1) % self.entries
            if self.cq_head == 0:
                self.phase ^= 1
        if out:
            self.dev.reg_write("CQ_HEAD", self.cq_head)
        return out

    def _finish(self, desc_id: int, status: DescStatus) -> AttnOutput:
        staged = self._staged.pop(desc_id, None)
        o = lse = None
        if staged is not None and status == DescStatus.OK and staged.q_heads:
            h, hd = staged.q_heads, staged.head_dim
            raw = self.dev.mem_read(staged.out_addr, h * hd * 4 + h * 4)
            o = np.frombuffer(raw[:h * hd * 4], dtype="<f4").reshape(h, hd).copy()
            lse = np.frombuffer(raw[h * hd * 4:], dtype="<f4").copy()
        if staged is not None:
            for addr in staged.buffers:
                self.memory.alloc.free(addr)
        return AttnOutput(desc_id, status, o, lse)

    def wait(self, desc_ids: Sequence[int], timeout_cycles: int = 50_000_000
             ) -> dict[int, AttnOutput]:
        """Run the device until these descriptors completed; their outputs by id."""
        want = set(desc_ids)
        waited = 0
        step = 256
        while not want <= self._done.keys():
            self._done.update((o.desc_id, o) for o in self._collect())
            if want <= self._done.keys():
                break
            if waited >= timeout_cycles:
                missing = sorted(want - self._done.keys())
                raise TimeoutError(f"descriptors {missing[:8]} not complete after {waited} "
                                   "device cycles")
            self.dev.port.advance(step)
            waited += step
            step = min(step * 2, 65536)
        return {i: self._done.pop(i) for i in desc_ids}
