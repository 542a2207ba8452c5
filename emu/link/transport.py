"""Framed, timed messages over real ZeroMQ sockets: ``LinkServer`` (ROUTER) and ``LinkClient``
(DEALER).

Requests are pipelined: a client may have many in flight and collects each reply by its
sequence number, so a caller overlaps its own work with the far side's (``PendingReply``). DATA
frames are one-sided. Each side keeps the timing model of the direction that ends at it: the
server stamps a request's arrival from the client's send time, the client a reply's arrival from
the server's completion time. Frames that fail their checks are answered with an ERROR frame
naming the problem, and the server goes on; duplicated frames (a sequence number already seen
from that peer) are dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from nelssa.emu.link.frame import (
    HEADER_BYTES,
    Frame,
    FrameError,
    FrameKind,
    LinkErrorCode,
    decode_frame,
    encode_frame,
    error_payload,
    parse_error,
)
from nelssa.emu.link.model import FaultInjector, LinkDirection, LinkFaults, LinkSpec
from nelssa.emu.link.security import (
    CurveClientKeys,
    CurveServerKeys,
    secure_client,
    secure_server,
)

log = logging.getLogger(__name__)

ZERO_COPY_BYTES = 65536
"""Payloads from this size are handed to ZeroMQ without a copy (smaller ones are cheaper to
copy than to track)."""


class ServiceError(Exception):
    """Raised by a handler to answer with an ERROR frame carrying ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class RemoteError(RuntimeError):
    """The far side answered with an ERROR frame."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class LinkTimeoutError(TimeoutError):
    """No reply within the client's timeout."""


@dataclass(frozen=True)
class Request:
    """A request as a handler sees it."""

    op: int
    payload: bytes
    arrive_ps: int
    """Emulated time its last byte arrived."""
    sent_ps: int
    """Emulated time the client handed it to the link."""
    peer: bytes


@dataclass(frozen=True)
class Reply:
    op: int
    payload: bytes
    done_ps: int
    """Emulated time the reply leaves the server."""


@dataclass
class _Peer:
    inbound: LinkDirection
    last_seq: int = 0


class LinkServer:
    """Serve ``handler`` at ``endpoint``; one request at a time, in arrival order."""

    def __init__(self, endpoint: str, handler: Callable[[Request], Reply | None], spec: LinkSpec,
                 curve: CurveServerKeys | None = None,
                 context: zmq.Context | None = None) -> None:
        self.spec = spec
        self.handler = handler
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        secure_server(self._sock, endpoint, curve)
        self._sock.bind(endpoint)
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._peers: dict[bytes, _Peer] = {}
        self._stop = threading.Event()
        self.frames_in = self.frames_bad = self.duplicates = 0
        log.info("link server at %s (%s)", self.endpoint, spec.name)

    def stop(self) -> None:
        """Make ``serve`` return after the request at hand."""
        self._stop.set()

    def serve(self, poll_ms: int = 100) -> None:
        while not self._stop.is_set():
            if self._sock.poll(poll_ms, zmq.POLLIN):
                self.serve_one()

    def serve_one(self) -> None:
        parts = self._sock.recv_multipart()
        peer_id, body = parts[0], parts[1:]
        peer = self._peers.get(peer_id)
        if peer is None:
            peer = self._peers[peer_id] = _Peer(LinkDirection(self.spec))
        self.frames_in += 1
        try:
            frame = decode_frame(body)
        except FrameError as e:
            self.frames_bad += 1
            log.warning("bad frame from peer %s: %s", peer_id.hex(), e)
            self._send(peer_id, Frame(FrameKind.ERROR, 0, 0, e.seq, 0, error_payload(e.code,
                                                                                   str(e))))
            return
        if frame.seq <= peer.last_seq:
            self.duplicates += 1
            log.warning("dropped duplicate frame %d from peer %s", frame.seq, peer_id.hex())
            return
        peer.last_seq = frame.seq
        arrive = peer.inbound.deliver(frame.emu_time_ps, HEADER_BYTES + len(frame.payload))
        request = Request(frame.op, frame.payload, arrive, frame.emu_time_ps, peer_id)
        try:
            reply = self.handler(request)
        except ServiceError as e:
            log.info("op %d from %s failed: %s", frame.op, peer_id.hex(), e)
            self._send(peer_id, Frame(FrameKind.ERROR, frame.op, 0, frame.seq, arrive,
                                      error_payload(e.code, str(e))))
            return
        except Exception as e:  # the server must outlive any one request
            log.exception("op %d from %s raised", frame.op, peer_id.hex())
            self._send(peer_id, Frame(FrameKind.ERROR, frame.op, 0, frame.seq, arrive,
                                      error_payload(LinkErrorCode.INTERNAL,
                                                    f"{type(e).__name__}: {e}")))
            return
        if frame.kind == FrameKind.REQUEST and reply is not None:
            self._send(peer_id, Frame(FrameKind.REPLY, reply.op, 0, frame.seq, reply.done_ps,
                                      reply.payload))

    def _send(self, peer_id: bytes, frame: Frame) -> None:
        parts = encode_frame(frame)
        self._sock.send_multipart([peer_id, *parts], copy=len(parts[1]) < ZERO_COPY_BYTES)

    def close(self) -> None:
        self._sock.close()


@dataclass(frozen=True)
class ReplyInfo:
    """A reply as the client receives it."""

    op: int
    payload: bytes
    sent_ps: int
    """Emulated time the request was handed to the link."""
    server_done_ps: int
    """Emulated time the server sent the reply."""
    arrive_ps: int
    """Emulated time the reply's last byte arrived here."""


class PendingReply:
    """A request in flight; ``result`` waits for its reply (or raises its error)."""

    def __init__(self, client: LinkClient, seq: int, op: int, sent_ps: int,
                 deadline: float) -> None:
        self._client, self.seq, self.op, self.sent_ps = client, seq, op, sent_ps
        self._deadline = deadline
        self._value: ReplyInfo | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        if self._value is None and self._error is None:
            self._client._pump(0)
        return self._value is not None or self._error is not None

    def result(self) -> ReplyInfo:
        while self._value is None and self._error is None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._client._forget(self.seq)
                raise LinkTimeoutError(f"no reply to op {self.op} (frame {self.seq}) from "
                                  f"{self._client.endpoint} within "
                                  f"{self._client.timeout_s:g} s")
            self._client._pump(min(left, 0.1))
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


class LinkClient:
    """One connection to a ``LinkServer``."""

    def __init__(self, endpoint: str, spec: LinkSpec, timeout_s: float = 30.0,
                 faults: LinkFaults | None = None, curve: CurveClientKeys | None = None,
                 context: zmq.Context | None = None,
                 error_factory: Callable[[int, str], BaseException] = RemoteError) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.endpoint, self.spec, self.timeout_s = endpoint, spec, timeout_s
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        secure_client(self._sock, curve)
        self._sock.connect(endpoint)
        self._inbound = LinkDirection(spec)
        self._faults = FaultInjector(faults) if faults and faults.active else None
        self._delay_ps = round(faults.delay_ns * 1000) if faults else 0
        self._error_factory = error_factory
        self._seq = 0
        self._pending: dict[int, PendingReply] = {}
        self._lock = threading.RLock()
        self.clock_ps = 0
        """The client's emulated now: the latest reply arrival (callers may set it)."""

    def _send(self, kind: FrameKind, op: int, payload: bytes, send_ps: int) -> int:
        self._seq += 1
        parts = encode_frame(Frame(kind, op, self._seq, 0, send_ps + self._delay_ps, payload))
        for copy in (self._faults.apply(parts) if self._faults else [parts]):
            self._sock.send_multipart(copy, copy=len(copy[1]) < ZERO_COPY_BYTES)
        return self._seq

    def request(self, op: int, payload: bytes, send_ps: int | None = None) -> PendingReply:
        """Send a request; the returned object waits for its reply."""
        sent = self.clock_ps if send_ps is None else send_ps
        with self._lock:
            seq = self._send(FrameKind.REQUEST, op, payload, sent)
            pending = PendingReply(self, seq, op, sent, time.monotonic() + self.timeout_s)
            self._pending[seq] = pending
        return pending

    def call(self, op: int, payload: bytes, send_ps: int | None = None) -> ReplyInfo:
        return self.request(op, payload, send_ps).result()

    def send_data(self, op: int, payload: bytes, send_ps: int | None = None) -> None:
        """One-sided: no reply."""
        with self._lock:
            self._send(FrameKind.DATA, op, payload, self.clock_ps if send_ps is None else send_ps)

    def _forget(self, seq: int) -> None:
        with self._lock:
            self._pending.pop(seq, None)

    def _pump(self, timeout_s: float) -> None:
        """Receive what has arrived (waiting up to ``timeout_s`` for the first frame)."""
        with self._lock:
            wait_ms = int(timeout_s * 1000)
            while self._sock.poll(wait_ms, zmq.POLLIN):
                wait_ms = 0
                self._take(self._sock.recv_multipart())

    def _take(self, parts: list[bytes]) -> None:
        try:
            frame = decode_frame(parts)
        except FrameError as e:
            # a reply we cannot trust: fail the request it names, if the header says which
            log.warning("bad frame from %s: %s", self.endpoint, e)
            return
        pending = self._pending.pop(frame.ref, None)
        if pending is None:
            log.warning("reply to unknown or abandoned frame %d from %s", frame.ref,
                        self.endpoint)
            return
        if frame.kind == FrameKind.ERROR:
            code, text = parse_error(frame.payload)
            pending._error = self._error_factory(code, text)
            return
        arrive = self._inbound.deliver(frame.emu_time_ps, HEADER_BYTES + len(frame.payload))
        self.clock_ps = max(self.clock_ps, arrive)
        pending._value = ReplyInfo(frame.op, frame.payload, pending.sent_ps, frame.emu_time_ps,
                                   arrive)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self._sock.close()
