"""What a step costs and what a request holds: the serving emulator's cost model, shared by both
schedulers (ours and vLLM's), so that they differ only in what they schedule.

Step cost: kernel overhead + max(weights over bandwidth, GEMM FLOPs over the linear layers'
achieved FLOP/s) for the batch's computed tokens + attention. GPU tier: every decoding request's
KV over the achieved bandwidth; prefill attention FLOPs over the attention kernels' achieved
FLOP/s. PNM tier: centroid search (keys only) on the GPU, then the PNM tier's sparse attention
(selected KV over N devices, plus one T_comm for the step) overlapped with the GPU's attention
(GPU-tier contexts and PNM-tier windows), not with its GEMMs nor with the search that picks what
the node reads (as the co-simulation runs a layer). Weights: every parameter but the input
embedding's (``ModelHw.weight_bytes``). Achieved rates are the GPU description's efficiencies
times its peaks (``linear_efficiency``, ``attn_efficiency``, ``mem_efficiency``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import repeat

from nelssa.emu.energy import EngineOps
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.policy.capacity import resident_tokens
from nelssa.emu.policy.states import Tier
from nelssa.emu.serving.results import Activity

__all__ = ["Chunk", "CostModel", "StepParts", "Tier"]


_SPARSITY = Sparsity()  # the defaults, by name (the cost model reads its latency model's)
SINK_TOKENS = _SPARSITY.sink_tokens
"""Attention-sink tokens a PNM-tier request keeps on the GPU (paper 4.2)."""
RECENT_TOKENS = _SPARSITY.recent_tokens
"""Recent tokens a PNM-tier request keeps on the GPU."""
CHUNK_TOKENS = _SPARSITY.chunk_tokens
"""Generated tokens held on the GPU before they are clustered and appended (paper 4.3)."""
KMEANS_ITERATIONS = _SPARSITY.kmeans_iterations
"""k-means passes over the keys when a context is clustered (RetroInfer)."""


@dataclass(frozen=True)
class Chunk:
    """Tokens of one request computed in one step."""

    start: int
    """Tokens whose KV already exists (the chunk attends to them)."""
    tokens: int
    computed: bool = True
    """False for KV that arrives rather than being computed (from a prefill GPU, or a PNM-tier
    request's GPU-resident window taken in through the token budget): no FLOPs are charged."""


@dataclass(frozen=True)
class StepParts:
    """One step's cost by component (seconds): what ``CostModel.step_agg_s`` adds up."""

    kernel_s: float
    """Launches and sampling, once per step (``GpuHw.kernel_us``)."""
    linear_s: float
    """Weights or GEMM FLOPs of the batch's computed tokens."""
    gpu_attn_s: float
    """The GPU's attention: GPU-tier contexts, PNM-tier windows, prefill."""
    topk_s: float
    """The centroid search of the PNM-tier requests."""
    pnm_attn_s: float
    """The PNM tier's sparse attention."""
    comm_s: float
    """One T_comm for the step (link, host software, CXL) when a PNM-tier request decodes."""
    swap_s: float = 0.0
    """Swapped-in KV over PCIe."""

    @property
    def pnm_s(self) -> float:
        return self.pnm_attn_s + self.comm_s

    @property
    def wait_s(self) -> float:
        """The GPU waiting for the node beyond its own attention."""
        return max(0.0, self.pnm_s - self.gpu_attn_s)

    @property
    def total_s(self) -> float:
        """The top-K search decides what the node reads, so it precedes the node's work; the
        node's work overlaps the GPU's attention only."""
        return (self.kernel_s + self.linear_s + self.topk_s + max(self.gpu_attn_s, self.pnm_s)
                + self.swap_s)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class CostModel:
    """Seconds of one step, for one latency model and tier layout."""

    def __init__(self, latency: LatencyModel, devices: int, window_tokens: int,
                 pcie_gbs: float, link_gbs: float) -> None:
        self.lm = latency
        m, g = latency.model, latency.gpu
        self.window_tokens = window_tokens
        self.kv_bytes = m.kv_bytes_per_token
        bw = g.hbm_gbs * 1e9 * g.mem_efficiency
        self._s_per_kv_token = self.kv_bytes / bw
        self._s_weights = m.weight_bytes / bw
        self._s_linear_flop = 1.0 / (g.bf16_tflops * 1e12 * g.linear_efficiency)
        self._s_attn_flop = 1.0 / (g.bf16_tflops * 1e12 * g.attn_efficiency)
        self._flops_per_token = 2 * m.params_b * 1e9
        self._attn_flops = 4 * m.head_dim * m.q_heads * m.layers  # per query token x context
        self._pnm_s_per_token = (latency.sparsity.selection * self.kv_bytes
                                 / (devices * latency.pnm.bw_eff_gbs * 1e9))
        self._t_comm = latency.t_comm(devices)
        self._s_per_centroid_token = self._s_per_kv_token / 2 / latency.sparsity.compression
        """Centroid search: one centroid (keys only, half a token's KV) per cluster."""
        self._s_per_swap_token = self.kv_bytes / (pcie_gbs * 1e9)
        self._s_per_link_token = self.kv_bytes / (link_gbs * 1e9)
        self._s_per_key_pass = self.kv_bytes / 2 / (g.hbm_gbs * 1e9)
        self._prefill_memo: dict[tuple[int, int], float] = {}
        """``prefill_s`` by its arguments: a fleet's prefill pool prices every request's
        prompt, and a resampled trace repeats its prompts' lengths (at most one entry a
        prompt length)."""

    def step_s(self, gpu_ctx: int, pnm_ctxs: list[int], chunks: list[Chunk],
               swap_tokens: int = 0, decodes: int = 0, t_pnm: float | None = None) -> float:
        """One step: ``gpu_ctx`` tokens of GPU-tier decode context in all (one decode token per
        request is a one-token chunk in ``chunks``, or counted in ``decodes``), the contexts of
        the PNM-tier requests decoding, and the prefill chunks. ``t_pnm``: the PNM tier's time
        when its requests are spread over several nodes (the slowest node's ``pnm_s``); None
        prices them all on this model's devices."""
        return self.step_agg_s(*self.step_sums(gpu_ctx, pnm_ctxs, chunks, decodes),
                               swap_tokens, t_pnm)

    def step_sums(self, gpu_ctx: int, pnm_ctxs: list[int], chunks: list[Chunk],
                  decodes: int = 0) -> tuple[int, int, int, int, int, float]:
        """``step_s``'s arguments as ``step_agg_s`` takes them: computed tokens, GPU decode
        context, PNM-tier context, PNM-tier requests, their GPU windows, prefill pairs."""
        tokens = decodes
        prefill_pairs = 0.0
        for c in chunks:
            if c.computed:
                tokens += c.tokens
                if c.tokens > 1:
                    prefill_pairs += c.tokens * (c.start + c.tokens / 2)
        tokens += len(pnm_ctxs)
        window = sum(map(min, pnm_ctxs, repeat(self.window_tokens)))
        return tokens, gpu_ctx, sum(pnm_ctxs), len(pnm_ctxs), window, prefill_pairs

    def step_agg_s(self, tokens: int, gpu_ctx: int, pnm_ctx: int, pnm_n: int, window: int,
                   prefill_pairs: float = 0.0, swap_tokens: int = 0,
                   t_pnm: float | None = None) -> float:
        """``step_s`` from its sums: computed tokens, GPU decode context, PNM-tier context,
        PNM-tier requests, their GPU windows, prefill (query, key) pairs, swapped-in tokens,
        and the PNM tier's time if it is priced elsewhere (several nodes)."""
        t_lin = max(self._s_weights, tokens * self._flops_per_token * self._s_linear_flop)
        t_gpu_attn = ((gpu_ctx + window) * self._s_per_kv_token
                      + prefill_pairs * self._attn_flops * self._s_attn_flop)
        t_topk = pnm_ctx * self._s_per_centroid_token
        if t_pnm is None:
            t_pnm = pnm_ctx * self._pnm_s_per_token + (self._t_comm if pnm_n else 0.0)
        return (self.lm.gpu.kernel_us * 1e-6 + t_lin + t_topk + max(t_gpu_attn, t_pnm)
                + swap_tokens * self._s_per_swap_token)

    def decode_run_terms(self, tokens: int, pnm_n: int) -> tuple[float, float, float, float,
                                                                  float]:
        """A run of pure decode steps (no prefill, no swap: ``tokens`` and ``pnm_n`` fixed)
        priced in the caller's loop without a call a step: (``base``, seconds a KV token of
        GPU attention, a centroid token, a PNM-tier context token, T_comm or 0). A step with
        ``gpu_ctx``, ``window``, ``pnm_ctx`` and the PNM tier's time ``t_pnm`` (None:
        ``pnm_ctx`` times the fourth plus the fifth) costs ``base + pnm_ctx * centroid +
        max((gpu_ctx + window) * kv, t_pnm)``: ``step_agg_s``'s sum in its order, bit for bit
        (tests/test_fastpath.py)."""
        t_lin = max(self._s_weights, tokens * self._flops_per_token * self._s_linear_flop)
        return (self.lm.gpu.kernel_us * 1e-6 + t_lin, self._s_per_kv_token,
                self._s_per_centroid_token, self._pnm_s_per_token,
                self._t_comm if pnm_n else 0.0)

    def pnm_s(self, pnm_ctx: int, pnm_n: int, slowdown: float = 1.0) -> float:
        """The PNM tier's part of a step on this model's devices: the sparse attention over
        ``pnm_ctx`` tokens of context of ``pnm_n`` requests, stretched by ``slowdown`` where
        other work shares the devices, and one T_comm."""
        return (pnm_ctx * self._pnm_s_per_token * slowdown
                + (self._t_comm if pnm_n else 0.0))

    @property
    def pnm_s_per_token(self) -> float:
        """The devices' sparse attention per token of context (``pnm_s``'s slope)."""
        return self._pnm_s_per_token

    @property
    def t_comm_s(self) -> float:
        """T_comm of a step with PNM-tier requests (``pnm_s``'s constant)."""
        return self._t_comm

    def pnm_attn_s(self, pnm_ctx: int) -> float:
        """The devices' sparse attention over ``pnm_ctx`` tokens of context, alone."""
        return pnm_ctx * self._pnm_s_per_token

    def step_parts(self, gpu_ctx: int, pnm_ctxs: list[int], decodes: int = 0) -> StepParts:
        """A decode-only step (``step_s`` with no prefill chunk) by component."""
        pnm_ctx = sum(pnm_ctxs)
        window = sum(min(x, self.window_tokens) for x in pnm_ctxs)
        tokens = decodes + len(pnm_ctxs)
        return StepParts(
            kernel_s=self.lm.gpu.kernel_us * 1e-6,
            linear_s=max(self._s_weights, tokens * self._flops_per_token * self._s_linear_flop),
            gpu_attn_s=(gpu_ctx + window) * self._s_per_kv_token,
            topk_s=pnm_ctx * self._s_per_centroid_token,
            pnm_attn_s=pnm_ctx * self._pnm_s_per_token,
            comm_s=self._t_comm if pnm_ctxs else 0.0)

    def gpu_work(self, a: Activity, migrated_tokens: int = 0) -> tuple[float, float]:
        """(FLOPs, HBM bytes) of the steps ``a`` sums up, as this model prices them: every
        step reads the weights; computed tokens run the GEMMs (2 FLOPs a parameter) and write
        their KV; decode attention reads the GPU-tier contexts and PNM-tier windows (4 FLOPs a
        query head, head width and layer per token, as a prefill's pairs); the centroid search
        reads one centroid (keys) per cluster; swapped-in KV is written; ``migrated_tokens``
        have their keys read once per k-means pass."""
        m, s = self.lm.model, self.lm.sparsity
        attended = a.gpu_ctx + a.window
        flops = (a.tokens * self._flops_per_token
                 + (a.prefill_pairs + attended + a.pnm_ctx / s.compression / 2)
                 * self._attn_flops)
        hbm = (a.steps * m.weight_bytes
               + (attended + a.tokens + a.swap_tokens) * self.kv_bytes
               + (a.pnm_ctx / s.compression + migrated_tokens * s.kmeans_iterations)
               * self.kv_bytes / 2)
        return flops, hbm

    def pnm_work(self, a: Activity, migrated_tokens: int = 0) -> tuple[EngineOps, float, float]:
        """(the engines' operations, DDR5 bytes read, bytes to and from the PNM tier) of the
        steps ``a`` sums up: the selected share of each PNM-tier context read per decode token
        in clusters of ``compression`` tokens, one device command per KV head and layer, each
        layer's query up and output down (``LatencyModel.link_bytes``), the prompts' and the
        migrated contexts' KV sent."""
        m, s = self.lm.model, self.lm.sparsity
        read = s.selection * a.pnm_ctx
        head_tokens = read * m.kv_heads * m.layers
        kv = read * self.kv_bytes
        ops = EngineOps.of(head_tokens, head_tokens / s.compression,
                           a.pnm_decodes * m.kv_heads * m.layers, m.q_heads // m.kv_heads,
                           m.head_dim, kv)
        link = (a.pnm_decodes * m.layers * self.lm.link_bytes
                + (a.offload_tokens + migrated_tokens) * self.kv_bytes)
        return ops, kv, link

    def prefill_s(self, tokens: int, chunk: int) -> float:
        """Seconds to prefill ``tokens`` alone in chunks of ``chunk`` tokens."""
        memo = self._prefill_memo.get((tokens, chunk))
        if memo is not None:
            return memo
        total, done = 0.0, 0
        while done < tokens:
            c = min(chunk, tokens - done)
            total += self.step_s(0, [], [Chunk(done, c)]) if c > 1 else self.step_s(done, [], [
                Chunk(done, 1)])
            done += c
        self._prefill_memo[tokens, chunk] = total
        return total

    def migration_s(self, tokens: int) -> float:
        """Background time to migrate a context: k-means reads the keys once per iteration on
        the GPU, then the KV streams over the link."""
        passes = self.lm.sparsity.kmeans_iterations
        return tokens * (passes * self._s_per_key_pass + self._s_per_link_token)

    def migration_link_s(self, tokens: int) -> float:
        """``migration_s``'s link part: the KV of ``tokens`` over the link."""
        return tokens * self._s_per_link_token

    def pnm_resident_tokens(self, context: int) -> int:
        """GPU-resident KV of a PNM-tier request of ``context`` tokens, in token-equivalents:
        sink and recent tokens, and one centroid (keys only) per cluster."""
        s = self.lm.sparsity
        return resident_tokens(context, s.sink_tokens + s.recent_tokens, s.compression)
