"""Clock domains: the clients of one simulation sharing each device's emulated timeline.

A node keeps each client's emulated time apart (host.py): strangers' clocks are independent, so
ordering one client's work after another's would let any client move the others' results with
its clock. The processes of one simulation (several GPU decode nodes against one PNM node) do
share a clock, and their work on a device must queue in emulated time. A client opens a domain
(DOMAIN_OPEN, naming how many members it waits for) and gets a ticket, 128 random bits, over its
own authenticated connection; each member joins with it (DOMAIN_JOIN). Members' ATTENDs then
start on a device at max(their arrival + host time, the device's busy-until in the domain);
anyone else keeps its own timeline, and a member's work never moves a non-member's times.

Conservative synchronization (Chandy-Misra-Bryant, as SimBricks and SST synchronize their
component simulators): the node starts a member's ATTEND stamped t (its emulated arrival) on the
devices only once no member may still send one stamped earlier. Each member's stamps never go
back (an ATTEND sent earlier than its last ATTEND or promise is refused), and the link takes at
least its base latency (the lookahead), so a member promises no arrival before
max(its last arrival + 1, its last send stamp + the latency), nor after an ATTEND of its own
that arrived and is not started yet. A member with nothing to send for a while sends a null
message (DOMAIN_PROMISE: its frame's stamp is the promise). Held ATTENDs start in the order of
(stamp, join rank); the first of them can always start once every other member has something
held or promised past it, so K members each waiting for a reply never deadlock. Devices finish in
any order in wall time; the emulated times are committed in the order the ATTENDs started.

A member that leaves (DOMAIN_LEAVE) stops holding the others at once; one that nothing is heard
from for ``NodeConfig.domain_stall_s`` while another waits on it is removed (its later ATTENDs
are refused naming why) and the others go on. A domain whose members have not all joined when a
held ATTEND has waited that long starts with those that did.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING, Any

from nelssa.emu.link.transport import ServiceError, ServiceRequest
from nelssa.host.pnm_node.dispatch import DeviceQueues, DeviceWork, Job
from nelssa.host.pnm_node.protocol import TICKET_BYTES, NodeErrorCode, NodeOp

if TYPE_CHECKING:
    from nelssa.host.pnm_node.config import NodeConfig

log = logging.getLogger(__name__)


def _refuse(message: str) -> ServiceError:
    return ServiceError(NodeErrorCode.DOMAIN_REFUSED, message)


class MemberState(Enum):
    ACTIVE = auto()
    LEFT = auto()
    """Left: holds no one; its ATTENDs already taken in still start in the domain's order."""
    EXPELLED = auto()
    """Removed after a stall: holds no one, and its new ATTENDs are refused."""


@dataclass
class Member:
    client: bytes
    rank: int
    """Join order: breaks ties between equal stamps."""
    heard: float
    """Wall clock of its last message (any operation)."""
    state: MemberState = MemberState.ACTIVE
    last_arrive_ps: int = -1
    last_sent_ps: int = 0
    """Its latest ATTEND's or promise's send stamp: nothing later may be stamped earlier."""
    unreleased: Counter[int] = field(default_factory=Counter)
    """Arrival stamps of its ATTENDs taken in and not started on the devices yet."""

    def bound(self, lookahead_ps: int) -> int:
        """The earliest arrival stamp an ATTEND of it not started yet may have."""
        b = max(self.last_arrive_ps + 1, self.last_sent_ps + lookahead_ps)
        return min(b, min(self.unreleased)) if self.unreleased else b


@dataclass
class _Slot:
    """An ATTEND started on the devices, its emulated times to commit in start order."""

    proxy: Job
    commit: Callable[[dict[Any, Any]], None]
    results: dict[Any, Any] | None = None


@dataclass
class _Held:
    member: Member
    arrive_ps: int
    parts: list[DeviceWork]
    slot: _Slot


class ClockDomain:
    """One domain: its members, their devices' timeline and the ATTENDs held for it."""

    def __init__(self, ticket: bytes, owner: bytes, expected: int, lookahead_ps: int,
                 dispatcher: DeviceQueues) -> None:
        self.ticket, self.owner, self.expected = ticket, owner, expected
        self.lookahead_ps = lookahead_ps
        self.dispatcher = dispatcher
        self.members: dict[bytes, Member] = {}
        self.opened = time.monotonic()
        self.started = False
        """Something of it started on the devices: no one joins after."""
        self.busy_until_ps: dict[int, int] = {}
        """Emulated time each device finishes the domain's latest ATTEND on it (device threads
        write it, in start order, under ``_lock``)."""
        self._heap: list[tuple[int, int, int, _Held]] = []
        self._seq = itertools.count()
        self._order: deque[_Slot] = deque()
        self._lock = threading.Lock()
        self.waiting_since: float | None = None
        """Wall clock the first held ATTEND began to wait (None: none waits)."""

    @property
    def active(self) -> list[Member]:
        return [m for m in self.members.values() if m.state is MemberState.ACTIVE]

    def hold(self, member: Member, arrive_ps: int, parts: list[DeviceWork],
             commit: Callable[[dict[Any, Any]], None]) -> Job:
        """Hold an ATTEND's device work until it may start; its job is done once its emulated
        times are committed."""
        slot = _Slot(Job([]), commit)
        held = _Held(member, arrive_ps, parts, slot)
        heapq.heappush(self._heap, (arrive_ps, member.rank, next(self._seq), held))
        self.release()
        return slot.proxy

    def forget(self, member: Member, arrive_ps: int) -> None:
        """An ATTEND refused before it was held: it holds no one any more."""
        member.unreleased[arrive_ps] -= 1
        if not member.unreleased[arrive_ps]:
            del member.unreleased[arrive_ps]
        self.release()

    def _may_start(self, arrive_ps: int, member: Member) -> bool:
        if not self.started and len(self.members) < self.expected:
            return False
        return all((arrive_ps, member.rank) < (m.bound(self.lookahead_ps), m.rank)
                   for m in self.active if m is not member)

    def release(self) -> None:
        """Start, in (stamp, rank) order, every held ATTEND no member may still precede."""
        while self._heap:
            arrive, _, _, held = self._heap[0]
            if not self._may_start(arrive, held.member):
                if self.waiting_since is None:
                    self.waiting_since = time.monotonic()
                return
            heapq.heappop(self._heap)
            self.waiting_since = None
            self.started = True
            m = held.member
            m.unreleased[arrive] -= 1
            if not m.unreleased[arrive]:
                del m.unreleased[arrive]
            with self._lock:
                self._order.append(held.slot)
            job = self.dispatcher.run(m.client, held.parts)
            job.future.add_done_callback(
                lambda f, s=held.slot: self._done(s, f.result()))
        self.waiting_since = None

    def _done(self, slot: _Slot, results: dict[Any, Any]) -> None:
        """On a device thread: commit the emulated times of the started ATTENDs whose turn
        has come, in start order."""
        ready = []
        with self._lock:
            slot.results = results
            while self._order and self._order[0].results is not None:
                s = self._order.popleft()
                assert s.results is not None
                try:
                    s.commit(s.results)
                except Exception:  # its reply names the failure; the others go on
                    log.exception("committing an ATTEND's emulated times")
                ready.append(s)
        for s in ready:
            assert s.results is not None
            s.proxy.future.set_result(s.results)

    def blockers(self) -> list[Member]:
        """The active members the first held ATTEND waits on."""
        if not self._heap:
            return []
        arrive, _, _, held = self._heap[0]
        return [m for m in self.active if m is not held.member
                and (arrive, held.member.rank) >= (m.bound(self.lookahead_ps), m.rank)]


class DomainTable:
    """The node's clock domains, on the node's thread (bounded: ``max_clients`` domains of
    ``max_domain_members`` members, and ``max_client_domains`` of them opened by one client,
    so no client takes them all)."""

    def __init__(self, config: NodeConfig, lookahead_ps: int, dispatcher: DeviceQueues) -> None:
        self.config = config
        self.lookahead_ps = lookahead_ps
        self.dispatcher = dispatcher
        self._by_ticket: dict[bytes, ClockDomain] = {}
        self._of: dict[bytes, tuple[ClockDomain, Member]] = {}
        """Active and expelled members, by client."""

    def __len__(self) -> int:
        return len(self._by_ticket)

    def open(self, client: bytes, expected: int) -> bytes:
        cap = self.config.max_domain_members
        if not 1 <= expected <= cap:
            raise _refuse(f"a clock domain of {expected} members: the node takes 1..{cap} "
                          "(max_domain_members)")
        mine = sum(d.owner == client for d in self._by_ticket.values())
        if mine >= self.config.max_client_domains:
            raise ServiceError(NodeErrorCode.LIMIT_EXCEEDED, f"this client has {mine} clock "
                               f"domains open: over the node's limit max_client_domains = "
                               f"{self.config.max_client_domains} (a domain ends when its "
                               "members have left)")
        if len(self._by_ticket) >= self.config.max_clients:
            raise ServiceError(NodeErrorCode.LIMIT_EXCEEDED, f"{len(self._by_ticket)} clock "
                               f"domains open: over the node's limit max_clients = "
                               f"{self.config.max_clients}")
        ticket = secrets.token_bytes(TICKET_BYTES)
        self._by_ticket[ticket] = ClockDomain(ticket, client, expected, self.lookahead_ps,
                                              self.dispatcher)
        log.info("clock domain opened for %d members", expected)
        return ticket

    def join(self, client: bytes, ticket: bytes) -> None:
        d = self._by_ticket.get(ticket)
        if d is None:  # compared by the dict's lookup: 128 random bits are not guessed
            raise _refuse("unknown clock-domain ticket (never given out, or its domain has "
                          "ended)")
        if client in self._of:
            raise _refuse("this client is already in a clock domain: leave it first")
        if d.started or len(d.members) >= d.expected:
            raise _refuse(f"the clock domain has started ({len(d.members)} of {d.expected} "
                          "members joined): members join before any of them attends")
        m = d.members[client] = Member(client, len(d.members), time.monotonic())
        self._of[client] = (d, m)
        log.info("client joined a clock domain (%d of %d)", len(d.members), d.expected)

    def leave(self, client: bytes) -> None:
        d, m = self._member(client, expelled_ok=True)
        del self._of[client]
        m.state = MemberState.LEFT
        d.release()
        self._end_if_empty(d)

    def _end_if_empty(self, d: ClockDomain) -> None:
        if d.members and all(m.state is not MemberState.ACTIVE for m in d.members.values()) \
                and not d._heap:
            for c, m in list(d.members.items()):
                if self._of.get(c, (None, None))[1] is m:
                    del self._of[c]
            self._by_ticket.pop(d.ticket, None)

    def _member(self, client: bytes, expelled_ok: bool = False) -> tuple[ClockDomain, Member]:
        got = self._of.get(client)
        if got is None:
            raise _refuse("this client is not in a clock domain")
        if got[1].state is MemberState.EXPELLED and not expelled_ok:
            raise _refuse(self._expelled_text())
        return got

    def _expelled_text(self) -> str:
        return (f"removed from its clock domain: nothing was heard from this client for "
                f"{self.config.domain_stall_s:g} s while other members waited on it; leave "
                "the domain (DOMAIN_LEAVE) and open or join another")

    def promise(self, client: bytes, r: ServiceRequest) -> None:
        d, m = self._member(client)
        m.last_sent_ps = max(m.last_sent_ps, r.sent_ps)
        d.release()

    def arrived(self, client: bytes, r: ServiceRequest) -> tuple[ClockDomain, Member] | None:
        """Note a request of a member (on arrival, before anything else); an ATTEND's stamp
        holds the others until it starts. Its domain and member, for an ATTEND; refused
        whole (nothing noted) if its stamp goes back."""
        got = self._of.get(client)
        if got is None:
            return None
        d, m = got
        m.heard = time.monotonic()
        if r.op != NodeOp.ATTEND:
            return None
        if m.state is MemberState.EXPELLED:
            raise _refuse(self._expelled_text())
        if r.sent_ps < m.last_sent_ps:
            raise _refuse(f"emulated time went back: ATTEND sent at {r.sent_ps} ps after this "
                          f"member's ATTEND or promise at {m.last_sent_ps} ps (a member's "
                          "stamps never decrease in a clock domain)")
        m.last_sent_ps, m.last_arrive_ps = r.sent_ps, max(m.last_arrive_ps, r.arrive_ps)
        m.unreleased[r.arrive_ps] += 1
        return d, m

    def tick(self) -> None:
        """Remove members stalled past ``domain_stall_s`` that others wait on, and start a
        domain whose members did not all join in that time (on the node's thread)."""
        now = time.monotonic()
        stall = self.config.domain_stall_s
        for d in list(self._by_ticket.values()):
            if d.waiting_since is None or now - d.waiting_since < stall:
                if not d.members and now - d.opened > max(stall, 60.0):
                    del self._by_ticket[d.ticket]  # opened, never joined
                continue
            if not d.started and len(d.members) < d.expected:
                log.warning("clock domain: %d of %d members joined in %g s; it starts with "
                            "them", len(d.members), d.expected, stall)
                d.expected = len(d.members)
            for m in d.blockers():
                if now - m.heard >= stall:
                    m.state = MemberState.EXPELLED
                    log.warning("clock domain: member %s removed, nothing heard for %.0f s "
                                "while others waited", m.client.hex()[:8], now - m.heard)
            d.waiting_since = None
            d.release()
            self._end_if_empty(d)
