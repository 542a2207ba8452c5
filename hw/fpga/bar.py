"""A board's PCIe BARs as Linux exposes them: the PCI device folder in sysfs
(``/sys/bus/pci/devices/DDDD:BB:DD.F``) with its ``vendor`` and ``device`` ids and one
``resourceN`` file per BAR, memory-mapped. Register accesses are single aligned 32-bit loads and
stores (a numpy view of the mapping), as PCIe MMIO wants them.

A fake board (hw/fpga/fake.py) is a folder with the same files; it also has ``fake-tap.sock``,
through which each register store is announced to the model serving it (on a board, the
store's TLP does that).
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nelssa.emu.files import read_text
from nelssa.hw.fpga.errors import BarError
from nelssa.hw.fpga.manifest import PciIds

log = logging.getLogger(__name__)

TAP_NAME = "fake-tap.sock"
"""The fake board's store announcements (absent on a real board)."""
DMA_H2C_NAME = "dma_h2c"
DMA_C2H_NAME = "dma_c2h"
"""A fake board's DMA channels (XDMA-style character devices on a board: /dev/xdma0_h2c_0)."""


@dataclass(frozen=True)
class BoardFiles:
    """Where a board's BARs and ids are."""

    folder: Path
    """The PCI device folder (or a fake board's folder)."""
    regs: Path
    """The register BAR's resource file."""
    mem: Path
    """The memory BAR's resource file (``resourceN_wc``, write-combining, when there is one)."""
    tap: Path | None
    """A fake board's store-announcement socket; None on a board."""

    @classmethod
    def locate(cls, bar: Path | str, pci: PciIds) -> BoardFiles:
        """The board at ``bar`` (a PCI device folder, or one of its resourceN files), checked to
        be the one the manifest names by its PCI ids, before any BAR is mapped."""
        p = Path(bar)
        if p.is_file() and re.fullmatch(r"resource\d(_wc)?", p.name):
            p = p.parent
        if not p.is_dir():
            raise BarError(f"no board at {p}: give the PCI device folder "
                           "(/sys/bus/pci/devices/DDDD:BB:DD.F) or its resourceN file")
        ids = {}
        for name in ("vendor", "device"):
            f = p / name
            try:
                ids[name] = int(read_text(f, "PCI id", 4096).strip(), 16)
            except (OSError, ValueError) as e:
                raise BarError(f"{p} is not a PCI device folder: cannot read its {name} id "
                               f"({e})") from e
        if (ids["vendor"], ids["device"]) != (pci.vendor, pci.device):
            raise BarError(f"{p} is not ours: PCI {ids['vendor']:04x}:{ids['device']:04x}, the "
                           f"manifest's bitstream enumerates as {pci.vendor:04x}:"
                           f"{pci.device:04x}")
        regs = p / f"resource{pci.bar_regs}"
        mem = p / f"resource{pci.bar_mem}_wc"
        if not mem.exists():
            mem = p / f"resource{pci.bar_mem}"
        for what, f in (("register", regs), ("memory", mem)):
            if not f.exists():
                raise BarError(f"the {what} BAR is absent: {f} does not exist (is the bitstream "
                               "loaded and the board rescanned? `lspci -vd "
                               f"{pci.vendor:04x}:{pci.device:04x}` lists its BARs)")
        tap = p / TAP_NAME
        return cls(p, regs, mem, tap if tap.exists() else None)


class MmioRegion:
    """One BAR, memory-mapped; read-only mappings cannot store at all."""

    def __init__(self, path: Path, min_bytes: int, what: str, writable: bool,
                 exclusive: bool = False) -> None:
        """``exclusive``: hold an advisory lock on the BAR while mapped, so that two processes
        never drive one board (reads for a probe need none)."""
        self.path, self.what = path, what
        self._lock_fd = -1
        try:
            self.size = path.stat().st_size
        except OSError as e:
            raise BarError(f"the {what} BAR is absent: {e}") from e
        if self.size < min_bytes:
            raise BarError(f"the {what} BAR {path} is too small: {self.size} bytes, the device "
                           f"needs {min_bytes}")
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_SYNC
        try:
            fd = os.open(path, flags)
        except OSError as e:
            hint = " (root, or a udev rule for the device, may be needed)" \
                if isinstance(e, PermissionError) else ""
            raise BarError(f"cannot open the {what} BAR {path}: {e}{hint}") from e
        try:
            if exclusive:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise BarError(f"the board at {path.parent} is in use by another process "
                                   "(one driver per board)") from None
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self._mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, prot)
        except (OSError, ValueError) as e:
            os.close(fd)
            raise BarError(f"cannot map the {what} BAR {path}: {e}") from e
        except BarError:
            os.close(fd)
            raise
        if exclusive:
            self._lock_fd = fd  # the lock lives as long as this descriptor
        else:
            os.close(fd)
        self.u32 = np.frombuffer(self._mm, dtype="<u4")
        self.u8 = np.frombuffer(self._mm, dtype=np.uint8)

    def read32(self, offset: int) -> int:
        return int(self.u32[offset >> 2])

    def write32(self, offset: int, value: int) -> None:
        self.u32[offset >> 2] = value

    def read(self, addr: int, n: int) -> bytes:
        return self.u8[addr:addr + n].tobytes()

    def write(self, addr: int, data: bytes) -> None:
        self.u8[addr:addr + len(data)] = np.frombuffer(data, dtype=np.uint8)

    def close(self) -> None:
        del self.u32, self.u8  # the mapping cannot close while views of it exist
        self._mm.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
