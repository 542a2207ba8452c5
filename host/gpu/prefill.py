"""Chunked prefill on the host, as vLLM's chunked prefill: the attention of one chunk of a
prompt's queries over the K and V of every earlier token and causally over its own, without a
(prompt x prompt) mask; and what a prefill costs (memory from the shapes, time from the FLOPs),
so that a run out of the host's reach is refused before it starts.

The chunk's attention is two parts merged by their log-sum-exp, as the hybrid decode merges
the GPU's and the node's: the earlier tokens without a mask (the query heads of a KV head
folded into one longer query block, so K and V are not repeated), and the chunk's own tokens
with ``is_causal``; both by PyTorch's flash-attention kernel for the CPU, which returns the LSE.
Where that kernel is missing (another PyTorch build), one SDPA call per chunk with a
(chunk x context) mask gives the same result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 - the usual spelling

from nelssa.emu.files import MIB, read_text
from nelssa.host.gpu.config import F32, LlamaConfig, PrefillConfig, PrefillMode

log = logging.getLogger(__name__)
Tensor = torch.Tensor

try:  # (query, key, value, dropout_p, is_causal) -> (output, logsumexp), batched (B, H, L, D)
    _FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
except (AttributeError, RuntimeError):  # pragma: no cover - depends on the PyTorch build
    _FLASH_CPU = None
RUNTIME_BYTES = 1 << 30
"""Host memory of the interpreter, PyTorch and the node a run boots, besides the model's own
tensors (a round allowance)."""


def chunk_attention(q: Tensor, k: Tensor, v: Tensor, lse_merge: bool = True) -> Tensor:
    """Causal attention of the last ``n`` tokens of a context: q (n, heads, hd) at positions
    ``ctx - n .. ctx - 1`` over k, v (ctx, kv heads, hd) (GQA); (n, heads, hd). The largest
    temporary is the chunk's scores by blocks inside the kernel, or (without ``lse_merge`` or
    the flash kernel) an (n x ctx) boolean mask."""
    n, heads, hd = q.shape
    ctx, kv_heads = k.shape[0], k.shape[1]
    start, group = ctx - n, heads // kv_heads
    if start < 0:
        raise ValueError(f"{n} queries over a context of {ctx} tokens")
    q4 = q.transpose(0, 1)[None]  # (1, heads, n, hd)
    own_k = k[start:].repeat_interleave(group, dim=1).transpose(0, 1)[None]
    own_v = v[start:].repeat_interleave(group, dim=1).transpose(0, 1)[None]
    if not lse_merge or _FLASH_CPU is None:
        kk = k.repeat_interleave(group, dim=1).transpose(0, 1)[None]
        vv = v.repeat_interleave(group, dim=1).transpose(0, 1)[None]
        mask = torch.ones(n, ctx, dtype=torch.bool).tril(start)
        return F.scaled_dot_product_attention(q4, kk, vv, attn_mask=mask)[0].transpose(0, 1)
    o_own, lse_own = _FLASH_CPU(q4, own_k, own_v, 0.0, True)
    if start == 0:
        return o_own[0].transpose(0, 1)
    # the earlier tokens: every query of a KV head's group sees all of them, so the group's
    # heads are one block of group * n queries over that KV head's K and V
    qf = q4.reshape(1, kv_heads, group * n, hd)
    o_old, lse_old = _FLASH_CPU(qf, k[:start].transpose(0, 1)[None],
                                v[:start].transpose(0, 1)[None], 0.0, False)
    o_old, lse_old = o_old.reshape(1, heads, n, hd), lse_old.reshape(1, heads, n)
    lse = torch.logaddexp(lse_old, lse_own)
    out = (o_old * torch.exp(lse_old - lse)[..., None]
           + o_own * torch.exp(lse_own - lse)[..., None])
    return out[0].transpose(0, 1)


@dataclass(frozen=True)
class PrefillEstimate:
    """What prefilling one prompt takes on the host, from the shapes (float32 throughout)."""

    tokens: int
    weights_bytes: int
    """The model's weights."""
    kv_bytes: int
    """Post-RoPE K and V of every layer for the whole prompt (kept after the prefill)."""
    activation_bytes: int
    """One chunk's activations through a layer, attention's temporaries and the logits."""
    flops: float
    """Linear layers, attention (causal: each token over the tokens up to it), the head."""

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.activation_bytes

    def seconds(self, gflops: float) -> float:
        """Host time at ``gflops`` GFLOP/s."""
        return self.flops / (gflops * 1e9)


def kv_bytes(c: LlamaConfig, tokens: int) -> int:
    """K and V of ``tokens`` tokens in every layer, float32."""
    return 2 * tokens * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * F32


def estimate_prefill(c: LlamaConfig, tokens: int, chunk: int = PrefillConfig.prefill_chunk,
                     all_logits: bool = False, lse_merge: bool = True) -> PrefillEstimate:
    """Memory and FLOPs of a chunked prefill of ``tokens`` tokens, ``chunk`` at a time;
    ``all_logits``: every token's logits are kept (else the last token's)."""
    if tokens < 1 or chunk < 1:
        raise ValueError(f"tokens and chunk must be >= 1, got {tokens}, {chunk}")
    n = min(chunk, tokens)
    h, i, hd = c.hidden_size, c.intermediate_size, c.head_dim
    qh, kvh = c.num_attention_heads, c.num_key_value_heads
    # residual, norm, attention output, O projection: hidden-wide; q, k, v; the own block's
    # repeated K and V, the two partial outputs and their merge; gate, up and their product
    per_token = 4 * h + (qh + 2 * kvh) * hd + 5 * qh * hd + 3 * i
    act = n * per_token * F32 + (tokens if all_logits else n) * c.vocab_size * F32
    if not lse_merge:  # the (chunk x context) mask, the context's K and V repeated
        act += n * tokens + 2 * tokens * qh * hd * F32
    linear = 2 * tokens * (c.num_hidden_layers * c.layer_params)
    head = 2 * (tokens if all_logits else 1) * c.vocab_size * h
    attn = 2 * qh * hd * tokens * (tokens + 1) * c.num_hidden_layers  # QK^T and PV
    return PrefillEstimate(tokens, c.params * F32, kv_bytes(c, tokens), act,
                           float(linear + head + attn))


def available_memory(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """The host's available memory in bytes (MemAvailable), None where it cannot be read."""
    try:
        for line in read_text(meminfo, "meminfo", MIB).splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    log.warning("no MemAvailable in %s: memory of the run not checked", meminfo)
    return None


@dataclass(frozen=True)
class RunEstimate:
    """Memory and prefill time of a decode run's requests, planned before it starts."""

    weights_bytes: int
    kv_bytes: int
    """The KV every request holds on the host (copies for the accuracy check, the local
    node's bf16 copy of long prompts included)."""
    activation_bytes: int
    """The largest prefill's chunk activations."""
    prefill_s: float
    """Host time of every prompt's prefill at the config's ``host_gflops``."""
    disk_bytes: int = 0
    """The local node's KV in file-backed device memory (on disk, not in host memory)."""

    @property
    def total_bytes(self) -> int:
        return RUNTIME_BYTES + self.weights_bytes + self.kv_bytes + self.activation_bytes


def emulates(c: LlamaConfig, tokens: int, cfg: PrefillConfig) -> bool:
    """Whether a prompt of ``tokens`` tokens gets the emulated prefill node's KV."""
    if cfg.prefill is PrefillMode.AUTO:
        return (estimate_prefill(c, tokens, cfg.prefill_chunk).seconds(cfg.host_gflops)
                > cfg.emulate_above_s)
    return cfg.prefill is PrefillMode.EMULATED


def weight_layers(c: LlamaConfig, weight_sets: int = 0) -> int:
    """Layers whose weights a random model holds: ``weight_sets`` when it is between one and
    the layer count (layer i uses set i mod weight_sets), else every layer its own."""
    return weight_sets if 0 < weight_sets < c.num_hidden_layers else c.num_hidden_layers


def estimate_run(c: LlamaConfig, short: list[int], long: list[int], cfg: PrefillConfig,
                 accuracy: bool = True, local_node: bool = True,
                 twin_layers: int = 0, weight_sets: int = 0, file_memory: bool = False,
                 tokens_per_cluster: float = 16.0) -> RunEstimate:
    """A decode run with prompts of these lengths (short ones on the GPU tier, long ones
    perhaps on the PNM tier: counted as if they were): each holds its float32 KV (a long
    emulated one bf16; without ``accuracy`` one layer of it at a time, as it is streamed to
    the node); a long one also a full copy for the accuracy check (``accuracy``) and,
    when the node runs on this host (``local_node``), the node's bf16 copy (on disk with
    ``file_memory``: ``disk_bytes``), and the Verilated twins' bf16 copy of the first
    ``twin_layers`` layers (sampled simulation), and the GPU's centroids (a float32 key per
    ``tokens_per_cluster`` tokens, every layer). Random weights of ``weight_sets`` layers
    (``weight_layers``) and the embeddings, float32."""
    layers = c.num_hidden_layers
    twins = min(twin_layers, layers) / layers
    node = 0.5 * (twins + (0.0 if file_memory else 1.0)) if local_node else 0.0
    copies = (1.0 if accuracy else 0.0) + node
    prompts = short + long
    if not prompts:
        raise ValueError("no prompt to estimate")
    ests = [estimate_prefill(c, n, cfg.prefill_chunk) for n in prompts]

    def own(n: int) -> float:  # a long prompt's own KV (decode._prefill)
        if not emulates(c, n, cfg):
            return 1.0  # float32
        return 0.5 if accuracy else 0.5 / layers  # bf16 from the emulated prefill node

    # and the GPU's Centroid Meta-Info: a float32 key per cluster of tokens_per_cluster
    cents = 0.5 / tokens_per_cluster
    kv = sum(kv_bytes(c, n) for n in short) + sum((copies + own(n) + cents) * kv_bytes(c, n)
                                                  for n in long)
    disk = sum(0.5 * kv_bytes(c, n) for n in long) if file_memory and local_node else 0
    real = [e for e, n in zip(ests, prompts, strict=True) if not emulates(c, n, cfg)]
    weights = (c.params - (layers - weight_layers(c, weight_sets)) * c.layer_params) * F32
    return RunEstimate(weights, int(kv), max(e.activation_bytes for e in ests),
                       sum(e.seconds(cfg.host_gflops) for e in real), int(disk))


def check_run(est: RunEstimate, cfg: PrefillConfig, available: int | None,
              disk_free: int | None = None) -> str | None:
    """Why a run cannot be planned on this host (memory, disk for file-backed device
    memory, then time), or None."""
    gib = 1 << 30
    if disk_free is not None and est.disk_bytes > cfg.memory_share * disk_free:
        return (f"needs about {est.disk_bytes / gib:.1f} GiB of disk for the node's "
                f"file-backed device memory; the limit is {cfg.memory_share:.0%} of the "
                f"{disk_free / gib:.1f} GiB free in the temporary folder")
    if available is not None and est.total_bytes > cfg.memory_share * available:
        return (f"needs about {est.total_bytes / gib:.1f} GiB of host memory (weights "
                f"{est.weights_bytes / gib:.1f}, KV {est.kv_bytes / gib:.1f}, a prefill chunk's "
                f"activations {est.activation_bytes / gib:.1f}, runtime "
                f"{RUNTIME_BYTES / gib:.1f}); the limit is {cfg.memory_share:.0%} of the "
                f"{available / gib:.1f} GiB available")
    if est.prefill_s > cfg.prefill_limit_s:
        return (f"needs about {est.prefill_s:,.0f} s of host time to prefill (at "
                f"{cfg.host_gflops:g} GFLOP/s); the limit is {cfg.prefill_limit_s:g} s")
    return None
