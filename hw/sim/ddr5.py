"""The Verilated memory subsystem (up to 8 sub-channel controllers, each with its timing checker)
behind a Python call, through the C++ harness hw/sim/ddr5_harness.cpp: one Verilated model per
sub-channel, run on one or more threads."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from construct import Const, Float64l, Int32ul, Int64ul, Struct

from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_device import arrival_cycles
from nelssa.hw.model.ddr5_patterns import random_blocks
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.ddr5_timing import PRESETS, DDR5Timing
from nelssa.hw.sim.rtl_sources import DDR5_BENCH, DDR5_VERILATOR_ARGS, VERILATOR_CONFIG
from nelssa.hw.sim.verilator import build_executable, run_harness

HARNESS_CPP = Path(__file__).resolve().parent / "ddr5_harness.cpp"
TRAINING_SEED = 2026
TRAINING_KEY = f"mix-v1-{TRAINING_SEED}"
"""Names the profile-guided build's training workload (RtlMemory._train) in the cache key."""

log = logging.getLogger(__name__)

DDR5_IN = Struct(
    "magic" / Const(b"NSDM"), "version" / Const(2, Int32ul), "num_sub" / Int32ul,
    "num_requests" / Int32ul, "ncl" / Int32ul, "ncwl" / Int32ul, "burst" / Int32ul,
    "threads" / Int32ul, "max_cycles" / Int64ul,
)
"""Header of a request file; 12-byte requests follow (sub, write, bg, bank: u8; row: u16;
column, pad: u8; arrival cycle: u32)."""

DDR5_OUT = Struct(
    "magic" / Const(b"NSDR"), "num_sub" / Int32ul, "violations" / Int32ul, "reserved" / Int32ul,
    "cycles" / Int64ul, "simulated_cycles" / Int64ul, "sim_seconds" / Float64l,
)
"""Header of a result file; per sub-channel (served, last data tCK) as two u64 follow."""

_REQUEST = np.dtype([("sub", "u1"), ("write", "u1"), ("bg", "u1"), ("bank", "u1"),
                     ("row", "<u2"), ("col", "u1"), ("pad", "u1"), ("arrival", "<u4")])


@dataclass(frozen=True)
class RtlMemoryRun:
    """What the RTL measured."""

    cycles: int
    """Controller cycles until the last data burst (the model's RunStats.cycles, device-wide)."""
    served: list[int]
    """Requests served per sub-channel."""
    violations: int
    """Timing-checker violations (a violation also ends the run)."""
    simulated_cycles: int
    """Cycles every sub-channel was clocked (until the slowest served its last request)."""
    sim_seconds: float
    """Wall time of the simulation proper (not the build, the reset or the file transfers)."""

    def bandwidth_fraction(self, timing: DDR5Timing, subchannels: int) -> float:
        peak = subchannels * timing.burst_bytes * TCK_PER_CYCLE / timing.burst_cycles
        return sum(self.served) * timing.burst_bytes / (self.cycles * peak)


class RtlMemory:
    """A cached Verilator build of a sub-channel controller with its checker, for one preset,
    instantiated once per sub-channel by the harness."""

    def __init__(self, preset: str = "ddr5-6400", subchannels: int = 8,
                 threads: int | None = None, check_preset: str | None = None,
                 tck_bits: int = 32) -> None:
        """``threads``: how many threads run the sub-channels (each takes slices of one
        sub-channel at a time from a shared queue); by default one per core, at most one per
        sub-channel. Results do not depend on it, only the simulation speed.
        ``check_preset``: the timings the checkers enforce, by default the controller's own; a
        stricter part's show what a violation does (the run stops with the rule, the cycle and
        the bank).
        ``tck_bits``: the width of the controllers' wrapping tCK registers, 20 to 32. Results do
        not depend on it; 32 is the fastest to simulate, 20 (the synthesis width) wraps within a
        test's run."""
        check_preset = preset if check_preset is None else check_preset
        for name in (preset, check_preset):
            if name not in PRESETS:
                raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
        if not 1 <= subchannels <= 8:
            raise ValueError(f"subchannels must be 1 to 8, got {subchannels}")
        if not 20 <= tck_bits <= 32:
            raise ValueError(f"tck_bits must be 20 to 32, got {tck_bits}")
        if threads is None:
            threads = min(os.cpu_count() or 1, subchannels)
        if not 1 <= threads <= 64:
            raise ValueError(f"threads must be 1 to 64, got {threads}")
        self.timing = PRESETS[preset]
        self.subchannels = subchannels
        self.threads = threads
        # -O3: about 1.3x the -O2 speed; link-time optimization: 3 % fewer instructions, as
        # Verilator's evaluation loop and the harness then inline across files; a profile from
        # a training mix (not the benchmark's pattern): about 1.2x (README)
        self.exe = build_executable(
            "ddr5-harness", "nelssa_ddr5_bench_top", [VERILATOR_CONFIG, *DDR5_BENCH],
            [HARNESS_CPP], parameters={"PresetId": list(PRESETS).index(preset),
                                       "CheckPresetId": list(PRESETS).index(check_preset),
                                       "TckW": tck_bits},
            extra_args=["-CFLAGS", "-O3 -flto", "-LDFLAGS", "-O3 -flto", *DDR5_VERILATOR_ARGS],
            # (a checker stricter than the controller would stop the training run; the 20-bit
            # build only shows the registers wrap in tests, not worth a training run)
            pgo_train=self._train if check_preset == preset and tck_bits == 32 else None,
            pgo_key=TRAINING_KEY,
        )

    def _train(self, exe: Path) -> None:
        """The profile-guided build's training run: a mix of every kind of traffic the tests
        and benchmarks use, on one thread (the profile counters are not atomic)."""
        geo = DeviceGeometry(self.timing, 8)
        rng = np.random.default_rng(TRAINING_SEED)
        lines = geo.capacity_bytes // 64
        parts = [rng.integers(0, lines, 6_000) * 64]                       # random lines
        parts += [random_blocks(30_000, block, geo, rng) for block in (4096, 8192)]  # clusters
        parts.append(np.arange(8_000) * 64)                                # sequential
        hot = rng.integers(0, lines // 4096, 4) * 4096                     # a few rows
        parts.append((hot[rng.integers(0, 4, 6_000)] + rng.integers(0, 256, 6_000)) * 64)
        addrs = np.concatenate(parts)
        writes = rng.random(len(addrs)) < 0.25
        run = self._play(exe, 8, 1, addrs, writes, "cacheline", 4, 100_000_000, None)
        log.info("training run: %d cycles, %d violations", run.simulated_cycles, run.violations)

    def run(self, addrs: np.ndarray, writes: np.ndarray | None = None,
            address_map: str = "cacheline", lines_per_cycle: int = 4,
            max_cycles: int = 100_000_000, arrival: np.ndarray | None = None) -> RtlMemoryRun:
        """Replay byte addresses as the model's run_device does (same arrivals, same map)."""
        return self._play(self.exe, self.subchannels, self.threads, addrs, writes, address_map,
                          lines_per_cycle, max_cycles, arrival)

    def _play(self, exe: Path, subchannels: int, threads: int, addrs: np.ndarray,
              writes: np.ndarray | None, address_map: str, lines_per_cycle: int,
              max_cycles: int, arrival: np.ndarray | None) -> RtlMemoryRun:
        geo = DeviceGeometry(self.timing, subchannels)
        d = decode(addrs, geo, address_map)
        req = np.zeros(len(addrs), dtype=_REQUEST)
        req["sub"], req["bg"], req["bank"] = d.subchannel, d.bank_group, d.bank
        req["row"], req["col"] = d.row, d.column
        req["write"] = 0 if writes is None else np.asarray(writes, bool)
        req["arrival"] = arrival_cycles(len(addrs), lines_per_cycle, arrival)
        t = self.timing
        header = DDR5_IN.build({"num_sub": subchannels, "num_requests": len(addrs),
                                "ncl": t.nCL, "ncwl": t.nCWL, "burst": t.burst_cycles,
                                "threads": threads, "max_cycles": max_cycles})
        raw = run_harness(exe, header + req.tobytes(), "memory")
        hdr = DDR5_OUT.parse(raw)
        per = np.frombuffer(raw[DDR5_OUT.sizeof():], dtype="<u8").reshape(-1, 2)
        return RtlMemoryRun(int(hdr.cycles), per[:, 0].astype(int).tolist(), hdr.violations,
                            int(hdr.simulated_cycles), hdr.sim_seconds)
