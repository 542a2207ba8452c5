"""The model device's timing from a cycle model of the RTL device's memory side
(``device_cycle.cpp``): its command queue, units, host port, memory front end and the eight
sub-channel controllers, stepped cycle by cycle on the line addresses each descriptor reads and
writes. It is the model device's default timer (``cycle``, hw/model/device_timers.py) in place
of the fluid :class:`~nelssa.hw.model.device_timing.Schedule`: the units share DDR5 as the
RTL's do, request by request, refresh windows, row conflicts and write drains included, instead
of by fitted sharing terms.

What it does not see (the engine's turns, its normalisation and output, the read pipeline) are
a few cycle counts in :class:`CycleTiming`, fitted by ``scripts/calibrate_device.py --cycle``.
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from nelssa.driver.formats import CLUSTER_ENTRY_BYTES, LINE_BYTES, DescOpcode, DescStatus
from nelssa.hw.model import ddr5_replay
from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_subchannel import BankState, ControllerConfig
from nelssa.hw.model.device_timing import CALIBRATION_FILE, HOST_SHARE
from nelssa.hw.model.engine import EngineParams
from nelssa.hw.model.engine_cycles import EngineTiming

READ_DEPTH = 128
"""Reads each unit's line reader keeps in flight (nelssa_attn_unit ReadDepth)."""
CYCLE_MAX_UNITS = 6
"""Most units the cycle model (and the RTL device, nelssa_device NumUnits) has: the memory
front end's 8 ports less the host's and the command queue's."""
TOKENS_OFFSET = 8
"""Where a directory entry's token count lies in it (driver/formats.CLUSTER_ENTRY)."""


@dataclass(frozen=True)
class CycleTiming:
    """The unit's own cycle counts, beside the memory side the model steps through."""

    read_latency: int = 2
    """Cycles from a read's last data burst at the DRAM to its line in the unit's reorder
    buffer (the controller's data path, the front end, the lanes)."""
    kv_turn: int = 2
    """Cycles the engine waits between a cluster's last K beat and its first V beat."""
    cluster_gap: int = 0
    """Cycles between one cluster's last V beat and the next cluster's first K beat."""
    final: int = 0
    """Cycles of normalisation per query head after the last V beat."""
    out_beat: int = 0
    """Cycles between two result writes beyond the one each takes."""
    start: int = 0
    """Cycles from the stream's start to the engine taking its first Q beat."""
    doorbell: int = 16
    """Cycles from the doorbell to the command queue seeing it."""
    final_fixed: int = 0
    """Cycles once per descriptor beside ``final`` per head: the arithmetic units' pipelines
    after the last V beat (:meth:`for_engine`; 0 with combinational units)."""
    v_row: int = 0
    """Cycles a V row takes at least (an adder's latency, which o and l wait for once a row:
    :meth:`for_engine`); a row of fewer beats waits the rest."""
    beat: int = 1
    """Cycles a K or V beat takes: 32 / the engine's compute lanes (:meth:`for_engine`)."""

    @classmethod
    def load(cls) -> CycleTiming:
        if not CALIBRATION_FILE.exists():
            return cls()
        data = json.loads(CALIBRATION_FILE.read_text()).get("cycle_model", {})
        return cls(**{f.name: int(data[f.name]) for f in fields(cls) if f.name in data})

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def for_engine(self, params: EngineParams) -> CycleTiming:
        """These counts (fitted on the RTL device, whose units are combinational and take a
        beat a cycle) for engines with ``params``' unit latencies and lanes: what the pipelines
        add to the K->V turn, after the last V beat, and to each V row, and the cycles of a
        K, V and result beat, from the engine's own schedule (hw/model/engine_cycles.py); the
        same counts for the fitted engine. (A result beat's chunks are charged between
        every two writes: one beat's too many before the LSE beat.)"""
        if params.as_fitted:
            return self
        t = EngineTiming.of(params)
        extra = t.over_combinational(params)
        return replace(self, kv_turn=self.kv_turn + extra.kv_turn,
                       final_fixed=self.final_fixed + extra.tail, v_row=params.latency.add,
                       beat=t.beat, out_beat=self.out_beat + extra.out_beat)


class CycleSchedule:
    """When the model device's descriptors complete, from the cycle model. The same use as the
    fluid Schedule: ``add`` descriptors and host lines at ``now``, ``sync`` to a cycle, which
    returns the completions written up to it."""

    def __init__(self, geometry: DeviceGeometry, engines: int, order_depth: int = 8,
                 timing: CycleTiming | None = None, address_map: str = "cacheline",
                 config: ControllerConfig | None = None) -> None:
        if not 1 <= engines <= CYCLE_MAX_UNITS:
            raise ValueError(f"the cycle model has 1..{CYCLE_MAX_UNITS} units, not {engines}")
        self._so = ddr5_replay.require("the device's cycle model")
        self.geometry = geometry
        self.address_map = address_map
        self.timing = timing or CycleTiming.load()
        t = self.timing
        mem = ddr5_replay._params(geometry.timing, config or ControllerConfig(), True)
        dev = np.array([engines, order_depth, READ_DEPTH, HOST_SHARE, t.doorbell,
                        t.read_latency, t.kv_turn, t.cluster_gap, t.final, t.out_beat,
                        t.start, t.final_fixed, t.v_row, t.beat], np.int64)
        self._handle = self._so.dc_new(ddr5_replay._ptr(mem, ctypes.c_longlong), mem.size,
                                 ddr5_replay._ptr(dev, ctypes.c_longlong))
        if not self._handle:
            raise ValueError(f"the cycle model cannot hold {geometry.timing.banks} banks")
        self._keys: dict[int, object] = {}
        self._next_key = 0
        self.recording: list[tuple] | None = None
        """Set to a list, the descriptors and host lines added from then on, as
        :func:`replay` takes them (a calibration fits the timing on them in seconds)."""
        self.host_served: list[int] = []
        """Tags of host lines served (their responses may leave), in order, not yet taken."""

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            self._so.dc_free(handle)
            self._handle = None

    @property
    def now(self) -> int:
        return int(self._so.dc_now(self._handle))

    @property
    def busy(self) -> int:
        """Cycles with a unit busy, up to ``now``: the RTL's PERF_BUSY."""
        return int(self._so.dc_busy(self._handle))

    @property
    def idle(self) -> bool:
        return bool(self._so.dc_idle(self._handle))

    def ddr5_counts(self) -> list[tuple[dict[str, int], dict[BankState, int]]]:
        """Per sub-channel, the commands its controller issued and the cycles its banks spent
        in each state (as the RTL controllers' perf_o counts them), up to ``now``."""
        out = np.zeros((len(ddr5_replay.COMMANDS) + len(ddr5_replay.STATES)) * 8, np.int64)
        self._so.dc_counts(self._handle, ddr5_replay._ptr(out, ctypes.c_longlong))
        c = len(ddr5_replay.COMMANDS)
        return [(dict(zip(ddr5_replay.COMMANDS, map(int, row[:c]), strict=True)),
                 dict(zip(ddr5_replay.STATES, map(int, row[c:]), strict=True)))
                for row in out.reshape(8, -1)]

    def log_commands(self) -> None:
        """Keep every DDR5 command from now on, for :meth:`take_commands`."""
        self._so.dc_log(self._handle)

    def take_commands(self, sub: int) -> np.ndarray:
        """Sub-channel ``sub``'s commands logged since the last call: rows of tCK, command
        (ddr5_checker.DramCmd), bank group, bank, row, in issue order."""
        rows = []
        buf = np.zeros((1 << 16, 4), np.int64)
        while n := int(self._so.dc_log_take(self._handle, sub,
                                            ddr5_replay._ptr(buf, ctypes.c_longlong), len(buf))):
            rows.append(buf[:n].copy())
        got = np.concatenate(rows) if rows else np.zeros((0, 4), np.int64)
        return ddr5_replay.log_rows(got, self.geometry.timing)

    def _coords(self, addrs: list[int]) -> np.ndarray:
        if not addrs:
            return np.zeros((0, 5), np.int64)
        d = decode(np.asarray(addrs, np.int64), self.geometry, self.address_map)
        return np.stack([d.subchannel, d.bank_group, d.bank, d.row, d.column], 1).astype(
            np.int64)

    def add(self, key: object, d, status: DescStatus, lines: list[int],
            writes: list[tuple[int, bytes]], ring_addr: int, cq_addr: int, mem) -> None:
        """A descriptor put on the ring now (parsed DESCRIPTOR ``d``, as run_descriptor ran
        it: ``status``, the ``lines`` it read, its ``writes``), read from ``ring_addr``, its
        completion written at ``cq_addr``; ``mem`` holds its directory."""
        nop = d.opcode == DescOpcode.NOP
        engine = status == DescStatus.OK and not nop and bool(lines)
        ids: list[int] = []
        dirs: list[int] = []
        stream: list[int] = []
        beats: list[int] = []
        q_lines = 0
        if lines and d.opcode == DescOpcode.ATTN:
            id_lines = -(-d.num_ids * 4 // LINE_BYTES)
            ids = lines[:id_lines]
            dirs = lines[id_lines:id_lines + d.num_ids]
            stream = lines[id_lines + d.num_ids:]
            if engine:
                q_lines = d.q_heads * d.head_dim * 2 // LINE_BYTES
                sel = np.frombuffer(mem.read(d.ids_addr, d.num_ids * 4), dtype="<u4")
                row = d.head_dim * 2 // LINE_BYTES
                beats = [int.from_bytes(mem.read(d.dir_addr + int(c) * CLUSTER_ENTRY_BYTES
                                                 + TOKENS_OFFSET, 2), "little") * row
                         for c in sel]
        out = [a + k for a, data in writes for k in range(0, len(data), LINE_BYTES)]
        line = self._coords([ring_addr - ring_addr % LINE_BYTES, cq_addr - cq_addr % LINE_BYTES,
                             *ids, *dirs, *stream, *out])
        counts = (int(nop), int(engine), q_lines, max(1, d.q_heads), len(ids), len(dirs),
                  len(stream), len(out))
        self._push(key, counts, np.asarray(beats, np.int32), np.ascontiguousarray(line))

    def _push(self, key: object, counts: tuple[int, ...], beats: np.ndarray,
              lines: np.ndarray) -> None:
        """Hand a descriptor to the cycle model (and to the recording)."""
        if self.recording is not None:
            self.recording.append(("add", self.now, counts, beats, lines))
        index = self._next_key
        self._next_key += 1
        self._keys[index] = key
        self._so.dc_add(self._handle, index, *counts, ddr5_replay._ptr(beats, ctypes.c_int),
                        beats.size, ddr5_replay._ptr(lines, ctypes.c_longlong))

    def add_host_line(self, addr: int, write: bool, tag: int) -> None:
        """A host CXL.mem line arriving now; ``tag`` comes back in ``host_served`` once the
        memory has it (a write taken, a read's data back)."""
        self._push_host(np.ascontiguousarray(self._coords([addr - addr % LINE_BYTES])[0]),
                        int(write), tag)

    def _push_host(self, coords: np.ndarray, write: int, tag: int) -> None:
        if self.recording is not None:
            self.recording.append(("host", self.now, coords, write))
        self._so.dc_add_host(self._handle, ddr5_replay._ptr(coords, ctypes.c_longlong), write,
                             tag)

    def _pairs(self, take) -> list[tuple[int, int]]:
        """Everything one of the library's hand-out calls (dc_finished, dc_host_done) has."""
        out: list[tuple[int, int]] = []
        first = np.zeros(64, np.int64)
        second = np.zeros(64, np.int64)
        while True:
            n = take(self._handle, ddr5_replay._ptr(first, ctypes.c_longlong),
                     ddr5_replay._ptr(second, ctypes.c_longlong), first.size)
            out += zip(first[:n].tolist(), second[:n].tolist(), strict=True)
            if n < first.size:
                return out

    def _collect(self) -> dict[object, int]:
        self.host_served += [tag for tag, _ in self._pairs(self._so.dc_host_done)]
        return {self._keys.pop(key): cycle for key, cycle in self._pairs(self._so.dc_finished)}

    def sync(self, t: int) -> dict[object, int]:
        """Run to cycle ``t``; the completions written on the way (key: cycle)."""
        if t > self.now:
            self._so.dc_run(self._handle, int(t), 0)
        return self._collect()

    def run_to_next_completion(self, limit: int) -> dict[object, int]:
        """Run until a completion is written or to cycle ``limit``; what was written."""
        self._so.dc_run(self._handle, int(limit), 1)
        return self._collect()

    def finish_times(self) -> dict[object, int]:
        """The cycle each descriptor now known completes, if nothing more arrives (on a copy:
        this schedule does not move)."""
        ahead = object.__new__(CycleSchedule)
        ahead.__dict__.update(self.__dict__)
        ahead._keys = dict(self._keys)
        ahead.host_served = []
        ahead.recording = None
        ahead._handle = self._so.dc_clone(self._handle)
        return ahead.run_to_idle()

    def run_to_idle(self) -> dict[object, int]:
        """Run until nothing is left to do; the completions written on the way."""
        out = self._collect()
        while not self.idle:
            out.update(self.sync(self.now + 100_000))
        return out


def replay(recording: list[tuple], timing: CycleTiming, geometry: DeviceGeometry,
           engines: int = 4, order_depth: int = 8) -> int:
    """Busy cycles of a recorded run (``CycleSchedule.recording``) under another ``timing``:
    the same descriptors and host lines at the same cycles, run until the device is idle."""
    s = CycleSchedule(geometry, engines, order_depth, timing)
    for kind, at, *args in recording:
        s.sync(at)
        if kind == "add":
            s._push(None, *args)
        else:
            s._push_host(*args, tag=0)
    s.run_to_idle()
    return s.busy
