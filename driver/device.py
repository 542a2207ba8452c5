"""A device as the driver sees it: register and memory access over a port, with tags, waits and
errors handled (the role of a real driver's BAR accessors and DMA helpers). Backends sit below
the port; the Memory and Command APIs sit above this class."""

from __future__ import annotations

import logging

from nelssa.driver import cxl, regs
from nelssa.driver.formats import LINE_BYTES
from nelssa.driver.port import DevicePort

log = logging.getLogger(__name__)

POLL_CYCLES = 64
"""Device cycles to run while waiting for a response that is not there yet."""
DMA_MIN_BYTES = 4096
"""Transfers this long or longer go through the port's DMA engine (or a simulated device's
backdoor) when it has one."""
MAX_OUTSTANDING = 256
"""CXL.mem requests the driver keeps in flight (tags are 16-bit; the device may back-pressure)."""


class DeviceError(RuntimeError):
    """The device answered with an error (an address outside device memory, ...)."""


class Device:
    """Registers and memory of one device behind ``port``."""

    def __init__(self, port: DevicePort, response_timeout_cycles: int = 1_000_000,
                 bulk: bool = True) -> None:
        """``bulk``: transfers of DMA_MIN_BYTES or more go through the port's DMA engine or
        backdoor when it has one (the bytes metered are the same); False sends every line
        over CXL.mem."""
        self.port = port
        self.timeout = response_timeout_cycles
        self.bulk = bulk
        self._tag = 0
        magic = self.reg_read("MAGIC")
        if magic != regs.DEVICE_MAGIC:
            raise DeviceError(f"no NELSSA device behind the port (MAGIC reads {magic:#010x})")
        self.caps_word = self.reg_read("CAPS")
        """The CAPS register as read (``caps`` is its fields)."""
        self.caps = regs.unpack_caps(self.caps_word)
        self.mem_bytes = self.reg_read64("MEM_SIZE")

    def _next_tag(self) -> int:
        self._tag = (self._tag + 1) & 0xFFFF
        return self._tag

    def _collect(self, want: set[int], channel: cxl.Channel) -> dict[int, object]:
        """Wait for the responses with these tags on this channel."""
        got: dict[int, object] = {}
        waited = 0
        while len(got) < len(want):
            for raw in self.port.receive():
                msg = cxl.parse_message(raw)
                if int(msg.channel) != channel or msg.body.tag not in want:
                    raise DeviceError(f"unexpected {cxl.Channel(int(msg.channel)).name} message "
                                      f"with tag {msg.body.tag}")
                got[msg.body.tag] = msg.body
            if len(got) < len(want):
                if waited >= self.timeout:
                    raise TimeoutError(f"{len(want) - len(got)} {channel.name} responses missing "
                                       f"after {waited} device cycles")
                self.port.advance(POLL_CYCLES)
                waited += POLL_CYCLES
        return got

    # -- registers -------------------------------------------------------------------------------
    def reg_read(self, reg: str | int) -> int:
        off = regs.offset(reg) if isinstance(reg, str) else reg
        tag = self._next_tag()
        self.port.send(cxl.mmio_rd(tag, off))
        rsp = self._collect({tag}, cxl.Channel.MMIO_RSP)[tag]
        if int(rsp.status) != cxl.RspStatus.OK:
            raise DeviceError(f"register read at {off:#x}: device reported "
                              f"{cxl.RspStatus(int(rsp.status)).name}")
        return int(rsp.value)

    def reg_write(self, reg: str | int, value: int) -> None:
        off = regs.offset(reg) if isinstance(reg, str) else reg
        if not 0 <= value <= 0xFFFF_FFFF:
            raise ValueError(f"register value must fit 32 bits, got {value:#x}")
        self.port.send(cxl.mmio_wr(self._next_tag(), off, value))

    def reg_read64(self, name: str) -> int:
        return self.reg_read(f"{name}_LO") | self.reg_read(f"{name}_HI") << 32

    def reg_write64(self, name: str, value: int) -> None:
        self.reg_write(f"{name}_LO", value & 0xFFFF_FFFF)
        self.reg_write(f"{name}_HI", value >> 32)

    # -- memory ----------------------------------------------------------------------------------
    def _check_range(self, addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > self.mem_bytes:
            raise ValueError(f"[{addr:#x}, {addr + n:#x}) is outside device memory "
                             f"(0 .. {self.mem_bytes:#x})")

    def mem_write(self, addr: int, data: bytes | memoryview) -> None:
        """Write bytes anywhere in device memory (partial lines with byte enables)."""
        data = memoryview(data).cast("B")  # any contiguous buffer, never copied here
        self._check_range(addr, len(data))
        if self.bulk and len(data) >= DMA_MIN_BYTES and self.port.dma_write(addr, data):
            return
        pending: set[int] = set()
        pos = 0
        while pos < len(data):
            line, off = divmod(addr + pos, LINE_BYTES)
            take = min(LINE_BYTES - off, len(data) - pos)
            chunk = bytes(off) + data[pos:pos + take] + bytes(LINE_BYTES - off - take)
            enable = ((1 << take) - 1) << off
            tag = self._next_tag()
            self.port.send(cxl.mem_wr(tag, line * LINE_BYTES, chunk, enable))
            pending.add(tag)
            pos += take
            if len(pending) >= MAX_OUTSTANDING:
                self._expect_ok(self._collect(pending, cxl.Channel.S2M_NDR))
                pending.clear()
        if pending:
            self._expect_ok(self._collect(pending, cxl.Channel.S2M_NDR))

    def mem_read(self, addr: int, n: int) -> bytes:
        """Read bytes anywhere in device memory."""
        self._check_range(addr, n)
        if self.bulk and n >= DMA_MIN_BYTES:
            data = self.port.dma_read(addr, n)
            if data is not None:
                return data
        first, last = addr // LINE_BYTES, (addr + n - 1) // LINE_BYTES if n else addr // LINE_BYTES
        out = bytearray()
        line = first
        while n and line <= last:
            batch = range(line, min(last + 1, line + MAX_OUTSTANDING))
            tags = {}
            for ln in batch:
                tag = self._next_tag()
                self.port.send(cxl.mem_rd(tag, ln * LINE_BYTES))
                tags[tag] = ln
            got = self._collect(set(tags), cxl.Channel.S2M_DRS)
            self._expect_ok(got)
            for tag in tags:  # in address order
                out += got[tag].data
            line = batch.stop
        off = addr - first * LINE_BYTES
        return bytes(out[off:off + n])

    @staticmethod
    def _expect_ok(responses: dict[int, object]) -> None:
        bad = [t for t, r in responses.items() if int(r.status) != cxl.RspStatus.OK]
        if bad:
            raise DeviceError(f"device reported {cxl.RspStatus(int(responses[bad[0]].status)).name}"
                              f" for {len(bad)} request(s)")
