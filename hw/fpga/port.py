"""The ``fpga`` backend: the port of a device on a board. Register messages become 32-bit loads
and stores on the register BAR; CXL.mem lines become loads and stores on the memory BAR (the
board's PCIe IP turns them into AXI4 toward the device's CXL.mem side); bulk transfers go
through a DMA channel (XDMA-style character devices: ``pwrite``/``pread`` at the card address).
Time is the device's own: PERF_CYCLES, read from the board.

Opening a board checks, in this order and before anything is written: the manifest (present,
well formed, built for this software's interface), the PCI ids of the folder, the register BAR
(present, big enough), then, on a read-only mapping, MAGIC, VERSION, IFACE_HASH, BUILD_ID, CAPS
and MEM_SIZE against the manifest.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from construct import StreamError

from nelssa.driver import cxl, regs
from nelssa.driver.formats import LINE_BYTES
from nelssa.driver.port import DevicePort
from nelssa.driver.remote import DeviceBusyError
from nelssa.hw.fpga.bar import DMA_C2H_NAME, DMA_H2C_NAME, BoardFiles, MmioRegion
from nelssa.hw.fpga.errors import BarError, DeviceNotAnsweringError
from nelssa.hw.fpga.manifest import Manifest

log = logging.getLogger(__name__)

ALL_ONES = 0xFFFF_FFFF
_SQ_TAIL = regs.offset("SQ_TAIL")
IDENTITY = ("MAGIC", "VERSION", "IFACE_HASH", "BUILD_ID", "CAPS", "MEM_SIZE")


def read_identity(read32: Callable[[int], int]) -> dict[str, int]:
    """The identity registers of a board (reads only). A board that reads all ones is not
    answering; one whose MAGIC is anything else holds something that is not ours."""
    magic = read32(regs.offset("MAGIC"))
    if magic == ALL_ONES:
        raise DeviceNotAnsweringError("the board reads all ones: the device is not answering "
                                      "(bitstream not loaded, link down, or removed)")
    if magic != regs.DEVICE_MAGIC:
        raise BarError(f"not a NELSSA device: MAGIC reads {magic:#010x}, expected "
                       f"{regs.DEVICE_MAGIC:#010x}")
    values = {n: read32(regs.offset(n)) for n in IDENTITY if n != "MEM_SIZE"}
    values["MEM_SIZE"] = read64(read32, "MEM_SIZE")
    return values


def read64(read32: Callable[[int], int], name: str) -> int:
    """A LO/HI register pair, LO first (reading LO latches HI)."""
    lo = read32(regs.offset(f"{name}_LO"))
    return lo | read32(regs.offset(f"{name}_HI")) << 32


@dataclass(frozen=True)
class DmaPaths:
    """A board's DMA channel: host-to-card and card-to-host character devices."""

    h2c: Path
    c2h: Path


class FpgaPort(DevicePort):
    """A device on a board (or a fake board), behind the port every backend implements."""

    def __init__(self, bar: Path | str, manifest: Path | str | Manifest | None = None, *,
                 dma: DmaPaths | str | None = "auto", stall_timeout_s: float = 10.0,
                 poll_s: float = 20e-6) -> None:
        """``bar``: the board's PCI device folder or one of its resourceN files. ``manifest``:
        the bitstream's manifest (default: ``manifest.json`` in the board folder). ``dma``:
        the DMA channel; "auto" takes a fake board's, None uses the memory BAR only.
        ``stall_timeout_s``: how long the device may stand still (its cycle counter, a store
        announcement) before it counts as not answering."""
        manifest = board_manifest(bar, manifest)
        manifest.check_software()
        self.manifest = manifest
        self.files = BoardFiles.locate(bar, manifest.pci)
        self.stall_timeout_s, self.poll_s = stall_timeout_s, poll_s
        # identity on a read-only mapping: no store can reach the board before it passes
        ro = MmioRegion(self.files.regs, regs.REG_WINDOW_BYTES, "register", writable=False)
        try:
            self.identity = read_identity(ro.read32)
        finally:
            ro.close()
        manifest.check_registers(self.identity)
        self.mem_bytes = manifest.device.mem_bytes
        self._h2c = self._c2h = -1
        self._tap: socket.socket | None = None
        try:
            self._open(dma)
        except BaseException:
            self.close()  # a half-open board keeps neither its lock nor its descriptors
            raise
        self._out: list[bytes] = []
        self._busy_mark: int | None = None
        log.info("board %s: %s (%s), build %#x, %d engines, %d GiB, memory BAR %#x bytes, "
                 "DMA %s", self.files.folder, manifest.board, manifest.part, manifest.build_id,
                 manifest.device.engines, self.mem_bytes >> 30, self._mem.size,
                 "yes" if self._h2c >= 0 else "no")

    def _open(self, dma: DmaPaths | str | None) -> None:
        self._regs = MmioRegion(self.files.regs, regs.REG_WINDOW_BYTES, "register", True,
                                exclusive=True)
        self._mem = MmioRegion(self.files.mem, LINE_BYTES, "memory", True)
        self.aperture = min(self._mem.size, self.mem_bytes)
        if dma == "auto":
            h2c, c2h = self.files.folder / DMA_H2C_NAME, self.files.folder / DMA_C2H_NAME
            dma = DmaPaths(h2c, c2h) if h2c.exists() and c2h.exists() else None
        if isinstance(dma, DmaPaths):
            try:
                self._h2c = os.open(dma.h2c, os.O_WRONLY)
                self._c2h = os.open(dma.c2h, os.O_RDONLY)
            except OSError as e:
                raise BarError(f"cannot open the DMA channel: {e}") from e
        if self.aperture < self.mem_bytes and self._h2c < 0:
            raise BarError(f"the memory BAR {self.files.mem} maps {self.aperture:#x} bytes of "
                           f"the device's {self.mem_bytes:#x} and there is no DMA channel for "
                           "the rest: give one (--bar DIR,H2C,C2H)")
        if self.files.tap is not None:
            self._tap = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._tap.settimeout(self.stall_timeout_s)
            try:
                self._tap.connect(str(self.files.tap))
            except OSError as e:
                raise DeviceNotAnsweringError(f"the fake board at {self.files.folder} is not "
                                              f"served: {e}") from e

    # -- registers --------------------------------------------------------------------------------
    def _rd32(self, off: int) -> int:
        value = self._regs.read32(off)
        # all ones is also what an unmapped offset reads; MAGIC tells a gone board apart
        if value == ALL_ONES and self._regs.read32(regs.offset("MAGIC")) == ALL_ONES:
            raise DeviceNotAnsweringError(f"the board at {self.files.folder} stopped answering: "
                                          "reads return all ones")
        return value

    def _wr32(self, off: int, value: int) -> None:
        if off == _SQ_TAIL:  # device time of what this doorbell starts, from here
            self._busy_mark = self._rd64("PERF_BUSY")
        self._regs.write32(off, value)
        if self._tap is not None:  # a fake board: announce the store and wait until it is taken
            try:
                self._tap.sendall(struct.pack("<I", off))
                ack = self._tap.recv(1)
            except OSError as e:
                raise DeviceNotAnsweringError(f"the fake board at {self.files.folder} did not "
                                              f"take a register write: {e}") from e
            if not ack:
                raise DeviceNotAnsweringError(f"the fake board at {self.files.folder} is gone")

    def read_register(self, name: str) -> int:
        """One register by name (a load from the register BAR)."""
        return self._rd32(regs.offset(name))

    @property
    def has_dma(self) -> bool:
        return self._h2c >= 0

    def _rd64(self, name: str) -> int:
        return read64(self._rd32, name)

    # -- memory -----------------------------------------------------------------------------------
    def _mem_read(self, addr: int, n: int) -> bytes:
        if addr + n <= self.aperture:
            return self._mem.read(addr, n)
        data = self.dma_read(addr, n)
        assert data is not None  # beyond the aperture only with a DMA channel (checked at open)
        return data

    def _mem_write(self, addr: int, data: bytes) -> None:
        if addr + len(data) <= self.aperture:
            self._mem.write(addr, data)
        else:
            self.dma_write(addr, data)

    def dma_write(self, addr: int, data: bytes) -> bool:
        if self._h2c < 0:
            return False
        done = os.pwrite(self._h2c, data, addr)
        if done != len(data):
            raise DeviceNotAnsweringError(f"DMA write of {len(data)} bytes at {addr:#x} wrote "
                                          f"{done}")
        return True

    def dma_read(self, addr: int, n: int) -> bytes | None:
        if self._c2h < 0:
            return None
        data = os.pread(self._c2h, n, addr)
        if len(data) != n:
            raise DeviceNotAnsweringError(f"DMA read of {n} bytes at {addr:#x} returned "
                                          f"{len(data)}")
        return data

    # -- port -------------------------------------------------------------------------------------
    def send(self, message: bytes) -> None:
        try:
            msg = cxl.parse_message(message)
        except StreamError as e:
            raise ValueError(f"not a host-to-device message: {e}") from None
        ch, body = int(msg.channel), msg.body
        if ch not in (cxl.Channel.MMIO_REQ, cxl.Channel.M2S_REQ, cxl.Channel.M2S_RWD):
            raise ValueError(f"{cxl.Channel(ch).name} is a device-to-host channel")
        # loads and stores carry no opcode to the board: an undefined one is answered here
        # (the board's ERR_OPCODE never sees it)
        defined = cxl.opcode_defined(ch, body.opcode)
        if ch == cxl.Channel.MMIO_REQ:
            off = body.offset
            inside = off < regs.REG_WINDOW_BYTES and off % 4 == 0
            if not defined:
                self._out.append(cxl.mmio_rsp(body.tag, regs.UNMAPPED_VALUE,
                                              cxl.RspStatus.OPCODE_ERROR))
            elif body.opcode == cxl.MmioOpcode.READ:
                self._out.append(cxl.mmio_rsp(body.tag, self._rd32(off) if inside
                                              else regs.UNMAPPED_VALUE))
            elif inside:
                self._wr32(off, body.value)
            return
        ok = defined and body.addr % LINE_BYTES == 0 and body.addr + LINE_BYTES <= self.mem_bytes
        status = (cxl.RspStatus.OK if ok else cxl.RspStatus.ADDR_ERROR if defined
                  else cxl.RspStatus.OPCODE_ERROR)
        if ch == cxl.Channel.M2S_REQ:
            data = self._mem_read(body.addr, LINE_BYTES) if ok else bytes(LINE_BYTES)
            self._out.append(cxl.build_message(cxl.Channel.S2M_DRS, {
                "opcode": cxl.S2MDrsOpcode.MEM_DATA, "tag": body.tag, "status": status,
                "data": data}))
            return
        if ok:
            self._write_enabled(body.addr, body.data, body.byte_enable)
        self._out.append(cxl.build_message(cxl.Channel.S2M_NDR, {
            "opcode": cxl.S2MNdrOpcode.CMP, "tag": body.tag, "status": status}))

    def _write_enabled(self, addr: int, data: bytes, enable: int) -> None:
        """Store the enabled bytes of a line, each run of enabled bytes as one store."""
        if enable == cxl.FULL_LINE:
            self._mem_write(addr, data)
            return
        b = 0
        while b < LINE_BYTES:
            if not enable >> b & 1:
                b += 1
                continue
            end = b
            while end < LINE_BYTES and enable >> end & 1:
                end += 1
            self._mem_write(addr + b, data[b:end])
            b = end

    def receive(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    @property
    def cycle(self) -> int:
        return self._rd64("PERF_CYCLES")

    def _wait(self, done: Callable[[int], bool], what: str) -> int:
        """Poll until ``done(cycle)``; the cycle it became true. The device's cycle counter
        must keep moving: standing still for stall_timeout_s means it stopped answering."""
        last, since = self.cycle, time.monotonic()
        while True:
            now = self.cycle
            if done(now):
                return now
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > self.stall_timeout_s:
                raise DeviceNotAnsweringError(
                    f"the board at {self.files.folder} stopped answering: PERF_CYCLES stood at "
                    f"{now} for {self.stall_timeout_s:g} s while waiting for {what}")
            time.sleep(self.poll_s)

    def advance(self, cycles: int) -> None:
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, got {cycles}")
        target = self.cycle + cycles
        self._wait(lambda now: now >= target, f"{cycles} cycles")

    def _idle(self) -> bool:
        """Nothing running and nothing the device would fetch (as the model defines it)."""
        r = self._rd32
        if not r(regs.offset("STATUS")) & 1:
            return False
        size = r(regs.offset("SQ_SIZE"))
        if not r(regs.offset("CONTROL")) & 1 or size == 0:
            return True
        if r(regs.offset("SQ_HEAD")) == r(regs.offset("SQ_TAIL")):
            return True
        cq_size = r(regs.offset("CQ_SIZE"))
        used = (r(regs.offset("CQ_TAIL")) - r(regs.offset("CQ_HEAD"))) % max(cq_size, 1)
        return cq_size == 0 or used >= cq_size - 1  # completion ring full: nothing to fetch

    def run_until_idle(self, max_cycles: int) -> int:
        """Wait until the device is idle; returns the cycles it was busy (PERF_BUSY) since
        the last doorbell, which is its own account of the work, free of the host's polling
        latency. DeviceBusyError after ``max_cycles`` of its clock."""
        mark = self._busy_mark if self._busy_mark is not None else self._rd64("PERF_BUSY")
        start = self.cycle
        self._wait(lambda now: self._idle() or now - start >= max_cycles, "the device to go idle")
        busy = self._rd64("PERF_BUSY")
        self._busy_mark = busy
        if not self._idle():
            raise DeviceBusyError(f"device still busy after {max_cycles} cycles")
        self._busy_mark = None
        return busy - mark

    @property
    def clock_hz(self) -> int:
        """The bitstream's core clock (its manifest)."""
        return self.manifest.device.clock_hz

    def set_timeout(self, timeout_ms: int) -> None:
        """How long the device may stand still before it counts as not answering."""
        self.stall_timeout_s = timeout_ms / 1000
        if self._tap is not None:
            self._tap.settimeout(self.stall_timeout_s)

    def shutdown(self) -> None:
        """A board stays up when its user goes (a device process would exit)."""

    def close(self) -> None:
        for fd in (self._h2c, self._c2h):
            if fd >= 0:
                os.close(fd)
        self._h2c = self._c2h = -1
        for region in ("_regs", "_mem"):
            r = self.__dict__.pop(region, None)
            if r is not None:
                r.close()
        tap = self.__dict__.pop("_tap", None)
        if tap is not None:
            tap.close()


def board_manifest(bar: Path | str, manifest: Path | str | Manifest | None) -> Manifest:
    """The manifest of the board at ``bar``: the one given, or ``manifest.json`` in the board's
    folder. A board folder that does not exist is named as such, not as a missing manifest."""
    if isinstance(manifest, Manifest):
        return manifest
    folder = Path(bar).parent if Path(bar).is_file() else Path(bar)
    if manifest is None and not folder.is_dir():
        raise BarError(f"no board at {bar}: give the PCI device folder "
                       "(/sys/bus/pci/devices/DDDD:BB:DD.F) or its resourceN file")
    return Manifest.load(manifest if manifest is not None else folder / "manifest.json")


def parse_board(spec: str) -> tuple[Path, DmaPaths | str]:
    """``DIR`` or ``DIR,H2C,C2H``: the board's PCI device folder, then optionally its DMA
    channel's host-to-card and card-to-host devices (e.g. /dev/xdma0_h2c_0,/dev/xdma0_c2h_0);
    "auto" when not given."""
    parts = spec.split(",")
    if len(parts) not in (1, 3) or not all(parts):
        raise BarError(f"board {spec!r}: expected DIR or DIR,H2C,C2H")
    return Path(parts[0]), DmaPaths(Path(parts[1]), Path(parts[2])) if len(parts) == 3 else "auto"


def open_board(spec: str, manifest: Path | str | None = None, **kwargs) -> FpgaPort:
    """The board of a :func:`parse_board` spec."""
    bar, dma = parse_board(spec)
    return FpgaPort(bar, manifest, dma=dma, **kwargs)
