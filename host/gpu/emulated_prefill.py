"""An emulated prefill node (issue 24 item 4): for prompts whose real forward pass is out of the
host's reach, the KV cache a prefill would hand the decode node, made with the statistics of a
real one, and the first token from a real pass of the last prompt token over it.

What the keys of a trained Llama look like, and what is kept here:

* a large per-head offset: keys share a mean direction per KV head (the reason clustering
  centres keys by the head mean first, host/gpu/clustering.py);
* clustered directions: around the offset, tokens of one passage point in similar directions,
  and text stays on a passage for a while, so a key is the offset plus one of ``directions``
  topic vectors, chosen per run of about ``run_tokens`` tokens, plus noise (``spread``);
* the scale of the model's own projection: each of a head's dimensions varies as much as the
  k_proj (or v_proj) rows of this model's weights make a unit-RMS hidden state vary (the row
  norms), so keys and values are in the units the model's queries meet; that variance is
  shared out between the offset, the topics and the noise (``*_share``, summing to one);
* RoPE applied by position, with the model's own rotary embedding, after the pre-RoPE key is
  drawn; values carry the same passage structure (their own topic vectors), unrotated;
* bf16 rounding as the model's ``attn_bf16`` does.

Each (layer, KV head) draws from its own seeded generator, so a request's KV is the same
whatever else runs. The prefill node's time is the latency model's (the caller's GPU timing
of the prefill's bytes and FLOPs); it is not charged to the decode node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from nelssa.host.gpu.model import Llama, attention_with_lse, bf16_round

log = logging.getLogger(__name__)
Tensor = torch.Tensor
BLOCK_TOKENS = 4096
"""Tokens drawn from one seed (a run of topics starts again at each block)."""
ROPE_TOKENS = 1 << 13
"""Tokens RoPE is applied to at a time: its temporaries (4 MB at head_dim 128) stay below the
allocator's mmap threshold, so they reuse memory instead of faulting in fresh pages."""
ROPE_CACHE_BYTES = 256 << 20
"""Most memory RoPE's cos and sin tables of a prompt take when kept for all KV heads (past it
they are made again for each head)."""


@dataclass(frozen=True)
class SyntheticKvConfig:
    """The statistics of the KV an emulated prefill makes."""

    directions: int = 64
    """Topic vectors per KV head that keys cluster around."""
    run_tokens: int = 256
    """Mean length of a run of tokens on one topic (geometric)."""
    offset_share: float = 0.35
    """Share of a key dimension's variance in the per-head offset."""
    topic_share: float = 0.5
    """Share in the topic vectors (keys of one passage point alike)."""
    noise_share: float = 0.15
    """Share in per-token noise around the topic."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.directions < 1 or self.run_tokens < 1:
            raise ValueError(f"directions and run_tokens must be >= 1, got {self.directions}, "
                             f"{self.run_tokens}")
        shares = (self.offset_share, self.topic_share, self.noise_share)
        if not all(0 <= s <= 1 for s in shares) or abs(sum(shares) - 1) > 1e-6:  # NaN fails
            raise ValueError(f"offset_share, topic_share and noise_share must be in 0..1 and "
                             f"sum to 1, got {shares}")


def projection_spread(weight: Tensor, heads: int, head_dim: int) -> Tensor:
    """(heads, head_dim): how much each output of ``h @ weight.T`` varies for a hidden state
    of unit RMS (what RMSNorm hands the projections): the norms of the weight's rows."""
    return weight.view(heads, head_dim, -1).norm(dim=-1)


def _runs(g: torch.Generator, tokens: int, mean: int, choices: int) -> Tensor:
    """A topic index per token: runs of geometric length with the given mean (a run starts at
    each token with probability 1 / mean)."""
    starts = torch.rand(tokens, generator=g) < 1.0 / mean
    starts[0] = True
    run = torch.cumsum(starts, 0) - 1
    return torch.randint(choices, (int(run[-1]) + 1,), generator=g)[run]


class EmulatedPrefill:
    """Synthetic prefill KV for ``model``."""

    def __init__(self, model: Llama, cfg: SyntheticKvConfig | None = None) -> None:
        self.model, self.cfg = model, cfg or SyntheticKvConfig()

    def layer_kv(self, layer: int, tokens: int, request_seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """Post-RoPE K and V (tokens, KV heads, head_dim) of one layer for a prompt of
        ``tokens`` tokens. Made in blocks of BLOCK_TOKENS, each from its own seed, so a longer
        prompt's KV starts with a shorter one's (a recovery makes the same KV again).
        ``dtype`` bfloat16 holds the same values in half the memory (the model rounds K and V
        to bf16: ``attn_bf16``). Made a head at a time, RoPE over ROPE_TOKENS at a time, so
        the memory beyond the result is one head's float32 K and V."""
        if tokens < 1:
            raise ValueError(f"tokens must be >= 1, got {tokens}")
        m, cfg = self.model, self.cfg
        if dtype is not torch.float32 and not (dtype is torch.bfloat16 and m.attn_bf16):
            raise ValueError(f"dtype {dtype}: float32, or bfloat16 for a model that rounds "
                             "K and V to bf16 (attn_bf16)")
        c = m.c
        kvh, hd = c.num_key_value_heads, c.head_dim
        p = f"model.layers.{layer}.self_attn."
        k_std = projection_spread(m.w[p + "k_proj.weight"], kvh, hd)
        v_std = projection_spread(m.w[p + "v_proj.weight"], kvh, hd)
        a, b, e = (s ** 0.5 for s in (cfg.offset_share, cfg.topic_share, cfg.noise_share))
        bv, ev = b / (b * b + e * e) ** 0.5, e / (b * b + e * e) ** 0.5  # values: no offset
        # head-major buffers (contiguous writes), handed out as (tokens, KV heads, head_dim)
        k_out = torch.empty(kvh, tokens, hd, dtype=dtype)
        v_out = torch.empty(kvh, tokens, hd, dtype=dtype)
        kh, vh = torch.empty(tokens, hd), torch.empty(tokens, hd)  # one head, pre-RoPE
        positions = torch.arange(tokens)
        base = (cfg.seed * 1_000_003 + request_seed) * 65_537 + layer * 257
        # RoPE's cos and sin made once for every head, where they take at most ROPE_CACHE_BYTES
        cache = 2 * tokens * hd * 4 <= ROPE_CACHE_BYTES
        tables: dict[int, tuple[Tensor, Tensor]] = {}
        for h in range(kvh):
            g = torch.Generator().manual_seed(base + h)
            offset = a * k_std[h] * torch.randn(hd, generator=g)
            topics_k = b * k_std[h] * torch.randn(cfg.directions, hd, generator=g)
            topics_v = bv * v_std[h] * torch.randn(cfg.directions, hd, generator=g)
            topics_k += offset  # the offset folded in: one add per token fewer
            for start in range(0, tokens, BLOCK_TOKENS):
                n = min(BLOCK_TOKENS, tokens - start)
                gb = torch.Generator().manual_seed((base + h) * 4099 + start // BLOCK_TOKENS + 1)
                which = _runs(gb, BLOCK_TOKENS, cfg.run_tokens, cfg.directions)[:n]
                noise = torch.randn(2, BLOCK_TOKENS, hd, generator=gb)[:, :n]
                kb, vb = kh[start:start + n], vh[start:start + n]
                torch.index_select(topics_k, 0, which, out=kb)
                kb.add_(noise[0].mul_(e * k_std[h]))
                torch.index_select(topics_v, 0, which, out=vb)
                vb.add_(noise[1].mul_(ev * v_std[h]))
            for start in range(0, tokens, ROPE_TOKENS):  # elementwise: the same values as
                end = min(tokens, start + ROPE_TOKENS)  # RoPE over every token at once
                table = tables.get(start) or m.rope_tables(positions[start:end])
                if cache:
                    tables[start] = table
                kr = m._rope(kh[start:end, None], positions[start:end], table)[:, 0]
                k_out[h, start:end] = bf16_round(kr) if m.attn_bf16 else kr
            v_out[h] = bf16_round(vh) if m.attn_bf16 else vh
        return k_out.transpose(0, 1), v_out.transpose(0, 1)

    def prefill(self, prompt: list[int], request_seed: int = 0,
                dtype: torch.dtype = torch.float32,
                keep: Callable[[int, Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
                ) -> tuple[int, list[tuple[Tensor, Tensor]]]:
        """(first token, each layer's K and V, in ``dtype`` as ``layer_kv`` makes them): the
        prompt's KV made up to its last token, the last token's own pass real (its K and V,
        then attention over the context, a KV head at a time, layer by layer), so the first
        token follows from what the decode node will hold. ``keep(layer, k, v)``: what is
        kept of each layer's K and V once the layer is done (the decoder streams a layer to
        the node and keeps its window), so one layer of the prompt's KV is held at a time."""
        m = self.model
        n = len(prompt)
        if n < 1:
            raise ValueError("empty prompt: a request needs at least one token")
        x = m.embed(torch.tensor(prompt[-1:]))
        pos = torch.tensor([n - 1])
        kv = []
        for layer in range(m.c.num_hidden_layers):
            q, k_last, v_last = m.qkv(layer, x, pos)
            if n > 1:
                k, v = self.layer_kv(layer, n, request_seed, dtype)
                k[-1], v[-1] = k_last[0], v_last[0]  # bf16 values already: exact in either
            else:
                k, v = k_last.to(dtype), v_last.to(dtype)
            x = m.finish_layer(layer, x, attention_with_lse(q[0], k, v)[0][None])
            kv.append(keep(layer, k, v) if keep is not None else (k, v))
            del k, v
        return int(m.logits(x)[-1].argmax()), kv
