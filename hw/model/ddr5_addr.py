"""Address maps of one PNM device: a byte address onto (sub-channel, bank group, bank, row,
column) of 4 channels x 2 sub-channels of DDR5. Vectorised over numpy arrays.

Fields are taken from the 64-byte line address, lowest first, in the order the map names:

* ``cacheline``: sub-channel, bank group, column, bank, row. Consecutive lines go to different
  sub-channels, then different bank groups (tCCD_S spacing), so a stream uses all 8
  sub-channels and every bank group.
* ``row``: column, sub-channel, bank group, bank, row. A 4 KB block fills one row of one bank:
  row-buffer hits, no parallelism inside the block.
* ``mop4``: 4 lines of a row, then sub-channel, bank group, the rest of the column, bank, row;
  the bank-group and bank bits are XORed with low row bits (after Ramulator 2's MOP4CLXOR, not
  the same map) so strided streams do not pile onto one bank. The RTL implements it.
* ``mop4clxor``: Ramulator 2's MOP4CLXOR (``src/addr_mapper/impl/linear_mappers.cpp``) bit for
  bit, with its channel level as our sub-channel and one rank: 2 column bits, sub-channel, bank
  group, bank, the other 4 column bits, row; then each of sub-channel, bank group, bank and row
  in turn, where it has bits, is XORed with the next of the column's bits, lowest first (on one
  sub-channel: bank group ^= col[2:0], bank ^= col[4:3], row ^= col[5]; on eight: sub-channel
  ^= col[2:0], bank group ^= col[5:3]). Model only: comparisons with Ramulator 2 use it.

The front end rejects addresses beyond the device (no wrap): :func:`decode` raises naming the
first bad address.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_timing import DDR5Timing

ADDRESS_MAPS = ("cacheline", "row", "mop4")
"""The maps the RTL address map implements too, in the order of its AddressMap parameter."""
ALL_ADDRESS_MAPS = (*ADDRESS_MAPS, "mop4clxor")
"""Every map :func:`decode` knows."""


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
    if name == "mop4clxor":
        return [("col_lo", 2), ("sc", w["sc"]), ("bg", w["bg"]), ("bank", w["bank"]),
                ("col_hi", w["col"] - 2), ("row", w["row"])]
    raise ValueError(f"unknown address map {name!r}; known: {', '.join(ALL_ADDRESS_MAPS)}")


def _clxor_masks(col: np.ndarray, w: dict[str, int]) -> dict[str, np.ndarray]:
    """MOP4CLXOR's XOR terms: the column's bits, lowest first, dealt to the levels above the
    column in Ramulator's order (channel, bank group, bank, row), each as many as it has."""
    masks, shift = {}, 0
    for level in ("sc", "bg", "bank", "row"):
        if w[level] > 0:
            masks[level] = (col >> shift) & ((1 << w[level]) - 1)
            shift += w[level]
    return masks


def _xor(fields: dict[str, np.ndarray], address_map: str, w: dict[str, int]
         ) -> dict[str, np.ndarray]:
    """The map's XOR step on named fields (its own inverse: applied again, it undoes itself)."""
    out = dict(fields)
    if address_map == "mop4":
        out["bg"] = fields["bg"] ^ (fields["row"] & ((1 << w["bg"]) - 1))
        out["bank"] = fields["bank"] ^ ((fields["row"] >> w["bg"]) & ((1 << w["bank"]) - 1))
    elif address_map == "mop4clxor":
        for level, mask in _clxor_masks(fields["col"], w).items():
            out[level] = fields[level] ^ mask
    return out


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
    if "col" not in fields:
        fields["col"] = (fields["col_hi"] << 2) | fields["col_lo"]
    f = _xor(fields, address_map, w)
    return Decoded(f["sc"], f["bg"], f["bank"], f["row"], f["col"])


def encode(d: Decoded, geometry: DeviceGeometry, address_map: str = "cacheline"
           ) -> npt.NDArray[np.int64]:
    """Inverse of :func:`decode`: the byte address of each line's first byte."""
    w = _widths(geometry)
    f = _xor({"sc": np.asarray(d.subchannel, dtype=np.int64),
              "bg": np.asarray(d.bank_group, dtype=np.int64),
              "bank": np.asarray(d.bank, dtype=np.int64),
              "row": np.asarray(d.row, dtype=np.int64),
              "col": np.asarray(d.column, dtype=np.int64)}, address_map, w)
    values = {**f, "col_lo": f["col"] & 3, "col_hi": f["col"] >> 2}
    line = np.zeros_like(np.asarray(d.row, dtype=np.int64))
    shift = 0
    for name, bits in _layout(address_map, w):
        line = line | (np.asarray(values[name], dtype=np.int64) << shift)
        shift += bits
    return line * geometry.line_bytes
