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


def jedec_round(t_ps: float, tck_ps: float) -> int:
    """JEDEC's DDR5 rounding of a time to clock cycles: up, after a 2.5 % guard band
    (JESD79-5's rounding algorithm; Ramulator 2's ``JEDEC_rounding_DDR5``)."""
    return int((t_ps * 1000 / tck_ps + 974) // 1000)


_NS_OF_6400 = {f: getattr(DDR5_6400_MICRON, f) * DDR5_6400_MICRON.tck_ps / 1000
               for f in ("nRAS", "nWR", "nRTP", "nCCD_L", "nCCD_L_WR", "nRRD_L", "nFAW",
                         "nWTR_S", "nWTR_L", "nRFC", "nREFI")}
"""The DDR5-6400 preset's timings in nanoseconds: what a speed grade keeps from it."""


def jedec_grade(rate_mts: int, cl: int) -> DDR5Timing:
    """A DDR5 speed grade: ``rate_mts`` MT/s (tCK = 2e6 / rate ps), its speed bin's CAS latency
    ``cl`` with nRCD = nRP = CL and nCWL = CL - 2 (JESD79-5's speed bins, as the DDR5-6400
    preset has them), and the other timings the DDR5-6400 preset's in nanoseconds, rounded by
    :func:`jedec_round` at the grade's clock (never fewer cycles than a burst's nCCD_S)."""
    tck = 2e6 / rate_mts
    cyc = {f: max(jedec_round(ns * 1000, tck), 1) for f, ns in _NS_OF_6400.items()}
    cyc["nREFI"] = round(_NS_OF_6400["nREFI"] * 1000 / tck)  # an interval, not a minimum
    for f in ("nCCD_L", "nRRD_L"):
        cyc[f] = max(cyc[f], DDR5_6400_MICRON.nCCD_S)
    cyc["nFAW"] = max(cyc["nFAW"], 4 * DDR5_6400_MICRON.nRRD_S)
    ras = cyc["nRAS"]
    return replace(DDR5_6400_MICRON, name=f"DDR5-{rate_mts} (JEDEC A-bin CL{cl})",
                   tck_ps=tck, nCL=cl, nRCD=cl, nRP=cl, nCWL=cl - 2, nRC=ras + cl, **cyc)


JEDEC_BINS: dict[int, int] = {4800: 34, 5600: 40, 6400: 46, 8000: 56}
"""CAS latency (tCK) of the fastest (A) bin of each JEDEC DDR5 speed grade, JESD79-5:
DDR5-4800A CL34 (14.17 ns), 5600A CL40 (14.29 ns), 6400A CL46 (14.38 ns), 8000A CL56
(14.0 ns)."""

PRESETS: dict[str, DDR5Timing] = {
    "ddr5-6400": DDR5_6400_MICRON,
    "ddr5-6400an": DDR5_6400AN_RAMULATOR2,
    **{f"ddr5-{rate}": jedec_grade(rate, cl) for rate, cl in JEDEC_BINS.items() if rate != 6400},
}
"""Presets by the name the command line, the hardware description and tests use. The first two
keep their indices (the RTL's ``PresetId``); ``jedec_grade(6400, 46)`` is ``ddr5-6400``'s
timing (a test holds them together)."""
GRADE_SOURCE = ("JEDEC JESD79-5 speed grades: the A bin's CL (= nRCD = nRP, nCWL = CL - 2); "
                "the other timings the DDR5-6400 (Micron/gem5) preset's in ns, rounded to the "
                "grade's clock by JEDEC's DDR5 rounding")
"""Where the ``ddr5-4800``, ``-5600`` and ``-8000`` presets come from."""


def with_overrides(timing: DDR5Timing, overrides: dict[str, int]) -> DDR5Timing:
    """``timing`` with some fields replaced (as Ramulator 2 takes a preset and per-field
    overrides); ValueError naming an unknown or refused field."""
    known = {f.name for f in fields(DDR5Timing)} - {"name"}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"unknown DDR5 timing field {key!r} (known: "
                             f"{', '.join(sorted(known))})")
        if key != "tck_ps" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"DDR5 timing {key} must be a whole number of tCK, got {value!r}")
    if not overrides:
        return timing
    text = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    return replace(timing, name=f"{timing.name} with {text}", **overrides)


def preset(name: str) -> DDR5Timing:
    """Look a preset up by name; the error lists the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown DDR5 preset {name!r}; known: {', '.join(PRESETS)}") from None
