"""``LinkClient``: requests to a ``LinkServer`` over a DEALER socket, sent again until answered
(emu/link/transport.py describes the protocol)."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq
from construct import ConstructError

from nelssa.emu.link.frame import (
    HEADER_BYTES,
    HELLO_REP,
    LINK_HELLO_OP,
    MAX_EMU_TIME_PS,
    Frame,
    FrameError,
    FrameKind,
    LinkErrorCode,
    decode_frame,
    encode_frame,
    parse_error,
)
from nelssa.emu.link.model import FaultInjector, LinkDirection, LinkFaults, LinkSpec
from nelssa.emu.link.security import CurveClientKeys, secure_client
from nelssa.emu.link.service import (
    DAMAGE,
    SMALL_PAYLOAD,
    WINDOW,
    ZERO_COPY_BYTES,
    LinkTimeoutError,
    RemoteError,
    ReplyInfo,
    bound_socket,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How a ``LinkClient`` recovers lost and damaged frames."""

    rto_s: float = 0.2
    """A request without a reply for this long is sent again (wall clock), until the round
    trips measured give a better estimate (Jacobson/Karels: smoothed round trip plus four
    deviations, from requests answered without a retransmission); the wait doubles with each
    retransmission of a request."""
    min_rto_s: float = 0.05
    max_rto_s: float = 2.0
    max_refusals: int = 16
    """Damaged copies of one request (refused by the server) or of its reply (refused here)
    after which the request fails with that error instead of being sent again."""
    window: int = WINDOW
    """Sequence numbers in flight: a request waits while the oldest one unanswered is this
    many behind it."""

    def __post_init__(self) -> None:
        if not 0 < self.min_rto_s <= self.rto_s <= self.max_rto_s < float("inf"):
            raise ValueError(f"need 0 < min_rto_s <= rto_s <= max_rto_s, got "
                             f"{self.min_rto_s}, {self.rto_s}, {self.max_rto_s}")
        if self.max_refusals < 0 or not 1 <= self.window <= WINDOW:
            raise ValueError(f"max_refusals must be >= 0 and window in 1..{WINDOW}, got "
                             f"{self.max_refusals}, {self.window}")


class PendingReply:
    """A request in flight; ``result`` waits for its reply (or raises its error)."""

    def __init__(self, client: LinkClient, seq: int, op: int, sent_ps: int, parts: list[bytes],
                 deadline: float, quiet: bool = False, timeless: bool = False) -> None:
        self._client, self.seq, self.op, self.sent_ps = client, seq, op, sent_ps
        self._parts, self._deadline, self._quiet = parts, deadline, quiet
        self._timeless = timeless
        """The link's own hello: its reply moves no emulated clock."""
        self._rto = client.rto_s
        self._first_at = self._next_at = 0.0
        self.retransmits = self.refusals = 0
        self._value: ReplyInfo | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        if self._value is None and self._error is None:
            self._client._pump(0)
        return self._value is not None or self._error is not None

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the reply; True once ``result`` will not wait."""
        end = min(time.monotonic() + timeout_s, self._deadline)
        while self._value is None and self._error is None:
            left = end - time.monotonic()
            if left <= 0:
                break
            self._client._pump(min(left, 0.1))
        return (self._value is not None or self._error is not None
                or time.monotonic() >= self._deadline)

    def result(self) -> ReplyInfo:
        while self._value is None and self._error is None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._client._forget(self.seq)
                raise LinkTimeoutError(f"no reply to op {self.op} (frame {self.seq}) from "
                                       f"{self._client.endpoint} within "
                                       f"{self._client.timeout_s:g} s ({self.retransmits} "
                                       "retransmissions)")
            self._client._pump(min(left, 0.1))
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


ROUTING_ID_BYTES = 16


def new_routing_id() -> bytes:
    """128 random bits, the first byte non-zero (ZeroMQ reserves ids that start with 0 for the
    ones a ROUTER makes up)."""
    rid = secrets.token_bytes(ROUTING_ID_BYTES)
    return bytes([rid[0] or 1]) + rid[1:]


class LinkClient:
    """One connection to a ``LinkServer``. ``faults`` are injected at this end, both
    directions (LinkFaults); ``max_reply`` bounds a reply's payload (ZMQ_MAXMSGSIZE).

    The connection names itself with ``routing_id`` (default: ``new_routing_id``), the id the
    server knows it by (``ServiceRequest.peer``: what a node binds its sessions to). ZeroMQ would
    otherwise make one up for each TCP or IPC connection, so a DEALER that reconnects after
    the connection dropped would come back a stranger; with its own id it keeps its sequence
    state and its sessions. The id is a secret shared with the server alone: the server's
    ROUTER ignores a second connection presenting an id that is in use (ROUTER_HANDOVER off),
    so while this one is connected nobody can take its place, and a client that closes and
    at once reconnects under the same id may be ignored until the server has seen the old
    connection go. A server that authenticates CURVE clients knows a peer by id and public key
    (LinkServer._peer_key), so an id presented under another key reaches nothing of this
    one's.

    A request larger than ``SMALL_PAYLOAD`` is sent only if the server takes it: the client
    learns the server's limit (``max_request``, else a hello the server answers itself, once
    per connection, outside emulated time) and refuses a larger request at once with
    ``LinkErrorCode.TOO_LARGE`` (ZeroMQ would drop it and the connection, unanswered)."""

    def __init__(self, endpoint: str, spec: LinkSpec, timeout_s: float = 30.0,
                 faults: LinkFaults | None = None, curve: CurveClientKeys | None = None,
                 context: zmq.Context | None = None,
                 error_factory: Callable[[int, str], BaseException] = RemoteError,
                 retry: RetryPolicy | None = None, max_reply: int | None = None,
                 routing_id: bytes | None = None, max_request: int | None = None) -> None:
        self.endpoint, self.spec = endpoint, spec
        self.routing_id = new_routing_id() if routing_id is None else routing_id
        if not 1 <= len(self.routing_id) <= 255 or self.routing_id[0] == 0:
            raise ValueError(f"routing_id: 1..255 bytes, the first non-zero, got "
                             f"{self.routing_id!r}")
        self.set_timeout(timeout_s)
        self.retry = retry or RetryPolicy()
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        bound_socket(self._sock, max_reply)
        self._sock.setsockopt(zmq.ROUTING_ID, self.routing_id)
        secure_client(self._sock, curve)
        self._sock.connect(endpoint)
        self._inbound = LinkDirection(spec)
        self._lock = threading.RLock()
        self.faults_out: FaultInjector | None = None
        self.faults_in: FaultInjector | None = None
        self._delay_ps = 0
        self._injected = dict.fromkeys(
            (f"{way}_{name}" for way in ("out", "in") for name in FaultInjector.COUNTS), 0)
        self.set_faults(faults)
        self._error_factory = error_factory
        self._hello: tuple[int, bytes] | None = None if max_request is None else (max_request,
                                                                                  b"")
        self._seq = 0
        self._pending: dict[int, PendingReply] = {}
        self.rto_s = self.retry.rto_s
        """The retransmission timeout a new request starts with."""
        self._srtt: float | None = None
        self._rttvar = 0.0
        self.clock_ps = 0
        """The client's emulated now: the latest reply arrival (callers may set it)."""
        self.retransmits = self.frames_bad = self.checksum_errors = self.stale = 0
        self.send_blocked = 0
        """Counters: requests sent again; replies refused (any check), by checksum; replies to
        nothing in flight (duplicates, replays); sends a full queue refused (sent again)."""

    def set_timeout(self, timeout_s: float) -> None:
        """How long a request waits for its reply, retransmissions included."""
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s must be > 0 and finite, got {timeout_s}")
        self.timeout_s = timeout_s

    def request(self, op: int, payload: bytes, send_ps: int | None = None) -> PendingReply:
        """Send a request; the returned object waits for its reply."""
        return self._submit(FrameKind.REQUEST, op, payload, send_ps)

    def call(self, op: int, payload: bytes, send_ps: int | None = None) -> ReplyInfo:
        return self.request(op, payload, send_ps).result()

    def send_data(self, op: int, payload: bytes, send_ps: int | None = None) -> None:
        """One-sided: the caller waits for nothing (the link still sees it delivered)."""
        self._submit(FrameKind.DATA, op, payload, send_ps)

    def hello(self) -> tuple[int, bytes]:
        """(the largest payload the server takes, what its layer above tells clients), asked
        once per connection. A server that does not answer it (not a LinkServer) is taken to
        take anything: its limit is then its own to enforce."""
        if self._hello is None:
            with self._lock:
                pending = self._submit(FrameKind.REQUEST, LINK_HELLO_OP, b"", None,
                                       timeless=True)
                try:
                    rep = HELLO_REP.parse(pending.result().payload)
                    self._hello = (rep.max_payload, bytes(rep.info))
                except (RemoteError, ConstructError) as e:
                    log.info("%s answered no hello (%s): its limit is not known here",
                             self.endpoint, e)
                    self._hello = (1 << 32, b"")
        return self._hello

    def _too_large(self, op: int, size: int) -> BaseException | None:
        """The refusal of a request of ``size`` bytes the server would not take, else None."""
        if size <= SMALL_PAYLOAD:
            return None
        limit = self.hello()[0]
        if size <= limit:
            return None
        return self._error_factory(LinkErrorCode.TOO_LARGE, f"request op {op} of {size} bytes: "
                                   f"the server at {self.endpoint} takes at most {limit} bytes "
                                   "(its max_payload); not sent")

    def _submit(self, kind: FrameKind, op: int, payload: bytes,
                send_ps: int | None, timeless: bool = False) -> PendingReply:
        sent = self.clock_ps if send_ps is None else send_ps
        if not 0 <= sent + self._delay_ps <= MAX_EMU_TIME_PS:
            raise ValueError(f"send time {sent} ps is outside 0..{MAX_EMU_TIME_PS} ps")
        refusal = self._too_large(op, len(payload))
        if refusal is not None:
            raise refusal
        with self._lock:
            deadline = time.monotonic() + self.timeout_s
            # a sliding window: nothing beyond window of the oldest unanswered request, so
            # the server holds every reply a retransmission may need
            while self._pending and self._seq + 1 - next(iter(self._pending)) >= self.retry.window:
                if time.monotonic() >= deadline:
                    raise LinkTimeoutError(f"{len(self._pending)} requests to {self.endpoint} "
                                           f"unanswered for {self.timeout_s:g} s")
                self._pump(0.05)
            if self._seq >= 0xFFFF_FFFF:
                raise RuntimeError(f"sequence numbers to {self.endpoint} are used up; open a "
                                   "new connection")
            self._seq += 1
            floor = next(iter(self._pending), self._seq)
            parts = encode_frame(Frame(kind, op, self._seq, floor, sent + self._delay_ps,
                                       payload))
            pending = PendingReply(self, self._seq, op, sent, parts, deadline,
                                   kind == FrameKind.DATA, timeless)
            self._pending[self._seq] = pending
            self._transmit(pending)
        return pending

    def _transmit(self, p: PendingReply) -> None:
        now = time.monotonic()
        p._first_at = p._first_at or now
        p._next_at = now + p._rto
        for copy in self.faults_out.apply(p._parts) if self.faults_out else [p._parts]:
            self._send_now(copy)

    def _send_now(self, parts: list[bytes]) -> None:
        try:
            self._sock.send_multipart(parts, flags=zmq.NOBLOCK,
                                      copy=len(parts[-1]) < ZERO_COPY_BYTES)
        except zmq.Again:  # a full queue: as good as lost, and recovered the same way
            self.send_blocked += 1

    def _again(self, p: PendingReply) -> None:
        p.retransmits += 1
        self.retransmits += 1
        self._transmit(p)

    def _forget(self, seq: int) -> None:
        with self._lock:
            self._pending.pop(seq, None)

    def forget(self, pending: PendingReply) -> None:
        """Stop waiting for ``pending``: it is sent no more, and its reply is dropped."""
        self._forget(pending.seq)

    def _tick(self) -> float:
        """Retransmit what is due and deliver late frames; returns seconds to the next due."""
        now = time.monotonic()
        for p in list(self._pending.values()):
            if now >= p._next_at:
                p._rto = min(p._rto * 2, self.retry.max_rto_s)
                self._again(p)
        if self.faults_out:
            for parts, _ in self.faults_out.due():
                self._send_now(parts)
        if self.faults_in:
            for parts, _ in self.faults_in.due():
                self._take_one(parts)
        dues = [p._next_at for p in self._pending.values()]
        dues += [d for inj in (self.faults_out, self.faults_in) if inj
                 if (d := inj.next_due()) is not None]
        return max(0.0, min(dues) - time.monotonic()) if dues else float("inf")

    def _pump(self, timeout_s: float) -> None:
        """Receive what has arrived (waiting up to ``timeout_s`` for the first frame), and
        retransmit what is due."""
        with self._lock:
            wait_ms = int(min(timeout_s, self._tick()) * 1000)
            while self._sock.poll(wait_ms, zmq.POLLIN):
                wait_ms = 0
                parts = self._sock.recv_multipart()
                for copy in self.faults_in.apply(parts) if self.faults_in else [parts]:
                    self._take_one(copy)
            self._tick()

    def drain(self, seconds: float) -> None:
        """Take in whatever arrives for ``seconds`` (a copy for nothing in flight is counted
        and dropped), so the counters cover frames still on their way."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._pump(left)

    def set_faults(self, faults: LinkFaults | None) -> None:
        """Inject ``faults`` from now on (None: none); frames held back so far are delivered
        first, and what was injected so far stays counted."""
        with self._lock:
            for inj, deliver in ((self.faults_out, self._send_now),
                                 (self.faults_in, self._take_one)):
                for parts, _ in inj.due(everything=True) if inj else []:
                    deliver(parts)
            for way, inj in (("out", self.faults_out), ("in", self.faults_in)):
                for name, n in (inj.counts() if inj else {}).items():
                    self._injected[f"{way}_{name}"] += n
            active = faults is not None and faults.active
            self.faults_out = FaultInjector(faults, 0) if active and faults else None
            self.faults_in = FaultInjector(faults, 1) if active and faults else None
            self._delay_ps = round(faults.delay_ns * 1000) if faults else 0

    def counters(self) -> dict[str, int]:
        """What this end saw and did, and what it injected (``out_*``: into the frames it
        sent, ``in_*``: into those it received)."""
        out = {"retransmits": self.retransmits, "frames_bad": self.frames_bad,
               "checksum_errors": self.checksum_errors, "stale": self.stale,
               "send_blocked": self.send_blocked, **self._injected}
        for way, inj in (("out", self.faults_out), ("in", self.faults_in)):
            for name, n in (inj.counts() if inj else {}).items():
                out[f"{way}_{name}"] += n
        return out

    def _take_one(self, parts: list[bytes]) -> None:
        try:
            frame = decode_frame(parts)
            if frame.kind not in (FrameKind.REPLY, FrameKind.ERROR):
                raise FrameError(LinkErrorCode.FIELD_RANGE, f"a client takes REPLY and ERROR "
                                 f"frames, got a {frame.kind.name} frame", frame.seq, frame.ref)
            error = parse_error(frame.payload) if frame.kind == FrameKind.ERROR else None
        except FrameError as e:
            self.frames_bad += 1
            self.checksum_errors += e.code == LinkErrorCode.CHECKSUM
            log.debug("bad frame from %s: %s", self.endpoint, e)
            self._damaged(e.ref, f"reply refused here: {e}")
            return
        pending = self._pending.get(frame.ref)
        if pending is None:
            self.stale += 1
            return
        if error is not None and error[0] in DAMAGE:  # the server refused a damaged copy
            self._damaged(frame.ref, f"refused by the server: {error[1]}")
            return
        del self._pending[frame.ref]
        pending._parts = []  # answered: never sent again (a future kept after holds no data)
        if not pending.retransmits:  # Karn: only unambiguous round trips are samples
            self._sample(time.monotonic() - pending._first_at)
        if error is not None:
            pending._error = self._error_factory(*error)
            if pending._quiet:
                log.warning("one-sided op %d to %s failed: %s", pending.op, self.endpoint,
                            error[1])
            return
        if pending._timeless:
            pending._value = ReplyInfo(frame.op, frame.payload, pending.sent_ps, 0, 0)
            return
        arrive = self._inbound.deliver(frame.emu_time_ps + self._delay_ps,
                                       HEADER_BYTES + len(frame.payload))
        self.clock_ps = max(self.clock_ps, arrive)
        pending._value = ReplyInfo(frame.op, frame.payload, pending.sent_ps, frame.emu_time_ps,
                                   arrive)

    def _sample(self, rtt: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self.rto_s = min(max(self._srtt + 4 * self._rttvar, self.retry.min_rto_s),
                         self.retry.max_rto_s)

    def _damaged(self, seq: int, text: str) -> None:
        """A copy of request ``seq`` or of its reply was damaged: send it again, or fail it
        once that has happened too often."""
        p = self._pending.get(seq)
        if p is None:
            return
        p.refusals += 1
        if p.refusals > self.retry.max_refusals:  # reported as what it is: damage
            del self._pending[seq]
            p._parts = []
            p._error = self._error_factory(LinkErrorCode.CHECKSUM, f"checksum mismatch: "
                                           f"{p.refusals} damaged copies of frame {seq} to "
                                           f"{self.endpoint}, given up (the last: {text})")
        else:
            self._again(p)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._sock.close()
