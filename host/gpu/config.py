"""Model configuration: the fields of a Hugging Face Llama ``config.json`` this decoder uses,
and a small deterministic default for demos and tests."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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

    def __post_init__(self) -> None:
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
        h, i, layers = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        attn = h * self.head_dim * (self.num_attention_heads * 2 + self.num_key_value_heads * 2)
        per_layer = attn + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return layers * per_layer + self.vocab_size * h + head + h

    @classmethod
    def from_hf(cls, path: str | Path) -> LlamaConfig:
        """Read a Hugging Face ``config.json`` (or the folder holding one)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        try:
            raw = json.loads(p.read_text())
        except FileNotFoundError:
            raise ValueError(f"no model config at {p}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{p} is not valid JSON: {e}") from None
        arch = raw.get("model_type")
        if arch not in (None, "llama"):
            raise ValueError(f"{p}: model_type {arch!r} is not a Llama model")
        kwargs = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        if "head_dim" not in raw and "hidden_size" in raw and "num_attention_heads" in raw:
            kwargs["head_dim"] = raw["hidden_size"] // raw["num_attention_heads"]
        if "num_key_value_heads" not in raw and "num_attention_heads" in raw:
            kwargs["num_key_value_heads"] = raw["num_attention_heads"]
        return cls(**kwargs)

    def to_hf(self) -> dict[str, Any]:
        """A Hugging Face ``config.json`` dictionary for this model."""
        d = asdict(self)
        d.update({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                  "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
                  "torch_dtype": "float32"})
        return d
