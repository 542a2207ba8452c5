"""DDR5 energy from counted commands and bank-state residencies, DRAMPower's core model.

The controller (the RTL's perf_o, and the cycle models: ddr5_subchannel.py, ddr5_sub.hpp)
counts its commands and the cycles its banks spend active (a row open), all precharged and
refreshing. The energy of a run is those counts times the memory specification's energies
(ddr5_power.py), per voltage domain (VDD with the IDD currents, VPP with the IPP ones) and die,
as DRAMPower 5 computes a DDR5 rank's core energy with one bank-wise factor rho = 1:

* ACT: V (IDD0 - IDD3N) tRAS and PRE: V (IDD0 - IDD2N) tRP (DRAMPower's E_act and E_pre with
  its default I_beta = IDD0; together the classic IDD0 tRC - IDD3N tRAS - IDD2N tRP);
* RD, WR: V (IDD4R - IDD3N) and V (IDD4W - IDD3N) over a burst (BL / 2 tCK);
* REF (all-bank): V (IDD5B - IDD3N) tRFC;
* background: V IDD3N while a row is open or a refresh runs (refresh is counted above active
  standby), V IDD2N while every bank is precharged.

Beside the core, the I/O: the termination energy of each bit a burst moves
(``DDR5PowerSpec.io_joules_per_bit``). :func:`energy_of_trace` computes the same from a command
stream, tCK by tCK, for checking the counters against the commands (and what DRAMPower reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from nelssa.driver.port import DDR5_COUNTERS
from nelssa.hw.model.ddr5_checker import DramCmd
from nelssa.hw.model.ddr5_power import DDR5PowerSpec
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE, BankState
from nelssa.hw.model.ddr5_timing import DDR5Timing

DOMAINS = ("vdd", "vpp")


class EnergyPart(Enum):
    """Where a DDR5 run's energy goes."""

    ACT_PRE = "ACT/PRE"
    READ = "RD"
    WRITE = "WR"
    BACKGROUND = "background"
    REFRESH = "refresh"
    IO = "I/O"


@dataclass(frozen=True)
class CommandEnergies:
    """Joules of one command and of one tCK in each state, for a whole sub-channel (all its
    dies, both domains)."""

    act: float
    pre: float
    rd: float
    wr: float
    ref: float
    active_tck: float
    """Background of one tCK with a row open or a refresh running."""
    precharged_tck: float
    """Background of one tCK with every bank precharged."""
    io_rd: float
    """Termination of one read burst's bits."""
    io_wr: float


def command_energies(spec: DDR5PowerSpec, timing: DDR5Timing) -> CommandEnergies:
    """The specification's energies per command and per tCK of each state."""
    tck = timing.tck_ps * 1e-12
    e = dict.fromkeys(("act", "pre", "rd", "wr", "ref", "active", "pre_bg"), 0.0)
    for domain in DOMAINS:
        v = getattr(spec, domain)
        i = spec.currents(domain)
        e["act"] += v * (i["0"] - i["3n"]) * timing.nRAS * tck
        e["pre"] += v * (i["0"] - i["2n"]) * timing.nRP * tck
        e["rd"] += v * (i["4r"] - i["3n"]) * timing.burst_cycles * tck
        e["wr"] += v * (i["4w"] - i["3n"]) * timing.burst_cycles * tck
        e["ref"] += v * (i["5b"] - i["3n"]) * timing.nRFC * tck
        e["active"] += v * i["3n"] * tck
        e["pre_bg"] += v * i["2n"] * tck
    n = spec.devices
    io = spec.io_joules_per_bit(timing) * timing.burst_bytes * 8
    return CommandEnergies(act=n * e["act"], pre=n * e["pre"], rd=n * e["rd"], wr=n * e["wr"],
                           ref=n * e["ref"], active_tck=n * e["active"],
                           precharged_tck=n * e["pre_bg"], io_rd=io, io_wr=io)


@dataclass(frozen=True)
class DDR5Energy:
    """A run's energy by part (joules), and what it was counted from."""

    parts: dict[EnergyPart, float]
    commands: dict[str, int]
    residency_tck: dict[BankState, int]
    burst_bytes: int = 64

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def core(self) -> float:
        """Everything but the I/O (what DRAMPower calls core energy)."""
        return self.total - self.parts[EnergyPart.IO]

    @property
    def bits_read(self) -> int:
        return self.commands.get("RD", 0) * self.burst_bytes * 8

    def per_bit_read_pj(self) -> float:
        """Picojoules per bit read (all of the run's energy over the bits its READs moved)."""
        return self.total / self.bits_read * 1e12 if self.bits_read else float("nan")

    def __add__(self, other: DDR5Energy) -> DDR5Energy:
        return DDR5Energy({p: self.parts[p] + other.parts[p] for p in EnergyPart},
                          _add(self.commands, other.commands),
                          _add(self.residency_tck, other.residency_tck), self.burst_bytes)


def _add(a: Mapping, b: Mapping) -> dict:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}


def energy_of_counts(spec: DDR5PowerSpec, timing: DDR5Timing, commands: Mapping[str, int],
                     residency_cycles: Mapping[BankState, int]) -> DDR5Energy:
    """A sub-channel run's energy from its command counts (by DramCmd name; PREA is charged a
    PRE, the one bank the controller's refresh closes at a time) and its residencies in
    controller cycles (TCK_PER_CYCLE tCK each)."""
    e = command_energies(spec, timing)
    tck = {s: n * TCK_PER_CYCLE for s, n in residency_cycles.items()}
    return _energy(e, commands, tck, timing)


def _energy(e: CommandEnergies, commands: Mapping[str, int], tck: Mapping[BankState, int],
            timing: DDR5Timing) -> DDR5Energy:
    c = {k: commands.get(k, 0) for k in ("ACT", "PRE", "PREA", "RD", "WR", "REF")}
    busy = tck.get(BankState.ACTIVE, 0) + tck.get(BankState.REFRESH, 0)
    parts = {
        EnergyPart.ACT_PRE: c["ACT"] * e.act + (c["PRE"] + c["PREA"]) * e.pre,
        EnergyPart.READ: c["RD"] * e.rd,
        EnergyPart.WRITE: c["WR"] * e.wr,
        EnergyPart.BACKGROUND: busy * e.active_tck
        + tck.get(BankState.PRECHARGED, 0) * e.precharged_tck,
        EnergyPart.REFRESH: c["REF"] * e.ref,
        EnergyPart.IO: c["RD"] * e.io_rd + c["WR"] * e.io_wr,
    }
    return DDR5Energy(parts, c, dict(tck), timing.burst_bytes)


_COMMANDS = DDR5_COUNTERS[:6]
_STATES = tuple(BankState[name] for name in DDR5_COUNTERS[6:])


def counter_row(commands: Mapping[str, int], residency_cycles: Mapping[BankState, int]
                ) -> tuple[int, ...]:
    """One sub-channel's counts as a port reports them (driver/port.DDR5_COUNTERS order; a
    command the counts lack, 0)."""
    return (*(int(commands.get(c, 0)) for c in _COMMANDS),
            *(int(residency_cycles.get(s, 0)) for s in _STATES))


def counts_of_row(row: Iterable[int]) -> tuple[dict[str, int], dict[BankState, int]]:
    """(commands, residency cycles) of a port's counter row, as :func:`energy_of_counts`
    takes them."""
    row = tuple(row)
    if len(row) != len(DDR5_COUNTERS):
        raise ValueError(f"a DDR5 counter row has {len(DDR5_COUNTERS)} values, got {len(row)}")
    return (dict(zip(_COMMANDS, row[:6], strict=True)),
            dict(zip(_STATES, row[6:], strict=True)))


def idle_row(timing: DDR5Timing, cycles: int) -> tuple[int, ...]:
    """What a sub-channel's controller counts over ``cycles`` idle controller cycles (a
    counter row): an all-bank REF every nREFI, nRFC refreshing after each, every bank
    precharged the rest of the time (the cycle model's idle stretch, on average). For the
    time a device's model did not step, between the requests it served."""
    cycles = max(0, cycles)
    tck = cycles * TCK_PER_CYCLE
    refs = tck // timing.nREFI
    refreshing = min(cycles, refs * timing.nRFC // TCK_PER_CYCLE)
    return counter_row({"REF": refs}, {BankState.PRECHARGED: cycles - refreshing,
                                       BankState.REFRESH: refreshing})


def energy_of_rows(spec: DDR5PowerSpec, timing: DDR5Timing,
                   rows: Iterable[Iterable[int]]) -> float:
    """Joules of counter rows (sub-channels, devices, or their sums: the energy is linear in
    the counts), through :func:`energy_of_counts`."""
    return sum((energy_of_counts(spec, timing, *counts_of_row(r)).total for r in rows), 0.0)


def energy_of_trace(spec: DDR5PowerSpec, timing: DDR5Timing,
                    commands: Iterable[tuple[int, DramCmd, int, int]], end_tck: int) -> DDR5Energy:
    """The energy of a command stream ((tCK, command, bank group, bank); put in time order here:
    a cycle's row command may precede its column command in tCK, not in issue order) up to
    ``end_tck``, its bank states followed tCK by tCK: a row is open from its ACT to its PRE,
    a refresh runs nRFC from its REF. Independent of the controller's counters: what they are
    checked against."""
    open_banks: set[tuple[int, int]] = set()
    counts = {c.name: 0 for c in DramCmd}
    tck = dict.fromkeys(BankState, 0)
    refresh_end = -1
    last = 0

    def advance(to: int) -> None:
        nonlocal last
        if to <= last:
            return
        # [last, to): refreshing up to refresh_end, then active or precharged as the banks are
        ref = max(0, min(to, refresh_end) - last)
        tck[BankState.REFRESH] += ref
        rest = to - last - ref
        tck[BankState.ACTIVE if open_banks else BankState.PRECHARGED] += rest
        last = to

    for t, cmd, g, k in sorted(commands, key=lambda c: c[0]):
        advance(min(t, end_tck))
        counts[DramCmd(cmd).name] += 1
        if cmd == DramCmd.ACT:
            open_banks.add((g, k))
        elif cmd == DramCmd.PRE:
            open_banks.discard((g, k))
        elif cmd == DramCmd.PREA:
            open_banks.clear()
        elif cmd == DramCmd.REF:
            refresh_end = t + timing.nRFC
    advance(end_tck)
    return _energy(command_energies(spec, timing), counts, tck, timing)
