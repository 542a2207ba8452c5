"""A device port in another process, over ZeroMQ: ``RemotePort`` (client, a DevicePort) and
``serve_port`` (the server loop of ``nelssa device serve``).

One REQ/REP exchange per call that needs an answer. Messages the driver sends (CXL.mem and MMIO
requests) are buffered and travel in order with the next exchange, so a burst of line writes
costs one round trip, not one per line. Envelope: ``RPC_REQUEST`` / ``RPC_REPLY`` below.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from enum import IntEnum

import zmq
from construct import Enum, Int8ul, Int64sl, Int64ul, Struct

from nelssa.driver.port import DevicePort
from nelssa.emu.link.security import (
    CurveClientKeys,
    CurveServerKeys,
    secure_client,
    secure_server,
)

log = logging.getLogger(__name__)


class RpcOp(IntEnum):
    SEND = 0
    """Deliver the carried messages; reply with nothing."""
    RECEIVE = 1
    """Deliver, then reply with every device-to-host message ready."""
    ADVANCE = 2
    """Deliver, then run ``arg`` cycles."""
    RUN_UNTIL_IDLE = 3
    """Deliver, then run until idle (at most ``arg`` cycles)."""
    CYCLE = 4
    """Deliver, then reply with the device's cycle count."""
    SHUTDOWN = 5
    """Stop the server."""
    WAIT = 6
    """Wait for the call answered PENDING (up to ``HEARTBEAT_S``); reply with its result, or
    PENDING again."""


class RpcStatus(IntEnum):
    OK = 0
    ERROR = 1
    """The call failed in the device; ``text`` says why."""
    TIMEOUT = 2
    PENDING = 3
    """The call is still running (a heartbeat): ``value`` is the CPU time in ns the device has
    spent on it so far; ask again with WAIT."""


HEARTBEAT_S = 0.2
"""A call still running after this long is answered PENDING, and so is each WAIT after it: a
device answers within this whatever its work costs, so a client judges liveness by answers
and progress, never by how long legitimate work takes."""
_POLL_S = 0.05
"""How often a waiting client looks whether its call was abandoned (``RemotePort.abort``)."""


def _pack_list(items: list[bytes]) -> bytes:
    return b"".join(len(m).to_bytes(4, "little") + m for m in items)


def _unpack_list(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError("message list truncated in a length field")
        n = int.from_bytes(data[pos:pos + 4], "little")
        if pos + 4 + n > len(data):
            raise ValueError(f"message list truncated: {n} bytes announced, "
                             f"{len(data) - pos - 4} left")
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


REQUEST = Struct("op" / Enum(Int8ul, RpcOp), "arg" / Int64ul)
"""Fixed part of a request; the message list (u32 length, bytes; repeated) follows."""
REPLY = Struct("status" / Enum(Int8ul, RpcStatus), "value" / Int64sl)
"""Fixed part of a reply; the message list, or the error text, follows."""


def encode_request(op: RpcOp, arg: int, messages: list[bytes]) -> bytes:
    return REQUEST.build({"op": op, "arg": arg}) + _pack_list(messages)


def decode_request(data: bytes) -> tuple[RpcOp, int, list[bytes]]:
    head = REQUEST.sizeof()
    if len(data) < head:
        raise ValueError(f"request of {len(data)} bytes is shorter than its {head}-byte header")
    r = REQUEST.parse(data[:head])
    return RpcOp(int(r.op)), r.arg, _unpack_list(data[head:])


class PortTimeoutError(TimeoutError):
    """The device process did not answer within the port's timeout (it may have died); the
    port cannot be used again."""


class PortAbortedError(PortTimeoutError):
    """The call was abandoned from another thread (``RemotePort.abort``: e.g. the device's
    process exited); the port cannot be used again."""


class DeviceBusyError(TimeoutError):
    """The device ran the cycles it was given and is still busy (it answered: it is alive)."""


class RemotePort(DevicePort):
    """A device served by ``nelssa device serve`` at ``endpoint``."""

    def __init__(self, endpoint: str, timeout_ms: int = 60_000,
                 context: zmq.Context | None = None, curve: CurveClientKeys | None = None
                 ) -> None:
        self.endpoint = endpoint
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.REQ)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._broken = False
        self._abort = threading.Event()
        self._abort_reason = ""
        self.set_timeout(timeout_ms)
        secure_client(self._sock, curve)
        self._sock.connect(endpoint)
        self._pending: list[bytes] = []

    def set_timeout(self, timeout_ms: int) -> None:
        """How long a call waits for an answer, and for progress while the device works on it
        (each answer is due within ``HEARTBEAT_S``; the work itself may take longer)."""
        self._timeout_ms = timeout_ms
        self._sock.setsockopt(zmq.SNDTIMEO, timeout_ms)

    def abort(self, reason: str) -> None:
        """Abandon the call in progress, and every later one, with PortAbortedError(reason);
        safe from any thread (the socket stays with the thread that uses the port)."""
        self._abort_reason = reason
        self._abort.set()

    def _answer(self, op: RpcOp) -> bytes:
        """The next reply, or PortTimeoutError after the timeout (PortAbortedError at once
        when aborted)."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        while not self._sock.poll(round(_POLL_S * 1000), zmq.POLLIN):
            if self._abort.is_set():
                self._broken = True
                raise PortAbortedError(f"device at {self.endpoint}: {self._abort_reason}")
            if time.monotonic() >= deadline:
                self._broken = True
                raise PortTimeoutError(f"device at {self.endpoint} did not answer {op.name} "
                                       f"within {self._timeout_ms / 1000:g} s")
        return self._sock.recv()

    def _call(self, op: RpcOp, arg: int = 0) -> tuple[int, bytes]:
        if self._abort.is_set():
            self._broken = True
            raise PortAbortedError(f"device at {self.endpoint}: {self._abort_reason}")
        if self._broken:
            raise PortTimeoutError(f"device at {self.endpoint} stopped answering earlier; the "
                                   "port is closed")
        msgs, self._pending = self._pending, []
        self._sock.send(encode_request(op, arg, msgs))
        raw = self._answer(op)
        head = REPLY.sizeof()
        rep = REPLY.parse(raw[:head])
        status = RpcStatus(int(rep.status))
        cpu_ns, since = -1, time.monotonic()
        while status == RpcStatus.PENDING:  # a heartbeat: alive; stuck unless the CPU time grows
            now = time.monotonic()
            if rep.value > cpu_ns:
                cpu_ns, since = rep.value, now
            elif now - since >= self._timeout_ms / 1000:
                self._broken = True
                raise PortTimeoutError(f"device at {self.endpoint} made no progress on "
                                       f"{op.name} for {self._timeout_ms / 1000:g} s (busy "
                                       f"{cpu_ns / 1e9:.1f} CPU s on it)")
            self._sock.send(encode_request(RpcOp.WAIT, 0, []))
            raw = self._answer(op)
            rep = REPLY.parse(raw[:head])
            status = RpcStatus(int(rep.status))
        if status == RpcStatus.TIMEOUT:
            raise DeviceBusyError(raw[head:].decode(errors="replace"))
        if status != RpcStatus.OK:
            raise RuntimeError(f"device at {self.endpoint}: {raw[head:].decode(errors='replace')}")
        return rep.value, raw[head:]

    def send(self, message: bytes) -> None:
        self._pending.append(bytes(message))

    def receive(self) -> list[bytes]:
        return _unpack_list(self._call(RpcOp.RECEIVE)[1])

    def advance(self, cycles: int) -> None:
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, got {cycles}")
        self._call(RpcOp.ADVANCE, cycles)

    def run_until_idle(self, max_cycles: int) -> int:
        return self._call(RpcOp.RUN_UNTIL_IDLE, max_cycles)[0]

    @property
    def cycle(self) -> int:
        return self._call(RpcOp.CYCLE)[0]

    def shutdown(self) -> None:
        """Ask the server to exit."""
        self._call(RpcOp.SHUTDOWN)

    def close(self) -> None:
        if self._pending and not self._broken:
            self._call(RpcOp.SEND)
        self._sock.close()


def _reply(status: RpcStatus, value: int = 0, body: bytes = b"") -> bytes:
    return REPLY.build({"status": status, "value": value}) + body


def _execute(port: DevicePort, op: RpcOp, arg: int, messages: list[bytes]) -> bytes:
    """Deliver a call's messages, carry out its operation; the reply (an error reply naming
    the problem when it fails)."""
    try:
        for m in messages:
            port.send(m)
        value, body = 0, b""
        if op == RpcOp.RECEIVE:
            body = _pack_list(port.receive())
        elif op == RpcOp.ADVANCE:
            port.advance(arg)
        elif op == RpcOp.RUN_UNTIL_IDLE:
            value = port.run_until_idle(arg)
        elif op == RpcOp.CYCLE:
            value = port.cycle
        return _reply(RpcStatus.OK, value, body)
    except TimeoutError as e:
        return _reply(RpcStatus.TIMEOUT, 0, str(e).encode())
    except Exception as e:
        log.warning("request failed: %s", e)
        return _reply(RpcStatus.ERROR, 0, f"{type(e).__name__}: {e}".encode())


class _Calls:
    """The port's calls, one at a time on a thread of their own, so the server answers
    (PENDING, with the thread's CPU time as progress) while a long one runs."""

    def __init__(self, port: DevicePort) -> None:
        self._port = port
        self._jobs: queue.SimpleQueue[tuple[RpcOp, int, list[bytes]]] = queue.SimpleQueue()
        self._done = threading.Event()
        self._result = b""
        self.running = False
        thread = threading.Thread(target=self._work, name="device-calls", daemon=True)
        thread.start()  # a daemon: a call stuck in the device does not keep the process
        assert thread.ident is not None
        self._clock = time.pthread_getcpuclockid(thread.ident)
        self._cpu0 = 0

    def _work(self) -> None:
        while True:
            self._result = _execute(self._port, *self._jobs.get())
            self._done.set()

    def start(self, op: RpcOp, arg: int, messages: list[bytes]) -> bytes:
        self.running = True
        self._done.clear()
        self._cpu0 = time.clock_gettime_ns(self._clock)
        self._jobs.put((op, arg, messages))
        return self.wait()

    def wait(self) -> bytes:
        """The running call's reply, or PENDING if it is still running after HEARTBEAT_S."""
        if not self._done.wait(HEARTBEAT_S):
            return _reply(RpcStatus.PENDING, time.clock_gettime_ns(self._clock) - self._cpu0)
        self.running = False
        return self._result


def serve_port(port: DevicePort, endpoint: str, context: zmq.Context | None = None,
               curve: CurveServerKeys | None = None, parent_pid: int | None = None) -> None:
    """Serve ``port`` at ``endpoint`` until a SHUTDOWN request (or, with ``parent_pid``, until
    that process is gone, so a node that crashes leaves no device behind). A failing call
    answers with an error reply naming the problem; the server goes on. A call still running
    after HEARTBEAT_S is answered PENDING until it is done. Binds to loopback only, unless
    CURVE keys are given (emu/link/security.py)."""
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    secure_server(sock, endpoint, curve)
    sock.bind(endpoint)
    log.info("device serving at %s", endpoint)
    calls = _Calls(port)
    try:
        while True:
            if not sock.poll(1000, zmq.POLLIN):
                if parent_pid is not None and os.getppid() != parent_pid:
                    log.warning("parent process %d is gone; device exits", parent_pid)
                    return
                continue
            raw = sock.recv()
            try:
                op, arg, messages = decode_request(raw)
            except Exception as e:
                log.warning("request failed: %s", e)
                sock.send(_reply(RpcStatus.ERROR, 0, f"{type(e).__name__}: {e}".encode()))
                continue
            if op == RpcOp.WAIT:
                sock.send(calls.wait() if calls.running else _reply(
                    RpcStatus.ERROR, 0, b"WAIT with no call in progress"))
            elif op == RpcOp.SHUTDOWN:
                if calls.running:  # a call stuck in the device does not stop a shutdown
                    log.warning("shutting down with a call still running in the device")
                    sock.send(_reply(RpcStatus.OK))
                    return
                sock.send(_execute(port, op, arg, messages))
                return
            elif calls.running:
                sock.send(_reply(RpcStatus.ERROR, 0, f"{op.name} while an earlier call is "
                                 "still running; WAIT for it".encode()))
            else:
                sock.send(calls.start(op, arg, messages))
    finally:
        sock.close()
        if not calls.running:  # else the device is still inside a call; the process ends it
            port.close()
