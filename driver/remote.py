"""A device port in another process, over ZeroMQ: ``RemotePort`` (client, a DevicePort), and
the calls both ends share (``serve_port``, the server loop of ``nelssa device serve``, is in
driver/remote_server.py).

The calls travel as link frames (emu/link/frame.py: sequence numbers, CRC-32) between a
``LinkClient`` and a ``LinkServer`` (emu/link/transport.py): a lost or damaged call is sent
again, and a call the device already ran is answered from the reply it gave, never run twice.
The frame's ``op`` is an ``RpcOp``; the payloads are ``RPC_REQUEST`` and ``RPC_REPLY`` below.
Messages the driver sends (CXL.mem and MMIO requests) are buffered and travel in order with the
next call, so a burst of line writes costs one round trip, not one per line.

A device server takes calls only from a connection that presented its token first (AUTH, the
token compared in constant time; emu/link/tokens.py says where tokens live): any other call
is refused UNAUTHORIZED before it is parsed, and changes nothing.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from enum import IntEnum
from pathlib import Path

import zmq
from construct import Enum, GreedyBytes, GreedyRange, Int8ul, Int32ul, Int64ul, Prefixed, Struct

from nelssa.driver import cxl
from nelssa.driver.port import DDR5_COUNTERS, DevicePort
from nelssa.emu.link.model import LinkFaults, link_preset
from nelssa.emu.link.security import CurveClientKeys
from nelssa.emu.link.tokens import (
    AdminTokenError,
    read_token,
    read_token_file,
)
from nelssa.emu.link.transport import (
    LinkClient,
    LinkTimeoutError,
    RetryPolicy,
)

log = logging.getLogger(__name__)
CXL_LINK = "cxl-pcie5-x16"
"""The link preset of the host-device connection."""


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
    DMA_WRITE = 7
    """Write device memory by backdoor (``DMA_WRITE_REQ``); reply with nothing."""
    DMA_READ = 8
    """Read device memory by backdoor (``DMA_READ_REQ``); reply with the bytes as its one
    message."""
    CLOCK = 9
    """Deliver, then reply with the device's core clock in Hz."""
    AUTH = 10
    """Present the device's token (the payload, ``ADMIN_TOKEN_BYTES``): the connection's later
    calls are served. Every other call needs it first."""
    COUNTERS = 11
    """Deliver, then reply with the device's cycle count (``value``, as CYCLE) and its DDR5
    counters (``DevicePort.counters``): one message of a ``DDR5_COUNTS_REP`` per sub-channel,
    or none where the device does not count its DDR5 commands."""


class RpcStatus(IntEnum):
    """What a REPLY frame says (a failed call is an ERROR frame instead: ``RpcErrorCode``)."""

    OK = 0
    PENDING = 1
    """The call is still running (a heartbeat): ``value`` is the CPU time in ns the device has
    spent on it so far; ask again with WAIT."""


class RpcErrorCode(IntEnum):
    """Errors of the device server (link errors are below 100: frame.LinkErrorCode)."""

    BAD_REQUEST = 100
    """A call that cannot be served as sent (payload, argument range, a message that does not
    parse, a call while another runs); nothing was delivered."""
    DEVICE_ERROR = 101
    """The device refused or failed the call."""
    DEVICE_BUSY = 102
    """The device ran the cycles it was given and is still busy."""
    UNAUTHORIZED = 103
    """The connection has not presented the device's token (AUTH), or presented a wrong one;
    nothing was run."""


HEARTBEAT_S = 0.1
"""A call still running after this long is answered PENDING, and so is each WAIT after it: a
device answers within this whatever its work costs, so a client judges liveness by answers
and progress, never by how long legitimate work takes."""
_POLL_S = 0.05
"""How often a waiting client looks whether its call was abandoned (``RemotePort.abort``)."""

MESSAGES = GreedyRange(Prefixed(Int32ul, GreedyBytes))
"""A list of port messages: u32 length, bytes; repeated to the end."""
RPC_REQUEST = Struct("arg" / Int64ul, "messages" / MESSAGES)
"""A call: its argument (cycles for ADVANCE and RUN_UNTIL_IDLE), then the messages to deliver
first."""
RPC_REPLY = Struct("status" / Enum(Int8ul, RpcStatus), "value" / Int64ul, "messages" / MESSAGES)
"""An answer: a status, a value (cycles run, the cycle count, CPU ns while PENDING), then the
device's messages (RECEIVE)."""
_ARG = struct.Struct("<Q")
"""RPC_REQUEST's head for ``struct``, the per-call path (tests hold it to the spec)."""
_REPLY_HEAD = struct.Struct("<BQ")
"""RPC_REPLY's head for ``struct``."""
_LEN = struct.Struct("<I")
DDR5_COUNTS_REP = struct.Struct(f"<{len(DDR5_COUNTERS)}Q")
"""One sub-channel's counters (driver/port.DDR5_COUNTERS); a COUNTERS answer's message is one
of these per sub-channel counted, back to back."""
MAX_DDR5_SUBCHANNELS = 8
"""Most sub-channels a device counts (the RTL device's and the cycle model's)."""

DMA_WRITE_REQ = Struct("addr" / Int64ul, "data" / GreedyBytes)
"""A backdoor write: the device address, then the bytes (at most ``MAX_DMA_BYTES``)."""
DMA_READ_REQ = Struct("addr" / Int64ul, "length" / Int64ul)
"""A backdoor read: the device address and how many bytes (at most ``MAX_DMA_BYTES``)."""
MAX_DMA_BYTES = 1 << 22
"""Most bytes one backdoor call carries; a port cuts a larger transfer into calls."""

MAX_CALL_CYCLES = 1 << 24
"""Most cycles one ADVANCE or RUN_UNTIL_IDLE may ask for (21 ms at 800 MHz; about 17 s of
``rtl``), so no call holds a device for long or carries its clock anywhere near overflow."""
MAX_AUTHORIZED = 256
"""Connections a device server remembers as authorized (the least recently heard from is
forgotten first, and must present the token again)."""
MAX_BATCH_MESSAGES = 4096
"""Messages one call carries; a port sends a fuller buffer on its own first."""
MAX_PORT_MESSAGE = 1 + max(s.sizeof() for s in (cxl.M2S_REQ, cxl.M2S_RWD, cxl.S2M_NDR,
                                                 cxl.S2M_DRS, cxl.MMIO_REQ, cxl.MMIO_RSP))
"""The largest port message (driver/cxl.py: a channel byte and the largest body)."""
MAX_BATCH_PAYLOAD = _ARG.size + MAX_BATCH_MESSAGES * (_LEN.size + MAX_PORT_MESSAGE)
"""The largest call that carries port messages."""
MAX_RPC_PAYLOAD = max(MAX_BATCH_PAYLOAD, _ARG.size + MAX_DMA_BYTES)
"""The largest legal call (a backdoor write); the server refuses a larger message before
reading it."""
MAX_RPC_REPLY = _REPLY_HEAD.size + max((1 << 16) * (_LEN.size + MAX_PORT_MESSAGE),
                                       _LEN.size + MAX_DMA_BYTES)
"""The largest legal answer: a response for each of the 2^16 tags a host can have out, or a
backdoor read."""
RPC_RETRY = RetryPolicy(rto_s=2 * HEARTBEAT_S, min_rto_s=0.05, max_rto_s=1.0)
"""Every call is answered within a heartbeat: one lost is sent again after two, until the
round trips measured say sooner."""


def _pack_list(items: list[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(m)) + m for m in items)


def _unpack_list(data: bytes, pos: int = 0, limit: int | None = None) -> list[bytes]:
    out = []
    while pos < len(data):
        if limit is not None and len(out) >= limit:
            raise ValueError(f"more than {limit} messages in one call")
        if pos + 4 > len(data):
            raise ValueError("message list truncated in a length field")
        (n,) = _LEN.unpack_from(data, pos)
        if pos + 4 + n > len(data):
            raise ValueError(f"message list truncated: {n} bytes announced, "
                             f"{len(data) - pos - 4} left")
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


def encode_request(arg: int, messages: list[bytes]) -> bytes:
    """An ``RPC_REQUEST`` payload."""
    return _ARG.pack(arg) + _pack_list(messages)


def decode_request(data: bytes) -> tuple[int, list[bytes]]:
    """(arg, messages) of an ``RPC_REQUEST``; ValueError naming what is wrong."""
    if len(data) < _ARG.size:
        raise ValueError(f"call of {len(data)} bytes is shorter than its {_ARG.size}-byte "
                         "argument")
    return _ARG.unpack_from(data)[0], _unpack_list(data, _ARG.size, MAX_BATCH_MESSAGES)


def encode_reply(value: int, messages: list[bytes], status: RpcStatus = RpcStatus.OK
                 ) -> bytes:
    """An ``RPC_REPLY`` payload."""
    return _REPLY_HEAD.pack(status, value) + _pack_list(messages)


def decode_reply(data: bytes) -> tuple[RpcStatus, int, list[bytes]]:
    """(status, value, messages) of an ``RPC_REPLY``; ValueError naming what is wrong."""
    if len(data) < _REPLY_HEAD.size:
        raise ValueError(f"answer of {len(data)} bytes is shorter than its "
                         f"{_REPLY_HEAD.size}-byte head")
    status, value = _REPLY_HEAD.unpack_from(data)
    try:
        status = RpcStatus(status)
    except ValueError:
        raise ValueError(f"answer with unknown status {status}") from None
    return status, value, _unpack_list(data, _REPLY_HEAD.size)


def encode_ddr5_counts(rows: list[tuple[int, ...]] | None) -> list[bytes]:
    """A COUNTERS answer's messages for a port's DDR5 counters."""
    if not rows:
        return []
    if len(rows) > MAX_DDR5_SUBCHANNELS:
        raise ValueError(f"{len(rows)} DDR5 sub-channels; a device has at most "
                         f"{MAX_DDR5_SUBCHANNELS}")
    return [b"".join(DDR5_COUNTS_REP.pack(*r) for r in rows)]


def decode_ddr5_counts(messages: list[bytes], who: str) -> list[tuple[int, ...]] | None:
    """A COUNTERS answer's DDR5 counters, checked whole: no message (not counted), or one of
    1..MAX_DDR5_SUBCHANNELS whole rows; RuntimeError naming ``who`` and what is wrong."""
    if not messages:
        return None
    size = DDR5_COUNTS_REP.size
    rows, extra = divmod(len(messages[0]), size)
    if len(messages) != 1 or extra or not 0 < rows <= MAX_DDR5_SUBCHANNELS:
        raise RuntimeError(f"{who}: COUNTERS answered {len(messages)} messages of "
                           f"{sum(map(len, messages))} bytes; it is none, or one of 1.."
                           f"{MAX_DDR5_SUBCHANNELS} sub-channels of {size} bytes each")
    return [DDR5_COUNTS_REP.unpack_from(messages[0], i * size) for i in range(rows)]


def _check_cycles(cycles: int) -> None:
    if not 0 <= cycles <= MAX_CALL_CYCLES:
        raise ValueError(f"cycles must be in 0..{MAX_CALL_CYCLES}, got {cycles}")


class PortTimeoutError(TimeoutError):
    """The device process did not answer within the port's timeout (it may have died); the
    port cannot be used again."""


class PortAbortedError(PortTimeoutError):
    """The call was abandoned from another thread (``RemotePort.abort``: its device process
    exited); the port cannot be used again."""


class DeviceBusyError(TimeoutError):
    """The device ran the cycles it was given and is still busy (it answered: it is alive)."""


class DeviceAuthError(PermissionError):
    """The device refused this port's token (or it had none to present)."""


class RemotePort(DevicePort):
    """A device served by ``nelssa device serve`` at ``endpoint``; ``faults`` are injected at
    this end of the link, both directions (for tests). Before its first call the port presents
    the device's token: the one in ``token_file``, else the one the device wrote for its
    endpoint on this host (admin.read_token)."""

    def __init__(self, endpoint: str, timeout_ms: int = 60_000,
                 context: zmq.Context | None = None, curve: CurveClientKeys | None = None,
                 faults: LinkFaults | None = None, retry: RetryPolicy = RPC_RETRY,
                 token_file: str | os.PathLike[str] | None = None) -> None:
        self.endpoint = endpoint
        self._token_file = token_file
        self._authorized = False
        self._broken = False
        self._abort = threading.Event()
        self._abort_reason = ""
        self.link = LinkClient(endpoint, link_preset(CXL_LINK), timeout_ms / 1000, faults,
                               curve, context, self._error, retry, MAX_RPC_REPLY,
                               max_request=MAX_RPC_PAYLOAD)  # a device's limit: no hello
        self._timeout_ms = timeout_ms
        self._pending: list[bytes] = []

    def _error(self, code: int, text: str) -> Exception:
        if code == RpcErrorCode.DEVICE_BUSY:
            return DeviceBusyError(text)
        if code == RpcErrorCode.UNAUTHORIZED:
            return DeviceAuthError(f"device at {self.endpoint}: {text}")
        return RuntimeError(f"device at {self.endpoint}: {text}")

    def set_timeout(self, timeout_ms: int) -> None:
        """How long a call waits for an answer (retransmissions included), and for progress
        while the device works on it (each answer is due within ``HEARTBEAT_S``; the work
        itself may take longer)."""
        self.link.set_timeout(timeout_ms / 1000)
        self._timeout_ms = timeout_ms

    def abort(self, reason: str) -> None:
        """Abandon the call in progress, and every later one, with PortAbortedError(reason);
        safe from any thread (the socket stays with the thread that uses the port)."""
        self._abort_reason = reason
        self._abort.set()

    def _aborted(self) -> PortAbortedError:
        self._broken = True
        return PortAbortedError(f"device at {self.endpoint}: {self._abort_reason}")

    def _exchange(self, op: RpcOp, call: RpcOp, payload: bytes) -> tuple[RpcStatus, int,
                                                                          list[bytes]]:
        """One request and its answer, for ``call``: PortTimeoutError after the timeout,
        PortAbortedError at once when aborted."""
        pending = self.link.request(op, payload)
        while not pending.wait(_POLL_S):
            if self._abort.is_set():
                self.link.forget(pending)
                raise self._aborted()
        try:
            info = pending.result()
        except LinkTimeoutError:
            self._broken = True
            raise PortTimeoutError(f"device at {self.endpoint} did not answer {call.name} "
                                   f"within {self._timeout_ms / 1000:g} s") from None
        try:
            return decode_reply(info.payload)
        except ValueError as e:
            raise RuntimeError(f"device at {self.endpoint}: {call.name} answer: {e}") from None

    def _call(self, op: RpcOp, arg: int = 0) -> tuple[int, list[bytes]]:
        self._usable()
        msgs, self._pending = self._pending, []
        return self._call_payload(op, encode_request(arg, msgs))

    def _usable(self) -> None:
        if self._abort.is_set():
            raise self._aborted()
        if self._broken:
            raise PortTimeoutError(f"device at {self.endpoint} stopped answering earlier; the "
                                   "port is closed")

    def _authorize(self, op: RpcOp) -> None:
        """Present the device's token, once per connection (before ``op``, the first call).
        A device still starting may not have written its token yet: it has the port's
        timeout to; one that never does is as good as not there."""
        wait_s = self._timeout_ms / 1000
        try:
            if self._token_file is not None:
                token = read_token_file(Path(self._token_file), wait_s)
            else:
                token = read_token(self.endpoint, wait_s)
        except AdminTokenError as e:
            if self._token_file is not None:
                raise DeviceAuthError(f"device at {self.endpoint}: {e}") from None
            self._broken = True
            raise PortTimeoutError(f"device at {self.endpoint} did not answer {op.name} within "
                                   f"{wait_s:g} s ({e}; give the device's token file)") from None
        self._exchange(RpcOp.AUTH, op, token)
        self._authorized = True

    def _call_payload(self, op: RpcOp, payload: bytes) -> tuple[int, list[bytes]]:
        if not self._authorized:
            self._authorize(op)
        status, value, out = self._exchange(op, op, payload)
        cpu_ns, since = -1, time.monotonic()
        while status == RpcStatus.PENDING:  # a heartbeat: alive; stuck unless the CPU time grows
            now = time.monotonic()
            if value > cpu_ns:
                cpu_ns, since = value, now
            elif now - since >= self._timeout_ms / 1000:
                self._broken = True
                raise PortTimeoutError(f"device at {self.endpoint} made no progress on "
                                       f"{op.name} for {self._timeout_ms / 1000:g} s (busy "
                                       f"{cpu_ns / 1e9:.1f} CPU s on it)")
            status, value, out = self._exchange(RpcOp.WAIT, op, encode_request(0, []))
        return value, out

    def send(self, message: bytes) -> None:
        if len(message) > MAX_PORT_MESSAGE:
            raise ValueError(f"port message of {len(message)} bytes; the largest is "
                             f"{MAX_PORT_MESSAGE}")
        self._pending.append(bytes(message))
        if len(self._pending) >= MAX_BATCH_MESSAGES:
            self._call(RpcOp.SEND)

    def receive(self) -> list[bytes]:
        return self._call(RpcOp.RECEIVE)[1]

    def advance(self, cycles: int) -> None:
        _check_cycles(cycles)
        self._call(RpcOp.ADVANCE, cycles)

    def run_until_idle(self, max_cycles: int) -> int:
        _check_cycles(max_cycles)
        return self._call(RpcOp.RUN_UNTIL_IDLE, max_cycles)[0]

    @property
    def cycle(self) -> int:
        return self._call(RpcOp.CYCLE)[0]

    @property
    def clock_hz(self) -> int:
        return self._call(RpcOp.CLOCK)[0]

    def counters(self) -> tuple[int, list[tuple[int, ...]] | None]:
        value, msgs = self._call(RpcOp.COUNTERS)
        return value, decode_ddr5_counts(msgs, f"device at {self.endpoint}")

    def ddr5_counts(self) -> list[tuple[int, ...]] | None:
        return self.counters()[1]

    def dma_write(self, addr: int, data: bytes) -> bool:
        """Device memory by backdoor (after the messages sent before it), in calls of at most
        MAX_DMA_BYTES."""
        if self._pending:
            self._call(RpcOp.SEND)
        data = memoryview(data).cast("B")
        for pos in range(0, len(data), MAX_DMA_BYTES):
            self._usable()
            chunk = data[pos:pos + MAX_DMA_BYTES]
            self._call_payload(RpcOp.DMA_WRITE, _ARG.pack(addr + pos) + chunk)
        return True

    def dma_read(self, addr: int, n: int) -> bytes:
        if self._pending:
            self._call(RpcOp.SEND)
        out = bytearray()
        for pos in range(0, n, MAX_DMA_BYTES):
            self._usable()
            want = min(MAX_DMA_BYTES, n - pos)
            _, msgs = self._call_payload(RpcOp.DMA_READ, DMA_READ_REQ.build(
                {"addr": addr + pos, "length": want}))
            if len(msgs) != 1 or len(msgs[0]) != want:
                raise RuntimeError(f"device at {self.endpoint}: DMA_READ of {want} bytes "
                                   f"answered with {sum(map(len, msgs))}")
            out += msgs[0]
        return bytes(out)

    def shutdown(self) -> None:
        """Ask the server to exit."""
        self._call(RpcOp.SHUTDOWN)

    def close(self) -> None:
        if self._pending and not self._broken and not self._abort.is_set():
            self._call(RpcOp.SEND)
        self.link.close()
