"""The frame every link message travels in (construct, little endian).

A frame is two ZeroMQ message parts: a fixed 32-byte header and the payload. The header carries
the kind (request, reply, error, one-sided data), an operation code owned by the layer above, a
sequence number, the sequence number of the request a reply answers, the sender's emulated time
in picoseconds, the payload length and a CRC-32 over the header (with the CRC field zero) and the
payload. ``decode_frame`` checks all of it and names the first thing that is wrong.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from construct import (
    Const,
    Enum,
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
    """A frame that cannot be accepted; ``code`` says which kind of problem."""

    def __init__(self, code: LinkErrorCode, message: str, seq: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.seq = seq


@dataclass(frozen=True)
class Frame:
    kind: FrameKind
    op: int
    seq: int
    ref: int
    emu_time_ps: int
    payload: bytes


def _crc(header_zero_crc: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(header_zero_crc))


def encode_frame(frame: Frame) -> list[bytes]:
    """The two message parts of ``frame``."""
    fields = (FRAME_MAGIC, FRAME_VERSION, frame.kind, frame.op, frame.seq, frame.ref,
              frame.emu_time_ps, len(frame.payload))
    header = _HEADER.pack(*fields, _crc(_HEADER.pack(*fields, 0), frame.payload))
    return [header, frame.payload]


def decode_frame(parts: list[bytes]) -> Frame:
    """Parse and check a received frame; raises FrameError naming what is wrong."""
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
                         f"frame version {version}, this side speaks {FRAME_VERSION}", seq)
    try:
        kind = FrameKind(kind_value)
    except ValueError:
        raise FrameError(LinkErrorCode.MALFORMED_FRAME, f"unknown frame kind {kind_value}",
                         seq) from None
    if length != len(payload):
        raise FrameError(LinkErrorCode.MALFORMED_FRAME,
                         f"frame {seq} announces {length} payload bytes, carries "
                         f"{len(payload)}", seq)
    blank = header[:HEADER_BYTES - 4] + bytes(4)
    crc = _crc(blank, payload)
    if crc != crc32:
        raise FrameError(LinkErrorCode.CHECKSUM,
                         f"checksum mismatch on frame {seq}: computed {crc:#010x}, header "
                         f"says {crc32:#010x}", seq)
    return Frame(kind, op, seq, ref, emu_time_ps, payload)


def error_payload(code: int, text: str) -> bytes:
    """ERROR frame payload (texts beyond 4 KiB are cut, with a marker)."""
    if len(text) > 4096:
        text = text[:4090] + " ..."
    return ERROR_BODY.build({"code": code, "text": text})


def parse_error(payload: bytes) -> tuple[int, str]:
    body = ERROR_BODY.parse(payload)
    return body.code, body.text
