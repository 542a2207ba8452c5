"""The serving emulator: one GPU's continuous-batching scheduler (vLLM-like), alone or with a
PNM tier (NELSSA), stepped in emulated time whose step costs come from the latency model.

GPU-only, as vLLM schedules: requests wait in one FCFS queue and are admitted while fewer than
``max_running`` run and the paged KV cache (blocks of ``block_tokens``) holds their prompt; the
head of the queue blocks the rest (head-of-line blocking). Each step decodes one token for every
request past prefill and spends the rest of a ``max_batched_tokens`` budget on prefill chunks, in
admission order. A request that needs a new block when none is free preempts the newest running
request: by recompute (its KV is dropped and rebuilt by prefill when it returns to the queue's
front) or by swap (its KV moves to host memory over PCIe and back).

NELSSA: requests of ``t_input`` tokens or more go to the PNM tier for good: on the GPU they hold
the window (sink, recent and not-yet-clustered tokens) and centroids (keys only, one per C
tokens), reserved at admission; the PNM tier holds their KV within its own capacity and FCFS
queue. Their prefill runs on the GPU in chunks that stream to the node.

Step cost: kernel overhead + max(weights over bandwidth, GEMM FLOPs over peak) for the batch's
tokens + attention. GPU-only: every request's KV over bandwidth, prefill attention FLOPs over
peak. NELSSA: GPU attention of short requests, centroid search and window attention of long
ones, and the PNM tier's sparse attention (selected KV over N devices, one request after another,
plus one T_comm for the step) overlapped with the GPU's attention, not with its GEMMs.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.serving.workload import Request

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServingConfig:
    """Scheduler and tier settings of one run."""

    mode: str = "gpu"
    """``gpu`` (GPU-only baseline) or ``nelssa``."""
    devices: int = 4
    """PNM devices (NELSSA)."""
    max_running: int = 256
    """Most requests in the running batch (vLLM max_num_seqs)."""
    max_batched_tokens: int = 8192
    """Tokens per step, decode tokens and prefill chunks together (vLLM max_num_batched_tokens)."""
    block_tokens: int = 16
    """Tokens per KV block."""
    gpu_mem_util: float = 0.9
    """Share of GPU memory for weights and KV (vLLM gpu_memory_utilization)."""
    preemption: str = "recompute"
    """``recompute`` or ``swap``."""
    pcie_gbs: float = 55.0
    """Host link bandwidth for swapping, GB/s."""
    t_input: int | None = None
    """Routing threshold in tokens; None takes the latency model's crossover for ``devices``."""
    window_tokens: int = 4 + 64 + 1024
    """GPU-resident tokens of a PNM-tier request: sink, recent, one chunk not yet clustered."""
    sample_s: float = 1.0
    """Interval of the time series."""
    prefill: str = "colocated"
    """``colocated``: prefill runs in chunks on the decode GPU (vLLM on one GPU);
    ``disaggregated``: a separate prefill GPU of the same kind serves prefills FCFS and the
    decode GPU receives their KV (the paper's Prefill Node, section 5)."""
    prefill_gpus: int = 1
    """Prefill GPUs when disaggregated (each request goes to the first one free)."""
    migration: bool = False
    """NELSSA: move GPU requests whose context has grown past T_input to the PNM tier in the
    background when GPU memory runs short (paper 4.3), instead of waiting to preempt."""
    migrate_at: float = 0.95
    """Share of the GPU's KV blocks in use from which a migration starts."""
    link_gbs: float = 50.0
    """GPU node -> PNM node bandwidth for migrations, GB/s (RoCE 400G)."""

    def __post_init__(self) -> None:
        if self.prefill not in ("colocated", "disaggregated"):
            raise ValueError(f"prefill must be 'colocated' or 'disaggregated', got "
                             f"{self.prefill!r}")
        if self.mode not in ("gpu", "nelssa"):
            raise ValueError(f"mode must be 'gpu' or 'nelssa', got {self.mode!r}")
        if self.preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', got "
                             f"{self.preemption!r}")
        for name in ("devices", "max_running", "max_batched_tokens", "block_tokens",
                     "window_tokens", "prefill_gpus"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("pcie_gbs", "sample_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.migrate_at <= 1 or self.link_gbs <= 0:
            raise ValueError(f"migrate_at must be in (0, 1] and link_gbs > 0, got "
                             f"{self.migrate_at}, {self.link_gbs}")
        if self.migration and self.mode != "nelssa":
            raise ValueError("migration needs mode 'nelssa' (there is no PNM tier otherwise)")
        if not 0 < self.gpu_mem_util <= 1:
            raise ValueError(f"gpu_mem_util must be in (0, 1], got {self.gpu_mem_util}")


@dataclass
class _Live:
    req: Request
    tier: str
    order: int = 0
    """Admission order (preemption takes the newest)."""
    prefill_target: int = 0
    """Tokens whose KV must exist before decoding (prompt, or prompt + generated after a
    recompute)."""
    prefilled: int = 0
    generated: int = 0
    rebuilt: int = 0
    """Generated tokens that ``prefill_target`` already holds (rebuilt after a recompute)."""
    blocks: int = 0
    swapped: bool = False
    migrating_until: float | None = None
    """When a background migration to the PNM tier completes."""
    pnm_reserved: int = 0
    """PNM-tier tokens reserved for it (the tier's tokens it will hold)."""
    migrated: bool = False
    first_token_s: float | None = None
    preemptions: int = 0

    @property
    def ctx(self) -> int:
        if self.prefilled < self.prefill_target:
            return self.prefilled
        return self.prefilled + self.generated - self.rebuilt


@dataclass
class RequestResult:
    rid: int
    input_len: int
    output_len: int
    tier: str
    arrival_s: float
    first_token_s: float
    finish_s: float
    preemptions: int
    migrated: bool = False

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.output_len < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_len - 1)


@dataclass
class Sample:
    t_s: float
    running: int
    waiting: int
    gpu_kv_used: float
    """Share of the GPU's KV blocks in use."""
    decode_tokens: int
    """Decode tokens produced since the previous sample."""
    pnm_running: int = 0


@dataclass
class RunResult:
    config: ServingConfig
    t_input: int | None
    results: list[RequestResult] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    steps: int = 0
    preemptions: int = 0
    end_s: float = 0.0
    decode_tokens: int = 0
    peak_gpu_blocks: int = 0
    """Most GPU KV blocks in use at once."""
    gpu_blocks: int = 0
    """GPU KV blocks in all."""
    peak_pnm_tokens: int = 0
    """Most PNM-tier tokens reserved at once."""
    migrations: int = 0
    """Requests moved from the GPU to the PNM tier while decoding."""
    migrated_tokens: int = 0
    """Context moved by those migrations (clustered once, incrementally)."""
    recompute_tokens: int = 0
    """Tokens prefilled again because of recompute preemptions."""


class CapacityError(ValueError):
    """A request no tier can ever hold."""


class ServingSim:
    """Replay ``requests`` through one configuration."""

    def __init__(self, latency: LatencyModel, config: ServingConfig) -> None:
        self.lm, self.cfg = latency, config
        m, g = latency.model, latency.gpu
        self.m_kv = m.kv_bytes_per_token
        kv_bytes = g.memory_gb * 1e9 * config.gpu_mem_util - m.weight_bytes
        if kv_bytes <= 0:
            raise ValueError(f"{m.name} weights ({m.weight_bytes / 1e9:.1f} GB) do not fit "
                             f"{g.name} at gpu_mem_util {config.gpu_mem_util}")
        self.gpu_blocks = int(kv_bytes // (self.m_kv * config.block_tokens))
        self.pnm_tokens = int(latency.pnm.capacity_gb * 1e9 * config.devices // self.m_kv)
        self.t_input = (None if config.mode == "gpu" else
                        config.t_input if config.t_input is not None
                        else latency.t_input(config.devices))
        bw = g.hbm_gbs * 1e9 * g.mem_efficiency
        self._s_per_kv_token = self.m_kv / bw
        self._s_weights = m.weight_bytes / bw
        self._s_flop = 1.0 / (g.bf16_tflops * 1e12)
        self._flops_per_token = 2 * m.params_b * 1e9
        self._attn_flops = 4 * m.head_dim * m.q_heads * m.layers  # per query token x context
        self._pnm_s_per_token = (latency.sparsity.selection * self.m_kv
                                 / (config.devices * latency.pnm.bw_eff_gbs * 1e9))
        self._t_comm = latency.t_comm(config.devices)
        self._centroid_frac = 1.0 / latency.sparsity.compression

    # -- placement ---------------------------------------------------------------------------------
    def _tier(self, r: Request) -> str:
        return "pnm" if self.t_input is not None and r.input_len >= self.t_input else "gpu"

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.cfg.block_tokens)

    def _pnm_gpu_blocks(self, r: Request) -> int:
        total = r.input_len + r.output_len
        keys = total * self._centroid_frac / 2  # centroids are keys only
        return self._blocks(int(min(total, self.cfg.window_tokens) + keys))

    def check(self, requests: list[Request]) -> None:
        """Refuse, by trace line, a request no tier could ever hold."""
        for r in requests:
            total = r.input_len + r.output_len
            where = f"trace line {r.line}" if r.line else f"request {r.rid}"
            if self._tier(r) == "gpu" and self._blocks(total) > self.gpu_blocks:
                raise CapacityError(f"{where}: {total} tokens exceed the GPU's KV capacity of "
                                    f"{self.gpu_blocks * self.cfg.block_tokens} tokens"
                                    + ("" if self.cfg.mode == "nelssa" else
                                       " (a GPU-only run cannot serve it; cap the trace)"))
            if self._tier(r) == "pnm" and total > self.pnm_tokens:
                raise CapacityError(f"{where}: {total} tokens exceed the PNM tier's capacity of "
                                    f"{self.pnm_tokens} tokens")

    # -- the run -----------------------------------------------------------------------------------
    def run(self, requests: list[Request],
            progress: Callable[[float], None] | None = None) -> RunResult:
        self.check(requests)
        cfg = self.cfg
        out = RunResult(cfg, self.t_input, gpu_blocks=self.gpu_blocks)
        ordered = sorted(requests, key=lambda r: (r.arrival_s, r.rid))
        disagg = cfg.prefill == "disaggregated"
        if disagg:  # the prefill GPU's FCFS queue decides when each request reaches decode
            ready, servers = [], [0.0] * cfg.prefill_gpus
            for r in ordered:
                free_at = heapq.heappop(servers)
                done = max(free_at, r.arrival_s) + self.prefill_s(r.input_len)
                heapq.heappush(servers, done)
                ready.append((done, r))
            arrivals = deque(sorted(ready, key=lambda x: (x[0], x[1].rid)))
        else:
            arrivals = deque((r.arrival_s, r) for r in ordered)
        queues: dict[str, deque[_Live]] = {"gpu": deque(), "pnm": deque()}
        running: dict[int, _Live] = {}  # by admission order: oldest first, newest last
        free = self.gpu_blocks
        pnm_free = self.pnm_tokens
        now = 0.0
        order = 0
        next_sample = cfg.sample_s
        tokens_since = 0
        total = len(requests)
        while arrivals or queues["gpu"] or queues["pnm"] or running:
            while arrivals and arrivals[0][0] <= now:
                t, r = arrivals.popleft()
                tier = self._tier(r)
                live = _Live(r, tier, prefill_target=r.input_len)
                if disagg:  # KV and first token come from the prefill GPU
                    live.prefilled, live.generated, live.first_token_s = r.input_len, 1, t
                queues[tier].append(live)
            if not running and not queues["gpu"] and not queues["pnm"]:
                now = arrivals[0][0]
                continue
            # admission, FCFS per tier; the head that does not fit blocks its queue
            swap_s = 0.0
            for tier in ("gpu", "pnm"):
                q = queues[tier]
                while q and len(running) < cfg.max_running:
                    live = q[0]
                    if tier == "gpu":
                        need = self._blocks(live.prefill_target + (live.generated if
                                                                   live.swapped else 0) + 1)
                        if need > free:
                            break
                    else:
                        need = self._pnm_gpu_blocks(live.req)
                        total_tokens = live.req.input_len + live.req.output_len
                        if need > free or total_tokens > pnm_free:
                            break
                        pnm_free -= total_tokens
                    q.popleft()
                    free -= need
                    live.blocks = need
                    if live.swapped:
                        swap_s += need * cfg.block_tokens * self.m_kv / (cfg.pcie_gbs * 1e9)
                        live.swapped = False
                    order += 1
                    live.order = order
                    running[order] = live
            # the batch
            budget = cfg.max_batched_tokens
            decoding = [x for x in running.values() if x.prefilled >= x.prefill_target]
            budget -= len(decoding)
            chunks: list[tuple[_Live, int]] = []
            for x in running.values():
                if x.prefilled < x.prefill_target and budget > 0:
                    c = min(budget, x.prefill_target - x.prefilled)
                    chunks.append((x, c))
                    budget -= c
            if not decoding and not chunks:
                if arrivals:  # nothing fits now: wait for the next arrival
                    now = max(now, arrivals[0][0])
                    continue
                raise RuntimeError("scheduler stalled with requests that can never run")
            if free < 0 or pnm_free < 0:
                raise RuntimeError(f"capacity overrun: {free} GPU blocks, {pnm_free} PNM tokens")
            out.peak_gpu_blocks = max(out.peak_gpu_blocks, self.gpu_blocks - free)
            out.peak_pnm_tokens = max(out.peak_pnm_tokens, self.pnm_tokens - pnm_free)
            dt = swap_s + self._step_cost(decoding, chunks)
            now += dt
            out.steps += 1
            # progress
            for x, c in chunks:
                x.prefilled += c
                if x.prefilled >= x.prefill_target and x.first_token_s is None:
                    x.first_token_s = now
                    x.generated = max(x.generated, 1)
            finished = []
            for x in decoding:
                x.generated += 1
                tokens_since += 1
                out.decode_tokens += 1
                if x.generated >= x.req.output_len:
                    finished.append(x)
            for x, _ in chunks:
                if x.generated >= x.req.output_len and x.first_token_s is not None:
                    finished.append(x)
            for x in finished:
                del running[x.order]
                free += x.blocks
                if x.tier == "pnm" and not x.migrated:
                    pnm_free += x.req.input_len + x.req.output_len
                pnm_free += x.pnm_reserved
                assert x.first_token_s is not None
                out.results.append(RequestResult(
                    x.req.rid, x.req.input_len, x.req.output_len, x.tier, x.req.arrival_s,
                    x.first_token_s, now, x.preemptions, x.migrated))
            # KV growth of GPU-tier requests, oldest first; preempt the newest when full
            for x in decoding:  # admission order
                if x.tier != "gpu" or running.get(x.order) is not x:
                    continue
                need = self._blocks(x.ctx + 1) - x.blocks
                while need > free:  # the newest GPU-tier request gives way
                    victim = next(y for y in reversed(running.values()) if y.tier == "gpu")
                    self._preempt(victim, running, queues)
                    free += victim.blocks
                    victim.blocks = 0
                    pnm_free += victim.pnm_reserved  # a migration under way is abandoned
                    victim.pnm_reserved, victim.migrating_until = 0, None
                    out.preemptions += 1
                    if cfg.preemption == "recompute":
                        out.recompute_tokens += victim.prefill_target
                    if victim is x:
                        break
                if running.get(x.order) is x and need <= free:
                    free -= need
                    x.blocks += need
            if cfg.migration:
                free, pnm_free = self._migrate(running, now, free, pnm_free, out)
            if now >= next_sample:
                out.samples.append(Sample(now, len(running),
                                          len(queues["gpu"]) + len(queues["pnm"]),
                                          1 - free / self.gpu_blocks, tokens_since,
                                          sum(1 for x in running.values() if x.tier == "pnm")))
                tokens_since = 0
                next_sample = now + cfg.sample_s
                if progress is not None:
                    progress(len(out.results) / total)
        out.end_s = now
        return out

    def _migrate(self, running: dict[int, _Live], now: float, free: int, pnm_free: int,
                 out: RunResult) -> tuple[int, int]:
        """Finish migrations that are done; start one (the link carries one at a time) when
        memory is short: the GPU request with the largest context past T_input."""
        busy = False
        for x in running.values():
            if x.migrating_until is None:
                continue
            if now < x.migrating_until:
                busy = True
                continue
            keep = self._pnm_gpu_blocks(x.req)  # window and centroids stay on the GPU
            free += max(0, x.blocks - keep)
            x.blocks = min(x.blocks, keep)
            x.tier, x.migrated, x.migrating_until = "pnm", True, None
            out.migrations += 1
        if busy or free > (1 - self.cfg.migrate_at) * self.gpu_blocks:
            return free, pnm_free
        assert self.t_input is not None
        cands = [x for x in running.values() if x.tier == "gpu" and x.migrating_until is None
                 and x.prefilled >= x.prefill_target and x.ctx >= self.t_input]
        if not cands:
            return free, pnm_free
        x = max(cands, key=lambda y: (y.ctx, -y.order))
        total = x.req.input_len + x.req.output_len
        if total > pnm_free:
            return free, pnm_free
        pnm_free -= total
        x.pnm_reserved = total
        x.migrating_until = now + self.migration_s(x.ctx)
        out.migrated_tokens += x.ctx
        return free, pnm_free

    def migration_s(self, tokens: int) -> float:
        """Background time to migrate a context: k-means reads the keys once per iteration on
        the GPU (10 iterations), then the KV streams over the link."""
        kv = tokens * self.m_kv
        return 10 * kv / 2 / (self.lm.gpu.hbm_gbs * 1e9) + kv / (self.cfg.link_gbs * 1e9)

    def prefill_s(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` alone, in chunks of ``max_batched_tokens``."""
        total, done = 0.0, 0
        while done < tokens:
            c = min(self.cfg.max_batched_tokens, tokens - done)
            total += (self.lm.gpu.kernel_us * 1e-6
                      + max(self._s_weights, c * self._flops_per_token * self._s_flop)
                      + c * (done + c / 2) * self._attn_flops * self._s_flop)
            done += c
        return total

    def max_batch(self, context: int) -> int:
        """Most requests of ``context`` tokens that can decode together (memory and
        ``max_running``); 0 if not even one fits."""
        tier = self._tier(Request(0, 0.0, context, 1))
        if tier == "gpu":
            fit = self.gpu_blocks // self._blocks(context + 1)
        else:
            per_gpu = self._pnm_gpu_blocks(Request(0, 0.0, context, 1))
            fit = min(self.gpu_blocks // per_gpu, self.pnm_tokens // (context + 1))
        return min(fit, self.cfg.max_running)

    def steady_decode(self, context: int, batch: int) -> float:
        """Seconds of one decode step of ``batch`` requests at ``context`` tokens each."""
        tier = self._tier(Request(0, 0.0, context, 1))
        live = []
        for i in range(batch):
            x = _Live(Request(i, 0.0, context, 2), tier, prefill_target=context)
            x.prefilled, x.generated = context, 1
            live.append(x)
        return self._step_cost(live, [])

    def _preempt(self, victim: _Live, running: dict[int, _Live],
                 queues: dict[str, deque[_Live]]) -> None:
        del running[victim.order]
        victim.preemptions += 1
        if self.cfg.preemption == "swap":
            victim.swapped = True
        else:  # recompute: rebuild prompt and generated tokens by prefill
            victim.prefill_target = victim.req.input_len + victim.generated
            victim.rebuilt = victim.generated
            victim.prefilled = 0
        queues[victim.tier].appendleft(victim)

    def _step_cost(self, decoding: list[_Live], chunks: list[tuple[_Live, int]]) -> float:
        g = self.lm.gpu
        tokens = len(decoding) + sum(c for _, c in chunks)
        t_lin = max(self._s_weights, tokens * self._flops_per_token * self._s_flop)
        t_prefill_attn = sum(c * (x.prefilled + c / 2) for x, c in chunks) * self._attn_flops \
            * self._s_flop
        gpu_ctx = pnm_ctx = window = 0
        long_n = 0
        for x in decoding:
            if x.tier == "gpu":
                gpu_ctx += x.ctx
            else:
                pnm_ctx += x.ctx
                window += min(x.ctx, self.cfg.window_tokens)
                long_n += 1
        t_gpu_attn = (gpu_ctx + pnm_ctx * self._centroid_frac + window) * self._s_per_kv_token \
            + t_prefill_attn
        t_pnm = pnm_ctx * self._pnm_s_per_token + (self._t_comm if long_n else 0.0)
        return g.kernel_us * 1e-6 + t_lin + max(t_gpu_attn, t_pnm)
