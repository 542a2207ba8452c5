"""Cycle-level model of one DDR5 sub-channel and its memory controller: the policy the RTL
controller (rtl/mem/) implements, and the figures it must reach.

Policy, per 800 MHz controller cycle ``c`` (tCK ``4c .. 4c+3``):

* FR-FCFS: at most one column command (READ/WRITE) and one row command (ACT, PRE, REF) per
  cycle, each placed at the earliest tCK of the cycle that every JEDEC rule and the CA bus
  allow. The column command goes to the oldest queued request whose row is open ("first ready");
  the row command opens the bank of the oldest request whose bank is closed, or closes a bank
  whose open row no queued request wants while an older request waits for another row of it.
* Open page: a row stays open after its last access and closes after ``close_idle`` tCK
  without a request for it (or when another row of the bank is wanted, or for refresh).
* Requests enter the queues one per cycle and can be scheduled from the next cycle. A request
  whose 64-byte line sits in the other queue waits until that entry is served, so reads and
  writes of one line complete in request order (reads are served before older writes to other
  lines, never to the same line).
* Reads first; writes wait in their own queue and drain between ``write_high`` and
  ``write_low`` entries, or whenever no read waits.
* All-bank refresh every nREFI: new ACTs stop, open banks are precharged, REF issues, ACTs
  resume nRFC later.

Every command goes through :class:`DDR5TimingChecker` when ``check`` is on, so a policy bug
shows up as a named violation, not as a wrong figure.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from nelssa.hw.model.ddr5_checker import CA_CYCLES, DDR5TimingChecker, DramCmd
from nelssa.hw.model.ddr5_timing import DDR5Timing

log = logging.getLogger(__name__)

TCK_PER_CYCLE = 4
"""tCK per controller cycle (800 MHz controller, 3.2 GHz DRAM clock)."""
ROW_COMMANDS_PER_CYCLE = 2
"""ACT/PRE/REF commands the controller may issue per cycle (beside one READ or WRITE): a random
access needs PRE + ACT + READ every 8 tCK (two controller cycles) at full bandwidth."""
_NEVER = -(10**12)


class BankState(IntEnum):
    """What the banks of a sub-channel do in a controller cycle, by their state at its start:
    the residencies DRAM background and refresh energy are counted from (the RTL controller's
    perf_o counts the same, nelssa_ddr5_pkg::ddr5_perf_t)."""

    ACTIVE = 0
    """A row is open (and no refresh runs)."""
    PRECHARGED = 1
    """Every bank precharged, no refresh running."""
    REFRESH = 2
    """Within nRFC of an all-bank REF."""


class RowGuard(IntEnum):
    """What keeps an open row from being closed for another row of its bank (the order is
    ddr5_sub.hpp's ``Guard``)."""

    QUEUE = 0
    """Any queued request of the served queue that wants the open row (the RTL's policy)."""
    OPENER = 1
    """Only the request whose ACT opened it, until its READ/WRITE: Ramulator 2's guard (its
    controller keeps a PRE off a bank while a request of its active buffer, one whose ACT
    issued, waits on it; requests that found the row already open never enter that buffer)."""
    NONE = 2
    """Nothing: the oldest request's PRE issues as soon as the timings allow."""


class Arbiter(IntEnum):
    """How a cycle's commands are chosen (the order is ddr5_sub.hpp's ``Arbiter``)."""

    CYCLE = 0
    """The RTL's: a column command (the oldest request whose row is open), then up to
    ROW_COMMANDS_PER_CYCLE row commands, each at its earliest tCK of the 4-tCK cycle; rows left
    idle close after ``close_idle``."""
    TCK = 1
    """Ramulator 2's FR-FCFS (GenericDRAMController): one command a tCK, the oldest request
    whose next command (RD/WR, ACT or PRE) is ready, requests whose own ACT issued first; no
    idle close (its open-row policy). Refresh as CYCLE's."""


@dataclass(frozen=True)
class ControllerConfig:
    """Memory-controller parameters of one sub-channel."""

    read_queue: int = 32
    """Read-queue entries."""
    write_queue: int = 32
    """Write-queue entries."""
    write_high: int = 24
    """Write-queue occupancy that starts a write drain."""
    write_low: int = 8
    """Occupancy at which a write drain stops (while reads wait)."""
    close_idle: int = 64
    """tCK an open row may stay unrequested before it is precharged."""
    row_guard: RowGuard = RowGuard.QUEUE
    """What keeps an open row open (an experiment's knob, docs/results/ddr5_energy.md: the RTL
    controller and the Python model implement QUEUE only; the compiled model all three)."""
    arbiter: Arbiter = Arbiter.CYCLE
    """How commands are chosen (the same experiment's; CYCLE only but in the compiled model)."""

    def __post_init__(self) -> None:
        for name in ("read_queue", "write_queue", "write_high", "close_idle"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.write_low < self.write_high <= self.write_queue:
            raise ValueError("need 0 <= write_low < write_high <= write_queue, got "
                             f"{self.write_low}, {self.write_high}, {self.write_queue}")


@dataclass
class DramAccess:
    """One 64-byte access of this sub-channel."""

    index: int
    """Position in the input stream."""
    is_write: bool
    bank_group: int
    bank: int
    row: int
    column: int
    arrival: int = 0
    """Controller cycle the request is offered to the controller."""
    eligible: int = -1
    """First cycle the scheduler may pick it (the cycle after it entered its queue)."""
    issue_tck: int = -1
    """tCK of its READ/WRITE."""
    done_tck: int = -1
    """tCK its data burst ends."""


@dataclass
class RunStats:
    """What a run measured."""

    requests: int = 0
    reads: int = 0
    writes: int = 0
    cycles: int = 0
    """Controller cycles from start to the last data burst."""
    commands: dict[str, int] = field(default_factory=dict)
    residency: dict[BankState, int] = field(default_factory=dict)
    """Controller cycles the run stepped, by the banks' state at each cycle's start."""
    latencies_tck: list[int] = field(default_factory=list)
    """Per read: data end minus the start of its first schedulable cycle, in tCK."""

    def bandwidth_fraction(self, timing: DDR5Timing) -> float:
        """Bytes moved over (cycles x peak bytes per cycle)."""
        peak_per_tck = timing.burst_bytes / timing.burst_cycles
        return (self.requests * timing.burst_bytes) / (self.cycles * TCK_PER_CYCLE * peak_per_tck)


class SubchannelModel:
    """Controller and DRAM timing of one sub-channel; feed requests with :meth:`run`."""

    def __init__(self, timing: DDR5Timing, config: ControllerConfig | None = None,
                 check: bool = True, refresh: bool = True) -> None:
        self.t = timing
        self.cfg = config or ControllerConfig()
        if self.cfg.row_guard != RowGuard.QUEUE or self.cfg.arbiter != Arbiter.CYCLE:
            raise ValueError(f"row_guard {self.cfg.row_guard.name}, arbiter "
                             f"{self.cfg.arbiter.name}: the Python model (as the RTL) has the "
                             "QUEUE guard and the CYCLE arbiter only; the compiled model "
                             "(ddr5_replay) has all")
        self.checker = DDR5TimingChecker(timing) if check else None
        self.refresh = refresh
        nb, ng = timing.banks, timing.bank_groups
        self.open_row: list[int | None] = [None] * nb
        self.row_used = [0] * nb  # tCK of the last column command to the open row
        self.last_act = [_NEVER] * nb
        self.last_pre = [_NEVER] * nb
        self.last_rd = [_NEVER] * nb
        self.last_wr = [_NEVER] * nb
        self.group_act = [_NEVER] * ng
        self.group_rd = [_NEVER] * ng
        self.group_wr = [_NEVER] * ng
        self.any_act = _NEVER
        self.any_rd = _NEVER
        self.any_wr = _NEVER
        self.acts: deque[int] = deque([_NEVER] * 4, maxlen=4)
        self.ref_tck = _NEVER
        self.next_refresh = timing.nREFI
        self.ca_busy: set[int] = set()
        self.draining = False
        self.counts = {c.name: 0 for c in DramCmd}
        self.residency = dict.fromkeys(BankState, 0)
        self.cycle_cmds: list[tuple[int, DramCmd, int, int, int]] = []
        self.trace: list[tuple[int, DramCmd, int, int, int]] | None = None
        """Set to a list to collect every command (tCK, command, bank group, bank, row) in
        issue order."""

    # -- earliest legal tCK of each command (the rules of ddr5_checker, as lower bounds) --------
    def _earliest_act(self, b: int, g: int) -> int:
        t = self.t
        other = max((self.group_act[x] for x in range(t.bank_groups) if x != g), default=_NEVER)
        return max(self.last_pre[b] + t.nRP, self.last_act[b] + t.nRC, self.ref_tck + t.nRFC,
                   self.group_act[g] + t.nRRD_L, other + t.nRRD_S, self.acts[0] + t.nFAW)

    def _earliest_col(self, is_write: bool, b: int, g: int) -> int:
        t = self.t
        ng = range(t.bank_groups)
        if is_write:
            other_wr = max((self.group_wr[x] for x in ng if x != g), default=_NEVER)
            return max(self.last_act[b] + t.nRCD, self.group_wr[g] + t.nCCD_L_WR,
                       other_wr + t.nCCD_S, self.any_rd + t.read_to_write)
        other_rd = max((self.group_rd[x] for x in ng if x != g), default=_NEVER)
        other_wr = max((self.group_wr[x] for x in ng if x != g), default=_NEVER)
        return max(self.last_act[b] + t.nRCD, self.group_rd[g] + t.nCCD_L, other_rd + t.nCCD_S,
                   self.group_wr[g] + t.write_to_read(True),
                   other_wr + t.write_to_read(False))

    def _earliest_pre(self, b: int) -> int:
        t = self.t
        return max(self.last_act[b] + t.nRAS, self.last_rd[b] + t.nRTP,
                   self.last_wr[b] + t.write_to_precharge)

    def _place(self, earliest: int, cmd: DramCmd, lo: int, hi: int) -> int | None:
        """First tCK in [max(earliest, lo), hi] whose CA slots are free, or None."""
        for tck in range(max(earliest, lo), hi + 1):
            if all(tck + k not in self.ca_busy for k in range(CA_CYCLES[cmd])):
                return tck
        return None

    def _issue(self, tck: int, cmd: DramCmd, b: int = 0, row: int = 0) -> None:
        t = self.t
        g, k = divmod(b, t.banks_per_group)
        # the checker wants time order; a cycle's row command may sit before its column command
        self.cycle_cmds.append((tck, cmd, g, k, row))
        if self.trace is not None:
            self.trace.append((tck, cmd, g, k, row))
        for x in range(CA_CYCLES[cmd]):
            self.ca_busy.add(tck + x)
        self.counts[cmd.name] += 1
        if cmd == DramCmd.ACT:
            self.open_row[b] = row
            self.row_used[b] = tck
            self.last_act[b] = self.group_act[g] = self.any_act = tck
            self.acts.append(tck)
        elif cmd == DramCmd.RD:
            self.last_rd[b] = self.group_rd[g] = self.any_rd = tck
            self.row_used[b] = tck
        elif cmd == DramCmd.WR:
            self.last_wr[b] = self.group_wr[g] = self.any_wr = tck
            self.row_used[b] = tck
        elif cmd == DramCmd.PRE:
            self.open_row[b] = None
            self.last_pre[b] = tck
        elif cmd == DramCmd.REF:
            self.ref_tck = tck
            self.next_refresh += t.nREFI

    def run(self, requests: Iterable[DramAccess], max_cycles: int = 10**9) -> RunStats:
        """Serve every request (in arrival order) and return the statistics."""
        t, cfg = self.t, self.cfg
        pending = deque(sorted(requests, key=lambda r: (r.arrival, r.index)))
        stats = RunStats(requests=len(pending))
        rq: list[DramAccess] = []
        wq: list[DramAccess] = []
        last_done = 0
        cycle = 0
        while pending or rq or wq:
            if cycle >= max_cycles:
                raise RuntimeError(f"sub-channel model did not finish in {max_cycles} cycles")
            lo, hi = cycle * TCK_PER_CYCLE, cycle * TCK_PER_CYCLE + TCK_PER_CYCLE - 1
            self.ca_busy = {x for x in self.ca_busy if x >= lo}
            self.residency[self.bank_state(lo)] += 1
            room = {False: len(rq) < cfg.read_queue, True: len(wq) < cfg.write_queue}
            # same-line ordering: a request waits while the other queue holds its line
            head = pending[0] if pending and pending[0].arrival <= cycle else None
            blocked = head is not None and any(
                (e.bank_group, e.bank, e.row, e.column)
                == (head.bank_group, head.bank, head.row, head.column)
                for e in (rq if head.is_write else wq))
            if len(wq) >= cfg.write_high or (wq and not rq):
                self.draining = True
            elif len(wq) <= cfg.write_low and rq:
                self.draining = False
            active = wq if self.draining else rq
            refreshing = self.refresh and lo >= self.next_refresh

            # column command: oldest request of the active queue whose row is open
            if not refreshing or any(r is not None for r in self.open_row):
                for r in active:
                    b = r.bank_group * t.banks_per_group + r.bank
                    if self.open_row[b] != r.row:
                        continue
                    cmd = DramCmd.WR if r.is_write else DramCmd.RD
                    tck = self._place(self._earliest_col(r.is_write, b, r.bank_group), cmd,
                                      lo, hi)
                    if tck is None:
                        continue
                    self._issue(tck, cmd, b, r.row)
                    r.issue_tck = tck
                    r.done_tck = tck + (t.nCWL if r.is_write else t.nCL) + t.burst_cycles
                    last_done = max(last_done, r.done_tck)
                    if not r.is_write:
                        stats.latencies_tck.append(r.done_tck - r.eligible * TCK_PER_CYCLE)
                    active.remove(r)
                    break

            # row commands: up to ROW_COMMANDS_PER_CYCLE, as the CA bus allows
            for _ in range(ROW_COMMANDS_PER_CYCLE):
                if not self._row_command(active, refreshing, lo, hi):
                    break
            if self.checker:
                for args in sorted(self.cycle_cmds, key=lambda c: c[0]):
                    self.checker.issue(*args)
            self.cycle_cmds.clear()
            # one request enters its queue at the end of the cycle (the RTL's input register);
            # a full queue holds it and everything behind it
            # (room is judged at the start of the cycle, as the RTL's ready)
            if head is not None and room[head.is_write] and not blocked:
                r = pending.popleft()
                r.eligible = cycle + 1
                (wq if r.is_write else rq).append(r)
            cycle += 1
        stats.reads = sum(1 for _ in stats.latencies_tck)
        stats.writes = stats.requests - stats.reads
        stats.cycles = -(-last_done // TCK_PER_CYCLE)
        stats.commands = dict(self.counts)
        stats.residency = dict(self.residency)
        return stats

    def bank_state(self, lo: int) -> BankState:
        """The banks' state at tCK ``lo``, the start of a cycle: refreshing while a REF's nRFC
        runs, else active while a row is open, else precharged."""
        if self.ref_tck + self.t.nRFC > lo:
            return BankState.REFRESH
        if any(r is not None for r in self.open_row):
            return BankState.ACTIVE
        return BankState.PRECHARGED

    def _row_command(self, active: list[DramAccess], refreshing: bool, lo: int, hi: int) -> bool:
        """Issue at most one ACT, PRE or REF in [lo, hi]; True if one issued."""
        t = self.t
        if refreshing:
            open_banks = [b for b, r in enumerate(self.open_row) if r is not None]
            if open_banks:
                b = min(open_banks, key=self._earliest_pre)
                tck = self._place(self._earliest_pre(b), DramCmd.PRE, lo, hi)
                if tck is not None:
                    self._issue(tck, DramCmd.PRE, b)
                return tck is not None
            earliest = max(max(self.last_pre) + t.nRP, self.ref_tck + t.nRFC)
            tck = self._place(earliest, DramCmd.REF, lo, hi)
            if tck is not None:
                self._issue(tck, DramCmd.REF)
            return tck is not None
        wanted: dict[int, set[int]] = {}
        for r in active:
            wanted.setdefault(r.bank_group * t.banks_per_group + r.bank, set()).add(r.row)
        for r in active:  # oldest first
            b = r.bank_group * t.banks_per_group + r.bank
            if self.open_row[b] is None:
                tck = self._place(self._earliest_act(b, r.bank_group), DramCmd.ACT, lo, hi)
                if tck is not None:
                    self._issue(tck, DramCmd.ACT, b, r.row)
                    return True
            elif self.open_row[b] != r.row and self.open_row[b] not in wanted[b]:
                tck = self._place(self._earliest_pre(b), DramCmd.PRE, lo, hi)
                if tck is not None:
                    self._issue(tck, DramCmd.PRE, b)
                    return True
        for b, row in enumerate(self.open_row):  # close rows left idle
            if row is not None and b not in wanted and lo - self.row_used[b] >= self.cfg.close_idle:
                tck = self._place(self._earliest_pre(b), DramCmd.PRE, lo, hi)
                if tck is not None:
                    self._issue(tck, DramCmd.PRE, b)
                    return True
        return False


def requests_from_lines(bg: np.ndarray, bank: np.ndarray, row: np.ndarray, col: np.ndarray,
                        is_write: np.ndarray | None = None,
                        arrival: np.ndarray | None = None) -> list[DramAccess]:
    """DramAccess objects from per-line coordinate arrays (all requests at cycle 0 by default)."""
    n = len(bg)
    w = np.zeros(n, bool) if is_write is None else is_write
    a = np.zeros(n, np.int64) if arrival is None else arrival
    return [DramAccess(i, bool(w[i]), int(bg[i]), int(bank[i]), int(row[i]), int(col[i]), int(a[i]))
            for i in range(n)]
