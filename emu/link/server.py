"""``LinkServer``: a handler behind a ROUTER socket, each client's requests run once and in
order (emu/link/transport.py describes the protocol).

Admission: the server takes in every message that has arrived whenever it is between two
requests, so a request waits in the server's own queue, not unseen in a socket, and one that
finds the queue full is refused at once (``BUSY``) instead of waiting without bound. The queue
holds ``LinkLimits.max_queued`` requests of all clients together; once it is full, a client
still gets in while it holds less than its share (``max_queued`` over the clients with
requests queued), so a client that floods the server fills only its own share. A client is
what ``admission_group`` makes of a peer (the node counts a client's queue pairs with it).
After a refusal, the client's frames sent before it could have seen it are refused too (their
``ref`` is not past the refused frame), so what runs of one client's stream is always in the
order it was sent: nothing after a gap runs before the client has seen the gap.

A handler may answer later (``Deferred``): the server serves on, and a request answered later
keeps its place in its client's share of the queue until it is answered, so what a client has
unanswered stays bounded by its share.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from concurrent.futures import Future
from dataclasses import dataclass, field

import zmq

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
    error_payload,
)
from nelssa.emu.link.model import FaultInjector, LinkDirection, LinkFaults, LinkSpec
from nelssa.emu.link.security import CurveServerKeys, secure_server
from nelssa.emu.link.service import (
    ZERO_COPY_BYTES,
    Deferred,
    LinkLimits,
    Reply,
    ServiceError,
    ServiceRequest,
    bound_socket,
)

log = logging.getLogger(__name__)


@dataclass
class _Peer:
    inbound: LinkDirection
    next_seq: int
    """The sequence number to run next."""
    floor: int = 0
    """The client's acknowledgement floor: it waits for no reply below it."""
    early: dict[int, Frame] = field(default_factory=dict)
    replies: dict[int, list[bytes]] = field(default_factory=dict)
    queued: dict[int, int] = field(default_factory=dict)
    """Sequence numbers taken in and waiting to run, with the copies of each that arrived
    meanwhile (each gets the reply too, as a copy arriving after it would)."""
    refused_at: int | None = None
    """The frame last refused ``BUSY``, while frames sent before the client saw it arrive."""


MAX_TAKE = 1024
"""Messages taken in at most between two requests (then one runs, so the queue moves)."""
TAKE_WAIT_MS = 1
"""How long the server waits for the next message of what has arrived before it runs a
request."""

@dataclass(frozen=True)
class _Later:
    """A request its handler answers later (``Deferred``)."""

    peer_id: bytes
    peer: _Peer
    frame: Frame
    stamp: int
    group: bytes | None
    ready: Future[Callable[[], Reply | None]]


class LinkServer:
    """Serve ``handler`` at ``endpoint``; one request at a time, each client's in sequence
    order (a handler may answer later: ``Deferred``). ``faults`` are injected at this end,
    both directions (LinkFaults)."""

    def __init__(self, endpoint: str,
                 handler: Callable[[ServiceRequest], Reply | Deferred | None],
                 spec: LinkSpec,
                 curve: CurveServerKeys | None = None, context: zmq.Context | None = None,
                 limits: LinkLimits | None = None, faults: LinkFaults | None = None,
                 admission_group: Callable[[bytes], bytes] | None = None,
                 always_admitted: Collection[int] = (), hello_info: bytes = b"") -> None:
        self.spec = spec
        self.handler = handler
        self.limits = limits or LinkLimits()
        self.admission_group = admission_group or (lambda peer_id: peer_id)
        """Whose share of the queue a peer's request takes (module doc)."""
        self.always_admitted = frozenset(always_admitted) | {LINK_HELLO_OP}
        """Operations queued even when the queue is full (cheap ones that relieve the server,
        or that its operator needs under load: freeing, closing, status, shutdown)."""
        self._hello = HELLO_REP.build({"max_payload": self.limits.max_payload,
                                       "info": hello_info})
        """The answer to a client's hello (frame.LINK_HELLO_OP): this server's limit, and
        ``hello_info`` from the layer above."""
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
        self._queue: deque[tuple[bytes, _Peer, Frame, bytes | None]] = deque()
        self._queued_by: dict[bytes, int] = {}  # admission group -> its requests in the queue
        self._later: dict[int, _Later] = {}  # requests to answer later, by a number of their own
        self._later_ids = itertools.count()
        self._ready: deque[int] = deque()  # those whose answer is ready (any thread appends)
        # a byte on this pipe wakes the server's poll when an answer gets ready
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._wake_r, zmq.POLLIN)
        active = faults is not None and faults.active
        self.faults_in = FaultInjector(faults, 0) if active and faults else None
        self.faults_out = FaultInjector(faults, 1) if active and faults else None
        self._delay_ps = round(faults.delay_ns * 1000) if faults else 0
        self._stop = threading.Event()
        self._stopping = False
        self.frames_in = self.frames_bad = self.checksum_errors = 0
        self.duplicates = self.replays = self.overflow = self.internal_errors = 0
        self.busy = 0
        """Counters: frames received; refused (any check), by checksum; duplicates of frames
        already taken, replies replayed to them; requests dropped for want of room; failures
        the server survived that no check foresaw; requests refused for a full queue."""
        log.info("link server at %s (%s)", self.endpoint, spec.name)

    def counters(self) -> dict[str, int]:
        """What this end saw and did, and what it injected (``out_*``: into the frames it
        sent, ``in_*``: into those it received)."""
        out = {name: getattr(self, name) for name in (
            "frames_in", "frames_bad", "checksum_errors", "duplicates", "replays", "overflow",
            "internal_errors", "busy")}
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
            self._answer_ready()
            if self._queue:  # between two requests: take in what arrived, then run one
                self._take_arrived()
                self._run_next()
            elif self._poll(poll_ms):
                self._take_arrived()
            elif not self._ready and idle is not None and idle():
                break
            self._release_late()
        self._linger()

    @property
    def queued(self) -> int:
        """Requests taken in and waiting to run, or running (answered later)."""
        return len(self._queue) + len(self._later)

    def _poll(self, poll_ms: float) -> bool:
        """Wait up to ``poll_ms`` for a message (True) or an answer made ready (False)."""
        dues = [d for inj in (self.faults_in, self.faults_out) if inj
                if (d := inj.next_due()) is not None]
        if dues:
            poll_ms = min(poll_ms, max(0.0, (min(dues) - time.monotonic()) * 1000))
        if self._ready:
            poll_ms = 0
        events = dict(self._poller.poll(int(poll_ms)))
        if self._wake_r in events:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
        return self._sock in events

    # -- answers made later -----------------------------------------------------------------------
    def _defer(self, peer_id: bytes, peer: _Peer, frame: Frame, stamp: int,
               group: bytes | None, deferred: Deferred) -> None:
        key = next(self._later_ids)
        self._later[key] = _Later(peer_id, peer, frame, stamp, group, deferred.ready)
        deferred.ready.add_done_callback(lambda _: self._made_ready(key))

    def _made_ready(self, key: int) -> None:
        """On any thread: queue the answer for the server's thread, and wake it."""
        self._ready.append(key)
        with contextlib.suppress(OSError):  # a full pipe wakes it already
            os.write(self._wake_w, b"\0")

    def _answer_ready(self) -> None:
        while self._ready:
            later = self._later.pop(self._ready.popleft(), None)
            if later is None:  # abandoned at stop
                continue
            self._dequeued(later.peer, later.frame, later.group)
            try:
                parts = self._reply_parts(later.frame, later.stamp, later.ready.result()())
            except ServiceError as e:
                log.info("op %d from %s failed: %s", later.frame.op, later.peer_id.hex(), e)
                parts = self._error(later.frame, later.stamp, e.code, str(e))
            except Exception as e:  # the server must outlive any one request
                self.internal_errors += 1
                log.exception("op %d from %s raised", later.frame.op, later.peer_id.hex())
                parts = self._error(later.frame, later.stamp, LinkErrorCode.INTERNAL,
                                    f"{type(e).__name__}: {e}")
            self._answer(later.peer_id, later.peer, later.frame.seq, parts)

    def _linger(self) -> None:
        self._stopping = True
        while self._queue:  # taken in, never run: each gets its answer
            peer_id, peer, frame, group = self._queue.popleft()
            self._dequeued(peer, frame, group)
            self._answer(peer_id, peer, frame.seq, self._error(
                frame, self._stamp(frame), LinkErrorCode.STOPPING, f"the server at "
                f"{self.endpoint} is stopping; frame {frame.seq} was not run"))
        now = time.monotonic()
        quiet, hard = now + self.limits.linger_s, now + 10 * self.limits.linger_s
        while self._later and (now := time.monotonic()) < hard:  # running: their answers
            if self._poll(hard * 1000 - now * 1000):
                self.serve_one()
            self._answer_ready()
        for later in self._later.values():
            self._answer(later.peer_id, later.peer, later.frame.seq, self._error(
                later.frame, later.stamp, LinkErrorCode.STOPPING, f"the server at "
                f"{self.endpoint} stopped before frame {later.frame.seq} was done"))
        self._later.clear()
        while (now := time.monotonic()) < min(quiet, hard):
            if self._poll(min(quiet, hard) * 1000 - now * 1000):
                self.serve_one()
                quiet = time.monotonic() + self.limits.linger_s
            self._release_late()
        self._release_late(everything=True)

    def serve_one(self) -> None:
        """Take one message (waiting for it) and answer it, with what it let run. Never
        raises: no input stops the server."""
        self._take_one()
        while self._queue:
            self._run_next()

    def _take_arrived(self) -> None:
        """Take in the messages that have arrived (up to ``MAX_TAKE``). ZeroMQ reads only
        ``receive_queue`` messages ahead from a connection, and the next as soon as one is
        taken, so a burst is taken whole by waiting ``TAKE_WAIT_MS`` for each next message."""
        for _ in range(MAX_TAKE):
            if not self._sock.poll(TAKE_WAIT_MS, zmq.POLLIN):
                return
            self._take_one()

    def _take_one(self) -> None:
        """Receive one message (waiting for it) and take in its frames. Never raises."""
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

    def _run_next(self) -> None:
        peer_id, peer, frame, group = self._queue.popleft()
        later = False
        try:
            later = self._run(peer_id, peer, frame, group)
        except Exception:
            self.internal_errors += 1
            peer.queued.pop(frame.seq, None)
            log.exception("link server at %s: a request failed unforeseen", self.endpoint)
        finally:
            if not later:  # one answered later keeps its place until then
                self._dequeued(peer, frame, group)

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
            self._admit(peer_id, peer, frame)
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
        if frame.seq < peer.floor:
            pass  # a stale copy of something the client already has (or gave up on)
        elif frame.seq in peer.queued:  # a copy of one waiting to run: answered with it
            peer.queued[frame.seq] += 1
        elif held is not None:
            self.replays += 1
            self._send(peer_id, held)
        else:
            self._refuse(peer_id, LinkErrorCode.REPLY_LOST,
                         f"frame {frame.seq} ran once; its reply is no longer held, and it is "
                         "not run again", frame.seq, bad=False)

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
            self._admit(peer_id, peer, frame)

    # -- admission --------------------------------------------------------------------------------
    def _admit(self, peer_id: bytes, peer: _Peer, frame: Frame) -> None:
        """Queue the frame next in the client's sequence, or refuse it ``BUSY`` (module doc);
        either way its sequence number is taken."""
        peer.next_seq = frame.seq + 1
        group = None if frame.op in self.always_admitted else self.admission_group(peer_id)
        refusal = None if group is None else self._refusal(peer, group, frame)
        if refusal is not None:
            self.busy += 1
            log.info("refused frame %d of %s: %s", frame.seq, peer_id.hex(), refusal)
            self._answer(peer_id, peer, frame.seq, self._error(
                frame, self._stamp(frame), LinkErrorCode.BUSY, refusal))
            return
        peer.queued[frame.seq] = 0
        if group is not None:  # the always admitted are cheap: they take no one's share
            self._queued_by[group] = self._queued_by.get(group, 0) + 1
        self._queue.append((peer_id, peer, frame, group))

    def _refusal(self, peer: _Peer, group: bytes, frame: Frame) -> str | None:
        if peer.refused_at is not None:
            if frame.ref <= peer.refused_at:
                return (f"frame {frame.seq} was sent before its client could see frame "
                        f"{peer.refused_at} refused; it is refused too, so that nothing runs "
                        "out of order (send both again)")
            peer.refused_at = None
        total, mine = sum(self._queued_by.values()), self._queued_by.get(group, 0)
        if total < self.limits.max_queued:
            return None
        share = max(1, self.limits.max_queued // (len(self._queued_by) + (mine == 0)))
        if mine < share:
            return None
        peer.refused_at = frame.seq
        return (f"server busy: {total} requests queued (max_queued = "
                f"{self.limits.max_queued}), {mine} of them this client's, its share "
                f"{share}; frame {frame.seq} was not run: send it again later")

    def _dequeued(self, peer: _Peer, frame: Frame, group: bytes | None) -> None:
        if group is None:
            return
        left = self._queued_by[group] - 1
        if left:
            self._queued_by[group] = left
        else:
            del self._queued_by[group]

    def _stamp(self, frame: Frame) -> int:
        return min(frame.emu_time_ps + self._delay_ps, MAX_EMU_TIME_PS)

    def _run(self, peer_id: bytes, peer: _Peer, frame: Frame, group: bytes | None) -> bool:
        """Run a request; True if its handler answers it later."""
        # the arrival, committed to the link only if the handler accepts the request: a
        # refused request changes nothing, the link's queue included
        if frame.op == LINK_HELLO_OP and frame.kind == FrameKind.REQUEST:  # the link's own:
            self._answer(peer_id, peer, frame.seq, encode_frame(Frame(  # no time, no handler
                FrameKind.REPLY, LINK_HELLO_OP, 0, frame.seq, frame.emu_time_ps, self._hello)))
            return False
        nbytes = HEADER_BYTES + len(frame.payload)
        arrive, busy = peer.inbound.arrival(frame.emu_time_ps + self._delay_ps, nbytes)
        request = ServiceRequest(frame.op, frame.payload, arrive, frame.emu_time_ps, peer_id)
        stamp = min(arrive, MAX_EMU_TIME_PS)
        try:
            reply = self.handler(request)
            if isinstance(reply, Deferred):  # taken: its bytes have crossed the link
                peer.inbound.commit(busy, nbytes)
                self._defer(peer_id, peer, frame, stamp, group, reply)
                return True
            parts = self._reply_parts(frame, stamp, reply)
            peer.inbound.commit(busy, nbytes)
        except ServiceError as e:
            log.info("op %d from %s failed: %s", frame.op, peer_id.hex(), e)
            parts = self._error(frame, stamp, e.code, str(e))
        except Exception as e:  # the server must outlive any one request
            log.exception("op %d from %s raised", frame.op, peer_id.hex())
            parts = self._error(frame, stamp, LinkErrorCode.INTERNAL, f"{type(e).__name__}: {e}")
        self._answer(peer_id, peer, frame.seq, parts)
        return False

    @staticmethod
    def _reply_parts(frame: Frame, stamp: int, reply: Reply | None) -> list[bytes]:
        if frame.kind == FrameKind.DATA or reply is None:  # an acknowledgement
            out = Frame(FrameKind.REPLY, frame.op, 0, frame.seq, stamp, b"")
        elif not 0 <= reply.done_ps <= MAX_EMU_TIME_PS:
            raise ServiceError(LinkErrorCode.FIELD_RANGE,
                               f"reply time {reply.done_ps} ps of frame {frame.seq} is past "
                               f"the {MAX_EMU_TIME_PS} ps a link takes (sent at "
                               f"{frame.emu_time_ps} ps)")
        else:
            out = Frame(FrameKind.REPLY, reply.op, 0, frame.seq, reply.done_ps, reply.payload)
        return encode_frame(out)

    def _answer(self, peer_id: bytes, peer: _Peer, seq: int, parts: list[bytes]) -> None:
        """Send a frame's answer, kept for replay while the client still has the server keep
        its state (a peer forgotten while its request waited gets the answer only)."""
        if self._peers.get(peer_id) is peer:
            self._keep(peer_id, peer, seq, parts)
        self._send(peer_id, parts)
        for _ in range(peer.queued.pop(seq, 0)):  # the copies that came while it waited
            self.replays += 1
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
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
