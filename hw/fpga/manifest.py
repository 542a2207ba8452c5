"""The bitstream manifest: a JSON file written beside every bitstream that says which board and
part it is for, its build id, the device parameters it was built with and the SHA-256 of the
device interface (driver/iface.py) it implements. Software reads it before it touches a board
and refuses a bitstream that does not match itself or the registers the board reports.

Format (``nelssa fpga manifest`` writes one)::

    {"format": "nelssa-bitstream/1", "board": "...", "part": "...", "build_id": 305419896,
     "built": "2026-11-29T12:00:00Z",
     "pci": {"vendor": "0x10ee", "device": "0x4e4c", "bar_regs": 0, "bar_mem": 2},
     "device": {"engines": 2, "max_qheads": 8, "head_dims": [64, 128],
                "max_cluster_tokens": 64, "mem_bytes": 68719476736, "clock_hz": 300000000},
     "interface": {"version": "1.0", "sha256": "<64 hex digits>"},
     "config": {"board": "alveo-u250", "units": 2, "channels": 4, ...},
     "bitstream": {"sha256": "<64 hex digits>"}}

``config`` (optional) is the board configuration ``nelssa fpga plan`` chose (hw/fpga/plan.py),
``bitstream`` (optional) the SHA-256 of the bitstream file the manifest describes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nelssa.driver import regs
from nelssa.driver.iface import interface_digest, version_major
from nelssa.driver.status import SUPPORTED_HEAD_DIMS
from nelssa.emu.files import InputFileError, read_text
from nelssa.hw.fpga.errors import ManifestError, MismatchError

if TYPE_CHECKING:
    from nelssa.hw.model.engine import EngineParams

log = logging.getLogger(__name__)

FORMAT = "nelssa-bitstream/1"
DEFAULT_VENDOR = 0x10EE
"""PCI vendor id of the reference build (Xilinx/AMD: the PCIe IP's default)."""
DEFAULT_DEVICE = 0x4E4C
"""PCI device id of the reference build ("NL")."""


@dataclass(frozen=True)
class PciIds:
    """How the board enumerates."""

    vendor: int
    """PCI vendor id the board's PCIe IP reports."""
    device: int
    """PCI device id."""
    bar_regs: int = 0
    """BAR of the 4 KB register window (AXI4-Lite toward the device's register block)."""
    bar_mem: int = 2
    """BAR of the device-memory aperture (AXI4 toward the CXL.mem side of the device)."""


@dataclass(frozen=True)
class DeviceParams:
    """What the device in the bitstream was built with (the RTL parameters software sees)."""

    engines: int
    """Attention units (NumUnits)."""
    max_qheads: int
    """Query heads per descriptor."""
    head_dims: tuple[int, ...]
    """head_dim values the engines take."""
    max_cluster_tokens: int
    """Most tokens per cluster."""
    mem_bytes: int
    """Device memory behind the memory controllers (MEM_SIZE)."""
    clock_hz: int
    """Core clock of the device (PERF_CYCLES counts it)."""

    @classmethod
    def of(cls, engines: int, e: EngineParams, mem_bytes: int, clock_hz: int) -> DeviceParams:
        """The parameters of a device of ``engines`` engines built with ``e``."""
        return cls(engines, e.num_qheads,
                   tuple(d for d in SUPPORTED_HEAD_DIMS if d <= e.head_dim),
                   e.max_cluster_tokens, mem_bytes, clock_hz)

    @property
    def caps(self) -> int:
        """The CAPS register value these parameters imply."""
        return regs.pack_caps(self.engines, self.max_qheads, self.head_dims,
                              self.max_cluster_tokens)


@dataclass(frozen=True)
class Manifest:
    """One bitstream's manifest."""

    board: str
    """Board name (e.g. ``alveo-u55c``)."""
    part: str
    """FPGA part number."""
    build_id: int
    """32-bit build id; the BUILD_ID register of the bitstream reads the same."""
    pci: PciIds
    """How the board enumerates."""
    device: DeviceParams
    """Device parameters."""
    interface_sha256: str
    """SHA-256 of the device interface the bitstream implements (driver/iface.py)."""
    interface_version: int = regs.DEVICE_VERSION
    """VERSION register value of that interface."""
    built: str = ""
    """When the bitstream was built (ISO 8601), for people."""
    config: dict[str, Any] | None = None
    """The board configuration the bitstream was built with (``Plan.to_dict``), if planned."""
    bitstream_sha256: str | None = None
    """SHA-256 of the bitstream file, if the manifest was written with it."""

    # -- reading and writing ----------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path | str) -> Manifest:
        """Read and validate a manifest; ManifestError names the file and the field."""
        p = Path(path)
        if not p.exists():
            raise ManifestError(f"no bitstream manifest at {p} (every bitstream ships one: "
                                "`nelssa fpga manifest` writes it at build time)")
        try:
            data = json.loads(read_text(p, "bitstream manifest"))
        except InputFileError as e:
            raise ManifestError(str(e)) from None
        except json.JSONDecodeError as e:
            raise ManifestError(f"{p}: not valid JSON: {e}") from e
        return cls.from_dict(data, source=str(p))

    @classmethod
    def from_dict(cls, data: Any, source: str = "manifest") -> Manifest:
        f = _Fields(data, source)
        fmt = f.get("format", str)
        if fmt != FORMAT:
            raise ManifestError(f"{source}: field 'format' is {fmt!r}, expected {FORMAT!r}")
        pci = PciIds(vendor=f.get("pci.vendor", int, hex_ok=True, bits=16),
                     device=f.get("pci.device", int, hex_ok=True, bits=16),
                     bar_regs=f.get("pci.bar_regs", int, lo=0, hi=5),
                     bar_mem=f.get("pci.bar_mem", int, lo=0, hi=5))
        if pci.bar_regs == pci.bar_mem:
            raise ManifestError(f"{source}: fields 'pci.bar_regs' and 'pci.bar_mem' are both "
                                f"{pci.bar_regs}; the registers and memory need their own BARs")
        dims = f.get("device.head_dims", list)
        if not dims or any(not isinstance(d, int) or isinstance(d, bool) for d in dims):
            raise ManifestError(f"{source}: field 'device.head_dims' must be a non-empty list "
                                f"of integers, got {dims!r}")
        device = DeviceParams(
            engines=f.get("device.engines", int, lo=1, hi=regs.CAPS_MAX_ENGINES),
            max_qheads=f.get("device.max_qheads", int, lo=1, hi=regs.CAPS_MAX_QHEADS),
            head_dims=tuple(dims),
            max_cluster_tokens=f.get("device.max_cluster_tokens", int, lo=1,
                                     hi=regs.CAPS_MAX_CLUSTER_TOKENS),
            mem_bytes=f.get("device.mem_bytes", int, lo=regs.REG_WINDOW_BYTES, hi=(1 << 64) - 1),
            clock_hz=f.get("device.clock_hz", int, lo=1_000_000, hi=2_000_000_000))
        digest = _sha256(f, "interface.sha256")
        bitstream = _sha256(f, "bitstream.sha256", required=False)
        config = f.get("config", dict, required=False)
        version = f.get("interface.version", str)
        try:
            major, minor = (int(x) for x in version.split("."))
        except ValueError:
            raise ManifestError(f"{source}: field 'interface.version' must be MAJOR.MINOR, "
                                f"got {version!r}") from None
        return cls(board=f.get("board", str), part=f.get("part", str),
                   build_id=f.get("build_id", int, hex_ok=True, bits=32), pci=pci,
                   device=device, interface_sha256=digest,
                   interface_version=major << 16 | minor,
                   built=f.get("built", str, required=False) or "", config=config,
                   bitstream_sha256=bitstream)

    def to_dict(self) -> dict[str, Any]:
        dev = asdict(self.device)
        dev["head_dims"] = list(self.device.head_dims)
        return {"format": FORMAT, "board": self.board, "part": self.part,
                "build_id": self.build_id, "built": self.built,
                "pci": {"vendor": f"{self.pci.vendor:#06x}", "device": f"{self.pci.device:#06x}",
                        "bar_regs": self.pci.bar_regs, "bar_mem": self.pci.bar_mem},
                "device": dev,
                "interface": {"version": f"{self.interface_version >> 16}."
                                         f"{self.interface_version & 0xFFFF}",
                              "sha256": self.interface_sha256},
                **({"config": self.config} if self.config is not None else {}),
                **({"bitstream": {"sha256": self.bitstream_sha256}}
                   if self.bitstream_sha256 is not None else {})}

    def save(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def for_this_software(cls, board: str, part: str, build_id: int, device: DeviceParams,
                          pci: PciIds | None = None, built: str = "",
                          config: dict[str, Any] | None = None,
                          bitstream_sha256: str | None = None) -> Manifest:
        """The manifest of a bitstream built from this tree."""
        return cls(board=board, part=part, build_id=build_id,
                   pci=pci or PciIds(DEFAULT_VENDOR, DEFAULT_DEVICE), device=device,
                   interface_sha256=interface_digest(), built=built, config=config,
                   bitstream_sha256=bitstream_sha256)

    # -- checks -----------------------------------------------------------------------------------
    def check_software(self) -> None:
        """Refuse a bitstream built for another interface than this software's."""
        mine = interface_digest()
        if version_major(self.interface_version) != version_major():
            raise MismatchError(
                f"bitstream interface version {self.interface_version >> 16}.x, this software "
                f"speaks {version_major()}.x")
        if self.interface_sha256 != mine:
            raise MismatchError(
                f"bitstream built for device interface {self.interface_sha256[:16]}..., this "
                f"software's is {mine[:16]}... (register map or descriptor formats differ): "
                "rebuild the bitstream from this tree or use the software it was built with")
        unsupported = [d for d in self.device.head_dims if d not in SUPPORTED_HEAD_DIMS]
        if unsupported:
            raise MismatchError(f"bitstream head_dims {unsupported} are not supported by this "
                                f"software ({list(SUPPORTED_HEAD_DIMS)})")

    def check_registers(self, values: dict[str, int]) -> None:
        """Refuse a board whose identity registers differ from this manifest (a bitstream
        loaded that is not the one the manifest describes). With :meth:`check_software`
        passed first, IFACE_HASH matching the manifest means matching this software."""
        expect = {"MAGIC": regs.DEVICE_MAGIC, "VERSION": self.interface_version,
                  "IFACE_HASH": int(self.interface_sha256[:8], 16), "BUILD_ID": self.build_id,
                  "CAPS": self.device.caps, "MEM_SIZE": self.device.mem_bytes}
        wrong = [f"{name} reads {values[name]:#x}, manifest says {want:#x}"
                 for name, want in expect.items() if values.get(name) != want]
        if wrong:
            raise MismatchError("the board does not hold the bitstream of this manifest: "
                                + "; ".join(wrong))


def _sha256(f: _Fields, name: str, required: bool = True) -> str | None:
    digest = f.get(name, str, required=required)
    if digest is not None and (len(digest) != 64
                               or any(c not in "0123456789abcdef" for c in digest)):
        raise ManifestError(f"{f.source}: field {name!r} must be 64 lower-case hex digits, got "
                            f"{digest!r}")
    return digest


class _Fields:
    """Typed access to nested JSON fields by dotted name; errors name the field."""

    def __init__(self, data: Any, source: str) -> None:
        if not isinstance(data, dict):
            raise ManifestError(f"{source}: the manifest must be a JSON object, got "
                                f"{type(data).__name__}")
        self.data, self.source = data, source

    def get(self, name: str, kind: type, *, required: bool = True, hex_ok: bool = False,
            lo: int | None = None, hi: int | None = None, bits: int | None = None) -> Any:
        node: Any = self.data
        for part in name.split("."):
            if not isinstance(node, dict) or part not in node:
                if not required:
                    return None
                raise ManifestError(f"{self.source}: field {name!r} is missing")
            node = node[part]
        value = node
        if kind is int and hex_ok and isinstance(value, str):
            try:
                value = int(value, 0)
            except ValueError:
                raise ManifestError(f"{self.source}: field {name!r} must be an integer, got "
                                    f"{node!r}") from None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ManifestError(f"{self.source}: field {name!r} must be {kind.__name__}, got "
                                f"{node!r}")
        if bits is not None:
            lo, hi = 0, (1 << bits) - 1
        if kind is int and ((lo is not None and value < lo) or (hi is not None and value > hi)):
            raise ManifestError(f"{self.source}: field {name!r} must be in {lo}..{hi}, got "
                                f"{value}")
        return value
