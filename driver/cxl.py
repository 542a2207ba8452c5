"""The messages of a device port (construct structs, little endian, IntEnum opcodes): CXL.mem
M2S Req / RwD and S2M NDR / DRS on 64-byte lines with 16-bit tags, plus the CXL.io register
accesses (32-bit MMIO) beside them. Every message is one ``MESSAGE``: a channel byte, then that
channel's body. The same bytes cross the ZeroMQ link and the C ABI of the RTL harness.

A request whose opcode is not defined for its channel is answered on the channel's response
(MMIO_RSP, S2M DRS for a Req, S2M NDR for a RwD) with ``RspStatus.OPCODE_ERROR``, the request's
tag, zero data (all ones for MMIO, as a PCIe unsupported request reads), and nothing else done.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from construct import (
    Bytes,
    Container,
    Enum,
    Int8ul,
    Int16ul,
    Int32ul,
    Int64ul,
    StreamError,
    Struct,
    Switch,
)


class Channel(IntEnum):
    M2S_REQ = 0
    """Host to device, request without data (MemRd)."""
    M2S_RWD = 1
    """Host to device, request with data (MemWr, MemWrPtl)."""
    S2M_NDR = 2
    """Device to host, response without data (Cmp)."""
    S2M_DRS = 3
    """Device to host, response with data (MemData)."""
    MMIO_REQ = 4
    """Host to device, register read or write (CXL.io)."""
    MMIO_RSP = 5
    """Device to host, register read data (or the error answer to an undefined opcode)."""


class M2SReqOpcode(IntEnum):
    MEM_RD = 1


class M2SRwDOpcode(IntEnum):
    MEM_WR = 1
    """Full-line write (all 64 byte enables set)."""
    MEM_WR_PTL = 2
    """Partial write: only the bytes whose enable bit is set."""


class S2MNdrOpcode(IntEnum):
    CMP = 0


class S2MDrsOpcode(IntEnum):
    MEM_DATA = 0


class MmioOpcode(IntEnum):
    READ = 0
    """Answered with MMIO_RSP."""
    WRITE = 1
    """Posted: no answer."""


class RspStatus(IntEnum):
    """Status of a CXL.mem response (the poison indication of a DRS, an error of an NDR)."""

    OK = 0
    ADDR_ERROR = 1
    """The address lies outside device memory; nothing was read or written."""
    OPCODE_ERROR = 2
    """The opcode is not defined for the request's channel; nothing was read or written."""


M2S_REQ = Struct("opcode" / Enum(Int8ul, M2SReqOpcode), "tag" / Int16ul, "addr" / Int64ul)
M2S_RWD = Struct("opcode" / Enum(Int8ul, M2SRwDOpcode), "tag" / Int16ul, "addr" / Int64ul,
                 "byte_enable" / Int64ul, "data" / Bytes(64))
S2M_NDR = Struct("opcode" / Enum(Int8ul, S2MNdrOpcode), "tag" / Int16ul,
                 "status" / Enum(Int8ul, RspStatus))
S2M_DRS = Struct("opcode" / Enum(Int8ul, S2MDrsOpcode), "tag" / Int16ul,
                 "status" / Enum(Int8ul, RspStatus), "data" / Bytes(64))
MMIO_REQ = Struct("opcode" / Enum(Int8ul, MmioOpcode), "tag" / Int16ul, "offset" / Int32ul,
                  "value" / Int32ul)
MMIO_RSP = Struct("tag" / Int16ul, "status" / Enum(Int8ul, RspStatus), "value" / Int32ul)

MESSAGE = Struct(
    "channel" / Enum(Int8ul, Channel),
    "body" / Switch(lambda ctx: int(ctx.channel), {
        Channel.M2S_REQ: M2S_REQ, Channel.M2S_RWD: M2S_RWD, Channel.S2M_NDR: S2M_NDR,
        Channel.S2M_DRS: S2M_DRS, Channel.MMIO_REQ: MMIO_REQ, Channel.MMIO_RSP: MMIO_RSP,
    }),
)
"""Any port message."""
# The line path packs and unpacks with ``struct`` (tens of times faster than construct); the
# layouts below restate MESSAGE field for field, and a test holds them to it byte for byte.
_FAST: dict[int, tuple[struct.Struct, tuple[str, ...]]] = {
    Channel.M2S_REQ: (struct.Struct("<BBHQ"), ("opcode", "tag", "addr")),
    Channel.M2S_RWD: (struct.Struct("<BBHQQ64s"), ("opcode", "tag", "addr", "byte_enable",
                                                   "data")),
    Channel.S2M_NDR: (struct.Struct("<BBHB"), ("opcode", "tag", "status")),
    Channel.S2M_DRS: (struct.Struct("<BBHB64s"), ("opcode", "tag", "status", "data")),
    Channel.MMIO_REQ: (struct.Struct("<BBHII"), ("opcode", "tag", "offset", "value")),
    Channel.MMIO_RSP: (struct.Struct("<BHBI"), ("tag", "status", "value")),
}


def parse_message(raw: bytes) -> Container:
    """What ``MESSAGE.parse`` gives (enum fields as plain ints), fast; a message of the wrong
    length or on an unknown channel raises StreamError naming it."""
    if not raw:
        raise StreamError("empty port message")
    fast = _FAST.get(raw[0])
    if fast is None:
        raise StreamError(f"port message on unknown channel {raw[0]}")
    layout, names = fast
    if len(raw) != layout.size:
        raise StreamError(f"port message of {len(raw)} bytes on channel "
                          f"{Channel(raw[0]).name}, which has {layout.size}: truncated or "
                          "overlong")
    values = layout.unpack(raw)
    return Container(channel=values[0], body=Container(zip(names, values[1:], strict=True)))


def build_message(channel: Channel, body: dict[str, int | bytes]) -> bytes:
    """``MESSAGE.build`` for one channel's body, fast."""
    layout, names = _FAST[channel]
    return layout.pack(channel, *(body[n] for n in names))


FULL_LINE = (1 << 64) - 1
"""Byte enables of a full-line write."""


def mem_rd(tag: int, addr: int) -> bytes:
    return build_message(Channel.M2S_REQ, {"opcode": M2SReqOpcode.MEM_RD, "tag": tag,
                                           "addr": addr})


def mem_wr(tag: int, addr: int, data: bytes, byte_enable: int = FULL_LINE) -> bytes:
    op = M2SRwDOpcode.MEM_WR if byte_enable == FULL_LINE else M2SRwDOpcode.MEM_WR_PTL
    return build_message(Channel.M2S_RWD, {"opcode": op, "tag": tag, "addr": addr,
                                           "byte_enable": byte_enable, "data": data})


def mmio_rd(tag: int, offset: int) -> bytes:
    return build_message(Channel.MMIO_REQ, {"opcode": MmioOpcode.READ, "tag": tag,
                                            "offset": offset, "value": 0})


def mmio_wr(tag: int, offset: int, value: int) -> bytes:
    return build_message(Channel.MMIO_REQ, {"opcode": MmioOpcode.WRITE, "tag": tag,
                                            "offset": offset, "value": value})


def mmio_rsp(tag: int, value: int, status: RspStatus = RspStatus.OK) -> bytes:
    return build_message(Channel.MMIO_RSP, {"tag": tag, "status": status, "value": value})


def opcode_defined(channel: int, opcode: int) -> bool:
    """Whether a host-to-device request's opcode is defined for its channel."""
    if channel == Channel.MMIO_REQ:
        return opcode in (MmioOpcode.READ, MmioOpcode.WRITE)
    if channel == Channel.M2S_REQ:
        return opcode == M2SReqOpcode.MEM_RD
    if channel == Channel.M2S_RWD:
        return opcode in (M2SRwDOpcode.MEM_WR, M2SRwDOpcode.MEM_WR_PTL)
    return False
