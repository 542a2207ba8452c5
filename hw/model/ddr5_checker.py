"""JEDEC timing rules of one DDR5 sub-channel, checked on a command stream.

The reference for the always-on checker of the sim-only DRAM model (rtl/sim/): the same rules
with the same names, so a violation reads the same in both ("tRCD violated at cycle 1203, bank
group 2 bank 1: ..."). Times are in tCK; commands must come in time order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import IntEnum

from nelssa.hw.model.ddr5_timing import DDR5Timing


class DramCmd(IntEnum):
    """Commands on a sub-channel's command/address bus."""

    ACT = 0
    RD = 1
    WR = 2
    PRE = 3
    PREA = 4
    REF = 5


class CheckRule(IntEnum):
    """Rule numbers shared with the SV checker (bit positions of its violation mask)."""

    CA = 0
    state = 1
    tRCD = 2
    tRP = 3
    tRAS = 4
    tRC = 5
    tRRD_S = 6
    tRRD_L = 7
    tFAW = 8
    tCCD_S = 9
    tCCD_L = 10
    tCCD_L_WR = 11
    tWTR_S = 12
    tWTR_L = 13
    tRTW = 14
    tRTP = 15
    tWR = 16
    tRFC = 17
    tREFI = 18


CA_CYCLES = {DramCmd.ACT: 2, DramCmd.RD: 2, DramCmd.WR: 2, DramCmd.PRE: 1, DramCmd.PREA: 1,
             DramCmd.REF: 1}
"""tCK a command occupies the CA bus (DDR5: two-cycle ACT, READ, WRITE)."""


@dataclass(frozen=True)
class Violation:
    """One broken rule."""

    rule: str
    """Rule name: tRCD, tRP, tRAS, tRC, tCCD_S, tCCD_L, tCCD_L_WR, tRRD_S, tRRD_L, tFAW, tWR,
    tRTP, tWTR_S, tWTR_L, tRTW, tRFC, tREFI, CA, state."""
    cycle: int
    """tCK of the offending command."""
    bank_group: int
    """Bank group addressed (0 for all-bank commands)."""
    bank: int
    """Bank within the group (0 for all-bank commands)."""
    detail: str
    """What was required and what happened."""

    def __str__(self) -> str:
        return (f"{self.rule} violated at cycle {self.cycle}, bank group {self.bank_group} "
                f"bank {self.bank}: {self.detail}")


class TimingViolationError(RuntimeError):
    """Raised by a strict checker on the first violation."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(str(violation))
        self.violation = violation


_NEVER = -(10**12)


class DDR5TimingChecker:
    """Feed it every command of one sub-channel with :meth:`issue`; strict checkers raise
    :class:`TimingViolationError`, others collect :attr:`violations`."""

    def __init__(self, timing: DDR5Timing, strict: bool = True) -> None:
        self.t = timing
        self.strict = strict
        self.violations: list[Violation] = []
        nb, ng = timing.banks, timing.bank_groups
        self.open_row: list[int | None] = [None] * nb
        self.last_act = [_NEVER] * nb
        self.last_pre = [_NEVER] * nb
        self.last_rd = [_NEVER] * nb
        self.last_wr = [_NEVER] * nb
        self.group_act = [_NEVER] * ng
        self.group_rd = [_NEVER] * ng
        self.group_wr = [_NEVER] * ng
        self.any_rd = _NEVER
        self.acts: deque[int] = deque(maxlen=4)
        self.last_ref = 0
        self.ref_cycle = _NEVER
        self.ca_free = 0
        self.now = _NEVER
        self.commands = 0

    def _fail(self, rule: str, cycle: int, bg: int, bank: int, detail: str) -> None:
        v = Violation(rule, cycle, bg, bank, detail)
        self.violations.append(v)
        if self.strict:
            raise TimingViolationError(v)

    def _need(self, rule: str, cycle: int, since: int, gap: int, bg: int, bank: int,
              what: str) -> None:
        if cycle - since < gap:
            self._fail(rule, cycle, bg, bank,
                       f"{what} needs {gap} tCK, got {cycle - since} (previous at {since})")

    def issue(self, cycle: int, cmd: DramCmd, bank_group: int = 0, bank: int = 0,
              row: int = 0) -> None:
        """Check one command and update the state."""
        t, bg = self.t, bank_group
        if cycle < self.now:
            raise ValueError(f"commands out of order: cycle {cycle} after {self.now}")
        if not (0 <= bg < t.bank_groups and 0 <= bank < t.banks_per_group and 0 <= row < t.rows):
            raise ValueError(f"address out of range: bank group {bg}, bank {bank}, row {row}")
        self.now = cycle
        self.commands += 1
        b = bg * t.banks_per_group + bank
        if cycle < self.ca_free:
            self._fail("CA", cycle, bg, bank, f"command bus busy until {self.ca_free}")
        self.ca_free = cycle + CA_CYCLES[cmd]
        if cmd == DramCmd.ACT:
            self._act(cycle, bg, bank, b, row)
        elif cmd in (DramCmd.RD, DramCmd.WR):
            self._column(cycle, cmd, bg, bank, b)
        elif cmd == DramCmd.PRE:
            self._pre(cycle, bg, bank, b)
        elif cmd == DramCmd.PREA:
            for g in range(t.bank_groups):
                for k in range(t.banks_per_group):
                    self._pre(cycle, g, k, g * t.banks_per_group + k)
        elif cmd == DramCmd.REF:
            self._ref(cycle)

    def _act(self, cycle: int, bg: int, bank: int, b: int, row: int) -> None:
        t = self.t
        if self.open_row[b] is not None:
            self._fail("state", cycle, bg, bank, f"ACT to a bank with row {self.open_row[b]} open")
        self._need("tRP", cycle, self.last_pre[b], t.nRP, bg, bank, "PRE to ACT")
        self._need("tRC", cycle, self.last_act[b], t.nRC, bg, bank, "ACT to ACT, same bank")
        self._need("tRFC", cycle, self.ref_cycle, t.nRFC, bg, bank, "REF to ACT")
        for g in range(t.bank_groups):
            if g == bg:
                self._need("tRRD_L", cycle, self.group_act[g], t.nRRD_L, bg, bank,
                           "ACT to ACT, same bank group")
            else:
                self._need("tRRD_S", cycle, self.group_act[g], t.nRRD_S, bg, bank,
                           f"ACT to ACT, other bank group {g}")
        if len(self.acts) == 4:
            self._need("tFAW", cycle, self.acts[0], t.nFAW, bg, bank, "fifth ACT in a window")
        self.acts.append(cycle)
        self.open_row[b] = row
        self.last_act[b] = cycle
        self.group_act[bg] = cycle

    def _column(self, cycle: int, cmd: DramCmd, bg: int, bank: int, b: int) -> None:
        t = self.t
        if self.open_row[b] is None:
            self._fail("state", cycle, bg, bank, f"{cmd.name} to a precharged bank")
        self._need("tRCD", cycle, self.last_act[b], t.nRCD, bg, bank, f"ACT to {cmd.name}")
        for g in range(t.bank_groups):
            same = g == bg
            if cmd == DramCmd.RD:
                self._need("tCCD_L" if same else "tCCD_S", cycle, self.group_rd[g],
                           t.nCCD_L if same else t.nCCD_S, bg, bank, "RD to RD")
                self._need("tWTR_L" if same else "tWTR_S", cycle, self.group_wr[g],
                           t.write_to_read(same), bg, bank, "WR to RD")
            else:
                self._need("tCCD_L_WR" if same else "tCCD_S", cycle, self.group_wr[g],
                           t.nCCD_L_WR if same else t.nCCD_S, bg, bank, "WR to WR")
        if cmd == DramCmd.WR:
            self._need("tRTW", cycle, self.any_rd, t.read_to_write, bg, bank, "RD to WR")
            self.last_wr[b] = cycle
            self.group_wr[bg] = cycle
        else:
            self.last_rd[b] = cycle
            self.group_rd[bg] = cycle
            self.any_rd = cycle

    def _pre(self, cycle: int, bg: int, bank: int, b: int) -> None:
        t = self.t
        if self.open_row[b] is None:
            return  # precharging a closed bank is a no-op
        self._need("tRAS", cycle, self.last_act[b], t.nRAS, bg, bank, "ACT to PRE")
        self._need("tRTP", cycle, self.last_rd[b], t.nRTP, bg, bank, "RD to PRE")
        self._need("tWR", cycle, self.last_wr[b], t.write_to_precharge, bg, bank, "WR to PRE")
        self.open_row[b] = None
        self.last_pre[b] = cycle

    def _ref(self, cycle: int) -> None:
        t = self.t
        open_banks = [i for i, r in enumerate(self.open_row) if r is not None]
        if open_banks:
            g, k = divmod(open_banks[0], t.banks_per_group)
            self._fail("state", cycle, g, k, f"REF with {len(open_banks)} bank(s) open")
        self._need("tRP", cycle, max(self.last_pre), t.nRP, 0, 0, "PRE to REF")
        self._need("tRFC", cycle, self.ref_cycle, t.nRFC, 0, 0, "REF to REF")
        self._check_refresh_interval(cycle)
        self.last_ref = cycle
        self.ref_cycle = cycle

    def _check_refresh_interval(self, cycle: int) -> None:
        limit = (self.t.max_postponed_refresh + 1) * self.t.nREFI
        if cycle - self.last_ref > limit:
            self._fail("tREFI", cycle, 0, 0, f"{cycle - self.last_ref} tCK since the last "
                       f"refresh, at most {limit} allowed")

    def finish(self, cycle: int) -> list[Violation]:
        """End of simulation at ``cycle``: checks the refresh interval; returns violations."""
        self._check_refresh_interval(cycle)
        return self.violations
