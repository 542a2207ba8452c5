"""The frame every link message travels in (construct, little endian).

A frame is two ZeroMQ message parts: a fixed 32-byte header and the payload. The header carries
the kind (request, reply, error, one-sided data), an operation code owned by the layer above, a
sequence number, a reference (in a reply: the sequence number of the request it answers; in a
request: the sender's acknowledgement floor, the lowest sequence number whose reply it still
waits for), the sender's emulated time in picoseconds, the payload length and a CRC-32 over the
header (with the CRC field zero) and the payload. ``decode_frame`` checks all of it, every field
against its range, and names the first thing that is wrong.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from construct import (
    Const,
    ConstructError,
    Enum,
    GreedyBytes,
    Int8ul,
    Int16ul,
    Int32ul,
    Int64ul,
    PascalString,
    Struct,
)

FRAME_MAGIC = b"NLNK"
FRAME_VERSION = 1


class FrameKind(IntEnum):
    REQUEST = 1
    """Asks for a reply (control path, or a data exchange that returns a result)."""
    REPLY = 2
    """Answers the request whose ``seq`` is in ``ref``."""
    ERROR = 3
    """Answers a request with an error: payload is an ``ERROR_BODY``."""
    DATA = 4
    """One-sided: no reply expected."""


class LinkErrorCode(IntEnum):
    """Errors of the link itself; layers above number theirs from 100."""

    MALFORMED_FRAME = 1
    """The frame could not be parsed (parts, magic, version, length)."""
    CHECKSUM = 2
    """The CRC-32 did not match: the frame was corrupted on the way."""
    UNKNOWN_OP = 3
    """The operation code is not served here."""
    INTERNAL = 4
    """The handler failed in a way it did not classify."""
    TIMEOUT = 5
    """Something behind the server did not answer in time."""
    FIELD_RANGE = 6
    """A header field outside what this side takes: a kind it does not serve, sequence number
    0, a reference past the sequence number, an emulated time (or a reply time) past
    ``MAX_EMU_TIME_PS``."""
    REPLY_LOST = 7
    """A retransmitted request whose reply the server no longer holds; it ran once and is not
    run again."""
    STOPPING = 8
    """The server is shutting down; the request was not run."""
    BUSY = 9
    """The server's queue is full (its client's share of it taken): the request was not run,
    and may be sent again later (LinkLimits.max_queued)."""
    TOO_LARGE = 10
    """A request larger than the server takes (its ``LinkLimits.max_payload``, learned by the
    client's hello): refused by the client before it is sent (ZeroMQ would drop it, and the
    connection, without an answer)."""


LINK_HELLO_OP = 0xFFFF
"""The link's own operation (layers above number theirs below it): a REQUEST with it is
answered by the server itself with ``HELLO_REP``, its handler never sees it, and no emulated
clock moves."""
HELLO_REP = Struct("max_payload" / Int64ul, "info" / GreedyBytes)
"""The answer to a hello: the largest payload the server takes, and what the layer above tells
its clients (LinkServer's ``hello_info``)."""


MAX_EMU_TIME_PS = (1 << 62) - 1
"""The latest emulated time a frame may carry (53 days): past any run, and far enough below the
header's 2^64 that times derived from it (arrival, service) cannot wrap before they are
checked."""


FRAME_HEADER = Struct(
    "magic" / Const(FRAME_MAGIC),
    "version" / Int8ul,
    "kind" / Enum(Int8ul, FrameKind),
    "op" / Int16ul,
    "seq" / Int32ul,
    "ref" / Int32ul,
    "emu_time_ps" / Int64ul,
    "length" / Int32ul,
    "crc32" / Int32ul,
)
"""Fixed part of every frame (32 bytes)."""
HEADER_BYTES = FRAME_HEADER.sizeof()
_HEADER = struct.Struct("<4sBBHIIQII")
"""FRAME_HEADER for ``struct`` (the per-message path; tests hold it to FRAME_HEADER)."""

ERROR_BODY = Struct("code" / Int16ul, "text" / PascalString(Int16ul, "utf8"))
"""Payload of an ERROR frame: a code (LinkErrorCode or a higher layer's) and a message."""


class FrameError(ValueError):
    """A frame that cannot be accepted; ``code`` says which kind of problem. ``seq`` and ``ref``
    are what the header claims (0 where it could not be read): hints, not trusted values."""

    def __init__(self, code: LinkErrorCode, message: str, seq: int = 0, ref: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.seq = seq
        self.ref = ref


@dataclass(frozen=True)
class Frame:
    kind: FrameKind
    op: int
    seq: int
    ref: int
    emu_time_ps: int
    payload: bytes


try:  # Intel ISA-L's CRC-32: the same values as zlib's, 7x as fast here (a 64 MiB KV write)
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - an environment without it (the vLLM one)
    _crc32 = zlib.crc32


def _crc(header_zero_crc: bytes, payload: bytes) -> int:
    return _crc32(payload, _crc32(header_zero_crc))


_FIELD_BITS = {"op": 16, "seq": 32, "ref": 32, "emu_time_ps": 64}


def encode_frame(frame: Frame) -> list[bytes]:
    """The two message parts of ``frame``; ValueError naming a field its header cannot hold."""
    for name, bits in _FIELD_BITS.items():
        value = getattr(frame, name)
        if not 0 <= value < 1 << bits:
            raise ValueError(f"frame field {name} = {value} does not fit {bits} bits")
    if len(frame.payload) >= 1 << 32:
        raise ValueError(f"a frame payload holds < 4 GiB, got {len(frame.payload)} bytes")
    fields = (FRAME_MAGIC, FRAME_VERSION, frame.kind, frame.op, frame.seq, frame.ref,
              frame.emu_time_ps, len(frame.payload))
    header = _HEADER.pack(*fields, _crc(_HEADER.pack(*fields, 0), frame.payload))
    return [header, frame.payload]


def decode_frame(parts: list[bytes]) -> Frame:
    """Parse and check a received frame; raises FrameError naming what is wrong. The checks run
    in an order that blames corruption on the checksum: the parts, the magic, the version and
    the length first (what a foreign or newer sender gets wrong), then the CRC, then the field
    ranges."""
    if len(parts) != 2:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"a frame has 2 message parts (header, payload), got {len(parts)}")
    header, payload = bytes(parts[0]), bytes(parts[1])
    if len(header) != HEADER_BYTES:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"frame header is {len(header)} bytes, expected {HEADER_BYTES}")
    if header[:4] != FRAME_MAGIC:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"bad frame magic {header[:4]!r}, expected {FRAME_MAGIC!r}")
    _, version, kind_value, op, seq, ref, emu_time_ps, length, crc32 = _HEADER.unpack(header)
    if version != FRAME_VERSION:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"frame version {version}, this side speaks {FRAME_VERSION}", seq, ref)
    if length != len(payload):
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"frame {seq} announces {length} payload bytes, carries "
                         f"{len(payload)}", seq, ref)
    blank = header[:HEADER_BYTES - 4] + bytes(4)
    crc = _crc(blank, payload)
    if crc != crc32:
        raise FrameError(LinkErrorCode.CHECKSUM,
                         f"checksum mismatch on frame {seq}: computed {crc:#010x}, header "
                         f"says {crc32:#010x}", seq, ref)
    try:
        kind = FrameKind(kind_value)
    except ValueError:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME, f"unknown frame kind {kind_value}",
                         seq, ref) from None
    if emu_time_ps > MAX_EMU_TIME_PS:
        raise FrameError(LinkErrorCode.FIELD_RANGE,
                         f"frame {seq} carries emulated time {emu_time_ps} ps, past the "
                         f"{MAX_EMU_TIME_PS} ps a link takes", seq, ref)
    return Frame(kind, op, seq, ref, emu_time_ps, payload)


def error_payload(code: int, text: str) -> bytes:
    """ERROR frame payload (texts beyond 4 KiB are cut, with a marker)."""
    if len(text) > 4096:
        text = text[:4090] + " ..."
    return ERROR_BODY.build({"code": code, "text": text})


def parse_error(payload: bytes) -> tuple[int, str]:
    """(code, text) of an ERROR frame's payload; FrameError if it is not an ``ERROR_BODY``."""
    try:
        body = ERROR_BODY.parse(payload)
    except (ConstructError, UnicodeDecodeError) as e:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"error frame payload of {len(payload)} bytes does not parse: "
                         f"{e}") from None
    return body.code, body.text
