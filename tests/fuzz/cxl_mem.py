"""Fuzzer of port messages: CXL.mem requests (MemRd, MemWr, MemWrPtl, undefined opcodes) and
CXL.io register accesses with any tag, address, byte enables, data, channel and length.

Reference (driver/cxl.py and driver/regs.py as documented): a message of the wrong length, on an
unknown or a device-to-host channel, is refused with ValueError and changes nothing; an
undefined opcode is answered on its channel's response with OPCODE_ERROR, zero data (all ones
for MMIO) and counted in ERR_OPCODE; a line request outside memory or not line-aligned gets
ADDR_ERROR and counts in ERR_MEM; a write changes exactly the enabled bytes of its line; reads
and writes of registers follow the register map (unmapped reads all ones and counts in
ERR_UNMAPPED, a write to a read-only register counts in ERR_RO_WRITE).

Oracles: every answer as the reference says (wrong result), no exception but the documented
ValueError (crash), every answer within a cycle bound (hang), nothing written but the lines
addressed (outside); on ``rtl`` also the model's answers and memory bit for bit.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass

from hypothesis import strategies as st

from nelssa.driver import cxl, regs
from nelssa.driver.formats import LINE_BYTES
from tests.fuzz.bench import Bench, on_fresh_bench
from tests.fuzz.oracle import Finding, Kind, expect_equal, guarded
from tests.fuzz.values import address, uint

MEM_TOP = 1 << 36
POLL_CYCLES = 64
ANSWER_CYCLES = 200_000
"""Cycles within which every answer must have come."""
WALL_S = 30.0
CONSTANT_REGS = ("MAGIC", "VERSION", "CAPS", "IFACE_HASH", "MEM_SIZE_LO", "MEM_SIZE_HI",
                 "BUILD_ID")
COUNTERS = ("ERR_UNMAPPED", "ERR_RO_WRITE", "ERR_MEM", "ERR_OPCODE")
# the layouts of driver/cxl.py, restated: channel byte then the body
_LAYOUT = {cxl.Channel.M2S_REQ: struct.Struct("<BBHQ"),
           cxl.Channel.M2S_RWD: struct.Struct("<BBHQQ64s"),
           cxl.Channel.MMIO_REQ: struct.Struct("<BBHII")}
_RO_OFFSETS = [r.offset for r in regs.REGISTERS if r.access == regs.Access.RO]
_UNMAPPED = [0x01C, 0x028, 0x0FC, 0x200, 0xFFC, 0x001, 0x002, 0x003, 0x1000, 0x1004,
             0xFFFF_FFFC, 0xFFFF_FFFF]


@dataclass(frozen=True)
class MessageCase:
    messages: tuple[bytes, ...]

    @property
    def units(self) -> int:
        return len(self.messages)


def _lines_strategy() -> st.SearchStrategy[int]:
    return address((0, 64, 4096, 1 << 20, MEM_TOP - 64, MEM_TOP, 1 << 63, 1 << 64))


_req = st.builds(lambda op, tag, a: _LAYOUT[cxl.Channel.M2S_REQ].pack(0, op, tag, a),
                 st.one_of(st.just(cxl.M2SReqOpcode.MEM_RD), uint(8)), uint(16),
                 _lines_strategy())
_rwd = st.builds(lambda op, tag, a, be, data: _LAYOUT[cxl.Channel.M2S_RWD].pack(
    1, op, tag, a, be, data),
    st.one_of(st.sampled_from([cxl.M2SRwDOpcode.MEM_WR, cxl.M2SRwDOpcode.MEM_WR_PTL]),
              uint(8)), uint(16), _lines_strategy(),
    st.one_of(st.just(cxl.FULL_LINE), uint(64)), st.binary(min_size=64, max_size=64))
_mmio_read = st.builds(lambda tag, off: _LAYOUT[cxl.Channel.MMIO_REQ].pack(
    4, cxl.MmioOpcode.READ, tag, off, 0), uint(16),
    st.one_of(st.sampled_from([r.offset for r in regs.REGISTERS]), st.sampled_from(_UNMAPPED),
              uint(32)))
# writes only where a write changes nothing but an error counter (the register fuzzer does
# the rest), and undefined opcodes anywhere
_mmio_write = st.builds(lambda tag, off, v: _LAYOUT[cxl.Channel.MMIO_REQ].pack(
    4, cxl.MmioOpcode.WRITE, tag, off, v), uint(16),
    st.one_of(st.sampled_from(_RO_OFFSETS), st.sampled_from(_UNMAPPED)), uint(32))
_mmio_bad = st.builds(lambda op, tag, off, v: _LAYOUT[cxl.Channel.MMIO_REQ].pack(
    4, op, tag, off, v), st.integers(2, 255), uint(16),
    st.one_of(st.sampled_from([r.offset for r in regs.REGISTERS]), uint(32)), uint(32))
GOOD = st.one_of(_req, _rwd, _rwd, _mmio_read, _mmio_write, _mmio_bad)
"""A well-formed port message (its opcode or address may still be refused)."""
MALFORMED = st.one_of(
    GOOD.flatmap(lambda m: st.integers(0, len(m) - 1).map(lambda n: m[:n])),
    GOOD.flatmap(lambda m: st.binary(min_size=1, max_size=8).map(lambda x: m + x)),
    GOOD.flatmap(lambda m: st.sampled_from([2, 3, 5, 6, 7, 0xFF]).map(
        lambda ch: bytes([ch]) + m[1:])),
    st.binary(max_size=100))
"""A message of the wrong length or on a channel a device does not take."""


@st.composite
def message_cases(draw, max_messages: int = 24) -> MessageCase:
    msgs = draw(st.lists(st.one_of(GOOD, GOOD, GOOD, MALFORMED), min_size=1,
                         max_size=max_messages))
    # now and then a read of a line written before, so reads return written data
    out = []
    for m in msgs:
        out.append(m)
        if m[:1] == bytes([cxl.Channel.M2S_RWD]) \
                and len(m) == _LAYOUT[cxl.Channel.M2S_RWD].size and draw(st.booleans()):
            addr = struct.unpack_from("<Q", m, 4)[0]
            out.append(_LAYOUT[cxl.Channel.M2S_REQ].pack(0, cxl.M2SReqOpcode.MEM_RD, 7, addr))
    return MessageCase(tuple(out))


def well_formed(m: bytes) -> bool:
    """Whether a device takes ``m`` at all: a host-to-device channel and its length."""
    layout = _LAYOUT.get(m[0]) if m else None
    return layout is not None and len(m) == layout.size


class CxlReference:
    """What the device must answer and hold, message by message."""

    def __init__(self, bench: Bench) -> None:
        self.mem = bench.ref
        self.mem_bytes = bench.mem_bytes
        self.counters = Counter({n: 0 for n in COUNTERS})
        self.constants = {n: regs.BY_NAME[n].offset for n in CONSTANT_REGS}

    @staticmethod
    def accepts(m: bytes) -> bool:
        return well_formed(m)

    def answer(self, m: bytes, const: dict[int, int]) -> bytes | None:
        ch = m[0]
        if ch == cxl.Channel.MMIO_REQ:
            _, op, tag, off, _ = _LAYOUT[ch].unpack(m)
            if op == cxl.MmioOpcode.WRITE:
                reg = regs.BY_OFFSET.get(off)
                self.counters["ERR_UNMAPPED" if reg is None else "ERR_RO_WRITE"] += 1
                return None
            if op != cxl.MmioOpcode.READ:
                self.counters["ERR_OPCODE"] += 1
                return cxl.mmio_rsp(tag, regs.UNMAPPED_VALUE, cxl.RspStatus.OPCODE_ERROR)
            if off not in regs.BY_OFFSET:
                self.counters["ERR_UNMAPPED"] += 1
                return cxl.mmio_rsp(tag, regs.UNMAPPED_VALUE)
            return cxl.mmio_rsp(tag, const[off]) if off in const else b"any:" + m
        if ch == cxl.Channel.M2S_REQ:
            _, op, tag, addr = _LAYOUT[ch].unpack(m)
        else:
            _, op, tag, addr, be, data = _LAYOUT[ch].unpack(m)
        defined = (op == cxl.M2SReqOpcode.MEM_RD if ch == cxl.Channel.M2S_REQ
                   else op in (cxl.M2SRwDOpcode.MEM_WR, cxl.M2SRwDOpcode.MEM_WR_PTL))
        if not defined:
            status = cxl.RspStatus.OPCODE_ERROR
            self.counters["ERR_OPCODE"] += 1
        elif addr % LINE_BYTES or addr + LINE_BYTES > self.mem_bytes:
            status = cxl.RspStatus.ADDR_ERROR
            self.counters["ERR_MEM"] += 1
        else:
            status = cxl.RspStatus.OK
        if ch == cxl.Channel.M2S_REQ:
            data = self.mem.read(addr, LINE_BYTES) if status == cxl.RspStatus.OK else bytes(64)
            return cxl.build_message(cxl.Channel.S2M_DRS, {
                "opcode": cxl.S2MDrsOpcode.MEM_DATA, "tag": tag, "status": status,
                "data": data})
        if status == cxl.RspStatus.OK:
            self.mem.write_line(addr, data, be)
        return cxl.build_message(cxl.Channel.S2M_NDR, {"opcode": cxl.S2MNdrOpcode.CMP,
                                                       "tag": tag, "status": status})


def run_message_case(case: MessageCase, backend: str = "model") -> list[Finding]:
    return on_fresh_bench(backend, WALL_S, lambda bench, found: _run(bench, case, found))


def _collect(port, n: int) -> list[bytes]:
    got: list[bytes] = []
    waited = 0
    while True:
        got += port.receive()
        if len(got) >= n or waited >= ANSWER_CYCLES:
            return got
        port.advance(POLL_CYCLES)
        waited += POLL_CYCLES


def _run(bench: Bench, case: MessageCase, findings: list[Finding]) -> None:
    ref = CxlReference(bench)
    with guarded(findings, WALL_S, "reading the constant registers") as g:
        const = {regs.offset(n): bench.under_test.dev.reg_read(n) for n in CONSTANT_REGS}
        before = {b.name: {n: b.dev.reg_read(n) for n in COUNTERS} for b in bench.units}
    if not g.passed:
        return
    answers: dict[str, list[bytes]] = {b.name: [] for b in bench.units}
    for i, m in enumerate(case.messages):
        want = ref.answer(m, const) if ref.accepts(m) else "refused"
        for b in bench.units:
            with guarded(findings, WALL_S, f"{b.name} message {i} {m.hex()}") as g:
                try:
                    b.port.send(m)
                    refused = False
                except ValueError:
                    refused = True
                got = _collect(b.port, 0 if want in ("refused", None) else 1)
            if not g.passed:
                return
            if want == "refused":
                if not refused:
                    findings.append(Finding(Kind.WRONG, f"{b.name}: message {i} {m.hex()} "
                                                        "accepted; it is malformed"))
                want_list: list[bytes] = []
            else:
                if refused:
                    findings.append(Finding(Kind.WRONG, f"{b.name}: message {i} {m.hex()} "
                                                        "refused; it is well formed"))
                want_list = [] if want is None else [want]
            answers[b.name] += got
            if len(want_list) == 1 and want_list[0].startswith(b"any:") and len(got) == 1:
                continue  # a register whose value the reference does not follow
            expect_equal(findings, f"{b.name}: answer to message {i} {m.hex()}",
                         [x.hex() for x in got], [x.hex() for x in want_list])
    with guarded(findings, WALL_S, "reading the results"):
        for b in bench.units:
            after = {n: b.dev.reg_read(n) for n in COUNTERS}
            for n in COUNTERS:
                expect_equal(findings, f"{b.name}: {n} counted", after[n] - before[b.name][n],
                             ref.counters[n])
        if bench.rtl is not None:
            expect_equal(findings, "rtl answers as the model's",
                         [x.hex() for x in answers["rtl"]], [x.hex() for x in answers["model"]])
        written = set(bench.model.mem.written())
        want_lines = {k * LINE_BYTES for k in ref.mem.lines}
        for addr in sorted(written - want_lines)[:3]:
            findings.append(Finding(Kind.OUTSIDE, f"model wrote line {addr:#x}, which no "
                                                  "accepted write addressed"))
        image = ref.mem.image()
        for b in bench.units:
            lines = b.read_lines(list(image))
            for addr, data in sorted(image.items()):
                expect_equal(findings, f"{b.name}: line {addr:#x}", lines[addr], data)
        if bench.rtl is not None and bench.rtl.line_count() > len(want_lines):
            findings.append(Finding(Kind.OUTSIDE, f"rtl wrote {bench.rtl.line_count()} lines, "
                                                  f"{len(want_lines)} were addressed"))
