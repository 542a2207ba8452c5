"""DDR5 command traces and memory specifications in DRAMPower 5's formats, so a run's figures
can be held to DRAMPower (github.com/tukl-msd/DRAMPower) on any machine.

* The command trace is DRAMPower's CLI CSV (``drampower_cli -t``): one command a line,
  ``timestamp,command,rank,bank_group,bank,row,column[,data]``, the timestamp in tCK, the
  command one of DRAMPower's names (ACT, PRE, PREA, RD, WR, REFA), the data of a RD or WR a
  hex string (the models carry no data: zeros, one burst of the sub-channel), and a last
  ``END`` line at the run's end. The column of a RD or WR is written 0: the command logs keep
  the row, and DRAMPower's energy does not read the column.
* The memory specification is DRAMPower's JSON memspec (``drampower_cli -m``), the DRAMUtils
  ``MemSpecDDR5`` schema: ``{"memspec": {"memoryId", "memoryType": "DDR5",
  "memarchitecturespec", "mempowerspec", "memtimingspec", "bankwisespec",
  "memimpedancespec"}}``, currents in A, voltages in V, timings in tCK and tCK in seconds.
* A CLI configuration (``drampower_cli -c``) with 50 % toggling, since the traces carry no data.

DRAMPower models one rank per run: a device's sub-channels are written one trace each.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nelssa.hw.model.ddr5_checker import DramCmd
from nelssa.hw.model.ddr5_device import TraceFormatError
from nelssa.hw.model.ddr5_power import ESTIMATE, DDR5PowerSpec
from nelssa.hw.model.ddr5_timing import DDR5Timing

NAMES = {DramCmd.ACT: "ACT", DramCmd.PRE: "PRE", DramCmd.PREA: "PREA", DramCmd.RD: "RD",
         DramCmd.WR: "WR", DramCmd.REF: "REFA"}
"""DRAMPower's command names (its CmdTypeUtil::from_string) for the controller's commands."""
_BY_NAME = {v: k for k, v in NAMES.items()}
MAX_LINE = 1024
"""Longest line read back: a burst's data is 128 hex digits."""
CLI_CONFIG = {"useToggleRate": True, "simconfig": {"toggleRateDefinition": {
    "togglingRateRead": 0.5, "togglingRateWrite": 0.5, "dutyCycleRead": 0.5,
    "dutyCycleWrite": 0.5, "idlePatternRead": "L", "idlePatternWrite": "L"}}}
"""drampower_cli's configuration: toggle rates in place of the data the traces lack."""


def trace_lines(commands: Iterable[Sequence[int]], end_tck: int, burst_bytes: int) -> Iterable[str]:
    """CSV lines of ``commands`` ((tCK, DramCmd, bank group, bank, row) each; put in time order,
    as DRAMPower reads them) and the END line at ``end_tck``."""
    data = "00" * burst_bytes
    last = 0
    for tck, cmd, g, k, row in sorted(commands, key=lambda c: int(c[0])):
        tck, cmd = int(tck), DramCmd(int(cmd))
        last = max(last, tck)
        line = f"{tck},{NAMES[cmd]},0,{int(g)},{int(k)},{int(row)},0"
        yield line + f",{data}" if cmd in (DramCmd.RD, DramCmd.WR) else line
    yield f"{max(end_tck, last)},END,0,0,0,0,0"


def write_trace(path: Path, commands: Iterable[Sequence[int]], end_tck: int,
                burst_bytes: int) -> int:
    """Write a command trace; returns how many commands it holds (END not counted)."""
    n = -1
    with path.open("w") as f:
        for n, line in enumerate(trace_lines(commands, end_tck, burst_bytes)):  # noqa: B007
            f.write(line + "\n")
    return n


def read_trace(path: Path, max_lines: int = 10**8) -> tuple[list[tuple[int, DramCmd, int, int,
                                                                         int]], int]:
    """A command trace read back: its commands (tCK, DramCmd, bank group, bank, row) and the
    END line's tCK. TraceFormatError naming the file, line and field of anything else."""
    out: list[tuple[int, DramCmd, int, int, int]] = []
    end = None
    with path.open() as f:
        for no, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), ""), 1):
            if no > max_lines:
                raise TraceFormatError(f"{path}: more than {max_lines} lines")
            if len(raw) > MAX_LINE:
                raise TraceFormatError(f"{path}:{no}: line longer than {MAX_LINE} characters")
            if end is not None:
                raise TraceFormatError(f"{path}:{no}: a line after END")
            fields = [x.strip() for x in raw.strip().split(",")]
            if len(fields) < 7:
                raise TraceFormatError(f"{path}:{no}: {len(fields)} fields, DRAMPower's CSV "
                                       "has timestamp,command,rank,bank_group,bank,row,column")
            try:
                tck, rank, g, k, row, _col = (int(fields[i]) for i in (0, 2, 3, 4, 5, 6))
            except ValueError:
                raise TraceFormatError(f"{path}:{no}: a field that is not a whole number: "
                                       f"{raw.strip()[:80]!r}") from None
            if min(tck, rank, g, k, row) < 0:
                raise TraceFormatError(f"{path}:{no}: a negative field")
            if fields[1] == "END":
                end = tck
                continue
            cmd = _BY_NAME.get(fields[1])
            if cmd is None:
                raise TraceFormatError(f"{path}:{no}: command {fields[1]!r} (known: "
                                       f"{', '.join(_BY_NAME)}, END)")
            if cmd in (DramCmd.RD, DramCmd.WR):
                hexdata = fields[7] if len(fields) > 7 else ""
                if not hexdata or len(hexdata) % 2 or any(c not in "0123456789abcdefABCDEF"
                                                          for c in hexdata):
                    raise TraceFormatError(f"{path}:{no}: {fields[1]} needs its data as an "
                                           "even number of hex digits")
            if out and tck < out[-1][0]:
                raise TraceFormatError(f"{path}:{no}: timestamp {tck} before the line above's")
            out.append((tck, cmd, g, k, row))
    if end is None:
        raise TraceFormatError(f"{path}: no END line")
    return out, end


def memspec(spec: DDR5PowerSpec, timing: DDR5Timing) -> dict[str, Any]:
    """The DRAMPower JSON memspec of one sub-channel (a rank of ``spec.devices`` dies)."""
    t = timing
    ns = t.tck_ps / 1000

    def cyc(nanoseconds: float) -> int:  # JEDEC-style rounding up of a time to tCK
        return math.ceil(nanoseconds / ns - 0.025)

    arch = {"nbrOfChannels": 1, "nbrOfDevices": spec.devices, "nbrOfRanks": 1,
            "nbrOfDIMMRanks": 1, "nbrOfPhysicalRanks": 1, "nbrOfLogicalRanks": 1,
            "nbrOfBanks": t.banks, "nbrOfBankGroups": t.bank_groups, "nbrOfRows": t.rows,
            "nbrOfColumns": t.row_bytes // spec.devices * 8 // spec.die_width,
            "burstLength": t.burst_length, "dataRate": 2, "width": spec.die_width,
            "maxBurstLength": t.burst_length, "cmdMode": 1, "refMode": 1, "RAAIMT": 32,
            "RAAMMT": 96, "RAADEC": 16}
    power = {"vdd": spec.vdd, "vpp": spec.vpp, "vddq": spec.vddq}
    for domain, prefix in (("vdd", "idd"), ("vpp", "ipp")):
        i = spec.currents(domain)
        power |= {f"{prefix}{s}": i[s] for s in ("0", "2n", "3n", "4r", "4w", "5b")}
        # states the controller never enters (power-down, self refresh, same-bank and fine
        # granularity refresh): DRAMPower's schema wants them; estimates, unused by its counts
        power |= {f"{prefix}5c": i["5b"] / 2, f"{prefix}5f": i["5b"] * 0.8,
                  f"{prefix}6n": i["2n"] * 0.6, f"{prefix}2p": i["2n"] * 0.75,
                  f"{prefix}3p": i["3n"] * 0.75}
    timing_spec = {
        "tCK": t.tck_ps * 1e-12, "RAS": t.nRAS, "RCD": t.nRCD, "RTP": t.nRTP, "WL": t.nCWL,
        "WR": t.nWR, "RP": t.nRP, "RL": t.nCL, "RFC1": t.nRFC, "RFC2": cyc(160),
        "RFCsb": cyc(130), "PPD": 2, "RPRE": 2, "RPST": 1, "RDDQS": 0, "WPRE": 2, "WPST": 1,
        "CCD_L_slr": t.nCCD_L, "CCD_L_WR_slr": t.nCCD_L_WR, "CCD_L_WR2_slr": t.nCCD_L,
        "CCD_M_slr": t.nCCD_L, "CCD_M_WR_slr": t.nCCD_L_WR, "CCD_S_slr": t.nCCD_S,
        "CCD_S_WR_slr": t.nCCD_S, "CCD_dlr": t.nCCD_S, "CCD_WR_dlr": t.nCCD_S,
        "CCD_WR_dpr": t.nCCD_S, "RRD_L_slr": t.nRRD_L, "RRD_S_slr": t.nRRD_S,
        "RRD_dlr": t.nRRD_S, "FAW_slr": t.nFAW, "FAW_dlr": t.nFAW, "WTR_L": t.nWTR_L,
        "WTR_M": t.nWTR_L, "WTR_S": t.nWTR_S, "RFC1_slr": t.nRFC, "RFC2_slr": cyc(160),
        "RFC1_dlr": cyc(10), "RFC2_dlr": cyc(10), "RFC1_dpr": cyc(10), "RFC2_dpr": cyc(10),
        "RFCsb_slr": cyc(130), "RFCsb_dlr": cyc(10), "REFI1": t.nREFI, "REFI2": t.nREFI // 2,
        "REFISB": t.nREFI // 4, "REFSBRD_slr": cyc(30), "REFSBRD_dlr": cyc(30), "RTRS": 2,
        "CPDED": 8, "PD": cyc(7.5), "XP": cyc(7.5), "ACTPDEN": 2, "PRPDEN": 2, "REFPDEN": 2}
    r_eq = spec.r_on_ohm + spec.r_tt_ohm
    impedance = {**{f"C_total_{x}": 2e-12 for x in ("cb", "ck", "dqs", "rb", "wb")},
                 **{f"R_eq_{x}": r_eq for x in ("cb", "ck", "dqs", "rb", "wb")}}
    return {"memspec": {
        "memoryId": f"nelssa {spec.name} x{spec.devices} ({timing.name})",
        "memoryType": "DDR5", "RefreshMode": 1, "memarchitecturespec": arch,
        "mempowerspec": power, "memtimingspec": timing_spec, "bankwisespec": {"factRho": 1.0},
        "memimpedancespec": impedance},
        "nelssa_sources": {
            **spec.sources(),
            "memimpedancespec": "2 pF per pin, R_on + R_tt: " + ESTIMATE,
            "idd5c, idd5f, idd6n, idd2p, idd3p and their ipp": "unused: " + ESTIMATE,
            "memtimingspec": "the timing preset (hw/model/ddr5_timing.py); the refresh-mode and "
            "multi-rank fields JEDEC-like values, unused by DRAMPower's energy of these traces"}}


def write_memspec(path: Path, spec: DDR5PowerSpec, timing: DDR5Timing) -> None:
    path.write_text(json.dumps(memspec(spec, timing), indent=2) + "\n")


def outputs(trace: Path, subchannels: int) -> tuple[list[Path], Path, Path]:
    """The files a ``--command-trace FILE`` writes: one CSV per sub-channel (FILE itself for one,
    else FILE's stem with ``-sub<N>``), the memspec and the CLI configuration beside them."""
    if subchannels == 1:
        traces = [trace]
    else:
        traces = [trace.with_name(f"{trace.stem}-sub{s}{trace.suffix}")
                  for s in range(subchannels)]
    return traces, trace.with_name(trace.stem + ".memspec.json"), \
        trace.with_name(trace.stem + ".drampower.json")


def check_writable(trace: Path) -> None:
    """ValueError naming the path where a command trace cannot be written (a missing folder,
    a folder in its place): checked before a run, so a long run does not end in the error."""
    if trace.is_dir():
        raise ValueError(f"--command-trace {trace}: is a folder, not a file")
    if not trace.parent.is_dir():
        raise ValueError(f"--command-trace {trace}: folder {trace.parent} does not exist")


def write_run(trace: Path, spec: DDR5PowerSpec, timing: DDR5Timing,
              per_subchannel: Sequence[tuple[Iterable[Sequence[int]], int]]) -> list[Path]:
    """Write a run's command traces (per sub-channel: its commands and end tCK), the memspec and
    the CLI configuration; returns the paths written."""
    traces, spec_path, cfg_path = outputs(trace, len(per_subchannel))
    for path, (commands, end) in zip(traces, per_subchannel, strict=True):
        write_trace(path, commands, end, timing.burst_bytes)
    write_memspec(spec_path, spec, timing)
    cfg_path.write_text(json.dumps(CLI_CONFIG, indent=2) + "\n")
    return [*traces, spec_path, cfg_path]


def command_trace_option(value: str) -> Path:
    """argparse type of ``--command-trace FILE``: a file whose folder exists (checked before
    the run, so a long run does not end in the error)."""
    import argparse

    path = Path(value)
    try:
        check_writable(path)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix(f"--command-trace {path}: ")
                                          + f": {path}") from None
    return path


def write_schedule(trace: Path, schedule: Any, spec: DDR5PowerSpec) -> list[Path]:
    """Write what a model device's cycle model (hw/model/device_cycle.CycleSchedule, logging
    since its log_commands) issued, one trace per sub-channel, up to its present cycle."""
    from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE

    end = schedule.now * TCK_PER_CYCLE
    subs = schedule.geometry.subchannels
    return write_run(trace, spec, schedule.geometry.timing,
                     [(schedule.take_commands(s).tolist(), end) for s in range(subs)])
