"""The ``rtl`` backend: the Verilated device (rtl/sim/nelssa_device_sim.sv) in a shared library
with a small C ABI (hw/sim/device_harness.cpp), behind the driver's port. One per process: the
simulated DRAM's backing store is the process's."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nelssa.driver.formats import LINE_BYTES
from nelssa.driver.port import DDR5_COUNTERS, DevicePort
from nelssa.driver.status import ENGINE_LANES
from nelssa.hw.model.ddr5_addr import Decoded, DeviceGeometry, decode, encode
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig
from nelssa.hw.model.engine import EngineParams, FpLatency
from nelssa.hw.sim.rtl_sources import (
    DDR5_STORE_CPP,
    DDR5_VERILATOR_ARGS,
    DEVICE_SIM,
    FP_GATED_ARGS,
    VERILATOR_CONFIG,
)
from nelssa.hw.sim.verilator import build_executable, fst_available

log = logging.getLogger(__name__)

HARNESS_CPP = Path(__file__).resolve().parent / "device_harness.cpp"
MAX_MESSAGE = 128
RTL_MAX_UNITS = 6
"""Most attention units the RTL device is built with: it uses NumUnits + 2 of the memory front
end's 8 ports (rtl/top/nelssa_device.sv checks NumUnits)."""
BACKDOOR_CHUNK_LINES = 1 << 18
"""Lines one backdoor step decodes and copies (16 MiB: bounded scratch for any size)."""
DRAIN_MAX_CYCLES = 1 << 20
"""Most cycles a backdoor access waits for the device to drain before it gives up."""
DEVICE_UNITS = DeviceConfig.engines
"""Units the RTL device is built with unless told otherwise: the model device's default, so the
two backends are the same device."""


def build_library(preset: str = "ddr5-6400", units: int = DEVICE_UNITS,
                  waves: bool = False, optimize: bool = True,
                  latency: FpLatency | None = None, lanes: int = ENGINE_LANES) -> Path:
    """Build (or reuse) the device library for a DDR5 preset and unit count; ``latency``: the
    engines' arithmetic units' (their *Latency parameters; None or all 0: combinational, the
    cache key of a build without them); ``lanes``: the lanes each engine computes a cycle (its
    ComputeLanes; 32, a beat a cycle, is the cache key of a build without it); ``waves`` adds
    waveform support (FST when the lz4 headers are installed, VCD otherwise); without
    ``optimize`` the C++ is compiled at -O0 (a build that runs briefly: 2.5 times less
    compile time, a slower simulation); with it, the model's hot code at -O2 and its cold
    code (construction, the initial settle) at -O0."""
    if preset not in PRESETS:
        raise KeyError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    if not 1 <= units <= RTL_MAX_UNITS:
        raise ValueError(f"units must be 1..{RTL_MAX_UNITS}, got {units}")
    trace: list[str] = []
    if waves:
        fst = fst_available()
        trace = ["--trace-fst" if fst else "--trace", "--trace-structs",
                 "-CFLAGS", "-DNELSSA_TRACE=1", "-CFLAGS", f"-DNELSSA_TRACE_FST={int(fst)}"]
    return build_executable(
        "device-lib", "nelssa_device_sim", [VERILATOR_CONFIG, *DEVICE_SIM],
        [HARNESS_CPP, DDR5_STORE_CPP],
        parameters={"PresetId": list(PRESETS).index(preset), "NumUnits": units,
                    **({} if latency in (None, FpLatency()) else latency.rtl_params()),
                    **({} if lanes == ENGINE_LANES else {"ComputeLanes": lanes})},
        # -O2 for the hot code only: the cold code (a third of the C++) and what goes with it
        # compiled in 30 s of CPU instead of 82 at -O2 (build_executable's opt)
        opt="-O2" if optimize else "-O0",
        extra_args=[*FP_GATED_ARGS, "-CFLAGS", "-fPIC", "-LDFLAGS", "-shared",
                    # calls inside the library (to the fp functions, the model's blocks) bind
                    # directly, not through the PLT: 5-13 % faster (scripts/bench_sim_speed.py)
                    "-CFLAGS", "-fno-semantic-interposition",
                    "-LDFLAGS", "-Wl,-Bsymbolic-functions",
                    *DDR5_VERILATOR_ARGS, *trace])


def store_image(keys: npt.NDArray[np.int64], data: npt.NDArray[np.uint8],
                geometry: DeviceGeometry) -> dict[int, bytes]:
    """The non-zero lines of a DRAM store dump (``keys``, (n, 64) ``data``) by device address:
    the key nelssa_ddr5_dram.sv makes (sub-channel << 40 | row << 11 | bg << 8 | bank << 6 |
    column) mapped back through the device's address map (cacheline)."""
    addr = encode(Decoded(keys >> 40, (keys >> 8) & 7, (keys >> 6) & 3,
                          (keys >> 11) & ((1 << 29) - 1), keys & 63), geometry)
    order = np.argsort(addr)
    return {int(addr[i]): data[i].tobytes() for i in order if data[i].any()}


class RtlDevice(DevicePort):
    """A simulated device in this process."""

    def __init__(self, preset: str = "ddr5-6400", units: int = DEVICE_UNITS,
                 waves: bool = False, optimize: bool = True,
                 latency: FpLatency | None = None, lanes: int = ENGINE_LANES) -> None:
        self.units = units
        self.latency = latency or FpLatency()
        self.lanes = EngineParams(latency=self.latency, compute_lanes=lanes).compute_lanes
        self.geometry = DeviceGeometry(PRESETS[preset])
        self._clock_hz = DeviceConfig(preset=preset).clock_hz  # the RTL's clocking is the model's
        self.lib_path = build_library(preset, units, waves, optimize, self.latency, self.lanes)
        lib = ctypes.CDLL(str(self.lib_path))
        lib.nelssa_dev_create.restype = ctypes.c_void_p
        lib.nelssa_dev_destroy.argtypes = [ctypes.c_void_p]
        lib.nelssa_dev_last_error.restype = ctypes.c_char_p
        lib.nelssa_dev_last_error.argtypes = [ctypes.c_void_p]
        lib.nelssa_dev_push.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32]
        lib.nelssa_dev_pop.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32]
        lib.nelssa_dev_run.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.nelssa_dev_run_until_idle.restype = ctypes.c_int64
        lib.nelssa_dev_run_until_idle.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.nelssa_dev_cycle.restype = ctypes.c_uint64
        lib.nelssa_dev_cycle.argtypes = [ctypes.c_void_p]
        lib.nelssa_dev_violations.restype = ctypes.c_uint32
        lib.nelssa_dev_violations.argtypes = [ctypes.c_void_p]
        lib.nelssa_dev_ddr5_counts.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.nelssa_dev_trace_open.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nelssa_dev_trace_close.argtypes = [ctypes.c_void_p]
        lib.nelssa_dev_drain.restype = ctypes.c_int64
        lib.nelssa_dev_drain.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        for name in ("nelssa_store_write_lines", "nelssa_store_read_lines"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
        lib.nelssa_store_lines.restype = ctypes.c_longlong
        lib.nelssa_store_dump.restype = ctypes.c_longlong
        lib.nelssa_store_dump.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
        self._lib = lib
        self._h = lib.nelssa_dev_create()
        if not self._h:
            raise RuntimeError(lib.nelssa_dev_last_error(None).decode())
        self._buf = ctypes.create_string_buffer(MAX_MESSAGE)

    def _error(self) -> str:
        return self._lib.nelssa_dev_last_error(self._h).decode()

    def send(self, message: bytes) -> None:
        if self._lib.nelssa_dev_push(self._h, bytes(message), len(message)) != 0:
            raise ValueError(self._error())

    def receive(self) -> list[bytes]:
        out = []
        while (n := self._lib.nelssa_dev_pop(self._h, self._buf, MAX_MESSAGE)) > 0:
            out.append(self._buf.raw[:n])
        return out

    def advance(self, cycles: int) -> None:
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, got {cycles}")
        if self._lib.nelssa_dev_run(self._h, cycles) != 0:
            raise RuntimeError(self._error())

    def run_until_idle(self, max_cycles: int) -> int:
        n = self._lib.nelssa_dev_run_until_idle(self._h, max_cycles)
        if n == -2:
            raise TimeoutError(f"device still busy after {max_cycles} cycles")
        if n < 0:
            raise RuntimeError(self._error())
        return int(n)

    @property
    def cycle(self) -> int:
        return int(self._lib.nelssa_dev_cycle(self._h))

    @property
    def clock_hz(self) -> int:
        return self._clock_hz

    # -- the backdoor: device memory through the DRAM store's C interface ----------------------
    def _keys(self, first_line: int, lines: int) -> npt.NDArray[np.int64]:
        """The store's keys of ``lines`` lines from line ``first_line``."""
        return self.store_keys((first_line + np.arange(lines, dtype=np.int64)) * LINE_BYTES)

    def store_keys(self, addrs: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The DRAM store's key of each line address (the key nelssa_ddr5_dram.sv makes,
        through the device's address map: cacheline)."""
        d = decode(np.asarray(addrs, dtype=np.int64), self.geometry)
        return np.ascontiguousarray(d.subchannel << 40 | d.row << 11 | d.bank_group << 8
                                    | d.bank << 6 | d.column, dtype=np.int64)

    def store_write_lines(self, addrs: npt.ArrayLike, data: npt.ArrayLike) -> None:
        """Whole 64-byte lines into the DRAM store at line addresses ``addrs`` (``data``:
        (n, 64) bytes), no drain: for set-up before the device runs."""
        keys = self.store_keys(addrs)
        buf = np.ascontiguousarray(data, dtype=np.uint8).reshape(len(keys), LINE_BYTES)
        self._lib.nelssa_store_write_lines(keys.ctypes.data, buf.ctypes.data, len(keys))

    def store_clear(self) -> None:
        """Empty the DRAM store (every line reads as zero again), for set-up before the device
        runs. The store is one per loaded library: every device of this process shares it."""
        self._lib.nelssa_store_clear()

    def _backdoor_range(self, addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > self.mem_bytes:
            raise ValueError(f"backdoor access of {n} bytes at {addr:#x} outside device memory "
                             f"(0..{self.mem_bytes:#x})")
        got = self._lib.nelssa_dev_drain(self._h, DRAIN_MAX_CYCLES)
        if got == -2:
            raise TimeoutError(f"device still busy after {DRAIN_MAX_CYCLES} cycles; a backdoor "
                               "access waits for it to drain")
        if got < 0:
            raise RuntimeError(self._error())

    def _lines_read(self, first_line: int, lines: int) -> npt.NDArray[np.uint8]:
        out = np.empty((lines, LINE_BYTES), dtype=np.uint8)
        keys = self._keys(first_line, lines)
        self._lib.nelssa_store_read_lines(keys.ctypes.data, out.ctypes.data, lines)
        return out

    def dma_write(self, addr: int, data: bytes) -> bool:
        """Write device memory straight into the DRAM store (a backdoor, as verification
        loads memories: no device cycle passes; the caller charges the time the front door
        would take). Waits first for the device to drain (every earlier write in the store)."""
        src = np.frombuffer(data, dtype=np.uint8)
        self._backdoor_range(addr, len(src))
        pos = 0
        while pos < len(src):
            first = (addr + pos) // LINE_BYTES
            off = (addr + pos) % LINE_BYTES
            lines = min(BACKDOOR_CHUNK_LINES, -(-(off + len(src) - pos) // LINE_BYTES))
            take = min(lines * LINE_BYTES - off, len(src) - pos)
            buf = np.zeros((lines, LINE_BYTES), dtype=np.uint8)
            if off:  # a partial first line keeps its other bytes
                buf[0] = self._lines_read(first, 1)[0]
            if (off + take) % LINE_BYTES:  # and a partial last one
                buf[-1] = self._lines_read(first + lines - 1, 1)[0]
            buf.reshape(-1)[off:off + take] = src[pos:pos + take]
            keys = self._keys(first, lines)
            self._lib.nelssa_store_write_lines(keys.ctypes.data, buf.ctypes.data, lines)
            pos += take
        return True

    def dma_read(self, addr: int, n: int) -> bytes:
        """Read device memory straight from the DRAM store (the backdoor; see dma_write)."""
        self._backdoor_range(addr, n)
        out = bytearray()
        first, end = addr // LINE_BYTES, -(-(addr + n) // LINE_BYTES)
        for line in range(first, end, BACKDOOR_CHUNK_LINES):
            out += self._lines_read(line, min(BACKDOOR_CHUNK_LINES, end - line)).tobytes()
        off = addr % LINE_BYTES
        return bytes(out[off:off + n])

    @property
    def mem_bytes(self) -> int:
        return self.geometry.capacity_bytes

    @property
    def store_lines(self) -> int:
        """Lines of the DRAM store ever written (front door or back)."""
        return int(self._lib.nelssa_store_lines())

    def trace_start(self, path: str | Path) -> None:
        """Write a waveform of everything from now on (needs ``waves=True``)."""
        if self._lib.nelssa_dev_trace_open(self._h, str(path).encode()) != 0:
            raise RuntimeError(self._error())

    def trace_stop(self) -> None:
        """Close the waveform file."""
        self._lib.nelssa_dev_trace_close(self._h)

    def image(self) -> dict[int, bytes]:
        """Every line of device memory that is not all zero, by address (what the model's
        SparseMemory.image gives): the DRAM backing store, its keys mapped back to addresses
        through the device's address map (cacheline, as nelssa_device_sim builds it)."""
        n = self._lib.nelssa_store_dump(None, None, 0)
        keys = np.zeros(n, dtype=np.int64)
        data = np.zeros((n, LINE_BYTES), dtype=np.uint8)
        got = self._lib.nelssa_store_dump(keys.ctypes.data, data.ctypes.data, n)
        if got != n:
            raise RuntimeError(f"the store changed while it was read ({n} then {got} lines)")
        return store_image(keys, data, self.geometry)

    @property
    def violations(self) -> int:
        """DDR5 timing violations the checkers saw (a violation also stops the simulation)."""
        return int(self._lib.nelssa_dev_violations(self._h))

    def ddr5_counts(self) -> list[tuple[int, ...]]:
        """Each DDR5 sub-channel controller's perf_o, read from the simulated memory
        (``DDR5_COUNTERS``, sub-channel 0 first), since reset."""
        out = np.zeros((8, len(DDR5_COUNTERS)), np.uint64)
        self._lib.nelssa_dev_ddr5_counts(self._h, out.ctypes.data)
        return [tuple(map(int, row)) for row in out]

    def close(self) -> None:
        if self._h:
            self._lib.nelssa_dev_destroy(self._h)
            self._h = None

    def __del__(self) -> None:
        self.close()
