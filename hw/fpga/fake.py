"""A fake board: a folder laid out like a PCI device in sysfs (``vendor``, ``device``,
``resource0`` for the registers, ``resource2`` for device memory, ``manifest.json``) whose
other side is served by the ``model`` device, so the fpga backend's whole path (mapping the
BARs, 32-bit register accesses, rings and completions in device memory, DMA) runs without a
board and gives the model's bits.

What a fake cannot do by files alone is see a register store happen; the port announces each
one on ``fake-tap.sock`` and waits until the model has taken it (on a board, the store's TLP
reaches the device, and a later read is ordered behind it). Loads are plain reads of the file,
which the server keeps current: every register after each store, the read-only ones after every
step of the device's clock. Device memory *is* the ``resource2`` file (sparse: it costs disk
only where written), and the DMA channels ``dma_h2c``/``dma_c2h`` lead to it as an XDMA
channel leads to the card's memory.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import selectors
import socket
import struct
import threading
from pathlib import Path

import numpy as np

from nelssa.driver import cxl, regs
from nelssa.driver.formats import LINE_BYTES
from nelssa.hw.fpga.bar import DMA_C2H_NAME, DMA_H2C_NAME, TAP_NAME
from nelssa.hw.fpga.manifest import DeviceParams, Manifest
from nelssa.hw.model.device import SIM_CLOCK_HZ, DeviceConfig, ModelDevice

log = logging.getLogger(__name__)

FAKE_BUILD_ID = 0x0FA4_E001
"""BUILD_ID of a fake board."""


class MappedBarMemory:
    """Device memory in a (sparse) file, memory-mapped: the model device's memory on a fake
    board, shared with the host's mapping of the memory BAR."""

    def __init__(self, path: Path, size: int) -> None:
        self.size = size
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self._path = path

    def read(self, addr: int, n: int) -> bytes:
        return self._mm[addr:addr + n]

    def write(self, addr: int, data: bytes) -> None:
        self._mm[addr:addr + len(data)] = data

    def write_line(self, line_addr: int, data: bytes, byte_enable: int) -> None:
        if byte_enable == cxl.FULL_LINE:
            self._mm[line_addr:line_addr + LINE_BYTES] = data
            return
        for b in range(LINE_BYTES):
            if byte_enable >> b & 1:
                self._mm[line_addr + b] = data[b]

    def image(self) -> dict[int, bytes]:
        """Every line that is not all zero, by line address (walks only the file's data)."""
        out: dict[int, bytes] = {}
        fd = os.open(self._path, os.O_RDONLY)
        try:
            pos = 0
            while pos < self.size:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:  # no data past pos
                    break
                end = os.lseek(fd, start, os.SEEK_HOLE)
                for line in range(start // LINE_BYTES * LINE_BYTES, end, LINE_BYTES):
                    data = self._mm[line:line + LINE_BYTES]
                    if any(data):
                        out[line] = data
                pos = end
        finally:
            os.close(fd)
        return out

    def close(self) -> None:
        self._mm.close()


class FakeBoard:
    """A fake board in ``folder``, its device a ModelDevice over the folder's memory file."""

    def __init__(self, folder: Path | str, config: DeviceConfig | None = None,
                 clock_hz: int = SIM_CLOCK_HZ, idle_tick_s: float = 0.001) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        base = config or DeviceConfig()
        self.config = DeviceConfig(engines=base.engines, engine=base.engine, preset=base.preset,
                                   build_id=FAKE_BUILD_ID)
        self.manifest = Manifest.for_this_software(
            board="nelssa-fake", part="model", build_id=FAKE_BUILD_ID,
            device=DeviceParams.of(self.config.engines, self.config.engine,
                                   self.config.mem_bytes, clock_hz))
        pci = self.manifest.pci
        (self.folder / "vendor").write_text(f"{pci.vendor:#06x}\n")
        (self.folder / "device").write_text(f"{pci.device:#06x}\n")
        self.regs_path = self.folder / f"resource{pci.bar_regs}"
        self.mem_path = self.folder / f"resource{pci.bar_mem}"
        self.regs_path.write_bytes(b"\xff" * regs.REG_WINDOW_BYTES)  # unmapped reads all ones
        with open(self.mem_path, "wb") as f:
            f.truncate(self.config.mem_bytes)  # sparse
        for name in (DMA_H2C_NAME, DMA_C2H_NAME):
            link = self.folder / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(self.mem_path.name)
        self.manifest.save(self.folder / "manifest.json")
        self.memory = MappedBarMemory(self.mem_path, self.config.mem_bytes)
        self.model = ModelDevice(self.config, memory=self.memory)
        fd = os.open(self.regs_path, os.O_RDWR)
        try:
            self._regs_mm = mmap.mmap(fd, regs.REG_WINDOW_BYTES, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self._u32 = np.frombuffer(self._regs_mm, dtype="<u4")
        self._ro = np.array([r.offset >> 2 for r in regs.REGISTERS
                             if r.access == regs.Access.RO], dtype=np.int64)
        self._all = np.array([r.offset >> 2 for r in regs.REGISTERS], dtype=np.int64)
        self.idle_step = max(1, int(clock_hz * idle_tick_s))
        self.idle_tick_s = idle_tick_s
        self.writes_taken = 0
        """Register stores the model has taken (tests check nothing came before a probe)."""
        self._stop = threading.Event()
        self._publish(self._all)
        tap = self.folder / TAP_NAME
        if tap.exists() or tap.is_symlink():
            tap.unlink()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(tap))
        self._listener.listen(8)

    def _publish(self, words: np.ndarray) -> None:
        file = self.model.register_file()
        values = np.array([file[int(w) << 2] for w in words], dtype="<u4")
        self._u32[words] = values

    def _take_store(self, off: int) -> None:
        """A register store announced by the port: hand the stored word to the model."""
        value = int(self._u32[off >> 2])
        self.model.send(cxl.mmio_wr(0, off, value))
        self.model.receive()
        if off not in regs.BY_OFFSET:  # the file keeps what a board would read there
            self._u32[off >> 2] = regs.UNMAPPED_VALUE
        self.writes_taken += 1
        self._publish(self._all)

    def _tick(self) -> bool:
        """One step of the device clock; True while the device has work."""
        m = self.model
        busy = m.has_work
        done = m.next_completion()
        m.advance(max(1, done - m.cycle) if done is not None else self.idle_step)
        self._publish(self._ro)
        return busy

    def serve_forever(self) -> None:
        """Take stores and run the clock until :meth:`stop`."""
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        partial: dict[socket.socket, bytes] = {}  # a store announcement split by the stream
        busy = False
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0 if busy else self.idle_tick_s):
                    sock = key.fileobj
                    if sock is self._listener:
                        conn, _ = self._listener.accept()
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    data = sock.recv(4096)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(sock)
                        partial.pop(sock, None)  # type: ignore[call-overload]
                        sock.close()  # type: ignore[union-attr]
                        continue
                    data = partial.pop(sock, b"") + data  # type: ignore[call-overload]
                    whole = len(data) // 4 * 4
                    if whole < len(data):
                        partial[sock] = data[whole:]  # type: ignore[index]
                    for (off,) in struct.iter_unpack("<I", data[:whole]):
                        self._take_store(off)
                    sock.sendall(b"\x01" * (whole // 4))  # type: ignore[union-attr]
                busy = self._tick()
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            sel.close()

    def stop(self) -> None:
        self._stop.set()

    def fall_off_the_bus(self) -> None:
        """What a board does when its link goes down: every read returns all ones and nothing
        answers (for tests of a device that stops answering)."""
        self._stop.set()
        self._u32[:] = 0xFFFF_FFFF

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        (self.folder / TAP_NAME).unlink(missing_ok=True)
        del self._u32
        self._regs_mm.close()
        self.memory.close()

    def remove(self) -> None:
        """After ``close``: the files this board made (its sparse memory file is as large as
        the device's memory, on disk once written), and its folder when nothing else is in it."""
        for path in (self.regs_path, self.mem_path, self.folder / DMA_H2C_NAME,
                     self.folder / DMA_C2H_NAME, self.folder / "manifest.json",
                     self.folder / "vendor", self.folder / "device"):
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # a folder the user put other files in stays
            self.folder.rmdir()
