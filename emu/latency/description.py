"""The parts of a hardware description beyond the latency model's numbers, validated by pydantic:
a PNM entry's device (units, DDR5 speed grade and per-field overrides, sub-channels), model
shapes from Hugging Face style ``config.json`` files (no weights), and the ``use`` section that
says which entries a command takes unless an option names others. Files are JSON, YAML or TOML
(by suffix); every refusal names the file, the entry and the field.

Each field's description (its unit in its name) is what ``nelssa presets --fields`` and the
command-line help show.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nelssa.driver.status import ENGINE_LANES
from nelssa.emu.files import InputFileError, read_bytes
from nelssa.emu.latency.fields import FieldError, load_json
from nelssa.emu.latency.pnm_device_docs import PNM_DEVICE_DOCS

MODELS_DIR = Path(__file__).with_name("models")
"""Shipped ``config.json`` files of the model presets (public configurations, written from
their published values), by preset name."""
SUFFIXES = (".json", ".yaml", ".yml", ".toml")
M = TypeVar("M", bound=BaseModel)


class DescriptionError(ValueError):
    """A description that cannot be used; the message names the file, entry and field."""


def read_document(p: Path, what: str = "hardware file") -> Any:
    """One file's content: JSON, YAML (.yaml, .yml) or TOML (.toml) by suffix; anything else is
    read as JSON. DescriptionError (naming ``what`` and the file) when it is not a document of
    its kind, or not a file of a document's size (emu/files.py)."""
    try:
        data = read_bytes(p, what)
    except InputFileError as e:
        raise DescriptionError(str(e)) from None
    suffix = p.suffix.lower()
    if suffix in (".yaml", ".yml", ".toml"):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise DescriptionError(f"{what} {p} is not UTF-8 text (byte {e.start})") from None
        try:
            return tomllib.loads(text) if suffix == ".toml" else yaml.safe_load(text)
        except (tomllib.TOMLDecodeError, yaml.YAMLError, RecursionError) as e:
            kind = "TOML" if suffix == ".toml" else "YAML"
            why = " ".join(str(e).split()) or type(e).__name__
            raise DescriptionError(f"{what} {p} is not valid {kind}: {why}") from None
    try:
        return load_json(data)
    except FieldError as e:
        raise DescriptionError(f"{what} {p} is {e}" if str(e).startswith("not ")
                               else f"{what} {p}: {e}") from None


def errors_text(e: ValidationError) -> str:
    """A pydantic refusal in the project's words: ``field: reason`` (the first error)."""
    first = e.errors()[0]
    where = ".".join(str(x) for x in first["loc"]) or "entry"
    ctx = first.get("ctx", {})
    reason = str(ctx["error"]) if "error" in ctx else first["msg"]
    value = first.get("input")
    shown = "" if first["type"] in ("missing", "value_error") else f", got {value!r}"
    return f"{where}: {reason}{shown}"


def validated(cls: type[M], raw: Any, label: str, what: str) -> M:
    """``raw`` (an object) as ``cls``; DescriptionError ``{label}field: reason``, or naming
    ``what`` when ``raw`` is no object."""
    if isinstance(raw, cls):
        return raw
    if not isinstance(raw, dict):
        raise DescriptionError(f"{label}{what} must be an object, got {type(raw).__name__}")
    try:
        return cls(**raw)
    except ValidationError as e:
        raise DescriptionError(f"{label}{errors_text(e)}") from None
    except ValueError as e:  # a check across fields
        raise DescriptionError(f"{label}{e}") from None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PnmDevice(Strict):
    """The device a PNM entry describes: what its bandwidth is measured on (the model device's
    cycle model) and what `node up` and `decode` boot."""

    units: int = Field(4, ge=1, le=6, description=PNM_DEVICE_DOCS["units"])
    ddr5: str = Field("ddr5-6400", description=PNM_DEVICE_DOCS["ddr5"])
    ddr5_overrides: dict[str, int] = Field(default_factory=dict,
                                           description=PNM_DEVICE_DOCS["ddr5_overrides"])
    subchannels: Literal[1, 2, 4, 8] = Field(8, description=PNM_DEVICE_DOCS["subchannels"])
    fp_latency: dict[str, int] = Field(default_factory=dict,
                                       description=PNM_DEVICE_DOCS["fp_latency"])
    compute_lanes: int = Field(ENGINE_LANES, description=PNM_DEVICE_DOCS["compute_lanes"])

    @field_validator("compute_lanes")
    @classmethod
    def _lanes(cls, v: int) -> int:
        from nelssa.hw.model.engine import COMPUTE_LANES

        if v not in COMPUTE_LANES:
            raise ValueError(f"must be one of {', '.join(map(str, COMPUTE_LANES))}")
        return v

    @field_validator("fp_latency")
    @classmethod
    def _latency(cls, v: dict[str, int]) -> dict[str, int]:
        fp_latency(v)
        return v

    @field_validator("ddr5")
    @classmethod
    def _grade(cls, v: str) -> str:
        from nelssa.hw.model.ddr5_timing import PRESETS

        if v not in PRESETS:
            raise ValueError(f"unknown DDR5 grade {v!r} (known: {', '.join(PRESETS)})")
        return v

    def device_config(self):
        """The model device's configuration (hw/model/device.DeviceConfig)."""
        from nelssa.hw.model.device import DeviceConfig
        from nelssa.hw.model.engine import EngineParams

        return DeviceConfig(engines=self.units, preset=self.ddr5, subchannels=self.subchannels,
                            ddr5_overrides=tuple(sorted(self.ddr5_overrides.items())),
                            engine=EngineParams(latency=fp_latency(self.fp_latency),
                                                compute_lanes=self.compute_lanes))

    def node_args(self) -> list[str]:
        """The same device as `node up` / `device serve` options."""
        out = ["--engines", str(self.units), "--preset", self.ddr5,
               "--subchannels", str(self.subchannels)]
        for k, v in sorted(self.ddr5_overrides.items()):
            out += ["--ddr5-override", f"{k}={v}"]
        given = [f"{k}={v}" for k, v in sorted(self.fp_latency.items()) if v]
        if given:
            out += ["--fp-latency", ",".join(given)]
        if self.compute_lanes != ENGINE_LANES:
            out += ["--compute-lanes", str(self.compute_lanes)]
        return out


def fp_latency(raw: dict[str, int]):
    """The arithmetic units' latencies (hw/model/engine.FpLatency) a description gives; a
    ValueError names the bad kind or value."""
    from nelssa.hw.model.engine import FpLatency

    known = FpLatency.__dataclass_fields__
    for kind in raw:
        if kind not in known:
            raise ValueError(f"unknown unit kind {kind!r} (known: {', '.join(known)})")
    return FpLatency(**raw)


def pnm_device(raw: Any) -> PnmDevice:
    """A PNM entry's ``device`` checked (DescriptionError naming the field)."""
    dev = validated(PnmDevice, raw, "device.", "device")
    try:
        dev.device_config()  # the overrides against the grade's own checks
    except ValueError as e:
        raise DescriptionError(f"device.ddr5_overrides: {e}") from None
    return dev


class Arch(BaseModel):
    """What an architecture (``model_type``) adds to grouped-query attention with RoPE."""

    qkv_bias: bool
    """Biases on the q, k and v projections (Qwen2)."""


ARCHITECTURES: dict[str, Arch] = {
    "llama": Arch(qkv_bias=False),
    "mistral": Arch(qkv_bias=False),
    "qwen2": Arch(qkv_bias=True),
}
"""The ``model_type`` values the decoder expresses: GQA, RoPE, RMSNorm, SwiGLU."""


class ModelShape(BaseModel):
    """The fields of a Hugging Face ``config.json`` the decoder and the latency model use
    (others are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    name_or_path: str | None = Field(None, alias="_name_or_path",
                                     description="where the config comes from (Hugging Face)")
    model_type: str = Field("llama", description="architecture: llama, mistral or qwen2")
    vocab_size: int = Field(ge=1, le=1 << 22, description="tokens in the vocabulary")
    hidden_size: int = Field(ge=1, le=1 << 20, description="width of the residual stream")
    intermediate_size: int = Field(ge=1, le=1 << 22, description="width of the SwiGLU MLP")
    num_hidden_layers: int = Field(ge=1, le=1 << 12, description="decoder layers")
    num_attention_heads: int = Field(ge=1, le=1 << 12, description="query heads")
    num_key_value_heads: int | None = Field(None, ge=1, le=1 << 12,
                                            description="KV heads (GQA; default: query heads)")
    head_dim: int | None = Field(None, ge=2, le=1 << 12, description="width of one head "
                                 "(default: hidden_size / num_attention_heads)")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base")
    rms_norm_eps: float = Field(1e-6, gt=0, description="RMSNorm epsilon")
    max_position_embeddings: int = Field(4096, ge=1, le=1 << 24,
                                         description="longest context, tokens")
    tie_word_embeddings: bool = Field(False, description="the output head is the embedding")
    rope_scaling: dict[str, Any] | None = Field(None, description="None or Llama 3's scaling")
    attention_bias: bool | None = Field(None, description="q/k/v/o biases (llama: off)")
    sliding_window: int | None = Field(None, description="must be None or unused")
    use_sliding_window: bool = False
    hidden_act: str = "silu"

    @field_validator("model_type")
    @classmethod
    def _arch(cls, v: str) -> str:
        if v not in ARCHITECTURES:
            raise ValueError(f"model_type {v!r} is not one the decoder expresses (GQA with "
                             f"RoPE: {', '.join(ARCHITECTURES)})")
        return v

    def model_post_init(self, _: Any) -> None:
        kv = self.kv_heads
        if self.num_attention_heads % kv:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a "
                             f"multiple of num_key_value_heads ({kv})")
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act {self.hidden_act!r}: the decoder's MLP is SwiGLU (silu)")
        if self.attention_bias and self.model_type == "llama":
            raise ValueError("attention_bias: the decoder has no o_proj bias (Llama with biases)")
        window = self.sliding_window if (self.model_type != "qwen2"
                                         or self.use_sliding_window) else None
        if window is not None and window < self.max_position_embeddings:
            raise ValueError(f"sliding_window {window}: the decoder attends to the whole "
                             "context (a config without a window, e.g. Mistral-7B v0.3)")
        kind = (self.rope_scaling or {}).get("rope_type", (self.rope_scaling or {}).get("type"))
        if self.rope_scaling is not None and kind not in ("llama3", "default"):
            raise ValueError(f"rope_scaling type {kind!r} is not supported (llama3, default)")

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def qkv_bias(self) -> bool:
        return ARCHITECTURES[self.model_type].qkv_bias

    @property
    def params(self) -> int:
        """Parameters: the layers, the embedding, the head unless tied, the final norm."""
        h, d = self.hidden_size, self.dim
        q, kv = self.num_attention_heads, self.kv_heads
        attn = h * d * (2 * q + 2 * kv) + (d * (q + 2 * kv) if self.qkv_bias else 0)
        layer = attn + 3 * h * self.intermediate_size + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_hidden_layers * layer + self.vocab_size * h + head + h

    def hf(self) -> dict[str, Any]:
        """The config as a ``config.json`` dictionary (the fields above, head_dim and KV heads
        made explicit)."""
        d = self.model_dump(by_alias=True)
        d.update(head_dim=self.dim, num_key_value_heads=self.kv_heads,
                 attention_bias=self.qkv_bias)
        return d


def shape_of(raw: Any, where: str) -> ModelShape:
    """A ``config.json`` dictionary as a ModelShape (DescriptionError naming ``where``)."""
    return validated(ModelShape, raw, f"{where}: ", "a model config")


def read_config(path: str | Path, base: Path | None = None) -> tuple[ModelShape, Path]:
    """A ``config.json`` (a file, a folder holding one, or a shipped preset's name such as
    ``llama-3-70b``; a relative path is taken from ``base``)."""
    p = Path(path)
    if not p.is_absolute() and base is not None and (base / p).exists():
        p = base / p
    if not p.exists() and (MODELS_DIR / f"{path}.json").exists():
        p = MODELS_DIR / f"{path}.json"
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise DescriptionError(f"no model config at {p}")
    return shape_of(read_document(p, "model config"), str(p)), p


class ModelEntry(Strict):
    """A model entry built from a shape: a ``config.json`` (``config``), another entry
    (``preset``) or the config inline (``hf``); ``layers`` and ``vocab_size`` cut it, and the
    latency model's fields, when given, replace what the shape gives."""

    config: str | None = Field(None, description="a Hugging Face config.json: a path (from "
                               "the hardware file's folder) or a shipped preset's name")
    preset: str | None = Field(None, description="another model entry this one starts from")
    hf: dict[str, Any] | None = Field(None, description="the config.json fields inline")
    layers: int | None = Field(None, ge=1, le=1 << 12, description="decoder layers kept (the "
                               "first ones): a model cut to fit the machine")
    vocab_size: int | None = Field(None, ge=1, le=1 << 22, description="a smaller vocabulary "
                                   "for the decoder's random weights (stated in its output)")
    params_b: float | None = Field(None, gt=0, description="parameters, billions (default: "
                                   "counted from the shape)")
    embedding_b: float | None = Field(None, ge=0, description="of params_b, the input "
                                      "embedding's, billions (default: vocab x hidden)")
    max_context: int | None = Field(None, ge=1, description="longest context, tokens "
                                    "(default: max_position_embeddings)")

    def model_post_init(self, _: Any) -> None:
        given = [k for k in ("config", "preset", "hf") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give one of config, preset and hf")


SHAPE_KEYS = ("config", "preset", "hf")
"""A model entry with one of these is built from a shape (ModelEntry); without, it lists the
latency model's fields (layers, heads, params_b, ...)."""


class Selection(Strict):
    """Which entries a command uses unless an option names another (``--gpu``, ``--pnm``,
    ``--model``, ``--link``)."""

    gpu: str | None = Field(None, description="a GPU entry")
    pnm: str | None = Field(None, description="a PNM entry (its device: what `decode` and "
                            "`node up` boot)")
    model: str | None = Field(None, description="a model entry")
    link: str | None = Field(None, description="a GPU node <-> PNM node link entry")


def selection(raw: Any, where: str) -> Selection:
    """A file's ``use`` section (DescriptionError naming the file and field)."""
    return validated(Selection, raw, f"{where} [use]: ", "section 'use'")
