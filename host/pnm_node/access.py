"""Who may reach what on a PNM node: clients, their sessions and queue pairs, their limits, and
each client's own view of device time.

A client is the connection that reached the node (``ServiceRequest.peer``: the routing id the
client's LinkClient names its connection with, 128 random bits, kept across ZeroMQ's
reconnects; where the node restricts CURVE clients, the client's public key as well), together
with the connections that joined it as queue pairs: a client asks for a join ticket (128
random bits, single use, short-lived) and its new connection presents it (the GPU node sends
bulk KV over a queue pair of its own). A session handle is 64 random bits from ``secrets``;
sessions are looked up by (client, handle), so a session of another client and a handle that
was never given out fail alike: the same code, the same message, the same path through the
code. Every table here is bounded by the limits of NodeConfig, and per client where a client
could otherwise push out another's entries: a client holds at most ``max_queue_pairs`` live
join tickets (its newest push out its own oldest), and a client with a live ticket is not
forgotten to make room for another.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nelssa.emu.link.transport import ServiceError
from nelssa.host.pnm_node.partition import Session
from nelssa.host.pnm_node.protocol import TICKET_BYTES, NodeErrorCode, Partition

if TYPE_CHECKING:
    from nelssa.host.pnm_node.config import NodeConfig

TICKET_LIFETIME_S = 60.0
"""How long a join ticket stays valid (wall-clock)."""


@dataclass
class Client:
    """What the node keeps for one client."""

    id: bytes
    """The routing id of the connection that first needed state."""
    sessions: set[int] = field(default_factory=set)
    queue_pairs: set[bytes] = field(default_factory=set)
    """Routing ids of the connections that joined this client."""
    reserved_bytes: int = 0
    """Device memory held by the KV regions of its sessions."""
    busy_until_ps: dict[int, int] = field(default_factory=dict)
    """Emulated time each device finishes this client's latest request on it."""
    tickets: OrderedDict[bytes, float] = field(default_factory=OrderedDict)
    """Its join tickets not yet used, oldest first, with the time each expires."""


def _limit(name: str, value: int, what: str) -> ServiceError:
    return ServiceError(NodeErrorCode.LIMIT_EXCEEDED, f"{what}: over the node's limit "
                        f"{name} = {value}")


class ClientTable:
    """Clients, sessions and tickets, under the limits of ``config``."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self._clients: OrderedDict[bytes, Client] = OrderedDict()  # least recently used first
        self._joined: dict[bytes, bytes] = {}  # queue pair routing id -> client id
        self._sessions: dict[tuple[bytes, int], Session] = {}
        self._handles: set[int] = set()  # every live handle, so no two sessions share one
        self._tickets: dict[bytes, bytes] = {}  # join ticket -> client id (Client.tickets)

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def client_id(self, peer: bytes) -> bytes:
        return self._joined.get(peer, peer)

    def _client(self, cid: bytes) -> Client:
        """Client ``cid``, made if it has no state yet. A full table forgets the least recently
        used client without sessions (the connections gone with it cannot be seen here)."""
        c = self._clients.get(cid)
        if c is not None:
            self._clients.move_to_end(cid)
            return c
        if len(self._clients) >= self.config.max_clients:
            idle = next((x for x in self._clients.values()
                         if not x.sessions and not self._live_tickets(x)), None)
            if idle is None:
                raise _limit("max_clients", self.config.max_clients,
                             f"{len(self._clients)} clients hold sessions or join tickets")
            self._forget(idle)
        c = self._clients[cid] = Client(cid)
        return c

    def _forget(self, c: Client) -> None:
        for qp in c.queue_pairs:
            self._joined.pop(qp, None)
        for t in c.tickets:
            self._tickets.pop(t, None)
        del self._clients[c.id]

    def _drop_if_idle(self, c: Client) -> None:
        if not c.sessions and not c.queue_pairs and not self._live_tickets(c):
            self._forget(c)

    def _live_tickets(self, c: Client) -> int:
        """How many join tickets ``c`` holds, its expired ones dropped first."""
        now = time.monotonic()
        while c.tickets and next(iter(c.tickets.values())) < now:
            self._tickets.pop(c.tickets.popitem(last=False)[0], None)
        return len(c.tickets)

    # -- sessions ---------------------------------------------------------------------------------
    def open(self, peer: bytes, partition: Partition, head_dim: int, group: int) -> Session:
        cfg = self.config
        if len(self._sessions) >= cfg.max_sessions:
            raise _limit("max_sessions", cfg.max_sessions,
                         f"{len(self._sessions)} sessions open on the node")
        c = self._client(self.client_id(peer))
        if len(c.sessions) >= cfg.max_sessions_per_client:
            self._drop_if_idle(c)
            raise _limit("max_sessions_per_client", cfg.max_sessions_per_client,
                         f"this client has {len(c.sessions)} sessions open")
        sid = 0
        while sid == 0 or sid in self._handles:
            sid = secrets.randbits(64)
        s = Session(sid, partition, head_dim, group, owner=c.id)
        self._sessions[(c.id, sid)] = s
        self._handles.add(sid)
        c.sessions.add(sid)
        return s

    def get(self, peer: bytes, sid: int) -> Session:
        """The caller's session ``sid``; anything else is an unknown session."""
        s = self._sessions.get((self.client_id(peer), sid))
        if s is None:
            raise ServiceError(NodeErrorCode.UNKNOWN_SESSION, f"unknown session {sid}")
        return s

    def close(self, s: Session) -> None:
        del self._sessions[(s.owner, s.id)]
        self._handles.discard(s.id)
        c = self._clients[s.owner]
        c.sessions.discard(s.id)
        self._drop_if_idle(c)

    def owner(self, s: Session) -> Client:
        return self._clients[s.owner]

    # -- memory -----------------------------------------------------------------------------------
    def reserve(self, s: Session, nbytes: int) -> None:
        """Charge ``nbytes`` of device memory to the session's client, or refuse."""
        c = self.owner(s)
        cap = self.config.max_client_bytes
        if cap is not None and c.reserved_bytes + nbytes > cap:
            raise _limit("max_client_bytes", cap, f"this client holds {c.reserved_bytes} bytes "
                         f"of device memory and asks for {nbytes} more")
        c.reserved_bytes += nbytes

    def refund(self, s: Session, nbytes: int) -> None:
        self.owner(s).reserved_bytes -= nbytes

    # -- queue pairs ------------------------------------------------------------------------------
    def ticket(self, peer: bytes) -> bytes:
        """A single-use ticket that joins another connection to the caller's client. A client
        holds at most ``max_queue_pairs`` (as many as could join it): a new one beyond them
        replaces its own oldest, so no client's tickets push out another's."""
        c = self._client(self.client_id(peer))
        while self._live_tickets(c) >= self.config.max_queue_pairs:
            self._tickets.pop(c.tickets.popitem(last=False)[0], None)
        t = secrets.token_bytes(TICKET_BYTES)
        c.tickets[t] = time.monotonic() + TICKET_LIFETIME_S
        self._tickets[t] = c.id
        return t

    def join(self, peer: bytes, ticket: bytes) -> None:
        """Join ``peer`` to the client that asked for ``ticket``; the ticket is used only by
        a join that succeeds (checked whole first)."""
        cid = self._tickets.get(ticket)
        owner = self._clients.get(cid) if cid is not None else None
        if owner is not None:
            self._live_tickets(owner)  # its expired tickets dropped
        if owner is None or ticket not in owner.tickets:
            raise ServiceError(NodeErrorCode.BAD_REQUEST, "unknown, used or expired join "
                               "ticket")
        if peer in self._joined or peer in self._clients:
            raise ServiceError(NodeErrorCode.BAD_REQUEST, "this connection already has a "
                               "client of its own or joined one; a join ticket is for a new "
                               "connection")
        if len(owner.queue_pairs) >= self.config.max_queue_pairs:
            raise _limit("max_queue_pairs", self.config.max_queue_pairs,
                         f"this client has {len(owner.queue_pairs)} queue pairs")
        del self._tickets[ticket], owner.tickets[ticket]
        c = self._client(owner.id)  # the most recently used now
        c.queue_pairs.add(peer)
        self._joined[peer] = c.id
