"""Framed, timed messages over real ZeroMQ sockets: ``LinkServer`` (ROUTER) and ``LinkClient``
(DEALER), reliable over a faulty link.

Requests are pipelined: a client may have up to a window of them in flight and collects each
reply by its sequence number, so a caller overlaps its own work with the far side's
(``PendingReply``). Each side keeps the timing model of the direction that ends at it: the
server stamps a request's arrival from the client's send time, the client a reply's arrival from
the server's completion time.

Delivery is exactly once and in order, per client: the server starts a client's requests in
sequence order (holding any that overtake a lost one; a handler may answer one later,
``Deferred``, while the server serves on), keeps each reply until the client
acknowledges it (a request's ``ref`` is the client's acknowledgement floor), and answers a
retransmitted request by replaying the reply it kept, never by running it again. The client
sends a request again when its reply is late (timeouts doubling from ``RetryPolicy.rto_s``) or
at once when either side refused a damaged copy. A frame that fails its checks is answered with
an ERROR frame naming the problem; nothing a client sends stops the server, and everything the
server holds is bounded (``LinkLimits``).
"""

from nelssa.emu.link.client import LinkClient, PendingReply, RetryPolicy
from nelssa.emu.link.server import LinkLimits, LinkServer
from nelssa.emu.link.service import (
    WINDOW,
    ZERO_COPY_BYTES,
    Deferred,
    LinkTimeoutError,
    RemoteError,
    Reply,
    ReplyInfo,
    ServiceError,
    ServiceRequest,
)

__all__ = [
    "WINDOW",
    "ZERO_COPY_BYTES",
    "Deferred",
    "LinkClient",
    "LinkLimits",
    "LinkServer",
    "LinkTimeoutError",
    "PendingReply",
    "RemoteError",
    "Reply",
    "ReplyInfo",
    "RetryPolicy",
    "ServiceError",
    "ServiceRequest",
]
