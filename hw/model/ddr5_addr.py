"""Address maps of one PNM device: a byte address onto (sub-channel, bank group, bank, row,
column) of 4 channels x 2 sub-channels of DDR5. Vectorised over numpy arrays.

Fields are taken from the 64-byte line address, lowest first, in the order the map names:

* ``cacheline``: sub-channel, bank group, column, bank, row. Consecutive lines go to different
  sub-channels, then different bank groups (tCCD_S spacing), so a stream uses all 8
  sub-channels and every bank group.
* ``row``: column, sub-channel, bank group, bank, row. A 4 KB block fills one row of one bank:
  row-buffer hits, no parallelism inside the block.
* ``mop4``: 4 lines of a row, then sub-channel, bank group, the rest of the column, bank, row;
  the bank-group and bank bits are XORed with low row bits (Ramulator 2's MOP4CLXOR idea) so
  strided streams do not pile onto one bank.

The front end rejects addresses beyond the device (no wrap): :func:`decode` raises naming the
first bad address.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_timing import DDR5Timing

ADDRESS_MAPS = ("cacheline", "row", "mop4")
"""Names of the supported maps."""


@dataclass(frozen=True)
class DeviceGeometry:
    """How many sub-channels share the device address space, and their timing/geometry."""

    timing: DDR5Timing
    """Geometry source: bank groups, banks, row size, rows."""
    subchannels: int = 8
    """4 channels x 2 independent 32-bit sub-channels."""

    def __post_init__(self) -> None:
        for name, v in (("subchannels", self.subchannels),
                        ("timing.bank_groups", self.timing.bank_groups),
                        ("timing.banks_per_group", self.timing.banks_per_group),
                        ("timing.columns_per_row", self.timing.columns_per_row),
                        ("timing.rows", self.timing.rows)):
            if v & (v - 1):
                raise ValueError(f"{name} must be a power of two, got {v}")

    @property
    def line_bytes(self) -> int:
        """Bytes per line (one burst)."""
        return self.timing.burst_bytes

    @property
    def capacity_bytes(self) -> int:
        """Bytes of the whole device."""
        t = self.timing
        return self.subchannels * t.banks * t.rows * t.row_bytes


@dataclass(frozen=True)
class Decoded:
    """Per-address coordinates (arrays of the input's shape)."""

    subchannel: npt.NDArray[np.int64]
    bank_group: npt.NDArray[np.int64]
    bank: npt.NDArray[np.int64]
    row: npt.NDArray[np.int64]
    column: npt.NDArray[np.int64]


def _widths(g: DeviceGeometry) -> dict[str, int]:
    t = g.timing
    return {"sc": g.subchannels.bit_length() - 1, "bg": t.bank_groups.bit_length() - 1,
            "bank": t.banks_per_group.bit_length() - 1,
            "col": t.columns_per_row.bit_length() - 1, "row": t.rows.bit_length() - 1}


def _layout(name: str, w: dict[str, int]) -> list[tuple[str, int]]:
    if name == "cacheline":
        return [("sc", w["sc"]), ("bg", w["bg"]), ("col", w["col"]), ("bank", w["bank"]),
                ("row", w["row"])]
    if name == "row":
        return [("col", w["col"]), ("sc", w["sc"]), ("bg", w["bg"]), ("bank", w["bank"]),
                ("row", w["row"])]
    if name == "mop4":
        return [("col_lo", 2), ("sc", w["sc"]), ("bg", w["bg"]), ("col_hi", w["col"] - 2),
                ("bank", w["bank"]), ("row", w["row"])]
    raise ValueError(f"unknown address map {name!r}; known: {', '.join(ADDRESS_MAPS)}")


def decode(addr: npt.ArrayLike, geometry: DeviceGeometry, address_map: str = "cacheline"
           ) -> Decoded:
    """Coordinates of byte addresses; raises ValueError on any address outside the device."""
    a = np.asarray(addr, dtype=np.int64)
    bad = (a < 0) | (a >= geometry.capacity_bytes)
    if np.any(bad):
        first = int(a[bad].flat[0])
        raise ValueError(f"address {first:#x} outside the device (0 .. "
                         f"{geometry.capacity_bytes:#x}, {np.count_nonzero(bad)} bad)")
    w = _widths(geometry)
    line = a // geometry.line_bytes
    fields: dict[str, np.ndarray] = {}
    for name, bits in _layout(address_map, w):
        fields[name] = line & ((1 << bits) - 1)
        line = line >> bits
    col = fields["col"] if "col" in fields else (fields["col_hi"] << 2) | fields["col_lo"]
    bg, bank, row = fields["bg"], fields["bank"], fields["row"]
    if address_map == "mop4":
        bg = bg ^ (row & ((1 << w["bg"]) - 1))
        bank = bank ^ ((row >> w["bg"]) & ((1 << w["bank"]) - 1))
    return Decoded(fields["sc"], bg, bank, row, col)


def encode(d: Decoded, geometry: DeviceGeometry, address_map: str = "cacheline"
           ) -> npt.NDArray[np.int64]:
    """Inverse of :func:`decode`: the byte address of each line's first byte."""
    w = _widths(geometry)
    bg, bank = d.bank_group, d.bank
    if address_map == "mop4":
        bg = bg ^ (d.row & ((1 << w["bg"]) - 1))
        bank = bank ^ ((d.row >> w["bg"]) & ((1 << w["bank"]) - 1))
    values = {"sc": d.subchannel, "bg": bg, "bank": bank, "row": d.row, "col": d.column,
              "col_lo": d.column & 3, "col_hi": d.column >> 2}
    line = np.zeros_like(np.asarray(d.row, dtype=np.int64))
    shift = 0
    for name, bits in _layout(address_map, w):
        line = line | (np.asarray(values[name], dtype=np.int64) << shift)
        shift += bits
    return line * geometry.line_bytes
