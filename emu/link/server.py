"""``LinkServer``: a handler behind a ROUTER socket, each client's requests run once and in
order (emu/link/transport.py describes the protocol)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from nelssa.emu.link.frame import (
    HEADER_BYTES,
    MAX_EMU_TIME_PS,
    Frame,
    FrameError,
    FrameKind,
    LinkErrorCode,
    decode_frame,
    encode_frame,
    error_payload,
)
from nelssa.emu.link.model import FaultInjector, LinkDirection, LinkFaults, LinkSpec
from nelssa.emu.link.security import CurveServerKeys, secure_server
from nelssa.emu.link.service import (
    WINDOW,
    ZERO_COPY_BYTES,
    Reply,
    Request,
    ServiceError,
    bound_socket,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LinkLimits:
    """The most a ``LinkServer`` takes and holds, so no client can make it grow without
    bound."""

    max_payload: int = 64 << 20
    """Largest payload part accepted. A larger message part is refused by ZeroMQ from its
    announced size, before it is read (ZMQ_MAXMSGSIZE: the sender is disconnected). The layer
    above passes its largest legal message."""
    window: int = WINDOW
    """Requests held per client while they wait for an earlier, lost one; and replies held per
    client for replay."""
    max_peers: int = 256
    """Clients whose sequence state is kept; the one heard from least recently is forgotten
    first."""
    held_bytes: int = 256 << 20
    """Replies kept for replay, all clients together (the oldest go first)."""
    early_bytes: int = 256 << 20
    """Requests held out of order, all clients together (beyond it a request is dropped, and
    its sender sends it again)."""
    receive_queue: int = 2
    """Messages ZeroMQ reads ahead from each connection (a full queue stops reading it: the
    sender waits), so what waits unread is at most this many largest payloads a connection."""
    send_queue: int = 2 * WINDOW
    """Replies queued to each connection (a full queue drops one, which its client recovers;
    a window of replies fits)."""
    linger_s: float = 0.25
    """After ``stop``, the server replays lost replies until the link has been quiet this
    long (at most ten times as long)."""

    def __post_init__(self) -> None:
        for name in ("max_payload", "window", "max_peers", "held_bytes", "early_bytes",
                     "receive_queue", "send_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.linger_s < float("inf"):
            raise ValueError(f"linger_s must be >= 0 and finite, got {self.linger_s}")


@dataclass
class _Peer:
    inbound: LinkDirection
    next_seq: int
    """The sequence number to run next."""
    floor: int = 0
    """The client's acknowledgement floor: it waits for no reply below it."""
    early: dict[int, Frame] = field(default_factory=dict)
    replies: dict[int, list[bytes]] = field(default_factory=dict)


class LinkServer:
    """Serve ``handler`` at ``endpoint``; one request at a time, each client's in sequence
    order. ``faults`` are injected at this end, both directions (LinkFaults)."""

    def __init__(self, endpoint: str, handler: Callable[[Request], Reply | None], spec: LinkSpec,
                 curve: CurveServerKeys | None = None, context: zmq.Context | None = None,
                 limits: LinkLimits | None = None, faults: LinkFaults | None = None) -> None:
        self.spec = spec
        self.handler = handler
        self.limits = limits or LinkLimits()
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        # a connection presenting a routing id in use is ignored, never handed the id: no one
        # takes over a client's connection (and its sessions) by naming its id
        self._sock.setsockopt(zmq.ROUTER_HANDOVER, 0)
        bound_socket(self._sock, self.limits.max_payload, self.limits.receive_queue,
                     self.limits.send_queue)
        secure_server(self._sock, endpoint, curve)
        self._keyed = curve is not None and curve.clients_dir is not None
        """Peers are known by routing id and CURVE public key (``_peer_key``)."""
        self._sock.bind(endpoint)
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._peers: OrderedDict[bytes, _Peer] = OrderedDict()
        self._held: OrderedDict[tuple[bytes, int], int] = OrderedDict()
        self._held_bytes = self._early_bytes = 0
        active = faults is not None and faults.active
        self.faults_in = FaultInjector(faults, 0) if active and faults else None
        self.faults_out = FaultInjector(faults, 1) if active and faults else None
        self._delay_ps = round(faults.delay_ns * 1000) if faults else 0
        self._stop = threading.Event()
        self._stopping = False
        self.frames_in = self.frames_bad = self.checksum_errors = 0
        self.duplicates = self.replays = self.overflow = self.internal_errors = 0
        """Counters: frames received; refused (any check), by checksum; duplicates of frames
        already taken, replies replayed to them; requests dropped for want of room; failures
        the server survived that no check foresaw."""
        log.info("link server at %s (%s)", self.endpoint, spec.name)

    def counters(self) -> dict[str, int]:
        """What this end saw and did, and what it injected (``out_*``: into the frames it
        sent, ``in_*``: into those it received)."""
        out = {name: getattr(self, name) for name in (
            "frames_in", "frames_bad", "checksum_errors", "duplicates", "replays", "overflow",
            "internal_errors")}
        for way, inj in (("out", self.faults_out), ("in", self.faults_in)):
            for name in FaultInjector.COUNTS:
                out[f"{way}_{name}"] = inj.counts()[name] if inj else 0
        return out

    def stop(self) -> None:
        """Make ``serve`` return after the request at hand (and the linger)."""
        self._stop.set()

    def serve(self, poll_ms: int = 100, idle: Callable[[], bool] | None = None) -> None:
        """Serve until ``stop`` (or until ``idle``, called whenever nothing arrived for
        ``poll_ms``, returns True); then linger, replaying replies that were lost."""
        while not self._stop.is_set():
            if self._poll(poll_ms):
                self.serve_one()
            elif idle is not None and idle():
                break
            self._release_late()
        self._linger()

    def _poll(self, poll_ms: float) -> bool:
        dues = [d for inj in (self.faults_in, self.faults_out) if inj
                if (d := inj.next_due()) is not None]
        if dues:
            poll_ms = min(poll_ms, max(0.0, (min(dues) - time.monotonic()) * 1000))
        return bool(self._sock.poll(int(poll_ms), zmq.POLLIN))

    def _linger(self) -> None:
        self._stopping = True
        now = time.monotonic()
        quiet, hard = now + self.limits.linger_s, now + 10 * self.limits.linger_s
        while (now := time.monotonic()) < min(quiet, hard):
            if self._poll(min(quiet, hard) * 1000 - now * 1000):
                self.serve_one()
                quiet = time.monotonic() + self.limits.linger_s
            self._release_late()
        self._release_late(everything=True)

    def serve_one(self) -> None:
        """Take one message (waiting for it) and answer it. Never raises: no input stops the
        server."""
        try:
            frames = self._sock.recv_multipart(copy=not self._keyed)
        except zmq.ZMQError as e:
            log.warning("link server at %s: receive failed: %s", self.endpoint, e)
            return
        try:
            parts = [f.bytes for f in frames] if self._keyed else frames
            if len(parts) < 2 or not parts[0]:  # a ROUTER gives an identity, then the body
                self.frames_in += 1
                self.frames_bad += 1
                log.warning("message of %d parts without a body or a sender", len(parts))
                return
            peer_id, body = self._peer_key(parts[0], frames[-1]), parts[1:]
            for copy in self.faults_in.apply(body, peer_id) if self.faults_in else [body]:
                self._frame(peer_id, copy)
        except Exception:  # the last line of defence: log, count, and go on serving
            self.internal_errors += 1
            log.exception("link server at %s: a message failed unforeseen", self.endpoint)

    def _peer_key(self, routing_id: bytes, frame: object) -> bytes:
        """Who sent a message: its connection's routing id and, where CURVE clients are
        authenticated (ZAP), the client's public key too, so an id presented by another key
        is another peer (``_routing_id`` undoes it)."""
        if not self._keyed:
            return routing_id
        try:
            user = frame.get("User-Id").encode()  # type: ignore[attr-defined]
        except zmq.ZMQError:  # not authenticated: the id alone
            user = b""
        return bytes([len(routing_id)]) + routing_id + user

    def _routing_id(self, peer_id: bytes) -> bytes:
        return peer_id[1:1 + peer_id[0]] if self._keyed else peer_id

    def _release_late(self, everything: bool = False) -> None:
        try:
            if self.faults_in:
                for body, peer_id in self.faults_in.due(everything):
                    self._frame(peer_id, body)  # type: ignore[arg-type]
            if self.faults_out:
                for parts, peer_id in self.faults_out.due(everything):
                    self._send_now(peer_id, parts)  # type: ignore[arg-type]
        except Exception:
            self.internal_errors += 1
            log.exception("link server at %s: a late frame failed unforeseen", self.endpoint)

    # -- one frame ------------------------------------------------------------------------------
    def _frame(self, peer_id: bytes, body: list[bytes]) -> None:
        self.frames_in += 1
        try:
            frame = decode_frame(body)
        except FrameError as e:
            self.checksum_errors += e.code == LinkErrorCode.CHECKSUM
            self._refuse(peer_id, e.code, str(e), e.seq)
            return
        if frame.kind not in (FrameKind.REQUEST, FrameKind.DATA):
            self._refuse(peer_id, LinkErrorCode.FIELD_RANGE, f"a server takes REQUEST and DATA "
                         f"frames, got a {frame.kind.name} frame ({frame.seq})", frame.seq)
            return
        if frame.seq == 0 or frame.ref > frame.seq:
            self._refuse(peer_id, LinkErrorCode.FIELD_RANGE,
                         "sequence number 0: a sender numbers its frames from 1" if not frame.seq
                         else f"frame {frame.seq} acknowledges up to {frame.ref}, past itself",
                         frame.seq)
            return
        peer = self._peer(peer_id, frame)
        self._acknowledge(peer_id, peer, frame.ref)
        if frame.seq < peer.next_seq:
            self._duplicate(peer_id, peer, frame)
        elif self._stopping:
            self._refuse(peer_id, LinkErrorCode.STOPPING,
                         f"the server at {self.endpoint} is stopping; frame {frame.seq} was "
                         "not run", frame.seq, bad=False)
        elif frame.seq > peer.next_seq:
            self._hold_early(peer, frame)
        else:
            self._run(peer_id, peer, frame)
        self._drain(peer_id, peer)

    def _peer(self, peer_id: bytes, frame: Frame) -> _Peer:
        peer = self._peers.get(peer_id)
        if peer is not None:
            self._peers.move_to_end(peer_id)
            return peer
        if len(self._peers) >= self.limits.max_peers:
            old_id, old = self._peers.popitem(last=False)
            self._forget(old_id, old)
            log.info("forgot the sequence state of peer %s (%d peers)", old_id.hex(),
                     self.limits.max_peers)
        # a new client's floor is where its stream starts; a sender without one starts here
        peer = self._peers[peer_id] = _Peer(LinkDirection(self.spec), frame.ref or frame.seq)
        return peer

    def _forget(self, peer_id: bytes, peer: _Peer) -> None:
        for seq in peer.replies:
            self._held_bytes -= self._held.pop((peer_id, seq))
        self._early_bytes -= sum(len(f.payload) for f in peer.early.values())

    def _acknowledge(self, peer_id: bytes, peer: _Peer, floor: int) -> None:
        if floor <= peer.floor:
            return
        peer.floor = floor
        for seq in [s for s in peer.replies if s < floor]:
            del peer.replies[seq]
            self._held_bytes -= self._held.pop((peer_id, seq))
        if floor > peer.next_seq:  # the client gave up on what lies below: skip it
            for seq in [s for s in peer.early if s < floor]:
                self._early_bytes -= len(peer.early.pop(seq).payload)
            peer.next_seq = floor

    def _duplicate(self, peer_id: bytes, peer: _Peer, frame: Frame) -> None:
        self.duplicates += 1
        held = peer.replies.get(frame.seq)
        if held is not None:
            self.replays += 1
            self._send(peer_id, held)
        elif frame.seq >= peer.floor:
            self._refuse(peer_id, LinkErrorCode.REPLY_LOST,
                         f"frame {frame.seq} ran once; its reply is no longer held, and it is "
                         "not run again", frame.seq, bad=False)
        # below the floor: a stale copy of something the client already has

    def _hold_early(self, peer: _Peer, frame: Frame) -> None:
        if frame.seq in peer.early:
            self.duplicates += 1
        elif (frame.seq >= peer.next_seq + self.limits.window
              or self._early_bytes + len(frame.payload) > self.limits.early_bytes):
            self.overflow += 1
            log.debug("no room for frame %d ahead of %d", frame.seq, peer.next_seq)
        else:
            peer.early[frame.seq] = frame
            self._early_bytes += len(frame.payload)

    def _drain(self, peer_id: bytes, peer: _Peer) -> None:
        while not self._stopping and peer.next_seq in peer.early:
            frame = peer.early.pop(peer.next_seq)
            self._early_bytes -= len(frame.payload)
            self._run(peer_id, peer, frame)

    def _run(self, peer_id: bytes, peer: _Peer, frame: Frame) -> None:
        peer.next_seq = frame.seq + 1
        # the arrival, committed to the link only if the handler accepts the request: a
        # refused request changes nothing, the link's queue included
        nbytes = HEADER_BYTES + len(frame.payload)
        arrive, busy = peer.inbound.arrival(frame.emu_time_ps + self._delay_ps, nbytes)
        request = Request(frame.op, frame.payload, arrive, frame.emu_time_ps, peer_id)
        stamp = min(arrive, MAX_EMU_TIME_PS)
        try:
            reply = self.handler(request)
            if frame.kind == FrameKind.DATA or reply is None:  # an acknowledgement
                out = Frame(FrameKind.REPLY, frame.op, 0, frame.seq, stamp, b"")
            elif not 0 <= reply.done_ps <= MAX_EMU_TIME_PS:
                raise ServiceError(LinkErrorCode.FIELD_RANGE,
                                   f"reply time {reply.done_ps} ps of frame {frame.seq} is past "
                                   f"the {MAX_EMU_TIME_PS} ps a link takes (sent at "
                                   f"{frame.emu_time_ps} ps)")
            else:
                out = Frame(FrameKind.REPLY, reply.op, 0, frame.seq, reply.done_ps,
                            reply.payload)
            parts = encode_frame(out)
            peer.inbound.commit(busy, nbytes)
        except ServiceError as e:
            log.info("op %d from %s failed: %s", frame.op, peer_id.hex(), e)
            parts = self._error(frame, stamp, e.code, str(e))
        except Exception as e:  # the server must outlive any one request
            log.exception("op %d from %s raised", frame.op, peer_id.hex())
            parts = self._error(frame, stamp, LinkErrorCode.INTERNAL, f"{type(e).__name__}: {e}")
        self._keep(peer_id, peer, frame.seq, parts)
        self._send(peer_id, parts)

    @staticmethod
    def _error(frame: Frame, stamp: int, code: int, text: str) -> list[bytes]:
        return encode_frame(Frame(FrameKind.ERROR, frame.op, 0, frame.seq, stamp,
                                  error_payload(code, text)))

    def _keep(self, peer_id: bytes, peer: _Peer, seq: int, parts: list[bytes]) -> None:
        size = len(parts[0]) + len(parts[1])
        peer.replies[seq] = parts
        self._held[(peer_id, seq)] = size
        self._held_bytes += size
        while len(peer.replies) > self.limits.window:
            oldest = next(iter(peer.replies))
            del peer.replies[oldest]
            self._held_bytes -= self._held.pop((peer_id, oldest))
        while self._held_bytes > self.limits.held_bytes:
            (pid, s), n = self._held.popitem(last=False)
            self._held_bytes -= n
            del self._peers[pid].replies[s]

    def _refuse(self, peer_id: bytes, code: int, text: str, seq: int, bad: bool = True) -> None:
        self.frames_bad += bad
        log.warning("refused a frame from peer %s: %s", peer_id.hex(), text)
        self._send(peer_id, encode_frame(Frame(FrameKind.ERROR, 0, 0, seq, 0,
                                               error_payload(code, text))))

    def _send(self, peer_id: bytes, parts: list[bytes]) -> None:
        for copy in self.faults_out.apply(parts, peer_id) if self.faults_out else [parts]:
            self._send_now(peer_id, copy)

    def _send_now(self, peer_id: bytes, parts: list[bytes]) -> None:
        try:  # a ROUTER drops what a full or vanished peer cannot take; its client recovers
            self._sock.send_multipart([self._routing_id(peer_id), *parts], flags=zmq.NOBLOCK,
                                      copy=len(parts[-1]) < ZERO_COPY_BYTES)
        except zmq.ZMQError as e:
            log.debug("reply to %s not sent: %s", peer_id.hex(), e)

    def close(self) -> None:
        self._sock.close()
