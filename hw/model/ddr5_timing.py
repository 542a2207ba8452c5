"""DDR5 timing presets as data, one table per speed grade (like LiteDRAM's module classes).

All timings are in DRAM clock cycles (tCK) of one 32-bit sub-channel. The memory controller RTL,
the sim-only DRAM model and timing checker, and the Python models all read these tables; the SV
side gets them from a generated package.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class DDR5Timing:
    """Geometry and timings of one DDR5 sub-channel; timings in tCK."""

    name: str
    """Preset name."""
    tck_ps: float = 312.5
    """Clock period in picoseconds (DDR5-6400: 0.3125 ns)."""
    bus_bits: int = 32
    """Data width of the sub-channel."""
    burst_length: int = 16
    """BL16: one burst moves bus_bits * 16 / 8 = 64 bytes in 8 tCK."""
    bank_groups: int = 8
    """Bank groups per sub-channel."""
    banks_per_group: int = 4
    """Banks per bank group."""
    row_bytes: int = 4096
    """Bytes of one row (page) across the sub-channel."""
    rows: int = 65536
    """Rows per bank (16 Gb devices)."""
    nCL: int = 46
    """READ to first data."""
    nCWL: int = 44
    """WRITE to first data."""
    nRCD: int = 46
    """ACT to READ/WRITE, same bank."""
    nRP: int = 46
    """PRE to ACT, same bank."""
    nRAS: int = 103
    """ACT to PRE, same bank."""
    nRC: int = 149
    """ACT to ACT, same bank."""
    nWR: int = 96
    """End of write data to PRE, same bank."""
    nRTP: int = 24
    """READ to PRE, same bank."""
    nCCD_S: int = 8
    """Column to column, different bank groups."""
    nCCD_L: int = 16
    """READ to READ, same bank group."""
    nCCD_L_WR: int = 64
    """WRITE to WRITE, same bank group."""
    nRRD_S: int = 8
    """ACT to ACT, different bank groups."""
    nRRD_L: int = 16
    """ACT to ACT, same bank group."""
    nFAW: int = 32
    """Window in which at most four ACTs may issue."""
    nWTR_S: int = 5
    """End of write data to READ, different bank groups."""
    nWTR_L: int = 32
    """End of write data to READ, same bank group."""
    nRFC: int = 946
    """REFab to the next ACT or REF (16 Gb devices)."""
    nREFI: int = 12480
    """Average interval between REFab commands (3.9 us)."""
    max_postponed_refresh: int = 4
    """REFab commands that may be postponed; the checker allows (this + 1) * nREFI between two."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                if not value:
                    raise ValueError("name must not be empty")
            elif not value > 0:
                raise ValueError(f"{f.name} must be positive, got {value}")
        if self.nRC < self.nRAS + self.nRP:
            raise ValueError(f"nRC ({self.nRC}) must be >= nRAS + nRP ({self.nRAS + self.nRP})")
        if self.nCCD_L < self.nCCD_S or self.nRRD_L < self.nRRD_S:
            raise ValueError("same-bank-group spacings (nCCD_L, nRRD_L) must be >= the "
                             "different-group ones (nCCD_S, nRRD_S)")
        if self.nFAW < self.nRRD_S:
            raise ValueError(f"nFAW ({self.nFAW}) must be >= nRRD_S ({self.nRRD_S})")
        if self.row_bytes % self.burst_bytes:
            raise ValueError(f"row_bytes ({self.row_bytes}) must be a multiple of a burst "
                             f"({self.burst_bytes} bytes)")

    @property
    def banks(self) -> int:
        """Banks per sub-channel."""
        return self.bank_groups * self.banks_per_group

    @property
    def burst_bytes(self) -> int:
        """Bytes per burst (64 for a 32-bit sub-channel with BL16)."""
        return self.bus_bits * self.burst_length // 8

    @property
    def burst_cycles(self) -> int:
        """tCK the data bus is busy per burst (double data rate)."""
        return self.burst_length // 2

    @property
    def columns_per_row(self) -> int:
        """Bursts per row."""
        return self.row_bytes // self.burst_bytes

    @property
    def peak_bytes_per_s(self) -> float:
        """One burst every burst_cycles."""
        return self.burst_bytes / (self.burst_cycles * self.tck_ps * 1e-12)

    @property
    def refresh_efficiency(self) -> float:
        """Fraction of time not blocked by all-bank refresh: 1 - nRFC / nREFI."""
        return 1.0 - self.nRFC / self.nREFI

    @property
    def read_to_write(self) -> int:
        """READ to WRITE (any bank): read burst ends, one tCK of bus turnaround, write data
        starts: nCL + burst - nCWL + 1 (at least nCCD_S)."""
        return max(self.nCL + self.burst_cycles - self.nCWL + 1, self.nCCD_S)

    def write_to_read(self, same_group: bool) -> int:
        """WRITE to READ: nCWL + burst + nWTR_L (same bank group) or nWTR_S."""
        return self.nCWL + self.burst_cycles + (self.nWTR_L if same_group else self.nWTR_S)

    @property
    def write_to_precharge(self) -> int:
        """WRITE to PRE, same bank: nCWL + burst + nWR."""
        return self.nCWL + self.burst_cycles + self.nWR

    def as_dict(self) -> dict[str, object]:
        """All fields, for reports and JSON."""
        return asdict(self)


DDR5_6400_MICRON = DDR5Timing(name="DDR5-6400 (Micron/gem5)")
"""DESIGN.md reference values (Micron datasheet as used by gem5)."""

DDR5_6400AN_RAMULATOR2 = replace(DDR5_6400_MICRON, name="DDR5_6400AN (Ramulator 2)",
                                 nRRD_S=16, nFAW=64)
"""Ramulator 2's DDR5_6400AN preset: differs in nRRD_S = 16 and nFAW = 64."""

PRESETS: dict[str, DDR5Timing] = {
    "ddr5-6400": DDR5_6400_MICRON,
    "ddr5-6400an": DDR5_6400AN_RAMULATOR2,
}
"""Presets by the name the command line and tests use."""


def preset(name: str) -> DDR5Timing:
    """Look a preset up by name; the error lists the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown DDR5 preset {name!r}; known: {', '.join(PRESETS)}") from None
