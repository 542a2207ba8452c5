"""Register map of a PNM device: the one source of truth. The SV package
``rtl/top/nelssa_dev_pkg.sv`` is generated from it (``python -m nelssa.driver.svgen``), the model
device and the driver read it, and ``tests/test_generated.py`` fails when they drift.

32-bit registers in a 4 KB window (CXL.io MMIO beside the CXL.mem HDM window). 64-bit values
are LO/HI pairs; reading LO latches HI (one latch: the next read of that HI returns it), so a
64-bit counter reads consistently when LO is read first.
Reads of unmapped offsets return ``UNMAPPED_VALUE`` and count in ERR_UNMAPPED; writes to
read-only or unmapped offsets are ignored and count in ERR_RO_WRITE / ERR_UNMAPPED.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Access(Enum):
    RO = "ro"
    """Read-only: writes are ignored and counted."""
    RW = "rw"
    """Read-write."""
    DOORBELL = "db"
    """Read-write; a write also tells the device to look at the submission ring."""


@dataclass(frozen=True)
class Register:
    """One 32-bit register."""

    name: str
    offset: int
    access: Access
    reset: int
    doc: str


DEVICE_MAGIC = 0x4E454C53  # "NELS"
DEVICE_VERSION = 0x0001_0000  # major 1, minor 0
UNMAPPED_VALUE = 0xFFFF_FFFF
"""What a read of an unmapped offset returns (as a PCIe unsupported request would)."""
REG_WINDOW_BYTES = 4096

REGISTERS: tuple[Register, ...] = (
    Register("MAGIC", 0x000, Access.RO, DEVICE_MAGIC, "'NELS'"),
    Register("VERSION", 0x004, Access.RO, DEVICE_VERSION, "interface version, major << 16 | minor"),
    Register("CAPS", 0x008, Access.RO, 0,
             "[3:0] engines, [7:4] max query heads per descriptor - 1, [8] head_dim 64, "
             "[9] head_dim 128, [23:16] max tokens per cluster"),
    Register("IFACE_HASH", 0x00C, Access.RO, 0,
             "interface hash: the first 32 bits of the SHA-256 of the generated "
             "nelssa_dev_pkg (register map, descriptor, completion and port formats) the "
             "device was built with (driver/iface.py)"),
    Register("MEM_SIZE_LO", 0x010, Access.RO, 0, "device memory (HDM window) bytes, low word"),
    Register("MEM_SIZE_HI", 0x014, Access.RO, 0, "device memory bytes, high word"),
    Register("BUILD_ID", 0x018, Access.RO, 0,
             "bitstream build id (the manifest's build_id; 0 in simulation)"),
    Register("CONTROL", 0x020, Access.RW, 0, "[0] enable: descriptors are fetched only when set"),
    Register("STATUS", 0x024, Access.RO, 1, "[0] idle (nothing fetched or running), [1] enabled"),
    Register("SQ_BASE_LO", 0x040, Access.RW, 0, "submission ring base (64-byte aligned)"),
    Register("SQ_BASE_HI", 0x044, Access.RW, 0, ""),
    Register("SQ_SIZE", 0x048, Access.RW, 0,
             "submission ring entries (power of two, 2..65536); a write empties the ring"),
    Register("SQ_TAIL", 0x04C, Access.DOORBELL, 0, "host: next entry it will write (doorbell)"),
    Register("SQ_HEAD", 0x050, Access.RO, 0, "device: next entry it will fetch"),
    Register("CQ_BASE_LO", 0x060, Access.RW, 0, "completion ring base (64-byte aligned)"),
    Register("CQ_BASE_HI", 0x064, Access.RW, 0, ""),
    Register("CQ_SIZE", 0x068, Access.RW, 0,
             "completion ring entries (power of two); a write empties the ring, phase 1 again"),
    Register("CQ_HEAD", 0x06C, Access.RW, 0, "host: next completion it will read"),
    Register("CQ_TAIL", 0x070, Access.RO, 0, "device: next completion it will write"),
    Register("REGION_BASE_LO", 0x080, Access.RW, 0,
             "lowest byte a descriptor of this queue may read or write"),
    Register("REGION_BASE_HI", 0x084, Access.RW, 0, ""),
    Register("REGION_LIMIT_LO", 0x088, Access.RW, 0, "one past the highest such byte"),
    Register("REGION_LIMIT_HI", 0x08C, Access.RW, 0, ""),
    Register("ERR_DESC", 0x100, Access.RO, 0, "descriptors completed with an error status"),
    Register("ERR_RO_WRITE", 0x104, Access.RO, 0, "writes to read-only registers (ignored)"),
    Register("ERR_UNMAPPED", 0x108, Access.RO, 0, "accesses to unmapped register offsets"),
    Register("ERR_MEM", 0x10C, Access.RO, 0, "CXL.mem requests outside device memory"),
    Register("ERR_DOORBELL", 0x110, Access.RO, 0,
             "doorbells that would overrun the ring or point outside it (ignored)"),
    Register("PERF_CYCLES_LO", 0x140, Access.RO, 0, "device cycles since reset"),
    Register("PERF_CYCLES_HI", 0x144, Access.RO, 0, ""),
    Register("PERF_BUSY_LO", 0x148, Access.RO, 0, "cycles with a descriptor in flight"),
    Register("PERF_BUSY_HI", 0x14C, Access.RO, 0, ""),
    Register("PERF_BYTES_READ_LO", 0x150, Access.RO, 0, "bytes the engines read from DDR5"),
    Register("PERF_BYTES_READ_HI", 0x154, Access.RO, 0, ""),
    Register("PERF_DESC_DONE", 0x158, Access.RO, 0, "descriptors completed (any status)"),
)

BY_NAME = {r.name: r for r in REGISTERS}
BY_OFFSET = {r.offset: r for r in REGISTERS}


def offset(name: str) -> int:
    """Offset of a register by name; KeyError names the unknown register."""
    try:
        return BY_NAME[name].offset
    except KeyError:
        raise KeyError(f"no register named {name!r}") from None


def pack_caps(engines: int, max_qheads: int, head_dims: tuple[int, ...],
              max_cluster_tokens: int) -> int:
    """The CAPS value of a device."""
    return ((engines & 0xF) | ((max_qheads - 1) & 0xF) << 4 | int(64 in head_dims) << 8
            | int(128 in head_dims) << 9 | (max_cluster_tokens & 0xFF) << 16)


def unpack_caps(value: int) -> dict[str, object]:
    """Inverse of :func:`pack_caps`."""
    dims = tuple(d for d, bit in ((64, 8), (128, 9)) if value >> bit & 1)
    return {"engines": value & 0xF, "max_qheads": (value >> 4 & 0xF) + 1, "head_dims": dims,
            "max_cluster_tokens": value >> 16 & 0xFF}


def _check_map() -> None:
    offsets = [r.offset for r in REGISTERS]
    if len(set(offsets)) != len(offsets) or any(o % 4 or o >= REG_WINDOW_BYTES for o in offsets):
        raise AssertionError("register map: offsets must be unique, 4-byte aligned, in window")


_check_map()
