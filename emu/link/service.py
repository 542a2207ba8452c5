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
WINDOW = 64
"""Requests a client may have unanswered at once; a server holds as many per client out of
order."""
DAMAGE = (LinkErrorCode.CHECKSUM, LinkErrorCode.MALFORMED_FRAME)
"""Refusals that mean a frame was damaged on the way (a LinkClient never builds a bad one)."""


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
