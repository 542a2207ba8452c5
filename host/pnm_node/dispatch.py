"""The node's device work queues: each device serves its queue on a thread of its own, so
requests that need different devices run at the same time, and shares it fairly among clients.

A request's device work is a ``Job``: one ``DeviceWork`` per device it needs (a function run on the
device slot's thread, and its work in KV tokens, what the device's time is roughly
proportional to). Each device's ``DeviceQueue`` holds a FIFO per client and picks the next part
by deficit round robin over the clients with work queued (a quantum of ``QUANTUM_TOKENS`` a
turn), so a client flooding a device waits its turns like any other and never starves another
client's request there; a client's parts keep their order on each device. What a client may
have queued or running on one device is capped (``NodeConfig.max_client_queued_tokens``):
``room`` tells before anything is queued, so a request over it is refused whole.

The node's state (sessions, allocation, emulated time) is changed only on the node's own
thread (host.py); the parts touch only their device.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from nelssa.host.pnm_node.devices import DeviceSlot, DeviceUnreachableError

log = logging.getLogger(__name__)

QUANTUM_TOKENS = 4096
"""Work a client is credited each turn of a device's round robin (KV tokens): small against
a large request, so turns are fine-grained; large against a small one, so one turn serves it."""


@dataclass
class DeviceWork:
    """One device's share of a request."""

    slot: DeviceSlot
    fn: Callable[[DeviceSlot], Any]
    work: int
    """KV tokens it reads or writes (0 for bookkeeping)."""
    client: bytes = b""
    job: Job | None = None


@dataclass
class Job:
    """A request's device work: done (``future``: the result or exception of each part, by
    slot) once every part is."""

    parts: list[DeviceWork]
    future: Future[dict[DeviceSlot, Any]] = field(default_factory=Future)
    _results: dict[DeviceSlot, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def part_done(self, part: DeviceWork, outcome: Any) -> None:
        with self._lock:
            self._results[part.slot] = outcome
            done = len(self._results) == len(self.parts)
        if done:
            self.future.set_result(self._results)


def outcome(results: dict[DeviceSlot, Any], slot: DeviceSlot) -> Any:
    """A part's result, or its exception raised."""
    value = results[slot]
    if isinstance(value, BaseException):
        raise value
    return value


class DeviceQueue:
    """One device's queue, shared among clients by deficit round robin (module doc)."""

    def __init__(self, slot: DeviceSlot, cap_tokens: int) -> None:
        self.slot = slot
        self.cap_tokens = cap_tokens
        self._cv = threading.Condition()
        self._fifo: dict[bytes, deque[DeviceWork]] = {}
        self._turns: deque[bytes] = deque()  # clients with parts queued, in round-robin order
        self._in_turn = False  # the first of _turns has had this turn's quantum
        self._deficit: dict[bytes, int] = {}
        self._held: dict[bytes, int] = {}  # tokens queued or running, by client
        self._running: DeviceWork | None = None
        self._stopping = False
        self.served = 0
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name=f"queue{slot.index}")
        self._thread.start()

    def room(self, client: bytes) -> int:
        """Tokens ``client`` may still queue here."""
        with self._cv:
            return self.cap_tokens - self._held.get(client, 0)

    @property
    def depth(self) -> int:
        """Parts queued or running."""
        with self._cv:
            return sum(len(f) for f in self._fifo.values()) + (self._running is not None)

    def put(self, part: DeviceWork) -> None:
        with self._cv:
            if self._stopping:
                self._fail(part, "the node is stopping")
                return
            fifo = self._fifo.get(part.client)
            if fifo is None:
                fifo = self._fifo[part.client] = deque()
                self._turns.append(part.client)
                self._deficit[part.client] = 0
            fifo.append(part)
            self._held[part.client] = self._held.get(part.client, 0) + part.work
            self._cv.notify()

    def _next(self) -> DeviceWork:
        """The next part by deficit round robin (the lock held, some part queued)."""
        while True:
            client = self._turns[0]
            fifo = self._fifo[client]
            if not self._in_turn:  # a client's turn starts: its quantum
                self._deficit[client] += QUANTUM_TOKENS
                self._in_turn = True
            if self._deficit[client] >= fifo[0].work:
                part = fifo.popleft()
                self._deficit[client] -= part.work
                if not fifo:  # an idle client keeps no credit
                    del self._fifo[client], self._deficit[client]
                    self._turns.popleft()
                    self._in_turn = False
                return part
            self._turns.rotate(-1)  # its turn is over: the next client's
            self._in_turn = False

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._turns and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                part = self._running = self._next()
            try:
                result: Any = self.slot.submit(part.fn).result()
            except BaseException as e:  # the part's outcome, handed to its request
                result = e
            with self._cv:
                self._running = None
                self._held[part.client] -= part.work
                if not self._held[part.client]:
                    del self._held[part.client]
                self.served += 1
            assert part.job is not None
            part.job.part_done(part, result)

    def _fail(self, part: DeviceWork, why: str) -> None:
        assert part.job is not None
        part.job.part_done(part, DeviceUnreachableError(
            f"device {self.slot.index} at {self.slot.endpoint}: {why}"))

    def stop(self) -> None:
        """Fail what is queued; the part running finishes."""
        with self._cv:
            self._stopping = True
            queued = [p for f in self._fifo.values() for p in f]
            self._fifo.clear()
            self._turns.clear()
            self._cv.notify_all()
        for part in queued:
            self._fail(part, "the node is stopping")
        self._thread.join(timeout=1.0)


class DeviceQueues:
    """The device queues of a node's devices (and of their twins)."""

    def __init__(self, slots: list[DeviceSlot], cap_tokens: int) -> None:
        self.queues = {id(sl): DeviceQueue(sl, cap_tokens) for sl in slots}

    def queue(self, slot: DeviceSlot) -> DeviceQueue:
        return self.queues[id(slot)]

    def over_cap(self, client: bytes, parts: list[DeviceWork]) -> str | None:
        """What queueing ``parts`` for ``client`` would pass, or None."""
        for part in parts:
            room = self.queue(part.slot).room(client)
            if part.work > room:
                return (f"{part.work} KV tokens of work for device {part.slot.index}, where "
                        f"this client has {self.queue(part.slot).cap_tokens - room} queued "
                        "or running")
        return None

    def run(self, client: bytes, parts: list[DeviceWork]) -> Job:
        """Queue a request's parts (checked first with ``over_cap``)."""
        job = Job(parts)
        if not parts:
            job.future.set_result({})
        for part in parts:
            part.client, part.job = client, job
            self.queue(part.slot).put(part)
        return job

    def stop(self) -> None:
        for q in self.queues.values():
            q.stop()
