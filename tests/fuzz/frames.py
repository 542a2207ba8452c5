"""Fuzzer of link frames against a real LinkServer (its own thread, a ROUTER socket on ipc://),
sent from a raw DEALER socket: damaged parts, headers, lengths and checksums, every kind, any
op, sequence number, reference and emulated time, payloads up to past the server's size limit,
several frames per connection so that duplicates, gaps and acknowledgement floors meet.

Reference: the frame checks of emu/link/frame.py in their documented order, then the protocol
of emu/link/transport.py (a server takes REQUEST and DATA; each client's requests run once and
in order from the floor its first frame names; a duplicate gets the kept reply again; a frame
ahead of the next is held, answered when the gap closes or dropped when the floor passes it).
The handler echoes the payload reversed (op 9: a ServiceError, op 8: an exception); a REQUEST
of the link's own op (LINK_HELLO_OP) is answered by the server with its limit, never run.

Oracles: each frame answered as the reference says, the handler run exactly as often
(wrong result); the server thread alive and its ``internal_errors`` (failures no check
foresaw) still 0 (crash); a probe after each input answered within a bound (hang).
"""

from __future__ import annotations

import contextlib
import logging
import struct
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from hypothesis import strategies as st

from nelssa.emu.link.frame import (
    FRAME_MAGIC,
    FRAME_VERSION,
    HELLO_REP,
    LINK_HELLO_OP,
    MAX_EMU_TIME_PS,
    FrameKind,
    LinkErrorCode,
    decode_frame,
    parse_error,
)
from nelssa.emu.link.model import link_preset
from nelssa.emu.link.server import LinkLimits, LinkServer
from nelssa.emu.link.service import WINDOW, Reply, ServiceError, ServiceRequest
from tests.fuzz.oracle import Finding, Kind, expect_equal
from tests.fuzz.values import uint

log = logging.getLogger(__name__)

HEADER = struct.Struct("<4sBBHIIQII")
MAX_PAYLOAD = 4096
"""The fuzz server's payload limit (LinkLimits.max_payload)."""
ANSWER_S = 5.0
"""Wall time within which a probe must be answered."""
MARGIN_PS = 10**9
"""Reply times this close to MAX_EMU_TIME_PS may be refused as out of range or answered."""
SERVICE_PS = 1000
SEQ_TOP = (1 << 32) - 1


def _crc(header: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(header[:28] + bytes(4)))


@dataclass(frozen=True)
class RawFrame:
    """One frame as sent: header fields, payload, and what is done to its parts on the way."""

    kind: int
    op: int
    seq: int
    ref: int
    emu_time_ps: int
    payload: bytes
    damage: tuple = ()
    """("magic", b), ("version", v), ("length", n), ("crc", x), ("header", bytes),
    ("parts", list): how the frame is spoiled, if it is."""

    def __repr__(self) -> str:
        p = self.payload
        shown = repr(p) if len(p) <= 16 else f"{p[:8]!r} * ... ({len(p)} bytes)"
        return (f"RawFrame(kind={self.kind}, op={self.op}, seq={self.seq}, ref={self.ref}, "
                f"emu_time_ps={self.emu_time_ps}, payload={shown}, damage={self.damage!r})")

    def parts(self) -> list[bytes]:
        d = dict(self.damage)
        if "parts" in d:
            return list(d["parts"])
        length = d.get("length", len(self.payload))
        header = HEADER.pack(d.get("magic", FRAME_MAGIC), d.get("version", FRAME_VERSION),
                             self.kind, self.op, self.seq, self.ref, self.emu_time_ps, length, 0)
        crc = _crc(header, self.payload) ^ d.get("crc", 0)
        header = header[:28] + struct.pack("<I", crc)
        if "header" in d:
            header = d["header"]
        return [header, self.payload]


@dataclass(frozen=True)
class FrameCase:
    frames: tuple[RawFrame, ...]

    @property
    def units(self) -> int:
        return len(self.frames)


_TIMES = st.one_of(st.sampled_from([0, 1, 10**6, 10**12, MAX_EMU_TIME_PS - 10**6,
                                    MAX_EMU_TIME_PS, MAX_EMU_TIME_PS + 1, 1 << 63,
                                    (1 << 64) - 1]), uint(64))
_PAYLOADS = st.one_of(st.binary(max_size=64), st.binary(max_size=64), st.binary(max_size=64),
                      st.sampled_from([MAX_PAYLOAD - 1, MAX_PAYLOAD, MAX_PAYLOAD + 1, 70000])
                      .map(lambda n: bytes([n % 251]) * n))
"""Mostly small; now and then at the server's limit or past it (ZeroMQ then cuts the
connection, which costs the input its answers)."""
_DAMAGE = st.one_of(
    st.just(()),
    st.just(()),
    st.just(()),
    st.tuples(st.tuples(st.just("magic"), st.binary(min_size=4, max_size=4)
                        .filter(lambda m: m != FRAME_MAGIC))),
    st.tuples(st.tuples(st.just("version"), st.integers(0, 255).filter(
        lambda v: v != FRAME_VERSION))),
    st.tuples(st.tuples(st.just("length"), uint(32))),
    st.tuples(st.tuples(st.just("crc"), st.integers(1, SEQ_TOP))),
    st.tuples(st.tuples(st.just("header"), st.binary(max_size=40).filter(
        lambda h: len(h) != HEADER.size))),
    st.tuples(st.tuples(st.just("parts"), st.lists(st.binary(max_size=40), min_size=1, max_size=4)
                        .filter(lambda p: len(p) != 2).map(tuple))),
)


@st.composite
def frame_cases(draw, max_frames: int = 6) -> FrameCase:
    """Frames of one connection; sequence numbers mostly next, duplicate or a little ahead."""
    frames = []
    top = 0
    for _ in range(draw(st.integers(1, max_frames))):
        seq = draw(st.one_of(st.just(top + 1), st.just(top + 1), st.integers(0, top + 1),
                             st.integers(top + 2, top + WINDOW + 2), uint(32)))
        seq = min(seq, SEQ_TOP)
        ref = draw(st.one_of(st.just(0), st.integers(0, max(seq, 1)), st.just(seq),
                             uint(32)))
        kind = draw(st.one_of(st.just(FrameKind.REQUEST), st.just(FrameKind.REQUEST),
                              st.just(FrameKind.DATA), uint(8)))
        op = draw(st.one_of(st.just(1), st.sampled_from([8, 9, 0, 0xFFFF]), uint(16)))
        frames.append(RawFrame(kind, op, seq, ref, draw(st.one_of(st.just(0), _TIMES)),
                               draw(_PAYLOADS), draw(_DAMAGE)))
        top = max(top, min(seq, SEQ_TOP - 2))
    return FrameCase(tuple(frames))


# -- the reference -----------------------------------------------------------------------------
@dataclass
class _Expect:
    """What one frame must draw: nothing, or one ERROR (code, ref) or REPLY (ref, payload)."""

    kind: FrameKind | None
    ref: int = 0
    code: int | None = None
    payload: bytes | None = None
    near_limit: bool = False
    """Its reply time is near MAX_EMU_TIME_PS: a FIELD_RANGE error is as right as a reply."""
    replay: int | None = None
    """A duplicate of the frame run as this seq: the same answer again."""
    ran: bool = False
    """The answer of a request the handler ran (what a duplicate gets again)."""


@dataclass
class _PeerRef:
    next_seq: int
    floor: int = 0
    early: dict[int, RawFrame] = field(default_factory=dict)
    answers: dict[int, _Expect] = field(default_factory=dict)
    latest: int = 0
    """The latest emulated send time run: the link's queue is busy until after it."""


def _checked(f: RawFrame) -> tuple[int | None, int]:
    """(error code, ref of the error) by the frame checks; (None, 0) if it passes them."""
    parts = f.parts()
    if len(parts) != 2 or len(parts[0]) != HEADER.size:
        return LinkErrorCode.MALFORMED_FRAME, 0
    magic, version, kind, _, seq, _, t, length, crc = HEADER.unpack(parts[0])
    if magic != FRAME_MAGIC:
        return LinkErrorCode.MALFORMED_FRAME, 0
    if version != FRAME_VERSION or length != len(parts[1]):
        return LinkErrorCode.MALFORMED_FRAME, seq
    if crc != _crc(parts[0], parts[1]):
        return LinkErrorCode.CHECKSUM, seq
    if kind not in FrameKind.__members__.values():
        return LinkErrorCode.MALFORMED_FRAME, seq
    if t > MAX_EMU_TIME_PS:
        return LinkErrorCode.FIELD_RANGE, seq
    if kind not in (FrameKind.REQUEST, FrameKind.DATA) or f.seq == 0 or f.ref > f.seq:
        return LinkErrorCode.FIELD_RANGE, seq
    return None, 0


class Reference:
    """The answers a connection's frames must draw, and how often the handler runs."""

    def __init__(self) -> None:
        self.peer: _PeerRef | None = None
        self.runs = 0

    def frame(self, f: RawFrame) -> list[_Expect]:
        if any(len(p) > MAX_PAYLOAD for p in f.parts()):
            return [_Expect(None)]  # refused by ZeroMQ before it is read
        code, ref = _checked(f)
        if code is not None:
            return [_Expect(FrameKind.ERROR, ref, code)]
        if self.peer is None:
            self.peer = _PeerRef(f.ref or f.seq)
        p = self.peer
        if f.ref > p.floor:
            p.floor = f.ref
            p.answers = {s: a for s, a in p.answers.items() if s >= f.ref}
            if f.ref > p.next_seq:
                p.early = {s: e for s, e in p.early.items() if s >= f.ref}
                p.next_seq = f.ref
        if f.seq < p.next_seq:
            if f.seq in p.answers:
                out = [_Expect(None, replay=f.seq)]
            elif f.seq >= p.floor:
                out = [_Expect(FrameKind.ERROR, f.seq, LinkErrorCode.REPLY_LOST)]
            else:
                out = [_Expect(None)]
        elif f.seq > p.next_seq:
            if f.seq not in p.early and f.seq < p.next_seq + WINDOW:
                p.early[f.seq] = f
            out = [_Expect(None)]
        else:
            out = [self._run(f)]
        # what was held runs once the gap closes: the next one arrived, or the floor passed it
        while p.next_seq in p.early:
            out.append(self._run(p.early.pop(p.next_seq)))
        return out

    def _run(self, f: RawFrame) -> _Expect:
        assert self.peer is not None
        self.peer.next_seq = f.seq + 1
        self.peer.latest = max(self.peer.latest, f.emu_time_ps)
        near = self.peer.latest + MARGIN_PS > MAX_EMU_TIME_PS
        if f.op == LINK_HELLO_OP and f.kind == FrameKind.REQUEST:  # the server's own answer
            e = _Expect(FrameKind.REPLY, f.seq, payload=HELLO_REP.build(
                {"max_payload": MAX_PAYLOAD, "info": b""}))
            self.peer.answers[f.seq] = e
            if len(self.peer.answers) > WINDOW:
                del self.peer.answers[min(self.peer.answers)]
            return e
        self.runs += 1
        if f.op == 9:
            e = _Expect(FrameKind.ERROR, f.seq, 150)
        elif f.op == 8:
            e = _Expect(FrameKind.ERROR, f.seq, LinkErrorCode.INTERNAL)
        elif f.kind == FrameKind.DATA:  # acknowledged with an empty reply
            e = _Expect(FrameKind.REPLY, f.seq, payload=b"")
        else:
            e = _Expect(FrameKind.REPLY, f.seq, payload=f.payload[::-1], near_limit=near)
        e.ran = True
        self.peer.answers[f.seq] = e
        if len(self.peer.answers) > WINDOW:
            del self.peer.answers[min(self.peer.answers)]
        return e


# -- the server --------------------------------------------------------------------------------
class FrameServer:
    """A LinkServer with the echo handler in a thread of this process."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="nelssa-fuzz-")
        self.endpoint = f"ipc://{Path(self._dir.name)}/link"
        self.runs = 0
        self.server: LinkServer | None = None
        self.thread: threading.Thread | None = None
        self.start()

    def _handle(self, r: ServiceRequest) -> Reply | None:
        self.runs += 1
        if r.op == 9:
            raise ServiceError(150, "op 9 refused")
        if r.op == 8:
            raise KeyError("boom")
        return Reply(r.op, r.payload[::-1], r.arrive_ps + SERVICE_PS)

    def start(self) -> None:
        self.server = LinkServer(self.endpoint, self._handle, link_preset("roce-100g"),
                                 limits=LinkLimits(max_payload=MAX_PAYLOAD, linger_s=0.0))
        self.thread = threading.Thread(target=self.server.serve, kwargs={"poll_ms": 20},
                                       daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            if self.thread is not None:
                self.thread.join(5)
            with contextlib.suppress(Exception):
                self.server.close()
        self.server = self.thread = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


def _socket(endpoint: str) -> zmq.Socket:
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    return s


def _probe_frame(seq: int) -> list[bytes]:
    header = HEADER.pack(FRAME_MAGIC, FRAME_VERSION, FrameKind.REQUEST, 1, seq, seq, 0, 5, 0)
    return [header[:28] + struct.pack("<I", _crc(header, b"probe")), b"probe"]


def _receive_until_probe(sock: zmq.Socket, seq: int, deadline: float,
                         enough: int | None = None) -> tuple[list, bool]:
    """The answers until the probe's (True), the deadline, or ``enough`` of them."""
    got: list = []
    while (left := deadline - time.monotonic()) > 0 and (enough is None or len(got) < enough):
        if not sock.poll(int(left * 1000) + 1, zmq.POLLIN):
            break
        parts = sock.recv_multipart()
        try:
            frame = decode_frame(parts)
        except Exception as e:
            got.append(("undecodable", str(e)))
            continue
        if frame.kind in (FrameKind.REPLY, FrameKind.ERROR) and frame.ref == seq:
            return got, True  # the probe's answer (no frame of the input numbers that high)
        got.append(frame)
    return got, False


def run_frame_case(case: FrameCase, server: FrameServer) -> list[Finding]:
    findings: list[Finding] = []
    if not server.alive:
        server.restart()
    before_runs = server.runs
    assert server.server is not None
    before_internal = server.server.internal_errors
    ref = Reference()
    sock = _socket(server.endpoint)
    try:
        expected: list[_Expect] = []
        replays: dict[int, list] = {}
        oversize = False
        for f in case.frames:
            sock.send_multipart(f.parts())
            expected += ref.frame(f)
            oversize |= any(len(p) > MAX_PAYLOAD for p in f.parts())
        top = max((f.seq for f in case.frames), default=0)
        probe_seq = min(top + 1, SEQ_TOP)
        if oversize or top >= SEQ_TOP:  # the connection was cut, or no number is left on it
            # no probe can follow on this connection: wait for as many answers as the
            # reference expects (a loaded machine may take longer than a moment)
            enough = sum(1 for e in expected if e.kind is not None or e.replay is not None)
            got, _ = _receive_until_probe(sock, -1, time.monotonic() + (
                0.05 if oversize else ANSWER_S), None if oversize else enough)
            if not oversize:  # and a moment more, for any answer beyond the expected
                got += _receive_until_probe(sock, -1, time.monotonic() + 0.05)[0]
            sock.close()
            sock = _socket(server.endpoint)
            probe_seq = 1
        sock.send_multipart(_probe_frame(probe_seq))
        if not oversize and top < SEQ_TOP:
            got, answered = _receive_until_probe(sock, probe_seq, time.monotonic() + ANSWER_S)
        else:
            more, answered = _receive_until_probe(sock, probe_seq, time.monotonic() + ANSWER_S)
            got = got + more
        if not answered:
            findings.append(Finding(Kind.HANG if server.alive else Kind.CRASH,
                                    f"no answer to a probe within {ANSWER_S:g} s after "
                                    f"{case.units} frame(s); server thread "
                                    f"{'alive' if server.alive else 'dead'}"))
        if not server.alive:
            findings.append(Finding(Kind.CRASH, "the server thread exited"))
            return findings
        if server.server.internal_errors != before_internal:
            findings.append(Finding(Kind.CRASH, "the server hit a failure no check foresaw "
                                                "(internal_errors went up)"))
        if answered and not oversize:  # a cut connection loses what it held: no comparison
            _compare(findings, got, expected, replays)
            expect_equal(findings, "handler runs", server.runs - before_runs - 1, ref.runs)
    finally:
        sock.close()
    return findings


def _compare(findings: list[Finding], got: list, expected: list[_Expect],
             replays: dict[int, list]) -> None:
    """The answers against the reference's. Answers to different frames may come in any order
    (a refusal goes out at once, a request waiting in the server's queue is answered when it
    runs), so the answers that name one sequence number are compared as a multiset, with every
    duplicate's answer equal to its run's."""
    want = [e for e in expected if e.kind is not None or e.replay is not None]
    if len(got) != len(want):
        findings.append(Finding(Kind.WRONG, f"{len(got)} answers, expected {len(want)}: got "
                                            f"{[_show(g) for g in got]}, expected "
                                            f"{[_show_e(e) for e in want]}"))
        return
    for g in got:
        if isinstance(g, tuple):
            findings.append(Finding(Kind.WRONG, f"an answer does not decode: {g[1]}"))
    if any(isinstance(g, tuple) for g in got):
        return
    wanted: dict[int, list[_Expect]] = {}
    answers: dict[int, list[tuple]] = {}
    for e in want:
        wanted.setdefault(e.replay if e.replay is not None else e.ref, []).append(e)
    for g in got:
        answers.setdefault(g.ref, []).append(_show(g))
    for ref in sorted(set(wanted) | set(answers)):
        left = list(answers.get(ref, []))
        run: tuple | None = None
        copies = 0
        for e in wanted.get(ref, []):
            if e.replay is not None:
                copies += 1
                continue
            ok = [_show_e(e)]
            if e.near_limit:
                ok.append(_show_e(_Expect(FrameKind.ERROR, e.ref, LinkErrorCode.FIELD_RANGE)))
            took = next((v for v in ok if v in left), None)
            if took is None:
                findings.append(Finding(Kind.WRONG, f"answer: got {left} for frame {ref}, "
                                                    f"expected {ok[0]}"))
                continue
            left.remove(took)
            if e.ran:  # what a duplicate of it must get again (a refusal is no such answer)
                run = took
        for _ in range(copies):
            if run is not None and run in left:
                left.remove(run)
            else:
                findings.append(Finding(Kind.WRONG, f"duplicate of frame {ref} answered "
                                                    f"{left}, its run {run}"))
        if left:
            findings.append(Finding(Kind.WRONG, f"answers to frame {ref} no frame asked for: "
                                                f"{left}"))


def _show(f) -> tuple:
    if isinstance(f, tuple):
        return f
    if f.kind == FrameKind.ERROR:
        try:
            code = parse_error(f.payload)[0]
        except Exception:
            code = "unparsable"
        return ("ERROR", f.ref, code)
    return (f.kind.name, f.ref, f.payload[:16].hex(), len(f.payload))


def _show_e(e: _Expect) -> tuple:
    if e.replay is not None:
        return ("REPLAY OF", e.replay)
    if e.kind == FrameKind.ERROR:
        return ("ERROR", e.ref, int(e.code) if e.code is not None else None)
    if e.payload is None:
        return ("REPLY", e.ref, "any payload")
    return ("REPLY", e.ref, e.payload[:16].hex(), len(e.payload))
