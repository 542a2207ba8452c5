"""DDR5 memory specifications for energy: the currents and voltages of each DDR5 part, one per
timing preset (``ddr5_timing.PRESETS``), as DRAMPower's ``mempowerspec`` holds them.

A sub-channel of the device is 32 bits wide: four x8 dies (``devices``) of 16 Gb, one rank
(the timing presets' geometry: 8 bank groups of 4 banks, a 1 KiB page per die, 4 KiB across the
sub-channel). The currents below are per die.

Sources. The voltages are JEDEC's (JESD79-5, DC operating conditions: VDD = VDDQ = 1.1 V,
VPP = 1.8 V). The currents are **estimates**: values of the size 16 Gb x8 DDR5 data sheets give
in their IDD/IPP tables (Micron MT60B2G8, Samsung K4RAH086VB, SK hynix H5CG48MEBD, "IDD and IPP
specification" tables), not read off one of those tables here (no data sheet was at hand when
they were written), so each carries ``ESTIMATE`` as its source until someone replaces it with a
cited table value. The read and write burst currents grow with the data rate: the energy of a
burst above active standby (IDD4R - IDD3N over a burst) is taken as the same at every grade, so
IDD4R - IDD3N scales with the data rate from the DDR5-4800 figure. The I/O termination: the
DRAM's output driver RZQ/7 = 34 ohm and a write termination RZQ/5 = 48 ohm are JESD79-5 mode
register settings (which ones a DIMM uses is its SPD's choice: an estimate); the energy of a bit
on a pseudo-open-drain line is VDDQ^2 / (R_on + R_tt) over the bit time while the line is low
(half the bits, for random data).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from nelssa.hw.model.ddr5_timing import PRESETS, DDR5Timing

ESTIMATE = "estimate (size of 16 Gb x8 DDR5 data sheet IDD/IPP tables; not a cited value)"
JEDEC_VOLTAGES = "JEDEC JESD79-5, DC operating conditions"
JEDEC_ODT = "JEDEC JESD79-5 mode register choices (RZQ/7 driver, RZQ/5 RTT_WR); estimate"


@dataclass(frozen=True)
class DDR5PowerSpec:
    """Currents (A, per die) and voltages (V) of one DDR5 part, DRAMPower's names."""

    name: str
    vdd: float = 1.1
    vpp: float = 1.8
    vddq: float = 1.1
    idd0: float = 0.080
    """One bank ACT-PRE cycling at tRC."""
    idd2n: float = 0.046
    """Precharged standby."""
    idd3n: float = 0.058
    """Active standby (a row open)."""
    idd4r: float = 0.190
    """Read bursts back to back."""
    idd4w: float = 0.200
    """Write bursts back to back."""
    idd5b: float = 0.285
    """All-bank refresh, REFab every tRFC."""
    ipp0: float = 0.005
    ipp2n: float = 0.0025
    ipp3n: float = 0.0025
    ipp4r: float = 0.0025
    ipp4w: float = 0.0025
    ipp5b: float = 0.020
    r_on_ohm: float = 34.0
    """Output driver impedance (RZQ/7)."""
    r_tt_ohm: float = 48.0
    """On-die termination of the receiving end (RZQ/5)."""
    devices: int = 4
    """x8 dies of one 32-bit sub-channel."""
    die_width: int = 8
    source: tuple[tuple[str, str], ...] = ()
    """Per field, where its value comes from."""

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if k not in ("name", "source") and not v > 0:
                raise ValueError(f"DDR5 power spec {self.name}: {k} must be positive, got {v}")
        for low, high in (("idd2n", "idd3n"), ("idd3n", "idd0"), ("idd3n", "idd4r"),
                          ("idd3n", "idd4w"), ("idd3n", "idd5b")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"DDR5 power spec {self.name}: {low} must not exceed {high}")

    def currents(self, domain: str) -> dict[str, float]:
        """IDD (``domain`` "vdd") or IPP ("vpp") values by state: 0, 2n, 3n, 4r, 4w, 5b."""
        prefix = {"vdd": "idd", "vpp": "ipp"}[domain]
        return {s: getattr(self, prefix + s) for s in ("0", "2n", "3n", "4r", "4w", "5b")}

    def io_joules_per_bit(self, timing: DDR5Timing) -> float:
        """Termination energy of one bit on a DQ line: VDDQ^2 / (R_on + R_tt) over a bit
        time (tCK / 2), drawn while the line is low (half the bits of random data)."""
        bit_s = timing.tck_ps * 1e-12 / 2
        return 0.5 * self.vddq ** 2 / (self.r_on_ohm + self.r_tt_ohm) * bit_s

    def sources(self) -> dict[str, str]:
        """Every numeric field's source."""
        return dict(self.source)


_BASE_SOURCE = (
    *((v, JEDEC_VOLTAGES) for v in ("vdd", "vpp", "vddq")),
    *((c, ESTIMATE) for c in ("idd0", "idd2n", "idd3n", "idd4r", "idd4w", "idd5b", "ipp0",
                              "ipp2n", "ipp3n", "ipp4r", "ipp4w", "ipp5b")),
    ("r_on_ohm", JEDEC_ODT), ("r_tt_ohm", JEDEC_ODT),
    ("devices", "the presets' sub-channel: 32 bits of x8 dies"),
    ("die_width", "the presets' 1 KiB page per die (4 KiB per 32-bit sub-channel)"),
)
DDR5_4800_16GB_X8 = DDR5PowerSpec(name="16 Gb x8 DDR5-4800", source=_BASE_SOURCE)
"""The currents at DDR5-4800, the grade the others scale from."""
_REF_RATE = 4800


def spec_for(timing: DDR5Timing, base: DDR5PowerSpec = DDR5_4800_16GB_X8) -> DDR5PowerSpec:
    """``base`` at ``timing``'s data rate: the burst currents above active standby scale with
    the rate (the same energy per burst); the others stay."""
    rate = round(2e6 / timing.tck_ps)
    k = rate / _REF_RATE
    scaled = "scaled from DDR5-4800 by the data rate (the same energy per burst); " + ESTIMATE
    source = tuple((f, scaled if f in ("idd4r", "idd4w") else s) for f, s in base.source)
    return replace(base, name=f"16 Gb x8 DDR5-{rate}",
                   idd4r=base.idd3n + (base.idd4r - base.idd3n) * k,
                   idd4w=base.idd3n + (base.idd4w - base.idd3n) * k, source=source)


POWER_SPECS: dict[str, DDR5PowerSpec] = {name: spec_for(t) for name, t in PRESETS.items()}
"""The memory specification of each timing preset, by the preset's name."""


def power_spec(name: str) -> DDR5PowerSpec:
    """Look a part up by its timing preset's name; the error lists the known names."""
    try:
        return POWER_SPECS[name]
    except KeyError:
        raise KeyError(f"unknown DDR5 preset {name!r}; known: {', '.join(POWER_SPECS)}") from None
