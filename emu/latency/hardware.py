"""Hardware descriptions for the latency model: a GPU, a PNM tier, a link and a model, read from
JSON files (``hardware.json`` beside this module holds the presets) and validated field by field.

A file is ``{"gpus": {name: {...}}, "pnm": {name: {...}}, "links": {name: {...}},
"models": {name: {...}}}``; any section may be missing, and a user file adds to or overrides
the presets.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

PRESETS_FILE = Path(__file__).with_name("hardware.json")
T = TypeVar("T")


def _positive(obj: object, *names: str, allow_zero: bool = False) -> None:
    """Each field a finite number > 0 (>= 0 with ``allow_zero``): not a bool, not NaN or
    infinite, and an int where the field is declared ``int`` (a float such as 8.0 is refused)."""
    declared = {f.name: f.type for f in fields(obj)}  # type: ignore[arg-type]
    for n in names:
        v = getattr(obj, n)
        want_int = declared.get(n) in ("int", int)
        kind = "integer" if want_int else "number"
        sign = "non-negative" if allow_zero else "positive"
        ok = (isinstance(v, int) if want_int else isinstance(v, int | float))
        ok = ok and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))
        if not ok or (v < 0 if allow_zero else v <= 0):
            raise ValueError(f"{type(obj).__name__} {getattr(obj, 'name', '')!r}: {n} must be a "
                             f"{sign} {kind}, got {v!r}")


def _fraction(obj: object, *names: str) -> None:
    """Each field a share in (0, 1]."""
    _positive(obj, *names)
    for n in names:
        v = getattr(obj, n)
        if v > 1:
            raise ValueError(f"{type(obj).__name__} {getattr(obj, 'name', '')!r}: {n} must be "
                             f"in (0, 1], got {v!r}")


@dataclass(frozen=True)
class GpuHw:
    """A GPU (or a tensor-parallel group treated as one).

    Its time model: a decode step moves bytes at ``hbm_gbs * mem_efficiency``; a prefill's
    linear layers run at ``bf16_tflops * linear_efficiency`` and its attention at
    ``bf16_tflops * attn_efficiency``. The compute efficiency defaults are published Hopper
    measurements taken as shares of the H100 SXM5's datasheet peak (sources below and in each
    preset's ``source``) and applied to every Hopper preset; ``scripts/calibrate_gpu.py`` fits
    all three from kernel times on the GPU at hand.
    """

    name: str
    """Preset name."""
    hbm_gbs: float
    """HBM bandwidth in GB/s (BW_GPU): the datasheet value, or a measured one with
    ``mem_efficiency`` relative to it."""
    memory_gb: float
    """HBM capacity in GB."""
    bf16_tflops: float
    """Dense bf16 peak in TFLOP/s: the datasheet value, or a measured one with the two compute
    efficiencies relative to it."""
    kernel_us: float = 10.0
    """Fixed cost of one decode step beyond bandwidth and compute (launches, sampling)."""
    mem_efficiency: float = 0.8
    """Share of HBM bandwidth a decode step reaches (weights and KV cache read once per step).
    An estimate, not a measurement: no published whole-decode-step figure for Hopper was found.
    Its upper bound is the FlashInfer blog "Accelerating Self-Attentions for LLM Serving with
    FlashInfer" (2024-02-02), Figure 5: decode attention alone on an H100 SXM 80GB reaches
    "close to 100%" of the bandwidth for long sequences; a step also runs the weight GEMVs and
    short kernels, hence less."""
    linear_efficiency: float = 0.79
    """Share of ``bf16_tflops`` that the linear layers (GEMMs) of a prefill reach. Measured:
    OpenXLA's matmul performance table for sm_90 (``xla/service/gpu/model/
    matmul_interpolator_data.h``, ``kDefaultMatmulPTable``, bf16xbf16->bf16) gives
    783.3 TFLOP/s for a 4096 x 4096 x 4096 GEMM, 0.79 of the 989 TFLOP/s H100 SXM5 peak
    (738.5 TFLOP/s, 0.75, for 4096 x 1024 x 4096). That is cuBLAS GEMMs alone at square-ish
    shapes; a whole prefill's linear layers (with their elementwise work) reach less: issue 21
    quotes about two thirds from H100 profiles of a 7B model at 3K tokens, without a source, so
    it is not used here."""
    attn_efficiency: float = 0.585
    """Share of ``bf16_tflops`` that prefill attention (FlashAttention-style kernels) reaches.
    Measured: FlashAttention-3 (Shah et al., 2024, arXiv:2407.08608), Figure 5(d), forward,
    causal mask, head dim 128, BF16/FP16 on an H100 80GB SXM5: 579 TFLOP/s at 4K tokens,
    0.585 of 989 (521 at 2K, 602 at 8K); FlashAttention-2 reaches 319 (0.32) there."""
    source: str | None = None
    """Where the efficiencies come from (a paper and figure, or the calibration run that fitted
    them); a non-empty string when given."""

    def __post_init__(self) -> None:
        _positive(self, "hbm_gbs", "memory_gb", "bf16_tflops")
        _positive(self, "kernel_us", allow_zero=True)
        _fraction(self, "mem_efficiency", "linear_efficiency", "attn_efficiency")
        if self.source is not None and (not isinstance(self.source, str)
                                        or not self.source.strip()):
            raise ValueError(f"GpuHw {self.name!r}: source must be a non-empty string, got "
                             f"{self.source!r}")


@dataclass(frozen=True)
class PnmHw:
    """A PNM tier: devices of one kind and the node software around them."""

    name: str
    """Preset name."""
    bw_eff_gbs: float
    """Effective read bandwidth of one device under sparse random cluster reads (BW_PNM^eff)."""
    capacity_gb: float
    """KV capacity of one device."""
    t_base_us: float
    """Fixed cost of one layer's PNM request on the node (host software); the link's round
    trip is added from the link description."""
    t_dev_us: float
    """Incremental cost per device and layer (its CXL transfers)."""
    t_host_us: float
    """Host dispatch and aggregation per layer, only with more than one device."""

    def __post_init__(self) -> None:
        _positive(self, "bw_eff_gbs", "capacity_gb")
        _positive(self, "t_base_us", "t_dev_us", "t_host_us", allow_zero=True)


@dataclass(frozen=True)
class LinkHw:
    """The GPU node <-> PNM node link."""

    name: str
    """Preset name."""
    gbps: float
    """Line rate, Gb/s."""
    latency_us: float
    """One-way base latency."""

    def __post_init__(self) -> None:
        _positive(self, "gbps")
        _positive(self, "latency_us", allow_zero=True)


@dataclass(frozen=True)
class ModelHw:
    """What the latency model needs of an LLM."""

    name: str
    """Preset name."""
    layers: int
    """Decoder layers."""
    kv_heads: int
    """KV heads."""
    q_heads: int
    """Query heads."""
    head_dim: int
    """Head width."""
    params_b: float
    """Parameters in billions (bf16 weights are read once per decode step)."""
    max_context: int
    """Longest context the model takes."""

    def __post_init__(self) -> None:
        _positive(self, "layers", "kv_heads", "q_heads", "head_dim", "params_b", "max_context")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"ModelHw {self.name!r}: q_heads ({self.q_heads}) must be a multiple "
                             f"of kv_heads ({self.kv_heads})")

    @property
    def kv_bytes_per_token(self) -> int:
        """M_kv: K and V of every layer in bf16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * 2


def _build(cls: type[T], name: str, raw: Any, where: str) -> T:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: {name} must be an object, got {type(raw).__name__}")
    spec = {f.name: f for f in fields(cls) if f.name != "name"}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise ValueError(f"{where}: {name}: unknown field {unknown[0]!r} (known: "
                         f"{', '.join(spec)})")
    missing = [n for n, f in spec.items() if n not in raw and f.default is MISSING]
    if missing:
        raise ValueError(f"{where}: {name}: missing field {missing[0]!r}")
    try:
        return cls(name=name, **raw)
    except ValueError as e:
        raise ValueError(f"{where}: {name}: {e}") from None


@dataclass(frozen=True)
class HardwareCatalog:
    gpus: dict[str, GpuHw]
    pnm: dict[str, PnmHw]
    links: dict[str, LinkHw]
    models: dict[str, ModelHw]

    @classmethod
    def load(cls, *paths: str | Path) -> HardwareCatalog:
        """The presets, then each file in turn (later entries override earlier ones)."""
        sections: dict[str, dict[str, Any]] = {"gpus": {}, "pnm": {}, "links": {}, "models": {}}
        kinds = {"gpus": GpuHw, "pnm": PnmHw, "links": LinkHw, "models": ModelHw}
        for path in (PRESETS_FILE, *paths):
            p = Path(path)
            try:
                raw = json.loads(p.read_text())
            except FileNotFoundError:
                raise ValueError(f"hardware file {p} does not exist") from None
            except json.JSONDecodeError as e:
                raise ValueError(f"hardware file {p} is not valid JSON: {e}") from None
            if not isinstance(raw, dict):
                raise ValueError(f"hardware file {p}: the top level must be an object")
            for key in raw:
                if key not in sections:
                    raise ValueError(f"hardware file {p}: unknown section {key!r} (known: "
                                     f"{', '.join(sections)})")
            for key, kind in kinds.items():
                for name, entry in raw.get(key, {}).items():
                    sections[key][name] = _build(kind, name, entry, f"{p} [{key}]")
        return cls(**sections)

    def get(self, section: str, name: str) -> Any:
        table = getattr(self, section)
        if name not in table:
            raise ValueError(f"unknown {section[:-1] if section.endswith('s') else section} "
                             f"{name!r}; choose one of {sorted(table)}")
        return table[name]
