"""Fuzzer of descriptors and ring contents past the driver: raw submission-ring entries, cluster
directories and id lists written straight into device memory (the driver's own checks never
see them), rung with raw doorbells, on a ring that may already have wrapped.

Oracles: every descriptor completes (no hang) without an exception from the device (no crash),
with the status, completion record and O/LSE bits the reference says (driver/formats.py, the
engine model), the error counters counting it, nothing else in memory changed, and no device
write outside the queue's region; on ``rtl`` also the model's registers and memory bit for bit.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from hypothesis import strategies as st

from nelssa.driver.formats import (
    DESC_BYTES,
    DESCRIPTOR,
    DescOpcode,
    DescStatus,
    cluster_bytes,
)
from nelssa.hw.model.engine import EngineParams
from nelssa.hw.model.fp import f32_to_bf16_bits
from tests.fuzz.bench import Bench, on_fresh_bench, outside_writes
from tests.fuzz.device_ref import completion, expected_output, expected_status
from tests.fuzz.oracle import Finding, Kind, expect_equal, guarded
from tests.fuzz.values import address, uint

# One queue's layout (region of 1 MiB at 1 MiB); every buffer is 64-byte aligned.
REGION_BASE = 1 << 20
REGION_LIMIT = 2 << 20
RING = 16
SQ = REGION_BASE
CQ = REGION_BASE + 0x1000
DIR = REGION_BASE + 0x2000
Q = REGION_BASE + 0x3000
IDS = REGION_BASE + 0x4000
IDS_STRIDE = 0x4000  # 4096 ids
OUT = REGION_BASE + 0x40000
OUT_STRIDE = 0x2000  # 8 heads x 128 fp32 + LSE
KV = REGION_BASE + 0x60000
KV_STRIDE = cluster_bytes(64, 128)
MAX_CLUSTERS = 8
KV_END = KV + MAX_CLUSTERS * KV_STRIDE
"""Above it the region is unused (outputs near the limit may land there)."""
MAX_DESCRIPTORS = RING - 2
RUN_CYCLES = 20_000_000
"""Cycle bound of one input: a hundred times what its largest legal descriptors take (a few
clusters of up to 64 tokens each); the rtl runs it inside one C call, which no wall-clock
bound interrupts."""
WALL_S = 60.0
"""Wall-clock bound of one input."""

ADDRESS_FIELDS = ("q_addr", "dir_addr", "ids_addr", "out_addr")
MEM_TOP = 1 << 36  # the default device's memory (64 GiB), for the edge values
READ_ANCHORS = (REGION_BASE, REGION_LIMIT, Q, DIR, KV, 0, MEM_TOP, 1 << 64)
"""Where the addresses a descriptor reads from are drawn around (never the rings or the
outputs, whose contents depend on timing)."""


@dataclass(frozen=True)
class Desc:
    """One ring entry: DESCRIPTOR's fields, and the ids written at its ids buffer."""

    fields: dict[str, object]
    ids: tuple[int, ...]

    def raw(self) -> bytes:
        return DESCRIPTOR.build(self.fields)


@dataclass(frozen=True)
class DescriptorCase:
    seed: int
    """Seeds the K, V and Q contents."""
    raw_bits: bool
    """K, V and Q as any 16-bit patterns (NaN, Inf, subnormals), not normal values."""
    entries: tuple[tuple[int, int], ...]
    """The cluster directory: (kv_addr, tokens) per entry."""
    prefix: int
    """NOP descriptors completed before these, so the rings may wrap."""
    descriptors: tuple[Desc, ...] = field(default_factory=tuple)

    @property
    def units(self) -> int:
        return len(self.descriptors)


@cache
def _ids_strategy(n_clusters: int) -> st.SearchStrategy[tuple[int, ...]]:
    valid = st.integers(0, n_clusters - 1)
    bad = st.sampled_from([n_clusters, n_clusters + 1, 0xFFFF, 0xFFFF_FFFF])
    # long selections only of ids that fail: a long legal one costs seconds of engine model
    runs = st.lists(st.one_of(st.tuples(valid, st.sampled_from([1, 2, 5, 16])),
                              st.tuples(bad, st.sampled_from([1, 64, 4096]))),
                    min_size=1, max_size=4)

    def flatten(rs: list[tuple[int, int]]) -> tuple[int, ...]:
        out: list[int] = []
        for v, n in rs:
            out += [v] * n
        return tuple(out[:8192])
    return st.one_of(st.lists(valid, min_size=1, max_size=8).map(tuple), runs.map(flatten))


@cache
def _mutation(name: str, n_clusters: int) -> st.SearchStrategy[object]:
    """A value for a descriptor field; for num_ids "+1" or "-1" stands for one more or one
    fewer than the ids written."""
    if name == "opcode":
        return st.one_of(st.sampled_from([DescOpcode.NOP, 2, 3, 0x7F, 0x80, 0xFF]), uint(8))
    if name in ("flags", "reserved0"):
        return st.integers(1, 255)
    if name == "head_dim":
        return st.one_of(st.sampled_from([64, 128, 0, 1, 32, 63, 65, 127, 129, 192, 256,
                                          0xFFFF]), uint(16))
    if name == "q_heads":
        return st.one_of(st.integers(1, 8), st.sampled_from([0, 9, 16, 255]), uint(8))
    if name == "num_ids":
        return st.one_of(st.sampled_from([0, 1, "+1", "-1", 4096, 4097, 0xFFFF]), uint(16))
    if name == "num_clusters":
        return st.one_of(st.sampled_from([0, n_clusters - 1, n_clusters + 1, 1 << 16, 1 << 28,
                                          0xFFFF_FFFF]), uint(32))
    if name == "desc_id":
        return uint(32)
    if name == "out_addr":
        return address((REGION_BASE, REGION_LIMIT, 0, MEM_TOP, 1 << 64))
    if name in ADDRESS_FIELDS:
        return address(READ_ANCHORS)
    if name == "scale":
        return st.one_of(st.sampled_from([0, 0x8000_0000, 0x7F80_0000, 0xFF80_0000,
                                          0x7FC0_0000, 0x0000_0001, 0xBF80_0000]), uint(32))
    if name == "reserved1":
        return st.binary(min_size=12, max_size=12).filter(any)
    raise KeyError(name)


MUTABLE = ("opcode", "flags", "reserved0", "head_dim", "q_heads", "num_ids", "num_clusters",
           "desc_id", *ADDRESS_FIELDS, "scale", "reserved1")


@cache
def _descriptor(index: int, n_clusters: int) -> st.SearchStrategy[Desc]:
    return _draw_descriptor(index, n_clusters)


@st.composite
def _draw_descriptor(draw, index: int, n_clusters: int) -> Desc:
    hd = draw(st.sampled_from([128, 64]))
    ids = draw(_ids_strategy(n_clusters))
    f: dict[str, object] = {
        "opcode": DescOpcode.ATTN, "flags": 0, "head_dim": hd, "q_heads": draw(st.integers(1, 8)),
        "reserved0": 0, "num_ids": min(len(ids), 0xFFFF), "desc_id": index + 1,
        "num_clusters": n_clusters, "q_addr": Q, "dir_addr": DIR,
        "ids_addr": IDS + index * IDS_STRIDE, "out_addr": OUT + index * OUT_STRIDE,
        "scale": int(np.float32(1 / np.sqrt(hd)).view(np.uint32)), "reserved1": bytes(12)}
    names = draw(st.lists(st.sampled_from(MUTABLE), max_size=3, unique=True))
    for name in names:
        value = draw(_mutation(name, n_clusters))
        if value in ("+1", "-1"):
            value = max(0, len(ids) + int(value))
        f[name] = value
    out = int(f["out_addr"])  # type: ignore[call-overload]
    if REGION_BASE <= out < KV_END:  # an output lands only in its own buffer, past what
        f["out_addr"] = OUT + index * OUT_STRIDE  # others read, or (partly) outside
    spans = {"q_addr": 8 * 128 * 2, "ids_addr": 4 * 4096,
             "dir_addr": int(f["num_clusters"]) * 16}  # type: ignore[call-overload]
    for name, default in (("q_addr", Q), ("dir_addr", DIR),
                          ("ids_addr", IDS + index * IDS_STRIDE)):
        if _reads_hazard(int(f[name]), spans[name]):  # type: ignore[call-overload]
            f[name] = default
    return Desc(f, ids)


HAZARDS = ((CQ, DIR), (OUT, KV))
"""What descriptors write while others run (the completion ring, the outputs): a descriptor
that read there would read what timing decides, so the fuzzers read elsewhere."""


def _reads_hazard(addr: int, n: int) -> bool:
    return (REGION_BASE <= addr < REGION_LIMIT
            and any(addr < hi and addr + n > lo for lo, hi in HAZARDS))


@cache
def _entry(index: int) -> st.SearchStrategy[tuple[int, int]]:
    return _draw_entry(index)


@st.composite
def _draw_entry(draw, index: int) -> tuple[int, int]:
    kv = KV + index * KV_STRIDE
    tokens = draw(st.one_of(st.sampled_from([1, 2, 3, 4, 8, 63, 64]), st.integers(1, 16),
                            st.integers(1, 64)))
    which = draw(st.sampled_from(["ok", "ok", "ok", "tokens", "addr"]))
    if which == "tokens":
        tokens = draw(st.one_of(st.sampled_from([0, 65, 255, 256, 0xFFFF]), uint(16)))
    elif which == "addr":
        kv = draw(address((kv, REGION_BASE, REGION_LIMIT, REGION_LIMIT - KV_STRIDE, Q, 0,
                           MEM_TOP, 1 << 64)))
        if _reads_hazard(kv, cluster_bytes(min(tokens, 64), 128)):
            kv = KV + index * KV_STRIDE
    return kv, tokens


@st.composite
def descriptor_cases(draw, max_descriptors: int = MAX_DESCRIPTORS) -> DescriptorCase:
    """One input: a directory, up to ``max_descriptors`` ring entries, a ring position."""
    n = draw(st.integers(1, MAX_CLUSTERS))
    entries = tuple(draw(_entry(i)) for i in range(n))
    k = draw(st.integers(1, max_descriptors))
    return DescriptorCase(draw(st.integers(0, 2**32 - 1)), draw(st.booleans()), entries,
                          draw(st.integers(0, RING - 2)),
                          tuple(draw(_descriptor(i, n)) for i in range(k)))


def _bf16(rng: np.random.Generator, n: int, raw: bool) -> bytes:
    if raw:
        return rng.integers(0, 1 << 16, n, dtype=np.uint16).astype("<u2").tobytes()
    return f32_to_bf16_bits(rng.standard_normal(n).astype(np.float32)).astype("<u2").tobytes()


def _nop(desc_id: int) -> bytes:
    return DESCRIPTOR.build({"opcode": DescOpcode.NOP, "flags": 0, "head_dim": 0, "q_heads": 0,
                             "reserved0": 0, "num_ids": 0, "desc_id": desc_id,
                             "num_clusters": 0, "q_addr": 0, "dir_addr": 0, "ids_addr": 0,
                             "out_addr": 0, "scale": 0, "reserved1": bytes(12)})


def load_case(bench: Bench, case: DescriptorCase) -> None:
    """Write the case's memory: K/V data, Q, the directory, each descriptor's ids."""
    rng = np.random.default_rng(case.seed)
    for i, (_, tokens) in enumerate(case.entries):
        t = min(tokens, 64)
        bench.host_write(KV + i * KV_STRIDE, _bf16(rng, 2 * t * 128, case.raw_bits))
    bench.host_write(Q, _bf16(rng, 8 * 128, case.raw_bits))
    bench.host_write(DIR, b"".join(struct.pack("<QH6x", kv, t) for kv, t in case.entries))
    for i, d in enumerate(case.descriptors):
        ids = d.ids[:4096]
        # ids past the list read as an invalid id, so a mutated num_ids fails fast
        tail = max(0, min(int(d.fields["num_ids"]), 4096) - len(ids))  # type: ignore[arg-type]
        raw = struct.pack(f"<{len(ids)}I", *ids) + b"\xff" * (4 * tail)
        bench.host_write(IDS + i * IDS_STRIDE, raw)


def setup_rings(bench: Bench) -> None:
    bench.reg_write("CONTROL", 0)
    bench.reg_write64("REGION_BASE", REGION_BASE)
    bench.reg_write64("REGION_LIMIT", REGION_LIMIT)
    bench.reg_write64("SQ_BASE", SQ)
    bench.reg_write("SQ_SIZE", RING)
    bench.reg_write64("CQ_BASE", CQ)
    bench.reg_write("CQ_SIZE", RING)
    bench.reg_write("CONTROL", 1)


def run_descriptor_case(case: DescriptorCase, backend: str = "model") -> list[Finding]:
    """Run one input on a fresh device; its findings (empty when every oracle holds)."""
    return on_fresh_bench(backend, WALL_S, lambda bench, found: _run(bench, case, found))


def _run(bench: Bench, case: DescriptorCase, findings: list[Finding]) -> None:
    caps = bench.caps
    with guarded(findings, WALL_S, "loading the case") as g:
        load_case(bench, case)
        setup_rings(bench)
        if case.prefix:
            bench.host_write(SQ, b"".join(_nop(0xC0DE_0000 + i) for i in range(case.prefix)))
            bench.reg_write("SQ_TAIL", case.prefix)
            bench.run_until_idle(RUN_CYCLES)
            bench.reg_write("CQ_HEAD", case.prefix)
            for i in range(case.prefix):  # what the device wrote, checked with the rest
                bench.ref.write(CQ + i * 16, completion(0xC0DE_0000 + i, DescStatus.OK, i + 1,
                                                        RING))
    if not g.passed:
        return
    ring = [(SQ + ((case.prefix + i) % RING) * DESC_BYTES, d.raw())
            for i, d in enumerate(case.descriptors)]
    with guarded(findings, WALL_S, "writing the ring") as g:
        for addr, raw in ring:
            bench.host_write(addr, raw)
    if not g.passed:
        return
    # expected: what each descriptor completes with and writes, from the reference memory
    # as it is now (descriptors never read what another one writes: HAZARDS)
    region = (REGION_BASE, REGION_LIMIT)
    want_writes: list[tuple[int, bytes]] = []
    statuses = []
    for i, d in enumerate(case.descriptors):
        fetched = case.prefix + i + 1
        status, clusters = expected_status(d.fields, bench.ref, region, bench.mem_bytes, caps)
        statuses.append(status)
        if status == DescStatus.OK and d.fields["opcode"] == DescOpcode.ATTN:
            want_writes.append((int(d.fields["out_addr"]),  # type: ignore[arg-type]
                                expected_output(d.fields, bench.ref, clusters, EngineParams())))
        want_writes.append((CQ + ((fetched - 1) % RING) * 16,
                            completion(int(d.fields["desc_id"]),  # type: ignore[arg-type]
                                       status, fetched, RING)))
    with guarded(findings, WALL_S, "running the descriptors") as g:
        bench.reg_write("SQ_TAIL", (case.prefix + len(ring)) % RING)
        bench.run_until_idle(RUN_CYCLES)
    if not g.passed:
        return
    with guarded(findings, WALL_S, "reading the results") as g:
        _check(bench, case, statuses, want_writes, findings)


def _check(bench: Bench, case: DescriptorCase, statuses: list[DescStatus],
           want_writes: list[tuple[int, bytes]], findings: list[Finding]) -> None:
    total = case.prefix + len(case.descriptors)
    unit = bench.under_test
    got = unit.registers()
    want_regs = {"SQ_HEAD": total % RING, "CQ_TAIL": total % RING, "PERF_DESC_DONE": total,
                 "ERR_DESC": sum(s != DescStatus.OK for s in statuses), "ERR_DOORBELL": 0,
                 "ERR_MEM": 0, "STATUS": 0b11}
    for name, want in want_regs.items():
        expect_equal(findings, f"{unit.name} register {name}", got[name], want)
    # the completion ring and every output, then nothing else changed
    expected = bench.ref
    for addr, data in want_writes:
        expected.write(addr, data)
    spans = [range(addr - addr % 64, addr + len(data), 64) for addr, data in want_writes]
    lines = unit.read_lines([a for span in spans for a in span])
    for i, ((addr, data), span) in enumerate(zip(want_writes, spans, strict=True)):
        mine = b"".join(lines[a] or b"" for a in span)
        off = addr % 64
        if mine[off:off + len(data)] != data:
            what = "completion" if len(data) == 16 else "O/LSE"
            findings.append(Finding(Kind.WRONG, f"{unit.name}: {what} at {addr:#x} (write {i}): "
                                                f"got {mine[off:off + 32].hex()}..., expected "
                                                f"{data[:32].hex()}..."))
    if bench.rtl is None:
        image = {a: v for a, v in bench.model.mem.written().items() if any(v)}
        want = expected.image()
        extra = sorted(set(image) ^ set(want)) or [a for a in want if image[a] != want[a]]
        if extra:
            findings.append(Finding(Kind.WRONG, f"model memory differs from the reference at "
                                                f"{len(extra)} line(s), first {extra[0]:#x}"))
        findings.extend(outside_writes(bench.model.mem))
    else:
        findings.extend(outside_writes(bench.model.mem))
        bench.compare_backends(findings)
