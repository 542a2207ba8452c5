"""What both ends of a link share: the request and reply a handler sees, the errors, and the
socket bounds (emu/link/transport.py describes the protocol)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import zmq

from nelssa.emu.link.frame import HEADER_BYTES, LinkErrorCode

ZERO_COPY_BYTES = 65536
"""Payloads from this size are handed to ZeroMQ without a copy (smaller ones are cheaper to
copy than to track)."""
SMALL_PAYLOAD = 4096
"""Payloads every server takes (``LinkLimits.max_payload`` is at least this): a client sends
them without first asking the server's limit."""
WINDOW = 64
"""Requests a client may have unanswered at once; a server holds as many per client out of
order."""
DAMAGE = (LinkErrorCode.CHECKSUM, LinkErrorCode.MALFORMED_FRAME)
"""Refusals that mean a frame was damaged on the way (a LinkClient never builds a bad one)."""


@dataclass(frozen=True)
class LinkLimits:
    """The most a ``LinkServer`` takes and holds, so no client can make it grow without
    bound."""

    max_payload: int = 64 << 20
    """Largest payload part accepted (at least ``SMALL_PAYLOAD``). A larger message part is
    refused by ZeroMQ from its announced size, before it is read (ZMQ_MAXMSGSIZE: the sender is
    disconnected, unanswered), so a client learns it first (the hello, frame.LINK_HELLO_OP)
    and refuses a larger request itself. The layer above passes its largest legal message."""
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
    max_queued: int = 2 * WINDOW
    """Requests taken in and waiting to run, all clients together; beyond it a request is
    refused at once (``BUSY``) unless its client holds less than its share of the queue (the
    queue's size over the clients with requests in it). A lone client with a window of
    requests on each of two connections is never refused."""

    def __post_init__(self) -> None:
        for name in ("max_payload", "window", "max_peers", "held_bytes", "early_bytes",
                     "receive_queue", "send_queue", "max_queued"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_payload < SMALL_PAYLOAD:
            raise ValueError(f"max_payload must be >= {SMALL_PAYLOAD} (what a client sends "
                             f"without asking), got {self.max_payload}")
        if not 0 <= self.linger_s < float("inf"):
            raise ValueError(f"linger_s must be >= 0 and finite, got {self.linger_s}")


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


def bound_socket(sock: zmq.Socket, max_part: int | None, receive_queue: int | None = None,
                 send_queue: int | None = None) -> None:
    """No lingering on close; ``max_part`` (ZMQ_MAXMSGSIZE) and high-water marks if given."""
    sock.setsockopt(zmq.LINGER, 0)
    if max_part is not None:
        sock.setsockopt(zmq.MAXMSGSIZE, max(HEADER_BYTES, max_part))
    if receive_queue is not None:
        sock.setsockopt(zmq.RCVHWM, receive_queue)
    if send_queue is not None:
        sock.setsockopt(zmq.SNDHWM, send_queue)


@dataclass(frozen=True)
class ServiceRequest:
    """A request as a handler sees it."""

    op: int
    payload: bytes
    arrive_ps: int
    """Emulated time its last byte arrived."""
    sent_ps: int
    """Emulated time the client handed it to the link."""
    peer: bytes
    """Who sent it: the connection's routing id (LinkClient names it), with the client's CURVE
    public key where the server authenticates clients (LinkServer._peer_key)."""


@dataclass(frozen=True)
class Reply:
    op: int
    payload: bytes
    done_ps: int
    """Emulated time the reply leaves the server."""


@dataclass(frozen=True)
class Deferred:
    """What a handler returns for a request it answers later: the server goes on serving, and
    when ``ready`` resolves (on any thread) it calls the function ``ready`` holds on its own
    thread to make the reply, which may raise ServiceError like a handler. ``ready`` itself may
    hold a ServiceError instead."""

    ready: Future[Callable[[], Reply | None]]


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
