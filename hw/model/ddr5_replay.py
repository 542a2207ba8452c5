"""The cycle model of a DDR5 sub-channel, compiled: ``ddr5_replay.cpp`` beside this file is
:class:`~nelssa.hw.model.ddr5_subchannel.SubchannelModel`'s policy step for step (without the
timing checker), so it issues the same commands at the same tCK, a few hundred times faster.
It is the model device's DDR5 time source (hw/model/device_timers.py, device_cycle.py) and the
scripts' (bench_ddr5.py, ddr5_energy.py), which :func:`require` it: built once with
``g++ -O2 -shared`` into ``build/ddr5_replay-<hash>`` (``$NELSSA_BUILD_CACHE`` moves it; the
hash covers the sources), loaded with ctypes. Where no compiler is found or the build fails,
:func:`available` is False and :func:`require` raises, naming the compiler.

The timings, the controller's configuration and the CA slots a command takes come from their
one description (ddr5_timing.py, ControllerConfig, ddr5_checker.CA_CYCLES) on every call.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_checker import CA_CYCLES, DramCmd
from nelssa.hw.model.ddr5_subchannel import (
    ROW_COMMANDS_PER_CYCLE,
    TCK_PER_CYCLE,
    BankState,
    ControllerConfig,
)
from nelssa.hw.model.ddr5_timing import DDR5Timing

log = logging.getLogger(__name__)

SOURCES = tuple(Path(__file__).with_name(n) for n in ("ddr5_replay.cpp", "device_cycle.cpp"))
"""Compiled into one library: the open-loop replay and the device's cycle model
(device_cycle.py), both on the controller of ddr5_sub.hpp."""
HEADERS = (Path(__file__).with_name("ddr5_sub.hpp"),)
REPO_ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("ACT", "RD", "WR", "PRE", "REF")
"""The command counts the replay returns, in its order (ddr5_sub.hpp's ``Cmd``)."""
STATES = (BankState.ACTIVE, BankState.PRECHARGED, BankState.REFRESH)
"""The residencies the replay returns after them, in its order (ddr5_sub.hpp's ``State``)."""
_OUT = 1 + len(COMMANDS) + len(STATES)


@dataclass(frozen=True)
class ReplayRun:
    """One sub-channel's replay: what SubchannelModel.run measures, and its commands."""

    cycles: int
    """Controller cycles to the last data burst."""
    commands: dict[str, int]
    """Commands issued by name (COMMANDS)."""
    residency: dict[BankState, int]
    """Controller cycles stepped, by the banks' state at each one's start."""
    log: npt.NDArray[np.int64] | None = None
    """Where asked for: per command (in issue order) tCK, command (ddr5_checker.DramCmd), bank
    group, bank, row."""


def _build_dir() -> Path:
    env = os.environ.get("NELSSA_BUILD_CACHE")
    return Path(env) if env else REPO_ROOT / "build"


_WHY: list[str] = []
"""Why the library could not be built (one entry once it failed)."""


@cache
def _library() -> ctypes.CDLL | None:
    """The compiled replay, built on first use; None where it cannot be built."""
    name = os.environ.get("CXX", "g++")
    compiler = shutil.which(name)
    if compiler is None:
        _WHY.append(f"no C++ compiler: {name} (or $CXX) is not found")
        log.warning("%s: the compiled DDR5 cycle model is not available", _WHY[-1])
        return None
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES + HEADERS)).hexdigest()[:16]
    lib = _build_dir() / f"ddr5_replay-{digest}" / "libddr5_replay.so"
    if not lib.exists():
        lib.parent.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", *map(str, SOURCES), "-o",
               str(tmp)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            _WHY.append(f"building the DDR5 cycle model with {compiler} failed "
                        f"({' '.join(cmd)}):\n{done.stderr[-2000:]}")
            log.warning("%s", _WHY[-1])
            return None
        tmp.replace(lib)  # atomic: a parallel build leaves one complete library
    so = ctypes.CDLL(str(lib))
    p64 = ctypes.POINTER(ctypes.c_longlong)
    p32 = ctypes.POINTER(ctypes.c_int)
    so.ddr5_replay.argtypes = [p64, ctypes.c_int, p32, p32, p64, p64,
                               ctypes.POINTER(ctypes.c_ubyte), p64, ctypes.c_longlong, p64]
    so.ddr5_replay.restype = ctypes.c_int
    so.ddr5_replay_subchannels.argtypes = [p64, ctypes.c_int, p32, p32, p32, p64, p64,
                                           ctypes.POINTER(ctypes.c_ubyte), p64,
                                           ctypes.c_longlong, p64]
    so.ddr5_replay_subchannels.restype = ctypes.c_int
    so.ddr5_replay_log.argtypes = [p64, ctypes.c_int, p32, p32, p64, p64,
                                   ctypes.POINTER(ctypes.c_ubyte), p64, ctypes.c_longlong, p64,
                                   p64, ctypes.c_longlong]
    so.ddr5_replay_log.restype = ctypes.c_longlong
    i64, vp = ctypes.c_longlong, ctypes.c_void_p
    for name, args, res in (
            ("dc_new", [p64, ctypes.c_int, p64], vp), ("dc_free", [vp], None),
            ("dc_clone", [vp], vp),
            ("dc_add", [vp, i64] + [ctypes.c_int] * 8 + [p32, ctypes.c_int, p64], None),
            ("dc_add_host", [vp, p64, ctypes.c_int, i64], None),
            ("dc_host_done", [vp, p64, p64, ctypes.c_int], ctypes.c_int),
            ("dc_run", [vp, i64, ctypes.c_int], i64),
            ("dc_finished", [vp, p64, p64, ctypes.c_int], ctypes.c_int),
            ("dc_counts", [vp, p64], None), ("dc_log", [vp], None),
            ("dc_log_take", [vp, ctypes.c_int, p64, i64], i64),
            ("dc_now", [vp], i64), ("dc_busy", [vp], i64), ("dc_idle", [vp], ctypes.c_int)):
        getattr(so, name).argtypes = args
        getattr(so, name).restype = res
    return so


def library() -> ctypes.CDLL | None:
    """The compiled library (None where it cannot be built): for device_cycle.py."""
    return _library()


def available() -> bool:
    """Whether the compiled replay can run here."""
    return _library() is not None


def require(user: str) -> ctypes.CDLL:
    """The compiled library, which ``user`` cannot do without: RuntimeError naming the
    compiler where it cannot be built."""
    so = _library()
    if so is None:
        raise RuntimeError(f"{user} needs the compiled DDR5 cycle model: {_WHY[-1]}")
    return so


def _params(t: DDR5Timing, cfg: ControllerConfig, refresh: bool) -> npt.NDArray[np.int64]:
    """The parameter vector, in the order of ddr5_replay.cpp's ``Param``."""
    ca = [CA_CYCLES[c] for c in (DramCmd.ACT, DramCmd.RD, DramCmd.WR, DramCmd.PRE, DramCmd.REF)]
    return np.array([t.nCL, t.nCWL, t.nRCD, t.nRP, t.nRAS, t.nRC, t.nRTP, t.nCCD_S, t.nCCD_L,
                     t.nCCD_L_WR, t.nRRD_S, t.nRRD_L, t.nFAW, t.nRFC, t.nREFI, t.burst_cycles,
                     t.read_to_write, t.write_to_read(True), t.write_to_read(False),
                     t.write_to_precharge, t.bank_groups, t.banks_per_group, cfg.read_queue,
                     cfg.write_queue, cfg.write_high, cfg.write_low, cfg.close_idle,
                     int(refresh), TCK_PER_CYCLE, ROW_COMMANDS_PER_CYCLE, *ca,
                     int(cfg.row_guard), int(cfg.arbiter)], dtype=np.int64)


def _ptr(a: np.ndarray, kind: type) -> object:
    return a.ctypes.data_as(ctypes.POINTER(kind))


def _replay(t: DDR5Timing, start: npt.NDArray[np.int32], bank_group: npt.ArrayLike,
            bank: npt.ArrayLike, row: npt.ArrayLike, column: npt.ArrayLike,
            is_write: npt.ArrayLike | None, arrival: npt.ArrayLike,
            config: ControllerConfig | None, refresh: bool,
            max_cycles: int) -> npt.NDArray[np.int64]:
    """Per sub-channel (requests ``start[s]`` to ``start[s + 1]``): cycles and COMMANDS."""
    so = _library()
    if so is None:
        raise RuntimeError("the compiled DDR5 replay is not available (no C++ compiler?)")
    bg = np.ascontiguousarray(bank_group, dtype=np.int32)
    n = bg.size
    bk = np.ascontiguousarray(bank, dtype=np.int32)
    rw = np.ascontiguousarray(row, dtype=np.int64)
    cl = np.ascontiguousarray(column, dtype=np.int64)
    wr = np.ascontiguousarray(np.zeros(n, bool) if is_write is None else is_write, np.uint8)
    ar = np.ascontiguousarray(arrival, dtype=np.int64)
    if not (bk.size == rw.size == cl.size == wr.size == ar.size == n):
        raise ValueError("the request arrays differ in length")
    start = np.ascontiguousarray(start, dtype=np.int32)
    earlier = np.flatnonzero(np.diff(ar) < 0) + 1  # later requests that arrive earlier
    if not np.isin(earlier, start).all():  # a sub-channel's first may
        raise ValueError("arrival must be non-decreasing")
    params = _params(t, config or ControllerConfig(), refresh)
    subs = start.size - 1
    out = np.zeros((subs, _OUT), np.int64)
    rc = so.ddr5_replay_subchannels(
        _ptr(params, ctypes.c_longlong), subs, _ptr(start, ctypes.c_int),
        _ptr(bg, ctypes.c_int), _ptr(bk, ctypes.c_int), _ptr(rw, ctypes.c_longlong),
        _ptr(cl, ctypes.c_longlong), _ptr(wr, ctypes.c_ubyte), _ptr(ar, ctypes.c_longlong),
        max_cycles, _ptr(out, ctypes.c_longlong))
    if rc == -2:
        raise ValueError(f"the replay handles up to 64 banks, not {t.banks}")
    if rc != 0:
        raise RuntimeError(f"DDR5 replay did not finish in {max_cycles} cycles")
    return out


def replay_subchannel(t: DDR5Timing, bank_group: npt.ArrayLike, bank: npt.ArrayLike,
                      row: npt.ArrayLike, column: npt.ArrayLike,
                      is_write: npt.ArrayLike | None, arrival: npt.ArrayLike,
                      config: ControllerConfig | None = None, refresh: bool = True,
                      max_cycles: int = 10**12) -> tuple[int, dict[str, int]]:
    """Controller cycles until the last data burst of one sub-channel's requests (in arrival
    order, non-decreasing), and the commands issued, as SubchannelModel.run measures them."""
    run = replay_run(t, bank_group, bank, row, column, is_write, arrival, config, refresh,
                     max_cycles)
    return run.cycles, run.commands


def replay_run(t: DDR5Timing, bank_group: npt.ArrayLike, bank: npt.ArrayLike,
               row: npt.ArrayLike, column: npt.ArrayLike, is_write: npt.ArrayLike | None,
               arrival: npt.ArrayLike, config: ControllerConfig | None = None,
               refresh: bool = True, max_cycles: int = 10**12,
               log: bool = False) -> ReplayRun:
    """One sub-channel's replay (as :func:`replay_subchannel`) with its bank-state residencies
    and, with ``log``, every command it issued."""
    n = np.asarray(bank_group).size
    if not log:
        out = _replay(t, np.array([0, n], np.int32), bank_group, bank, row, column, is_write,
                      arrival, config, refresh, max_cycles)[0]
        return _run(out, None)
    so = require("a DDR5 command trace")
    a = [np.ascontiguousarray(x, dtype=k) for x, k in (
        (bank_group, np.int32), (bank, np.int32), (row, np.int64), (column, np.int64),
        (np.zeros(n, bool) if is_write is None else is_write, np.uint8), (arrival, np.int64))]
    if any(x.size != n for x in a):
        raise ValueError("the request arrays differ in length")
    if (np.diff(a[5]) < 0).any():
        raise ValueError("arrival must be non-decreasing")
    params = _params(t, config or ControllerConfig(), refresh)
    out = np.zeros(_OUT, np.int64)
    cap = 4 * n + 64
    while True:
        buf = np.zeros((cap, 4), np.int64)
        got = so.ddr5_replay_log(_ptr(params, ctypes.c_longlong), n, _ptr(a[0], ctypes.c_int),
                                 _ptr(a[1], ctypes.c_int), _ptr(a[2], ctypes.c_longlong),
                                 _ptr(a[3], ctypes.c_longlong), _ptr(a[4], ctypes.c_ubyte),
                                 _ptr(a[5], ctypes.c_longlong), max_cycles,
                                 _ptr(out, ctypes.c_longlong), _ptr(buf, ctypes.c_longlong), cap)
        if got != -3:
            break
        cap *= 4  # refreshes and idle closes: more commands than requests allow for
    if got == -2:
        raise ValueError(f"the replay handles up to 64 banks, not {t.banks}")
    if got < 0:
        raise RuntimeError(f"DDR5 replay did not finish in {max_cycles} cycles")
    return _run(out, log_rows(buf[:got], t))


def log_rows(raw: npt.NDArray[np.int64], t: DDR5Timing) -> npt.NDArray[np.int64]:
    """The C++ command log (tCK, ddr5_sub.hpp's Cmd, bank, row per row) as rows of tCK,
    DramCmd, bank group, bank, row."""
    names = np.array([int(DramCmd[c]) for c in COMMANDS])
    g, k = np.divmod(raw[:, 2], t.banks_per_group)
    return np.stack([raw[:, 0], names[raw[:, 1]], g, k, raw[:, 3]], axis=1)


def _run(out: npt.NDArray[np.int64], log: npt.NDArray[np.int64] | None) -> ReplayRun:
    c = len(COMMANDS)
    return ReplayRun(int(out[0]), dict(zip(COMMANDS, (int(x) for x in out[1:1 + c]),
                                           strict=True)),
                     dict(zip(STATES, (int(x) for x in out[1 + c:]), strict=True)), log)


def replay_device(addrs: npt.ArrayLike, writes: npt.ArrayLike | None, geometry: DeviceGeometry,
                  address_map: str = "cacheline", lines_per_cycle: int = 4,
                  config: ControllerConfig | None = None,
                  refresh: bool = True) -> list[int]:
    """Per sub-channel, controller cycles until its last burst (0 where it gets nothing), of a
    stream of byte addresses leaving the front end ``lines_per_cycle`` a cycle, in order (as
    :func:`~nelssa.hw.model.ddr5_device.run_device` replays it)."""
    d = decode(addrs, geometry, address_map)
    n = d.row.size
    w = np.zeros(n, bool) if writes is None else np.asarray(writes, bool)
    order = np.argsort(d.subchannel, kind="stable")
    start = np.searchsorted(d.subchannel[order], np.arange(geometry.subchannels + 1))
    out = _replay(geometry.timing, start, d.bank_group[order], d.bank[order], d.row[order],
                  d.column[order], w[order], order // lines_per_cycle, config, refresh,
                  10**12)
    return [int(c) for c in out[:, 0]]


def replay_device_runs(addrs: npt.ArrayLike, writes: npt.ArrayLike | None,
                       geometry: DeviceGeometry, address_map: str = "cacheline",
                       lines_per_cycle: int = 4, config: ControllerConfig | None = None,
                       refresh: bool = True, log: bool = False) -> list[ReplayRun]:
    """:func:`replay_device` with each sub-channel's whole :class:`ReplayRun` (its commands,
    residencies and, with ``log``, its command stream); a sub-channel without requests ran no
    cycle."""
    d = decode(addrs, geometry, address_map)
    n = d.row.size
    w = np.zeros(n, bool) if writes is None else np.asarray(writes, bool)
    arrival = np.arange(n) // lines_per_cycle
    runs = []
    for s in range(geometry.subchannels):
        at = np.flatnonzero(d.subchannel == s)
        if at.size == 0:
            runs.append(ReplayRun(0, dict.fromkeys(COMMANDS, 0), dict.fromkeys(STATES, 0),
                                  np.zeros((0, 5), np.int64) if log else None))
            continue
        runs.append(replay_run(geometry.timing, d.bank_group[at], d.bank[at], d.row[at],
                               d.column[at], w[at], arrival[at], config, refresh, log=log))
    return runs
