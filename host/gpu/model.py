"""A Llama decoder in PyTorch, split at attention so the decode step can route it: ``qkv``
gives one layer's post-RoPE queries, keys and values; attention happens elsewhere (dense on the
GPU or sparse on the PNM node); ``finish_layer`` applies the output projection and the MLP.

A prompt is prefilled in chunks (``PrefillConfig.prefill_chunk`` tokens through every layer at
a time, ``prefill.chunk_attention``), so its memory is the KV of all layers and one chunk's
activations, never a (prompt x prompt) mask; ``dense_forward`` is the unchunked pass the chunked
one is tested against.

Weights use Hugging Face names (``model.layers.{i}.self_attn.q_proj.weight``, ...) and load from
safetensors; without a file, ``random_weights`` makes a deterministic model. Computation is in
float32; ``attn_bf16`` rounds q, k and v to bf16 before attention, as the PNM devices hold them,
so the GPU-only and the hybrid runs see the same inputs.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 - the usual spelling

from nelssa.emu.files import not_a_file
from nelssa.host.gpu.config import LlamaConfig, PrefillConfig
from nelssa.host.gpu.prefill import chunk_attention, weight_layers

log = logging.getLogger(__name__)
Tensor = torch.Tensor


def bf16_round(t: Tensor) -> Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


def weight_shapes(c: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every weight a model of this config has, by its Hugging Face name."""
    h, hd = c.hidden_size, c.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, h),
                                          "model.norm.weight": (h,)}
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, h)
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (c.num_attention_heads * hd, h),
            p + "self_attn.k_proj.weight": (c.num_key_value_heads * hd, h),
            p + "self_attn.v_proj.weight": (c.num_key_value_heads * hd, h),
            p + "self_attn.o_proj.weight": (h, c.num_attention_heads * hd),
            p + "mlp.gate_proj.weight": (c.intermediate_size, h),
            p + "mlp.up_proj.weight": (c.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, c.intermediate_size),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        })
        if c.attention_bias:  # Qwen2: biases on q, k and v
            shapes.update({p + "self_attn.q_proj.bias": (c.num_attention_heads * hd,),
                           p + "self_attn.k_proj.bias": (c.num_key_value_heads * hd,),
                           p + "self_attn.v_proj.bias": (c.num_key_value_heads * hd,)})
    return shapes


def random_weights(c: LlamaConfig, seed: int = 0, qk_gain: float = 1.0,
                   weight_sets: int = 0) -> dict[str, Tensor]:
    """A deterministic model: normal weights scaled by 1/sqrt(fan-in), norms at one. ``qk_gain``
    multiplies the query and key projections: above one, attention is peakier, more like a
    trained model's than the near-uniform attention of a random one. ``weight_sets`` (0: every
    layer its own): only layers 0..weight_sets-1 are drawn, as a model of that many layers
    draws them (the same values), and layer i shares the tensors of layer i mod weight_sets,
    so 32 layers of the Llama-3-8B shape take the memory of a few."""
    g = torch.Generator().manual_seed(seed)
    drawn = weight_layers(c, weight_sets)
    out: dict[str, Tensor] = {}
    for name, shape in weight_shapes(c).items():
        if name.startswith("model.layers."):
            layer, rest = name[len("model.layers."):].split(".", 1)
            if int(layer) >= drawn:
                out[name] = out[f"model.layers.{int(layer) % drawn}.{rest}"]
                continue
        if name.endswith(".bias"):  # small, as trained projections' biases are
            out[name] = torch.randn(shape, generator=g).mul_(0.1)
        elif len(shape) == 1:
            out[name] = torch.ones(shape)
        else:
            gain = qk_gain if name.endswith(("q_proj.weight", "k_proj.weight")) else 1.0
            out[name] = torch.randn(shape, generator=g).mul_(gain / math.sqrt(shape[1]))
    return out


def load_weights(c: LlamaConfig, path: str | Path) -> dict[str, Tensor]:
    """Weights from safetensors files (a file, or a folder of ``*.safetensors``); every tensor
    the config needs must be there with its shape."""
    from safetensors.torch import load_file

    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files:
        raise ValueError(f"no safetensors weights at {p}")
    for f in files:  # weights may be any size, but only regular files
        why = not_a_file(f)
        if why:
            raise ValueError(f"safetensors weights {f} {why}")
    tensors: dict[str, Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    out = {}
    for name, shape in weight_shapes(c).items():
        t = tensors.get(name)
        if t is None:
            raise ValueError(f"weight {name} missing from {p}")
        if tuple(t.shape) != shape:
            raise ValueError(f"weight {name} has shape {tuple(t.shape)}, the config needs {shape}")
        out[name] = t.to(torch.float32)
    return out


def _rope_inv_freq(c: LlamaConfig) -> Tensor:
    inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64)
                                  / c.head_dim))
    rs = c.rope_scaling
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv.to(torch.float32)


class Llama:
    """The decoder, layer by layer."""

    def __init__(self, config: LlamaConfig, weights: dict[str, Tensor],
                 attn_bf16: bool = True, prefill: PrefillConfig | None = None) -> None:
        self.c = config
        self.w = weights
        self.attn_bf16 = attn_bf16
        self.prefill_cfg = prefill or PrefillConfig()
        self._inv_freq = _rope_inv_freq(config)

    @classmethod
    def load(cls, model: str | Path | None, seed: int = 0, attn_bf16: bool = True,
             config: LlamaConfig | None = None, prefill: PrefillConfig | None = None,
             weight_sets: int = 0) -> Llama:
        """A Hugging Face model folder (config.json and safetensors), or random weights
        (``random_weights(seed, weight_sets=weight_sets)``) of ``config`` (default: the small
        model) when ``model`` is None."""
        if model is None:
            c = config or LlamaConfig()
            return cls(c, random_weights(c, seed, weight_sets=weight_sets), attn_bf16, prefill)
        c = LlamaConfig.from_hf(model)
        return cls(c, load_weights(c, model), attn_bf16, prefill)

    @property
    def device(self) -> torch.device:
        return self._inv_freq.device

    def on(self, device: torch.device, dtype: torch.dtype = torch.float32) -> Llama:
        """This decoder with its weights on ``device``, its matrices in ``dtype`` (itself where
        they are so already); weights shared between layers (``weight_sets``) stay shared.
        Activations stay float32: each product runs in the weights' dtype (``_mm``)."""
        if device == self.device and dtype == torch.float32:
            return self
        moved: dict[int, Tensor] = {}
        for t in self.w.values():
            if id(t) not in moved:
                moved[id(t)] = t.to(device, dtype if t.ndim == 2 else t.dtype)
        w = {name: moved[id(t)] for name, t in self.w.items()}
        out = Llama(self.c, w, self.attn_bf16, self.prefill_cfg)
        out._inv_freq = self._inv_freq.to(device)
        return out

    def _norm(self, x: Tensor, weight: Tensor) -> Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.c.rms_norm_eps) * weight

    def rope_tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin (tokens, 1, head_dim) of the rotation at ``positions``."""
        freqs = positions.to(torch.float32)[:, None] * self._inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos()[:, None, :], emb.sin()[:, None, :]

    def _rope(self, x: Tensor, positions: Tensor,
              tables: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """x: (tokens, heads, head_dim); HF's rotate-half convention. ``tables``: what
        ``rope_tables(positions)`` gives, made once for several calls."""
        cos, sin = tables if tables is not None else self.rope_tables(positions)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def embed(self, tokens: Tensor) -> Tensor:
        return F.embedding(tokens, self.w["model.embed_tokens.weight"]).float()

    def qkv(self, layer: int, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Post-RoPE q (tokens, heads, hd), k and v (tokens, kv heads, hd)."""
        p, c = f"model.layers.{layer}.", self.c
        h = self._norm(x, self.w[p + "input_layernorm.weight"])
        q = self._proj(h, p + "self_attn.q_proj").view(-1, c.num_attention_heads, c.head_dim)
        k = self._proj(h, p + "self_attn.k_proj").view(-1, c.num_key_value_heads, c.head_dim)
        v = self._proj(h, p + "self_attn.v_proj").view(-1, c.num_key_value_heads, c.head_dim)
        q, k = self._rope(q, positions), self._rope(k, positions)
        if self.attn_bf16:
            q, k, v = bf16_round(q), bf16_round(k), bf16_round(v)
        return q, k, v

    def _proj(self, h: Tensor, name: str) -> Tensor:
        """A linear projection, with its bias where the architecture has one (Qwen2's q, k,
        v)."""
        y = self._mm(h, name + ".weight")
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def finish_layer(self, layer: int, x: Tensor, attn: Tensor) -> Tensor:
        """Residual stream after the layer, given its attention output (tokens, heads, hd)."""
        p = f"model.layers.{layer}."
        x = x + self._mm(attn.reshape(x.shape[0], -1), p + "self_attn.o_proj.weight")
        h = self._norm(x, self.w[p + "post_attention_layernorm.weight"])
        gate = F.silu(self._mm(h, p + "mlp.gate_proj.weight"))
        return x + self._mm(gate * self._mm(h, p + "mlp.up_proj.weight"),
                            p + "mlp.down_proj.weight")

    def _mm(self, x: Tensor, name: str) -> Tensor:
        """``x @ W.T`` in the weight's dtype (float32; bf16 on a GPU, what the roofline
        prices), the result in ``x``'s."""
        w = self.w[name]
        return (x.to(w.dtype) @ w.T).to(x.dtype)

    def logits(self, x: Tensor) -> Tensor:
        h = self._norm(x, self.w["model.norm.weight"])
        return self._mm(h, "model.embed_tokens.weight" if self.c.tie_word_embeddings
                        else "lm_head.weight")

    def prefill(self, tokens: Tensor, last_only: bool = False
                ) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """Causal forward pass of one sequence, chunked: logits (tokens, vocab), or (1, vocab)
        of the last token with ``last_only``, and each layer's post-RoPE K and V (tokens, kv
        heads, hd)."""
        x, kv = self._forward(tokens, "last" if last_only else "all")
        return self.logits(x), kv

    def context_kv(self, tokens: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Each layer's K and V of a context, as ``prefill`` gives them (no logits)."""
        return self._forward(tokens, "none")[1]

    def _check_prompt(self, tokens: Tensor) -> None:
        if tokens.ndim != 1 or tokens.numel() == 0:
            raise ValueError(f"a prompt is a non-empty 1-D token tensor, got {tuple(tokens.shape)}")
        if tokens.numel() > self.c.max_position_embeddings:
            raise ValueError(f"prompt of {tokens.numel()} tokens exceeds the model's maximum "
                             f"{self.c.max_position_embeddings}")

    def _forward(self, tokens: Tensor, keep: str, chunk: int | None = None
                 ) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """Chunks of ``chunk`` tokens (default: the prefill config's) through every layer in
        turn, each layer's K and V written into buffers for the whole prompt; the final
        hidden states of ``keep``: "all" tokens, the "last", or "none" (an empty tensor)."""
        self._check_prompt(tokens)
        c, n = self.c, tokens.numel()
        chunk = chunk or self.prefill_cfg.prefill_chunk
        shape = (n, c.num_key_value_heads, c.head_dim)
        kv = [(torch.empty(shape), torch.empty(shape)) for _ in range(c.num_hidden_layers)]
        outs = []
        for start in range(0, n, chunk):
            end = min(n, start + chunk)
            x = self.embed(tokens[start:end])
            pos = torch.arange(start, end)
            for layer, (kk, vv) in enumerate(kv):
                q, k, v = self.qkv(layer, x, pos)
                kk[start:end], vv[start:end] = k, v
                x = self.finish_layer(layer, x, chunk_attention(q, kk[:end], vv[:end]))
            if keep == "all" or (keep == "last" and end == n):
                outs.append(x if keep == "all" else x[-1:])
            log.debug("prefill: %d of %d tokens", end, n)
        x = torch.cat(outs) if outs else torch.empty(0, c.hidden_size)
        return x, kv

    def dense_forward(self, tokens: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """The unchunked causal pass (a tokens x tokens mask): final hidden states of every
        token and each layer's K and V; the reference of the chunked pass, for short
        prompts."""
        self._check_prompt(tokens)
        pos = torch.arange(tokens.numel())
        x = self.embed(tokens)
        kv = []
        for layer in range(self.c.num_hidden_layers):
            q, k, v = self.qkv(layer, x, pos)
            kv.append((k, v))
            attn = dense_attention(q, k, v, causal=True)
            x = self.finish_layer(layer, x, attn)
        return x, kv


def dense_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False) -> Tensor:
    """q (tokens, heads, hd) over k, v (ctx, kv heads, hd), GQA, torch SDPA; (tokens, heads, hd).
    With ``causal`` the last query sees all of the context and earlier ones less."""
    group = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(group, dim=1).transpose(0, 1)
    vv = v.repeat_interleave(group, dim=1).transpose(0, 1)
    qq = q.transpose(0, 1)
    mask = None
    if causal:
        n, ctx = q.shape[0], k.shape[0]
        mask = torch.ones(n, ctx, dtype=torch.bool, device=q.device).tril(ctx - n)
    return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).transpose(0, 1)


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """One query token's heads (heads, hd) over k, v (ctx, kv heads, hd): O (heads, hd) and the
    natural-log LSE of the scaled scores (heads,), for merging with the PNM part. A KV head's
    query group at a time, K and V in ``q``'s dtype one KV head at a time: no repeated K and V
    (at 1M tokens they would be 16 GiB each), and bf16 K and V read as they are stored."""
    group = q.shape[0] // k.shape[1]
    out, lse = [], []
    for h in range(k.shape[1]):
        kh, vh = k[:, h].to(q.dtype), v[:, h].to(q.dtype)
        s = q[h * group:(h + 1) * group] @ kh.T / math.sqrt(q.shape[-1])
        lse.append(torch.logsumexp(s, dim=-1))
        out.append(torch.exp(s - lse[-1][:, None]) @ vh)
    return torch.cat(out), torch.cat(lse)
