"""The order of each client's requests on the node, now that requests run concurrently.

Each client (with its queue pairs) has a lane. A request that only reads the client's state
(ATTEND: ``Order.OVERLAP``) may start while the client's other reads run; any other
(allocating, writing, freeing: ``Order.BARRIER``) starts once everything earlier of the client
is done, and holds everything later until it is. Requests are checked and planned when they
start, on the node's thread, so each sees the state its predecessors left, as it would have if
the node served one request at a time.

A started request either answers at once or leaves device work (``Pending``: a job and the
function that turns its results into the reply). Its reply is made, on the node's thread, only
once every earlier request of the lane has made its own: the client's replies, and the emulated
time each carries (host.py: a device busy with an earlier request of the client), are those of
one request at a time. Other clients' lanes are independent: nothing of one client waits for
another's, except its turn on a shared device (dispatch.py).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from nelssa.emu.link.transport import Deferred, Reply
from nelssa.host.pnm_node.dispatch import Job


class Order(Enum):
    OVERLAP = auto()
    """Runs beside the client's other OVERLAP requests (it only reads the client's state)."""
    BARRIER = auto()
    """Runs alone among the client's requests (it changes the client's state)."""


@dataclass(frozen=True)
class Pending:
    """Device work a started request left: its reply is ``finish(results)`` once ``job`` is
    done (called on the node's thread)."""

    job: Job
    finish: Callable[[dict[Any, Any]], Reply]


Start = Callable[[], "Reply | Pending"]


@dataclass
class _Entry:
    finish: Callable[[dict[Any, Any]], Reply]
    ready: Future[Callable[[], Reply]] = field(default_factory=Future)
    results: dict[Any, Any] | None = None


@dataclass
class _Lane:
    unfinished: int = 0
    """Requests started whose reply is not made yet."""
    barrier: bool = False
    """One of them is a BARRIER (then it is the only one)."""
    running: deque[_Entry] = field(default_factory=deque)
    """Started, in order, until their turn to make the reply comes."""
    held: deque[tuple[Order, Start, Future[Callable[[], Reply]]]] = field(
        default_factory=deque)
    """Not started yet, in order."""

    def may_start(self, order: Order) -> bool:
        return not self.held and (self.unfinished == 0
                                  or (order == Order.OVERLAP and not self.barrier))


class Lanes:
    """The lanes of a node's clients (their number bounded by the clients with requests
    unanswered, which the link's admission bounds)."""

    def __init__(self) -> None:
        self._lanes: dict[bytes, _Lane] = {}
        self._lock = threading.Lock()  # ``running`` is also walked by device threads

    def submit(self, client: bytes, order: Order, start: Start) -> Reply | Deferred:
        """Start the request now if its lane allows (its checks may raise ServiceError), or
        hold it; on the node's thread."""
        lane = self._lanes.setdefault(client, _Lane())
        if lane.may_start(order):
            try:
                return self._start(client, lane, order, start)
            finally:
                self._drop_if_idle(client, lane)
        ready: Future[Callable[[], Reply]] = Future()
        lane.held.append((order, start, ready))
        return Deferred(ready)

    @property
    def held(self) -> int:
        return sum(len(lane.held) for lane in self._lanes.values())

    def _start(self, client: bytes, lane: _Lane, order: Order, start: Start
               ) -> Reply | Deferred:
        out = start()
        if isinstance(out, Reply):
            return out
        entry = _Entry(out.finish)
        lane.unfinished += 1
        lane.barrier = order == Order.BARRIER
        with self._lock:
            lane.running.append(entry)
        out.job.future.add_done_callback(lambda f: self._done(client, lane, entry, f.result()))
        return Deferred(entry.ready)

    def _done(self, client: bytes, lane: _Lane, entry: _Entry, results: dict[Any, Any]
              ) -> None:
        """On a device thread: the replies whose turn has come are handed to the node's
        thread, in the lane's order."""
        turn = []
        with self._lock:
            entry.results = results
            while lane.running and lane.running[0].results is not None:
                turn.append(lane.running.popleft())
        for e in turn:
            e.ready.set_result(lambda e=e: self._finish(client, lane, e))

    def _finish(self, client: bytes, lane: _Lane, entry: _Entry) -> Reply:
        """On the node's thread: the reply, then whatever of the lane may start now."""
        try:
            assert entry.results is not None
            return entry.finish(entry.results)
        finally:
            lane.unfinished -= 1
            if not lane.unfinished:
                lane.barrier = False
            self._start_held(client, lane)

    def _start_held(self, client: bytes, lane: _Lane) -> None:
        while lane.held:
            order = lane.held[0][0]
            if not (lane.unfinished == 0 or (order == Order.OVERLAP and not lane.barrier)):
                break
            _, start, ready = lane.held.popleft()
            try:
                out = self._start(client, lane, order, start)
            except Exception as e:  # its refusal is its answer
                ready.set_exception(e)
                continue
            if isinstance(out, Reply):
                ready.set_result(lambda out=out: out)
            else:  # its answer is the started request's
                out.ready.add_done_callback(lambda f, ready=ready: _forward(f, ready))
        self._drop_if_idle(client, lane)

    def _drop_if_idle(self, client: bytes, lane: _Lane) -> None:
        if not lane.unfinished and not lane.held and self._lanes.get(client) is lane:
            del self._lanes[client]


def _forward(source: Future[Callable[[], Reply]], to: Future[Callable[[], Reply]]) -> None:
    exc = source.exception()
    if exc is not None:
        to.set_exception(exc)
    else:
        to.set_result(source.result())
