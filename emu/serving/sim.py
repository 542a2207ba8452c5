"""The serving emulator: one GPU's continuous batching, alone (GPU-only, vLLM's baseline) or with
a PNM tier (NELSSA), stepped in emulated time whose step costs come from the latency model.

``ServingSim`` sizes the tiers (the GPU's KV blocks from its memory, the PNM tier's tokens from
its devices), routes requests by T_input (the policy core's router, ``emu/policy``) and runs
a replay (``replay.py``) with either scheduler: ours (``scheduler.py``, vLLM v1's algorithm,
in this process) or vLLM's own (``vllm_sched.py``, in the vLLM environment's process,
``vllm_env.py``). Step costs (``cost.py``) are the same for both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.policy.adaptive import AdaptiveThreshold
from nelssa.emu.policy.capacity import blocks_for
from nelssa.emu.policy.migration import MigrationPolicy
from nelssa.emu.policy.router import Router
from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.cost import Chunk, CostModel, Tier
from nelssa.emu.serving.results import RequestResult, RunResult, Sample
from nelssa.emu.serving.workload import TraceRequest

__all__ = ["CapacityError", "Rejection", "RequestResult", "RunResult", "Sample",
           "SchedulerKind", "ServingConfig", "ServingSim", "admit"]

log = logging.getLogger(__name__)


class CapacityError(ValueError):
    """A request no tier can ever hold."""


@dataclass(frozen=True)
class Rejection:
    """A request refused before the run, as vLLM answers one it cannot serve with an error."""

    request: TraceRequest
    reason: str
    """Why, naming its trace line."""


def admit(requests: list[TraceRequest], sims: list[ServingSim]
          ) -> tuple[list[TraceRequest], list[Rejection]]:
    """The requests one of ``sims`` (a run's configuration, or a fleet's instances) can hold,
    in order, and the others rejected with why: longer than ``max_model_len``, or more than
    any tier of any of them could ever hold."""
    ok: list[TraceRequest] = []
    out: list[Rejection] = []
    cap = sims[0].cfg.max_model_len
    for r in requests:
        total = r.input_len + r.output_len
        if cap is not None and total > cap:
            out.append(Rejection(r, f"{_where(r)}: {total} tokens (prompt {r.input_len} + "
                                    f"output {r.output_len}) exceed --max-model-len {cap}"))
            continue
        why = None
        for sim in sims:
            try:
                sim.check([r])
            except CapacityError as e:
                why = why or str(e)
                continue
            why = None
            break
        if why is None:
            ok.append(r)
        else:
            out.append(Rejection(r, why))
    return ok, out


def _where(r: TraceRequest) -> str:
    return f"trace line {r.line}" if r.line else f"request {r.rid}"


class ServingSim:
    """Replay requests through one configuration."""

    def __init__(self, latency: LatencyModel, config: ServingConfig) -> None:
        self.lm, self.cfg = latency, config
        m, g = latency.model, latency.gpu
        self.m_kv = m.kv_bytes_per_token
        kv_bytes = g.memory_gb * 1e9 * config.gpu_mem_util - m.resident_bytes
        if kv_bytes <= 0:
            raise ValueError(f"{m.name} weights ({m.resident_bytes / 1e9:.1f} GB) do not fit "
                             f"{g.name} at gpu_mem_util {config.gpu_mem_util}")
        self.gpu_blocks = int(kv_bytes // (self.m_kv * config.block_tokens))
        self.pnm_tokens = int(latency.pnm.capacity_gb * 1e9 * config.devices // self.m_kv)
        self.router = Router.from_latency(latency, config.devices, config.t_input,
                                          pnm=config.mode != "gpu")
        self.t_input = self.router.t_input
        self.migration = MigrationPolicy(config.migrate_at)
        self.cost = CostModel(latency, config.devices, config.window_tokens, config.pcie_gbs,
                              config.link_gbs)

    def tier(self, r: TraceRequest) -> Tier:
        return self.router.tier(r.input_len)

    def _blocks(self, tokens: int) -> int:
        return blocks_for(tokens, self.cfg.block_tokens)

    def tiers(self, r: TraceRequest) -> set[Tier]:
        """Where ``r`` may be placed: its tier, or with ``adaptive`` routing either tier its
        prompt may fall on within the threshold's bounds."""
        if not self.cfg.adaptive or self.router.t_input is None:
            return {self.tier(r)}
        a = AdaptiveThreshold(self.router.t_input)
        return {Router(t).tier(r.input_len) for t in (a.lo, a.hi)}

    def check(self, requests: list[TraceRequest]) -> None:
        """Refuse, by trace line, a request no tier could ever hold."""
        for r in requests:
            for tier in self.tiers(r):
                self._check(r, tier)

    def _check(self, r: TraceRequest, tier: Tier) -> None:
        colocated = self.cfg.prefill == "colocated"
        total = r.input_len + r.output_len
        if tier is Tier.GPU:
            if self._blocks(total) > self.gpu_blocks:
                raise CapacityError(
                    f"{_where(r)}: {total} tokens exceed the GPU's KV capacity of "
                    f"{self.gpu_blocks * self.cfg.block_tokens} tokens"
                    + ("" if self.cfg.mode == "nelssa" else
                       " (a GPU-only run cannot serve it; cap the trace)"))
            return
        if total > self.pnm_tokens:
            raise CapacityError(f"{_where(r)}: {total} tokens exceed the PNM tier's capacity of "
                                f"{self.pnm_tokens} tokens")
        resident = self.cost.pnm_resident_tokens(total) + r.output_len
        if self._blocks(max(resident, r.input_len if colocated else 0)) > self.gpu_blocks:
            raise CapacityError(
                f"{_where(r)}: its prefill needs the KV of {r.input_len} tokens on the GPU, "
                f"more than its {self.gpu_blocks * self.cfg.block_tokens} tokens"
                " (prefill it on separate GPUs: --prefill disaggregated)")

    def run(self, requests: list[TraceRequest],
            progress: Callable[[float], None] | None = None) -> RunResult:
        self.check(requests)
        if self.cfg.prefix_caching:
            missing = next((r for r in requests if r.hash_ids is None and r.line), None)
            if missing is not None:
                raise ValueError(f"trace line {missing.line}: prefix caching needs hash_ids")
        if self.cfg.scheduler is SchedulerKind.VLLM:
            from nelssa.emu.serving.vllm_env import run_in_vllm_env

            return run_in_vllm_env(self, requests, progress)
        from nelssa.emu.serving.itl import timed_replay

        return timed_replay(self, requests, progress)

    def run_admitted(self, requests: list[TraceRequest],
                     progress: Callable[[float], None] | None = None
                     ) -> tuple[RunResult, list[Rejection]]:
        """Run the requests this configuration can take (``admit``), the others rejected and
        counted (``RunResult.rejected``) as vLLM rejects them; CapacityError if none is left."""
        ok, rejected = admit(requests, [self])
        if not ok:
            raise CapacityError(f"{rejected[0].reason}" + (
                f" (and the {len(rejected) - 1} other requests are rejected too)"
                if len(rejected) > 1 else ""))
        run = self.run(ok, progress)
        run.rejected = len(rejected)
        return run, rejected

    def prefill_s(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` alone, in chunks of ``max_batched_tokens``."""
        return self.cost.prefill_s(tokens, self.cfg.max_batched_tokens)

    def migration_s(self, tokens: int) -> float:
        return self.cost.migration_s(tokens)

    def max_batch(self, context: int) -> int:
        """Most requests of ``context`` tokens that can decode together (memory and
        ``max_running``); 0 if not even one fits."""
        if self.tier(TraceRequest(0, 0.0, context, 1)) is Tier.GPU:
            fit = self.gpu_blocks // self._blocks(context + 1)
        else:
            per_gpu = self._blocks(self.cost.pnm_resident_tokens(context) + 1)
            fit = min(self.gpu_blocks // per_gpu, self.pnm_tokens // (context + 1))
        return min(fit, self.cfg.max_running)

    def steady_decode(self, context: int, batch: int) -> float:
        """Seconds of one decode step of ``batch`` requests at ``context`` tokens each."""
        if self.tier(TraceRequest(0, 0.0, context, 1)) is Tier.GPU:
            return self.cost.step_s(batch * context, [], [Chunk(context - 1, 1)] * batch)
        return self.cost.step_s(0, [context] * batch, [])
