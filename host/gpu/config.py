"""Model configuration: the fields of a Hugging Face ``config.json`` this decoder uses (Llama,
Mistral and Qwen2: grouped-query attention with RoPE; ``emu/latency/description.ModelShape``
reads and checks them), a small deterministic default for demos and tests, the paper's
Llama-3-8B shape (``PRESETS``, random weights, any number of layers), and how a prompt is
prefilled (``PrefillConfig``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from nelssa.emu.latency.description import ARCHITECTURES, ModelShape, read_config
from nelssa.emu.latency.fields import Num

log = logging.getLogger(__name__)

F32 = 4
"""Bytes of a float32: the decoder's weights, activations and KV on the host."""
LLAMA3_ROPE_SCALING: dict[str, Any] = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}
"""Llama 3.1's RoPE scaling (its ``config.json``)."""


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama-architecture decoder."""

    vocab_size: int = 4096
    """Tokens in the vocabulary."""
    hidden_size: int = 1024
    """Width of the residual stream."""
    intermediate_size: int = 2816
    """Width of the SwiGLU MLP."""
    num_hidden_layers: int = 4
    """Decoder layers."""
    num_attention_heads: int = 16
    """Query heads."""
    num_key_value_heads: int = 4
    """KV heads (GQA): query heads per KV head = num_attention_heads / num_key_value_heads."""
    head_dim: int = 64
    """Width of one head."""
    rope_theta: float = 500000.0
    """RoPE base."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    max_position_embeddings: int = 131072
    """Longest context the model takes (prompt plus generated tokens)."""
    tie_word_embeddings: bool = False
    """The output head shares the embedding matrix."""
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    """None or a Llama-3 style ``{"rope_type": "llama3", ...}``."""
    model_type: str = "llama"
    """The architecture (``description.ARCHITECTURES``): llama, mistral or qwen2."""
    attention_bias: bool = False
    """Biases on the q, k and v projections (Qwen2's)."""

    def __post_init__(self) -> None:
        if self.model_type not in ARCHITECTURES:
            raise ValueError(f"model_type {self.model_type!r}: the decoder expresses "
                             f"{', '.join(ARCHITECTURES)}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim",
                     "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a "
                             f"multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError(f"rope_theta and rms_norm_eps must be > 0, got {self.rope_theta}, "
                             f"{self.rms_norm_eps}")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("llama3", "default"):
                raise ValueError(f"rope_scaling type {kind!r} is not supported (llama3, default)")

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def params(self) -> int:
        """Parameters (for the roofline time model)."""
        return self.num_hidden_layers * self.layer_params + self.vocab_params

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (projections, MLP, its two norms)."""
        h = self.hidden_size
        attn = h * self.head_dim * (self.num_attention_heads * 2 + self.num_key_value_heads * 2)
        bias = (self.head_dim * (self.num_attention_heads + 2 * self.num_key_value_heads)
                if self.attention_bias else 0)
        return attn + bias + 3 * h * self.intermediate_size + 2 * h

    @property
    def vocab_params(self) -> int:
        """Parameters outside the layers: the embedding, the output head unless tied, the
        final norm."""
        head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.vocab_size * self.hidden_size + head + self.hidden_size

    @classmethod
    def small(cls, layers: int | None = None, vocab: int | None = None,
              positions: int | None = None) -> LlamaConfig:
        """The small default model (``LlamaConfig()``), optionally with other layer,
        vocabulary and position counts."""
        c = cls()
        return replace(c, num_hidden_layers=layers or c.num_hidden_layers,
                       vocab_size=vocab or c.vocab_size,
                       max_position_embeddings=positions or c.max_position_embeddings)

    @classmethod
    def llama3_8b(cls, layers: int | None = None, vocab: int | None = None,
                  positions: int | None = None) -> LlamaConfig:
        """Llama-3-8B's shape (32 query heads, 8 KV heads of 128, hidden 4096, MLP 14336,
        RoPE base 500000 with Llama-3 scaling, 131072 positions unless ``positions``) with
        ``layers`` layers (default 32) and a ``vocab``-token vocabulary (default 32000, where
        the real model has 128256: the embedding and the output head are ``vocab`` x 4096
        each)."""
        return cls(vocab_size=vocab or 32000, hidden_size=4096, intermediate_size=14336,
                   num_hidden_layers=layers or 32, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
                   rms_norm_eps=1e-5, max_position_embeddings=positions or 131072,
                   rope_scaling=dict(LLAMA3_ROPE_SCALING))

    @classmethod
    def from_shape(cls, shape: ModelShape | dict[str, Any]) -> LlamaConfig:
        """The decoder of a checked ``config.json`` shape (or its dictionary)."""
        s = shape if isinstance(shape, ModelShape) else ModelShape(**shape)
        return cls(vocab_size=s.vocab_size, hidden_size=s.hidden_size,
                   intermediate_size=s.intermediate_size, num_hidden_layers=s.num_hidden_layers,
                   num_attention_heads=s.num_attention_heads, num_key_value_heads=s.kv_heads,
                   head_dim=s.dim, rope_theta=float(s.rope_theta),
                   rms_norm_eps=float(s.rms_norm_eps),
                   max_position_embeddings=s.max_position_embeddings,
                   tie_word_embeddings=s.tie_word_embeddings,
                   rope_scaling=dict(s.rope_scaling) if s.rope_scaling else None,
                   model_type=s.model_type, attention_bias=s.qkv_bias)

    @classmethod
    def from_hf(cls, path: str | Path) -> LlamaConfig:
        """Read a Hugging Face ``config.json`` (or the folder holding one) of an architecture
        the decoder expresses (ValueError naming the file and field otherwise)."""
        return cls.from_shape(read_config(path)[0])

    def to_hf(self) -> dict[str, Any]:
        """A Hugging Face ``config.json`` dictionary for this model."""
        d = asdict(self)
        arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                "qwen2": "Qwen2ForCausalLM"}[self.model_type]
        d.update({"architectures": [arch], "hidden_act": "silu", "mlp_bias": False,
                  "torch_dtype": "float32"})
        if self.model_type != "llama":
            d.pop("attention_bias")  # qwen2's q/k/v biases are its architecture's
            d["sliding_window"] = None
        return d


PRESETS: dict[str, Callable[..., LlamaConfig]] = {
    "small": LlamaConfig.small,
    "llama-3-8b": LlamaConfig.llama3_8b,
}
"""The decoder's own shapes with random weights (``nelssa decode --model``): each takes
``layers``, ``vocab`` and ``positions`` (None: the preset's own). ``llama-3-8b`` keeps the
32000-token vocabulary it has always had here (``--vocab 128256`` for the real one); every
other model of the hardware description comes from its ``config.json`` shape."""
ALIASES = {"llama3-8b": "llama-3-8b"}
"""Old names still taken, with a deprecation line in the log."""


def preset_name(name: str) -> str:
    """A model preset's name, an old alias turned into it (logged)."""
    if name in ALIASES:
        log.warning("model %r is deprecated: its name is now %r", name, ALIASES[name])
        return ALIASES[name]
    return name


def describe_shape(c: LlamaConfig) -> str:
    """One line on a shape and the float32 memory of its weights."""
    gib = 1 << 30
    return (f"{c.num_attention_heads} query / {c.num_key_value_heads} KV heads x {c.head_dim}, "
            f"hidden {c.hidden_size}, MLP {c.intermediate_size}, vocabulary {c.vocab_size}: "
            f"{c.layer_params * F32 / gib:.2f} GiB of weights per layer + "
            f"{c.vocab_params * F32 / gib:.2f} GiB for the vocabulary")


TOKENS = Num("a positive integer", integer=True, lo=1, most=1 << 20)
RATE = Num("a finite number > 0", lo=0, lo_open=True, most=1e6)
SHARE = Num("in (0, 1]", lo=0, lo_open=True, hi=1)


class PrefillMode(Enum):
    """How a prompt's KV is made."""

    REAL = "real"
    """A forward pass of the model over the prompt (chunked, on this host)."""
    EMULATED = "emulated"
    """The emulated prefill node's synthetic KV (host/gpu/emulated_prefill.py)."""
    AUTO = "auto"
    """Real where its estimated host time is within ``emulate_above_s``, emulated beyond."""


@dataclass(frozen=True)
class PrefillConfig:
    """How a prompt is prefilled on the host (vLLM's chunked prefill: the prompt goes through
    all layers ``prefill_chunk`` tokens at a time, each chunk's queries attending to the
    earlier chunks' K and V and causally to their own), and what a run may plan to use
    (``host/gpu/prefill.py`` estimates both before a run starts)."""

    prefill_chunk: int = field(default=2048, metadata={"num": TOKENS})
    """Prompt tokens per forward chunk: activations (and attention's working set) scale with
    it, the result does not."""
    prefill_limit_s: float = field(default=3600.0, metadata={"num": RATE})
    """Longest estimated host time of a run's prefills (all prompts), in seconds; a longer
    one is refused before it starts."""
    host_gflops: float = field(default=60.0, metadata={"num": RATE})
    """Host CPU rate (GFLOP/s, float32) the time estimate assumes; scripts/bench_prefill.py
    measures the real one."""
    memory_share: float = field(default=0.9, metadata={"num": SHARE})
    """Share of the host's available memory (MemAvailable) a run may plan to use."""
    prefill: PrefillMode = PrefillMode.AUTO
    """real: every prompt through the model; emulated: every prompt's KV from the emulated
    prefill node (per-head offsets, passage-clustered keys, RoPE by position; the first token
    from a real pass of the last prompt token); auto: real where affordable."""
    emulate_above_s: float = field(default=300.0, metadata={"num": RATE})
    """With --prefill auto, a prompt whose real prefill the estimate puts above this many
    seconds of host time is emulated."""

    def __post_init__(self) -> None:
        for name in ("prefill_chunk", "prefill_limit_s", "host_gflops", "memory_share",
                     "emulate_above_s"):
            self.__dataclass_fields__[name].metadata["num"].check(getattr(self, name), name)
        if not isinstance(self.prefill, PrefillMode):
            raise ValueError(f"prefill must be one of {[m.value for m in PrefillMode]}, got "
                             f"{self.prefill!r}")
