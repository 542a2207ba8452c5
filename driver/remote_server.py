"""``serve_port``: the server loop of ``nelssa device serve``, a device's port behind a link
server (driver/remote.py describes the calls and their checks). Calls are taken only from a
connection that presented the device's token (AUTH); each call is checked whole before the
device sees any of it."""

from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import zmq

from nelssa.driver import cxl
from nelssa.driver.port import DevicePort
from nelssa.driver.remote import (
    _ARG,
    CXL_LINK,
    DMA_READ_REQ,
    HEARTBEAT_S,
    MAX_AUTHORIZED,
    MAX_BATCH_PAYLOAD,
    MAX_CALL_CYCLES,
    MAX_DMA_BYTES,
    MAX_RPC_PAYLOAD,
    RpcErrorCode,
    RpcOp,
    RpcStatus,
    decode_request,
    encode_ddr5_counts,
    encode_reply,
)
from nelssa.emu.link.frame import LinkErrorCode
from nelssa.emu.link.model import LinkFaults, link_preset
from nelssa.emu.link.security import CurveServerKeys
from nelssa.emu.link.tokens import new_token, remove_token, write_token
from nelssa.emu.link.transport import LinkLimits, LinkServer, Reply, ServiceError, ServiceRequest

log = logging.getLogger(__name__)


def _check_dma(op: RpcOp, payload: bytes) -> tuple[int, list[bytes]]:
    """A backdoor call's (address, [data]) or (address, [length as 8 bytes])."""
    if len(payload) < _ARG.size:
        raise ValueError(f"call of {len(payload)} bytes is shorter than its {_ARG.size}-byte "
                         "address")
    (addr,) = _ARG.unpack_from(payload)
    if op == RpcOp.DMA_WRITE:
        data = payload[_ARG.size:]
        if len(data) > MAX_DMA_BYTES:
            raise ValueError(f"backdoor write of {len(data)} bytes; one call carries at most "
                             f"{MAX_DMA_BYTES}")
        return addr, [data]
    if len(payload) != DMA_READ_REQ.sizeof():
        raise ValueError(f"backdoor read of {len(payload)} bytes; it is "
                         f"{DMA_READ_REQ.sizeof()} (address, length)")
    length = DMA_READ_REQ.parse(payload).length
    if length > MAX_DMA_BYTES:
        raise ValueError(f"backdoor read of {length} bytes; one call reads at most "
                         f"{MAX_DMA_BYTES}")
    return addr, [payload[_ARG.size:]]


def _check_call(op: RpcOp, payload: bytes) -> tuple[int, list[bytes]]:
    """A call's (arg, messages), checked whole before the device sees any of it."""
    try:
        if op in (RpcOp.DMA_WRITE, RpcOp.DMA_READ):
            return _check_dma(op, payload)
        if len(payload) > MAX_BATCH_PAYLOAD:
            raise ValueError(f"call of {len(payload)} bytes; one carrying messages has at most "
                             f"{MAX_BATCH_PAYLOAD}")
        arg, messages = decode_request(payload)
        if op in (RpcOp.ADVANCE, RpcOp.RUN_UNTIL_IDLE) and arg > MAX_CALL_CYCLES:
            raise ValueError(f"{op.name} of {arg} cycles: one call runs at most "
                             f"{MAX_CALL_CYCLES}")
        for i, m in enumerate(messages):
            try:
                cxl.parse_message(m)
            except Exception as e:
                raise ValueError(f"message {i}: {e}") from None
    except ValueError as e:
        raise ServiceError(RpcErrorCode.BAD_REQUEST, f"{op.name}: {e}") from None
    return arg, messages


def _execute(port: DevicePort, op: RpcOp, arg: int, messages: list[bytes]) -> bytes:
    """Deliver a call's messages and carry out its operation: the reply payload, or
    ServiceError naming what failed."""
    value, out = 0, []
    if op in (RpcOp.DMA_WRITE, RpcOp.DMA_READ):
        return _execute_dma(port, op, arg, messages[0])
    try:
        for m in messages:
            port.send(m)
        if op == RpcOp.RECEIVE:
            out = port.receive()
        elif op == RpcOp.ADVANCE:
            port.advance(arg)
        elif op == RpcOp.RUN_UNTIL_IDLE:
            value = port.run_until_idle(arg)
        elif op == RpcOp.CYCLE:
            value = port.cycle
        elif op == RpcOp.CLOCK:
            value = port.clock_hz
        elif op == RpcOp.COUNTERS:
            value, rows = port.counters()
            out = encode_ddr5_counts(rows)
    except TimeoutError as e:
        raise ServiceError(RpcErrorCode.DEVICE_BUSY, str(e)) from None
    except Exception as e:
        log.warning("%s failed: %s", op.name, e)
        raise ServiceError(RpcErrorCode.DEVICE_ERROR, f"{type(e).__name__}: {e}") from None
    return encode_reply(value, out)


def _execute_dma(port: DevicePort, op: RpcOp, addr: int, body: bytes) -> bytes:
    """A backdoor call; an address range outside the device is a bad request (the port
    checks it before it touches memory)."""
    try:
        if op == RpcOp.DMA_WRITE:
            ok, out = port.dma_write(addr, body), []
        else:
            data = port.dma_read(addr, _ARG.unpack(body)[0])
            ok, out = data is not None, [data or b""]
    except ValueError as e:
        raise ServiceError(RpcErrorCode.BAD_REQUEST, f"{op.name}: {e}") from None
    except TimeoutError as e:
        raise ServiceError(RpcErrorCode.DEVICE_BUSY, str(e)) from None
    except Exception as e:
        log.warning("%s failed: %s", op.name, e)
        raise ServiceError(RpcErrorCode.DEVICE_ERROR, f"{type(e).__name__}: {e}") from None
    if not ok:
        raise ServiceError(RpcErrorCode.DEVICE_ERROR, f"{op.name}: this device has no backdoor")
    return encode_reply(0, out)


class _Calls:
    """The port's calls, one at a time on a thread of their own, so the server answers
    (PENDING, with the thread's CPU time as progress) while a long one runs."""

    def __init__(self, port: DevicePort) -> None:
        self._port = port
        self._jobs: queue.SimpleQueue[tuple[RpcOp, int, list[bytes]]] = queue.SimpleQueue()
        self._done = threading.Event()
        self._result: bytes | ServiceError = b""
        self.running = False
        thread = threading.Thread(target=self._work, name="device-calls", daemon=True)
        thread.start()  # a daemon: a call stuck in the device does not keep the process
        assert thread.ident is not None
        self._clock = time.pthread_getcpuclockid(thread.ident)
        self._cpu0 = 0

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                self._result = _execute(self._port, *job)
            except ServiceError as e:
                self._result = e
            except Exception as e:  # _execute classifies; this keeps the worker alive
                self._result = ServiceError(RpcErrorCode.DEVICE_ERROR, f"{type(e).__name__}: {e}")
            self._done.set()

    def start(self, op: RpcOp, arg: int, messages: list[bytes]) -> bytes:
        self.running = True
        self._done.clear()
        self._cpu0 = time.clock_gettime_ns(self._clock)
        self._jobs.put((op, arg, messages))
        return self.wait()

    def wait(self) -> bytes:
        """The running call's reply (or its ServiceError), or PENDING if it is still running
        after HEARTBEAT_S."""
        if not self._done.wait(HEARTBEAT_S):
            cpu = time.clock_gettime_ns(self._clock) - self._cpu0
            return encode_reply(max(0, cpu), [], RpcStatus.PENDING)
        self.running = False
        if isinstance(self._result, ServiceError):
            raise self._result
        return self._result


class _Served:
    """The handler of ``serve_port``."""

    def __init__(self, port: DevicePort, on_shutdown: Callable[[], None], token: bytes) -> None:
        self.port = port
        self.calls = _Calls(port)
        self._on_shutdown = on_shutdown
        self._token = token
        self._authorized: OrderedDict[bytes, None] = OrderedDict()
        """Connections that presented the token, least recently heard from first."""

    def _authorize(self, request: ServiceRequest) -> Reply:
        """AUTH: the token (constant-time compare) admits the connection; anything else
        leaves it as it was."""
        if not secrets.compare_digest(request.payload, self._token):
            log.warning("AUTH with a wrong token from %s", request.peer.hex()[:16])
            raise ServiceError(RpcErrorCode.UNAUTHORIZED, "AUTH refused: wrong token (the "
                               "device's token file: `device serve --token-file`, or the one it "
                               "wrote for its endpoint on its host)")
        self._authorized[request.peer] = None
        self._authorized.move_to_end(request.peer)
        while len(self._authorized) > MAX_AUTHORIZED:
            self._authorized.popitem(last=False)
        return Reply(RpcOp.AUTH, encode_reply(0, []), request.arrive_ps)

    def __call__(self, request: ServiceRequest) -> Reply:
        if request.op == RpcOp.AUTH:
            return self._authorize(request)
        if request.peer not in self._authorized:  # refused before anything is parsed
            raise ServiceError(RpcErrorCode.UNAUTHORIZED, f"call {request.op} refused: this "
                               "connection has not presented the device's token (AUTH first)")
        self._authorized.move_to_end(request.peer)
        try:
            op = RpcOp(request.op)
        except ValueError:
            raise ServiceError(LinkErrorCode.UNKNOWN_OP, f"operation {request.op} is not a device "
                               f"call ({', '.join(o.name for o in RpcOp)})") from None
        arg, messages = _check_call(op, request.payload)
        if op == RpcOp.WAIT:
            if not self.calls.running:
                raise ServiceError(RpcErrorCode.BAD_REQUEST, "WAIT with no call in progress")
            body = self.calls.wait()
        elif op == RpcOp.SHUTDOWN:
            if self.calls.running:  # a call stuck in the device does not stop a shutdown
                log.warning("shutting down with a call still running in the device")
                body = encode_reply(0, [])
            else:
                body = _execute(self.port, op, arg, messages)
            self._on_shutdown()  # the server stops after this reply
        elif self.calls.running:
            raise ServiceError(RpcErrorCode.BAD_REQUEST, f"{op.name} while an earlier call is "
                               "still running; WAIT for it")
        else:
            body = self.calls.start(op, arg, messages)
        return Reply(op, body, request.arrive_ps)


def serve_port(port: DevicePort, endpoint: str, context: zmq.Context | None = None,
               curve: CurveServerKeys | None = None, parent_pid: int | None = None,
               faults: LinkFaults | None = None, token: bytes | None = None) -> dict[str, int]:
    """Serve ``port`` at ``endpoint`` until a SHUTDOWN request (or, with ``parent_pid``, until
    that process is gone, so a node that crashes leaves no device behind). A failing or
    malformed call answers with an error naming the problem; the server goes on. A call still
    running after HEARTBEAT_S is answered PENDING until it is done. Binds to
    loopback only, unless CURVE keys are given (emu/link/security.py); ``faults`` are injected
    at this end of the link, both directions (for tests). Calls are taken from connections
    that presented ``token`` (AUTH); without one, a token is drawn and written for the endpoint
    (emu/link/tokens.py), where its user on this host reads it, and removed at the end.
    Returns the link's counters (LinkServer.counters)."""
    written = token is None
    handler = _Served(port, lambda: server.stop(), new_token() if token is None else token)
    server = LinkServer(endpoint, handler, link_preset(CXL_LINK), curve, context,
                        LinkLimits(max_payload=MAX_RPC_PAYLOAD), faults)
    names = [endpoint, server.endpoint]  # as asked and as bound
    if written:
        try:
            write_token(names, handler._token)
        except ValueError:
            server.close()
            raise

    def idle() -> bool:
        if parent_pid is not None and os.getppid() != parent_pid:
            log.warning("parent process %d is gone; device exits", parent_pid)
            return True
        return False

    log.info("device serving at %s", endpoint)
    try:
        server.serve(1000, idle)
    finally:
        server.close()
        if written:
            remove_token(names, handler._token)
        if not handler.calls.running:  # else the device is still inside a call; exit ends it
            port.close()
    return server.counters()
