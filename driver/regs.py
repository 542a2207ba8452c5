"""Register map of a PNM device: the one source of truth. The SV package
``rtl/top/nelssa_dev_pkg.sv`` is generated from it (``python -m nelssa.gen``), the model
device and the driver read it, and ``tests/test_generated.py`` fails when they drift.

32-bit registers in a 4 KB window (CXL.io MMIO beside the CXL.mem HDM window). 64-bit values
are LO/HI pairs; reading LO latches HI (one latch: the next read of that HI returns it), so a
64-bit counter reads consistently when LO is read first.
Reads of unmapped offsets return ``UNMAPPED_VALUE`` and count in ERR_UNMAPPED; writes to
read-only or unmapped offsets are ignored and count in ERR_RO_WRITE / ERR_UNMAPPED. A request
with an opcode that is not READ or WRITE is answered with ``OPCODE_ERROR`` and counts in
ERR_OPCODE.

The ring registers (access RING: ring bases and sizes, the region) hold still while the device
may use them: they are written only while the device is disabled (CONTROL.enable clear) and idle
(STATUS.idle set), and an enable is taken only if :func:`ring_problem` finds nothing wrong with
them. Everything else is refused and counted in ERR_RING. So while the device is enabled, or
finishing what it fetched, both rings lie inside the queue's region and device memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from nelssa.driver.formats import COMPLETION_BYTES, DESC_BYTES, LINE_BYTES


class Access(Enum):
    RO = "ro"
    """Read-only: writes are ignored and counted."""
    RW = "rw"
    """Read-write."""
    DOORBELL = "db"
    """Read-write; a write also tells the device to look at the submission ring."""
    RING = "ring"
    """Read-write while the device is disabled and idle; refused and counted in ERR_RING
    otherwise (the rings and the region must not move under the device)."""


class Hw(Enum):
    """What the device does with a field (the hardware side of the register block, which
    ``nelssa.gen_rdl`` writes as SystemRDL for PeakRDL-regblock)."""

    CONST = "const"
    """A constant of the map: its reset value, whatever happens."""
    IN = "in"
    """The device drives it (a build parameter, a pointer, a status bit)."""
    STORED = "stored"
    """Software's value, held for the device; each write may be refused by the device (the
    access rules above), and a write it refuses changes nothing."""
    COUNT = "count"
    """A counter the device increments (wrapping), by up to ``2^step_bits - 1`` a cycle."""
    FLAG = "flag"
    """A bit the device sets and clears."""


@dataclass(frozen=True)
class Field:
    """Bits ``[lsb + width - 1 : lsb]`` of a register."""

    name: str
    lsb: int
    width: int
    doc: str = ""
    hw: Hw | None = None
    """None: the register's."""


@dataclass(frozen=True)
class Register:
    """One 32-bit register, of one field (``value``) unless ``fields`` says otherwise."""

    name: str
    offset: int
    access: Access
    reset: int
    doc: str
    hw: Hw = Hw.CONST
    fields: tuple[Field, ...] = ()
    step_bits: int = 1
    """COUNT: width of the increment the device adds in a cycle."""
    emptied: bool = False
    """STORED: set to 0 when its ring's size is written (the ring starts over)."""

    def field_list(self) -> tuple[Field, ...]:
        """The fields, the whole register as ``value`` when none is named."""
        return self.fields or (Field("value", 0, 32),)


DEVICE_MAGIC = 0x4E454C53  # "NELS"
DEVICE_VERSION = 0x0001_0000  # major 1, minor 0
UNMAPPED_VALUE = 0xFFFF_FFFF
"""What a read of an unmapped offset returns (as a PCIe unsupported request would)."""
REG_WINDOW_BYTES = 4096
RING_MAX_ENTRIES = 65536
"""Most entries of a submission or completion ring."""
CAPS_MAX_ENGINES = 0xF
"""Most attention engines CAPS can report (its [3:0] field): the model device and a board's
manifest take 1..this; the RTL device takes fewer (``nelssa.hw.sim.device.RTL_MAX_UNITS``)."""
CAPS_MAX_QHEADS = 16
"""Most query heads per descriptor CAPS can report ([7:4] holds the count less one)."""
CAPS_MAX_CLUSTER_TOKENS = 0xFF
"""Most tokens per cluster CAPS can report ([23:16])."""

_CAPS_FIELDS = (
    Field("engines", 0, 4, "attention engines"),
    Field("max_qheads_m1", 4, 4, "most query heads per descriptor, less one"),
    Field("head_dim_64", 8, 1, "head_dim 64 supported"),
    Field("head_dim_128", 9, 1, "head_dim 128 supported"),
    Field("max_cluster_tokens", 16, 8, "most tokens per cluster"),
)
_CONTROL_FIELDS = (
    Field("enable", 0, 1, "descriptors are fetched only when set"),
    Field("unused", 1, 31, "kept as written; no meaning to the device"),
)
_STATUS_FIELDS = (
    Field("idle", 0, 1, "nothing fetched or running"),
    Field("enabled", 1, 1, "CONTROL.enable"),
    Field("ring_error", 2, 1, "the last enable was refused (cleared by the next CONTROL write "
          "taken)", Hw.FLAG),
)
_IN, _STORED, _COUNT = Hw.IN, Hw.STORED, Hw.COUNT

REGISTERS: tuple[Register, ...] = (
    Register("MAGIC", 0x000, Access.RO, DEVICE_MAGIC, "'NELS'"),
    Register("VERSION", 0x004, Access.RO, DEVICE_VERSION, "interface version, major << 16 | minor"),
    Register("CAPS", 0x008, Access.RO, 0,
             "[3:0] engines, [7:4] max query heads per descriptor - 1, [8] head_dim 64, "
             "[9] head_dim 128, [23:16] max tokens per cluster", _IN, _CAPS_FIELDS),
    Register("IFACE_HASH", 0x00C, Access.RO, 0,
             "interface hash: the first 32 bits of the SHA-256 of the generated "
             "nelssa_dev_pkg (register map, descriptor, completion and port formats) the "
             "device was built with (driver/iface.py)", _IN),
    Register("MEM_SIZE_LO", 0x010, Access.RO, 0, "device memory (HDM window) bytes, low word",
             _IN),
    Register("MEM_SIZE_HI", 0x014, Access.RO, 0, "device memory bytes, high word", _IN),
    Register("BUILD_ID", 0x018, Access.RO, 0,
             "bitstream build id (the manifest's build_id; 0 in simulation)", _IN),
    Register("CONTROL", 0x020, Access.RW, 0,
             "[0] enable: descriptors are fetched only when set; an enable is refused (and "
             "counted in ERR_RING) unless the ring registers pass driver/regs.ring_problem",
             _STORED, _CONTROL_FIELDS),
    Register("STATUS", 0x024, Access.RO, 1,
             "[0] idle (nothing fetched or running), [1] enabled, [2] ring error: the last "
             "enable was refused (cleared by the next CONTROL write taken)", _IN,
             _STATUS_FIELDS),
    Register("SQ_BASE_LO", 0x040, Access.RING, 0,
             "submission ring base (64-byte aligned; the ring inside the region)", _STORED),
    Register("SQ_BASE_HI", 0x044, Access.RING, 0, "", _STORED),
    Register("SQ_SIZE", 0x048, Access.RING, 0,
             "submission ring entries (power of two, 2..65536); a write empties the ring",
             _STORED),
    Register("SQ_TAIL", 0x04C, Access.DOORBELL, 0,
             "host: next entry it will write (doorbell; a value not below SQ_SIZE is ignored "
             "and counted in ERR_DOORBELL)", _STORED, emptied=True),
    Register("SQ_HEAD", 0x050, Access.RO, 0, "device: next entry it will fetch", _IN),
    Register("CQ_BASE_LO", 0x060, Access.RING, 0,
             "completion ring base (64-byte aligned; the ring inside the region)", _STORED),
    Register("CQ_BASE_HI", 0x064, Access.RING, 0, "", _STORED),
    Register("CQ_SIZE", 0x068, Access.RING, 0,
             "completion ring entries (power of two, 2..65536); a write empties the ring, "
             "phase 1 again", _STORED),
    Register("CQ_HEAD", 0x06C, Access.RW, 0,
             "host: next completion it will read (a value not below CQ_SIZE is ignored and "
             "counted in ERR_DOORBELL)", _STORED, emptied=True),
    Register("CQ_TAIL", 0x070, Access.RO, 0, "device: next completion it will write", _IN),
    Register("REGION_BASE_LO", 0x080, Access.RING, 0,
             "lowest byte a descriptor of this queue may read or write", _STORED),
    Register("REGION_BASE_HI", 0x084, Access.RING, 0, "", _STORED),
    Register("REGION_LIMIT_LO", 0x088, Access.RING, 0,
             "one past the highest such byte (device memory ends the region if it ends first)",
             _STORED),
    Register("REGION_LIMIT_HI", 0x08C, Access.RING, 0, "", _STORED),
    Register("ERR_DESC", 0x100, Access.RO, 0, "descriptors completed with an error status",
             _COUNT),
    Register("ERR_RO_WRITE", 0x104, Access.RO, 0, "writes to read-only registers (ignored)",
             _COUNT),
    Register("ERR_UNMAPPED", 0x108, Access.RO, 0, "accesses to unmapped register offsets",
             _COUNT),
    Register("ERR_MEM", 0x10C, Access.RO, 0, "CXL.mem requests outside device memory", _COUNT),
    Register("ERR_DOORBELL", 0x110, Access.RO, 0,
             "SQ_TAIL or CQ_HEAD writes that point outside their ring (ignored)", _COUNT),
    Register("ERR_RING", 0x114, Access.RO, 0,
             "ring register writes refused (device enabled or busy) and enables refused "
             "(ring registers invalid)", _COUNT),
    Register("ERR_OPCODE", 0x118, Access.RO, 0,
             "MMIO and CXL.mem requests with an undefined opcode (answered OPCODE_ERROR, "
             "nothing read or written)", _COUNT, step_bits=2),
    Register("PERF_CYCLES_LO", 0x140, Access.RO, 0, "device cycles since reset", _COUNT),
    Register("PERF_CYCLES_HI", 0x144, Access.RO, 0, "", _COUNT),
    Register("PERF_BUSY_LO", 0x148, Access.RO, 0, "cycles with a descriptor in flight", _COUNT),
    Register("PERF_BUSY_HI", 0x14C, Access.RO, 0, "", _COUNT),
    Register("PERF_BYTES_READ_LO", 0x150, Access.RO, 0, "bytes the engines read from DDR5",
             _COUNT, step_bits=16),
    Register("PERF_BYTES_READ_HI", 0x154, Access.RO, 0, "", _COUNT, step_bits=16),
    Register("PERF_DESC_DONE", 0x158, Access.RO, 0, "descriptors completed (any status)", _COUNT),
)
"""The map. Hardware side (``hw``) beside the software side (``access``): RO registers are
CONST, IN or COUNT; writable ones STORED."""

BY_NAME = {r.name: r for r in REGISTERS}
BY_OFFSET = {r.offset: r for r in REGISTERS}


def offset(name: str) -> int:
    """Offset of a register by name; KeyError names the unknown register."""
    try:
        return BY_NAME[name].offset
    except KeyError:
        raise KeyError(f"no register named {name!r}") from None


RING_REGISTERS = ("SQ_BASE", "SQ_SIZE", "CQ_BASE", "CQ_SIZE", "REGION_BASE", "REGION_LIMIT")
"""What :func:`ring_problem` looks at (64-bit values for the LO/HI pairs)."""


def ring_problem(values: Mapping[str, int], mem_bytes: int) -> str | None:
    """Why the device refuses to be enabled with these ring registers, or None if it would
    not: each ring's size a power of two in 2..RING_MAX_ENTRIES, its base 64-byte aligned, and
    the whole ring inside the region (which device memory ends if it ends first). The device
    (model and RTL) checks exactly this, with no arithmetic that could wrap."""
    lo, hi = values["REGION_BASE"], min(values["REGION_LIMIT"], mem_bytes)
    for ring, entry in (("SQ", DESC_BYTES), ("CQ", COMPLETION_BYTES)):
        size, base = values[f"{ring}_SIZE"], values[f"{ring}_BASE"]
        if not 2 <= size <= RING_MAX_ENTRIES or size & (size - 1):
            return f"{ring}_SIZE {size} is not a power of two in 2..{RING_MAX_ENTRIES}"
        if base % LINE_BYTES:
            return f"{ring}_BASE {base:#x} is not {LINE_BYTES}-byte aligned"
        if base < lo or base > hi or size * entry > hi - base:
            return (f"{ring} ring [{base:#x}, {base + size * entry:#x}) is not inside the region "
                    f"[{lo:#x}, {hi:#x})")
    return None


def pack_caps(engines: int, max_qheads: int, head_dims: tuple[int, ...],
              max_cluster_tokens: int) -> int:
    """The CAPS value of a device."""
    return ((engines & CAPS_MAX_ENGINES) | ((max_qheads - 1) & (CAPS_MAX_QHEADS - 1)) << 4
            | int(64 in head_dims) << 8 | int(128 in head_dims) << 9
            | (max_cluster_tokens & CAPS_MAX_CLUSTER_TOKENS) << 16)


def unpack_caps(value: int) -> dict[str, object]:
    """Inverse of :func:`pack_caps`."""
    dims = tuple(d for d, bit in ((64, 8), (128, 9)) if value >> bit & 1)
    return {"engines": value & CAPS_MAX_ENGINES,
            "max_qheads": (value >> 4 & (CAPS_MAX_QHEADS - 1)) + 1, "head_dims": dims,
            "max_cluster_tokens": value >> 16 & CAPS_MAX_CLUSTER_TOKENS}


def pairs() -> list[tuple[Register, Register]]:
    """The LO/HI pairs of 64-bit values, LO first."""
    return [(r, BY_NAME[r.name[:-3] + "_HI"]) for r in REGISTERS if r.name.endswith("_LO")]


def _check_map() -> None:
    offsets = [r.offset for r in REGISTERS]
    if len(set(offsets)) != len(offsets) or any(o % 4 or o >= REG_WINDOW_BYTES for o in offsets):
        raise AssertionError("register map: offsets must be unique, 4-byte aligned, in window")
    for r in REGISTERS:
        bits = [b for f in r.field_list() for b in range(f.lsb, f.lsb + f.width)]
        if len(set(bits)) != len(bits) or max(bits) > 31:
            raise AssertionError(f"register map: {r.name}'s fields overlap or pass bit 31")
        if (r.access == Access.RO) == (r.hw == Hw.STORED) or (r.emptied and r.hw != Hw.STORED):
            raise AssertionError(f"register map: {r.name}: software writes only STORED ones")
    for lo, hi in pairs():
        if hi.offset != lo.offset + 4 or (lo.hw, lo.access, lo.step_bits) != (
                hi.hw, hi.access, hi.step_bits):
            raise AssertionError(f"register map: {lo.name} and its HI differ in kind or place")


_check_map()
