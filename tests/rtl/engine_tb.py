"""Bus-functional testbench of nelssa_attn_engine: one coroutine drives every channel and samples
every handshake once per cycle (fast under Verilator), with optional random back-pressure."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from nelssa.driver.status import AttnStatus
from nelssa.hw.model import fp
from nelssa.hw.model.engine import AttnResult, EngineParams, attend
from nelssa.hw.model.engine import EngineCommand as Command
from nelssa.hw.model.reference import attend_f64

PARAMS_ENV = "NELSSA_ENGINE_PARAMS"


def engine_params() -> EngineParams:
    """The parameters the DUT was built with (passed by the pytest entry)."""
    return EngineParams(**json.loads(os.environ.get(PARAMS_ENV, "{}")))


@dataclass
class Outcome:
    status: AttnStatus
    o: np.ndarray | None
    lse: np.ndarray | None
    cycles: int  # command accepted .. done
    kv_consumed: int
    clu_consumed: int
    kv_span: int  # cycles from first to last accepted beat, inclusive
    result_beats: list[np.ndarray] = field(default_factory=list)


@dataclass
class Workload:
    """Well-formed random attention inputs (bf16 bits)."""

    q: np.ndarray
    keys: list[np.ndarray]
    values: list[np.ndarray]
    scale: float

    @classmethod
    def random(cls, rng: np.random.Generator, head_dim: int, num_qheads: int,
               cluster_lens: Sequence[int], q_gain: float = 1.0) -> Workload:
        def bf(shape):
            return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))

        q = fp.f32_to_bf16_bits((rng.standard_normal((num_qheads, head_dim)) * q_gain)
                                .astype(np.float32))
        return cls(q, [bf((n, head_dim)) for n in cluster_lens],
                   [bf((n, head_dim)) for n in cluster_lens], float(1 / np.sqrt(head_dim)))

    @property
    def cluster_lens(self) -> list[int]:
        return [k.shape[0] for k in self.keys]

    def command(self) -> Command:
        return Command.from_workload(self.q, self.keys, self.values, self.scale)


def _beat_int(beat: np.ndarray) -> int:
    return int.from_bytes(np.ascontiguousarray(beat, dtype="<u2").tobytes(), "little")


class TB:
    """Clock, reset and the channel models of one engine."""

    def __init__(self, dut) -> None:
        self.dut = dut
        self.params = engine_params()
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())

    async def reset(self) -> None:
        d = self.dut
        for sig in (d.cmd_valid_i, d.clu_valid_i, d.kv_valid_i, d.kv_last_i):
            sig.value = 0
        d.res_ready_i.value = 0
        d.rst_ni.value = 0
        for _ in range(3):
            await RisingEdge(d.clk_i)
        d.rst_ni.value = 1
        await RisingEdge(d.clk_i)

    async def run(self, cmd: Command, rng: np.random.Generator | None = None,
                  kv_gap: float = 0.0, res_stall: float = 0.0, clu_gap: float = 0.0,
                  max_cycles: int = 2_000_000) -> Outcome:
        """Offer ``cmd`` and its stream until done_o; fails on a hang (max_cycles). The gap and
        stall arguments are per-cycle probabilities of withholding a beat, a cluster entry or
        result readiness (late cluster entries exercise the engine's StClu path)."""
        d = self.dut
        rng = rng or np.random.default_rng(0)
        beats = [_beat_int(b) for b in cmd.beats]
        cmd_pending, clu_i, kv_i = True, 0, 0
        cycles, first_kv, last_kv, accepted_at = 0, None, None, None
        results: list[np.ndarray] = []
        while True:
            d.cmd_valid_i.value = int(cmd_pending)
            d.cmd_head_dim_i.value = cmd.head_dim
            d.cmd_num_qheads_i.value = cmd.num_qheads
            d.cmd_num_clusters_i.value = cmd.num_clusters
            d.cmd_scale_i.value = int(np.float32(cmd.scale).view(np.uint32))
            clu_valid = clu_i < len(cmd.cluster_lens) and not (clu_gap and rng.random() < clu_gap)
            d.clu_valid_i.value = int(clu_valid)
            d.clu_tokens_i.value = cmd.cluster_lens[clu_i] if clu_valid else 0
            kv_valid = kv_i < len(beats) and not (kv_gap and rng.random() < kv_gap)
            d.kv_valid_i.value = int(kv_valid)
            if kv_i < len(beats):
                d.kv_data_i.value = beats[kv_i]
                d.kv_last_i.value = int(kv_i == cmd.last_index)
            res_ready = not (res_stall and rng.random() < res_stall)
            d.res_ready_i.value = int(res_ready)
            await ReadOnly()
            if cmd_pending and d.cmd_ready_o.value == 1:
                cmd_pending, accepted_at = False, cycles
            if clu_valid and d.clu_ready_o.value == 1:
                clu_i += 1
            if kv_valid and d.kv_ready_o.value == 1:
                first_kv = cycles if first_kv is None else first_kv
                last_kv = cycles
                kv_i += 1
            if res_ready and d.res_valid_o.value == 1:
                raw = int(d.res_data_o.value).to_bytes(64, "little")
                results.append(np.frombuffer(raw, dtype="<u4").copy())
            if d.done_o.value == 1:
                status = AttnStatus(int(d.status_o.value))
                break
            cycles += 1
            assert cycles < max_cycles, f"engine hung: no done_o after {max_cycles} cycles"
            await RisingEdge(d.clk_i)
        # the offers end with the command (the engine, done, takes none in the next cycle): an
        # untaken beat or entry still offered there would be replaced by the next command's,
        # which the engine's KvKeptStable/CluKeptStable forbid
        await Timer(1, unit="ns")  # out of the read-only phase, before the next edge
        d.cmd_valid_i.value = 0
        d.kv_valid_i.value = 0
        d.clu_valid_i.value = 0
        await RisingEdge(d.clk_i)
        o = lse = None
        if status == AttnStatus.OK:
            per_head = cmd.head_dim // 16
            n = cmd.num_qheads * per_head
            assert len(results) == n + 1, f"expected {n + 1} result beats, got {len(results)}"
            o = np.concatenate(results[:n]).reshape(cmd.num_qheads, cmd.head_dim)
            lse = results[n][: cmd.num_qheads]
        else:
            assert not results, f"error status {status.name} but {len(results)} result beats"
        span = 0 if first_kv is None else last_kv - first_kv + 1
        return Outcome(status, o, lse, cycles - (accepted_at or 0), kv_i, clu_i, span, results)

    async def check_workload(self, wl: Workload, rng: np.random.Generator | None = None,
                             kv_gap: float = 0.0, res_stall: float = 0.0, clu_gap: float = 0.0,
                             bound: bool = True) -> Outcome:
        """Run a well-formed workload; demand bit equality with the model and, for finite data,
        the error bound against float64 (docs/numerics.md)."""
        out = await self.run(wl.command(), rng, kv_gap, res_stall, clu_gap)
        exp: AttnResult = attend(self.params, wl.q, wl.keys, wl.values, wl.scale)
        assert out.status == AttnStatus.OK, f"status {out.status.name}"
        assert np.array_equal(out.o, exp.o), (
            f"O differs from model in {np.count_nonzero(out.o != exp.o)} elements")
        assert np.array_equal(out.lse, exp.lse), f"LSE differs: {out.lse} vs {exp.lse}"
        if bound:
            assert_error_bound(wl, out.o, out.lse)
        return out


def assert_error_bound(wl: Workload, o_bits: np.ndarray, lse_bits: np.ndarray) -> None:
    """max|O - O64| <= 1e-3 * max|V| and |LSE - LSE64| <= 1e-3 (the engine's stated bound)."""
    o64, lse64 = attend_f64(wl.q, wl.keys, wl.values, wl.scale)
    vmax = max(float(np.abs(fp.as_f32(fp.bf16_to_f32_bits(v))).max()) for v in wl.values)
    o_err = float(np.abs(fp.as_f32(o_bits).astype(np.float64) - o64).max())
    lse_err = float(np.abs(fp.as_f32(lse_bits).astype(np.float64) - lse64).max())
    assert o_err <= 1e-3 * max(vmax, 1e-30), f"|O - O64| = {o_err:.3e} > 1e-3 * {vmax:.3e}"
    assert lse_err <= 1e-3, f"|LSE - LSE64| = {lse_err:.3e} > 1e-3"
