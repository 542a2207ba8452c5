"""The Verilated attention engine behind a Python call: commands go to a C++ harness
(engine_harness.cpp) as a file, results come back as a file; no per-cycle Python."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from construct import Bytes, Const, Float64l, Int32ul, Int64ul, Struct

from nelssa.driver.status import ENGINE_BEAT_BYTES, AttnStatus
from nelssa.hw.model.engine import AttnResult, EngineCommand, EngineParams
from nelssa.hw.sim.rtl_sources import ENGINE, ENGINE_BENCH_TOP, FP_GATED_ARGS, VERILATOR_CONFIG
from nelssa.hw.sim.verilator import build_executable, run_harness

log = logging.getLogger(__name__)

HARNESS_CPP = Path(__file__).resolve().parent / "engine_harness.cpp"

HARNESS_IN = Struct(
    "magic" / Const(b"NLSE"),
    "version" / Const(1, Int32ul),
    "head_dim" / Int32ul,
    "num_qheads" / Int32ul,
    "num_clusters" / Int32ul,
    "scale_bits" / Int32ul,
    "num_lens" / Int32ul,
    "num_beats" / Int32ul,
    "last_index" / Int32ul,
    "repeat" / Int32ul,
    "kv_gap_period" / Int32ul,
    "max_cycles" / Int32ul,
)
"""Header of a harness command file; cluster lengths (u32) and beats (64 B each) follow."""

HARNESS_OUT = Struct(
    "magic" / Const(b"NLSR"),
    "status" / Int32ul,
    "num_result_beats" / Int32ul,
    "kv_consumed" / Int32ul,
    "clu_consumed" / Int32ul,
    "reserved" / Bytes(4),
    "cycles" / Int64ul,
    "kv_span" / Int64ul,
    "total_cycles" / Int64ul,
    "sim_seconds" / Float64l,
)
"""Header of a harness result file; the result beats (64 B each) follow."""


@dataclass(frozen=True)
class RtlRun:
    """What one harness invocation measured (the last of ``repeat`` back-to-back runs)."""

    result: AttnResult
    """Status and, when OK, O and LSE bits."""
    cycles: int
    """Cycles from command acceptance to done."""
    kv_span: int
    """Cycles from the first to the last accepted stream beat."""
    kv_consumed: int
    """Stream beats the engine accepted."""
    clu_consumed: int
    """Cluster entries the engine accepted."""
    total_cycles: int
    """Cycles over all repeats, reset included."""
    sim_seconds: float
    """Wall time of the simulation loop over all repeats."""

    @property
    def beats_per_cycle(self) -> float:
        """Stream beats accepted per cycle while the stream was flowing."""
        return self.kv_consumed / self.kv_span if self.kv_span else 0.0


class RtlEngine:
    """A cached Verilator build of the engine with the given parameters."""

    def __init__(self, params: EngineParams | None = None) -> None:
        self.params = params or EngineParams()
        self.exe = build_executable(
            "engine-harness",
            "nelssa_engine_bench_top",
            [VERILATOR_CONFIG, *ENGINE, ENGINE_BENCH_TOP],
            [HARNESS_CPP],
            parameters=self.params.rtl_params(),
            opt="-O2",  # (its cold code at -O0: build_executable)
            extra_args=FP_GATED_ARGS,
        )

    def run(self, cmd: EngineCommand, repeat: int = 1, kv_gap_period: int = 0,
            max_cycles: int = 50_000_000) -> RtlRun:
        """Play ``cmd`` through the engine; ``kv_gap_period`` > 0 idles the stream every
        that many cycles (back-pressure from memory)."""
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        beats = np.ascontiguousarray(cmd.beats, dtype="<u2")
        if beats.ndim != 2 or beats.shape[1] * 2 != ENGINE_BEAT_BYTES:
            raise ValueError(f"beats must have shape (n, 32), got {beats.shape}")
        header = HARNESS_IN.build({
            "head_dim": cmd.head_dim, "num_qheads": cmd.num_qheads,
            "num_clusters": cmd.num_clusters,
            "scale_bits": int(np.float32(cmd.scale).view(np.uint32)),
            "num_lens": len(cmd.cluster_lens), "num_beats": len(beats),
            "last_index": cmd.last_index, "repeat": repeat, "kv_gap_period": kv_gap_period,
            "max_cycles": max_cycles,
        })
        raw = run_harness(self.exe, header + np.asarray(cmd.cluster_lens, dtype="<u4").tobytes()
                          + beats.tobytes(), "engine")
        hdr = HARNESS_OUT.parse(raw)
        body = np.frombuffer(raw[HARNESS_OUT.sizeof():], dtype="<u4")
        if body.size != hdr.num_result_beats * ENGINE_BEAT_BYTES // 4:
            raise RuntimeError(f"harness result file holds {body.size * 4} bytes of beats, "
                               f"header says {hdr.num_result_beats} beats")
        res_beats = body.reshape(hdr.num_result_beats, ENGINE_BEAT_BYTES // 4)
        status = AttnStatus(hdr.status)
        result = AttnResult(status)
        if status == AttnStatus.OK:
            n = cmd.num_qheads * cmd.head_dim // 16
            if hdr.num_result_beats != n + 1:
                raise RuntimeError(f"engine returned {hdr.num_result_beats} result beats for "
                                   f"{cmd.num_qheads} heads x {cmd.head_dim}, expected {n + 1}")
            o = res_beats[:n].reshape(cmd.num_qheads, cmd.head_dim).astype(np.uint32)
            result = AttnResult(status, o, res_beats[n, : cmd.num_qheads].astype(np.uint32))
        return RtlRun(result, hdr.cycles, hdr.kv_span, hdr.kv_consumed, hdr.clu_consumed,
                      hdr.total_cycles, hdr.sim_seconds)

    def attend(self, q: np.ndarray, keys: Sequence[np.ndarray], values: Sequence[np.ndarray],
               scale: float) -> RtlRun:
        """Run one well-formed command built from bf16 inputs."""
        from nelssa.hw.model.engine import validate_command

        qa, ks, vs = validate_command(self.params, q, keys, values)
        return self.run(EngineCommand.from_workload(qa, ks, vs, scale))
