"""The hardware description every command reads: GPUs, PNM tiers (and the device each is made
of), links and models, from JSON, YAML or TOML files (``hardware.json`` beside this module holds
the presets) validated field by field.

A file is ``{"gpus": {name: {...}}, "pnm": {name: {...}}, "links": {name: {...}},
"models": {name: {...}}, "energy": {name: {...}}, "use": {"gpu": ..., "pnm": ..., "model": ...,
"link": ...}}``; any
section may be missing, and a user file adds to or overrides the presets (``use``: which entries
a command takes unless an option names others). The link presets are not in ``hardware.json``:
they are the link layer's own table (``emu/link/model.py`` PRESETS, its GPU node <-> PNM node
entries), which the emulated links time messages with. A PNM entry with a ``device`` and no
``bw_eff_gbs`` gets its bandwidth measured on that device (``hw/model/bandwidth.py``) when a
latency model first uses it; models may come from Hugging Face ``config.json`` files
(``description.py``).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import date
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from nelssa.emu.latency.description import (
    SHAPE_KEYS,
    DescriptionError,
    ModelEntry,
    ModelShape,
    fp_latency,
    pnm_device,
    read_config,
    read_document,
    selection,
    shape_of,
    validated,
)
from nelssa.emu.latency.fields import FieldError, Num, check_numbers
from nelssa.emu.link.model import GPU_PNM_LINKS, LinkSpec
from nelssa.emu.link.model import PRESETS as LINK_PRESETS

PRESETS_FILE = Path(__file__).with_name("hardware.json")
DEFAULT_GPU = "h100-nvl"
"""The GPU every command and config assumes unless told (the paper's)."""
DEFAULT_PNM = "prototype"
"""The PNM device description: the emulated device's, calibrated against the RTL."""
DEFAULT_MODEL = "llama-3-8b"
"""The model the latency model and the serving emulator assume unless told."""
DEFAULT_ENERGY = "default"
"""The energy entry every report uses (a hardware file's ``default`` replaces the preset)."""
T = TypeVar("T")

RATE = Num("a positive number", lo=0, lo_open=True, least=1e-3, most=1e9)
"""A bandwidth (GB/s, Gb/s), a compute peak (TFLOP/s) or a capacity (GB): the limits keep the
latency model's arithmetic finite."""
DURATION_US = Num("a non-negative number", lo=0, most=1e9)
"""A fixed cost in microseconds (up to 1000 s)."""
SHARE = Num("in (0, 1]", lo=0, lo_open=True, hi=1)
COUNT = Num("a positive integer", integer=True, lo=1, most=1 << 20)
"""Layers, heads, head width."""
PARAMS_B = Num("a positive number", lo=0, lo_open=True, least=1e-6, most=1e6)
CONTEXT = Num("a positive integer", integer=True, lo=1, most=1 << 40)
EMBED_B = Num("a non-negative number", lo=0, most=1e6)
POWER_W = Num("a positive number", lo=0, lo_open=True, least=1e-3, most=1e6)
"""A power in watts (a power limit, an idle or a host's power)."""
ENERGY_PJ = Num("a non-negative number", lo=0, most=1e9)
"""An energy in picojoules (per operation, byte or bit); 0 leaves a part out."""


def _num(spec: Num, default: Any = MISSING) -> Any:
    """A dataclass field read and checked as ``spec``."""
    return field(default=default, metadata={"num": spec})


class HardwareError(DescriptionError):
    """A hardware description that cannot be used; the message names the file and field."""


def _check(obj: Any) -> None:
    """Every numeric field against its ``Num``, naming the description (a field left None
    is derived later)."""
    if not isinstance(obj.name, str) or not obj.name.strip():
        raise HardwareError(f"{type(obj).__name__}: name must be a non-empty string, got "
                            f"{obj.name!r}")
    try:
        check_numbers(obj)
    except FieldError as e:
        raise HardwareError(f"{type(obj).__name__} {obj.name!r}: {e}") from None


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
    hbm_gbs: float = _num(RATE)
    """HBM bandwidth in GB/s (BW_GPU): the datasheet value, or a measured one with
    ``mem_efficiency`` relative to it."""
    memory_gb: float = _num(RATE)
    """HBM capacity in GB."""
    bf16_tflops: float = _num(RATE)
    """Dense bf16 peak in TFLOP/s: the datasheet value, or a measured one with the two compute
    efficiencies relative to it."""
    kernel_us: float = _num(DURATION_US, 10.0)
    """Fixed cost of one decode step beyond bandwidth and compute (launches, sampling)."""
    mem_efficiency: float = _num(SHARE, 0.8)
    """Share of HBM bandwidth a decode step reaches (weights and KV cache read once per step).
    An estimate, not a measurement: no published whole-decode-step figure for Hopper was found.
    Its upper bound is the FlashInfer blog "Accelerating Self-Attentions for LLM Serving with
    FlashInfer" (2024-02-02), Figure 5: decode attention alone on an H100 SXM 80GB reaches
    "close to 100%" of the bandwidth for long sequences; a step also runs the weight GEMVs and
    short kernels, hence less."""
    linear_efficiency: float = _num(SHARE, 0.79)
    """Share of ``bf16_tflops`` that the linear layers (GEMMs) of a prefill reach. Measured:
    OpenXLA's matmul performance table for sm_90 (``xla/service/gpu/model/
    matmul_interpolator_data.h``, ``kDefaultMatmulPTable``, bf16xbf16->bf16) gives
    783.3 TFLOP/s for a 4096 x 4096 x 4096 GEMM, 0.79 of the 989 TFLOP/s H100 SXM5 peak
    (738.5 TFLOP/s, 0.75, for 4096 x 1024 x 4096). That is cuBLAS GEMMs alone at square-ish
    shapes; a whole prefill's linear layers (with their elementwise work) reach less: issue 21
    quotes about two thirds from H100 profiles of a 7B model at 3K tokens, without a source, so
    it is not used here."""
    attn_efficiency: float = _num(SHARE, 0.585)
    """Share of ``bf16_tflops`` that prefill attention (FlashAttention-style kernels) reaches.
    Measured: FlashAttention-3 (Shah et al., 2024, arXiv:2407.08608), Figure 5(d), forward,
    causal mask, head dim 128, BF16/FP16 on an H100 80GB SXM5: 579 TFLOP/s at 4K tokens,
    0.585 of 989 (521 at 2K, 602 at 8K); FlashAttention-2 reaches 319 (0.32) there."""
    source: str | None = None
    """Where the efficiencies come from (a paper and figure, or the calibration run that fitted
    them); a non-empty string when given."""
    device_name: str | None = None
    """The GPU the efficiencies were fitted on, as torch names it (``torch.cuda.
    get_device_name``); None for a preset that was not calibrated."""
    calibrated_on: str | None = None
    """The date of that calibration (ISO 8601, YYYY-MM-DD)."""
    tdp_w: float | None = _num(POWER_W, None)
    """Power limit, W (the datasheet's TDP): the power model's cap (``emu/energy.py``)."""
    idle_w: float | None = _num(POWER_W, None)
    """Power of the GPU powered but doing nothing, W."""
    pj_per_flop: float | None = _num(ENERGY_PJ, None)
    """Energy of one bf16 FLOP beyond idle, pJ."""
    pj_per_hbm_byte: float | None = _num(ENERGY_PJ, None)
    """Energy of one HBM byte read or written beyond idle, pJ."""
    power_source: str | None = None
    """Where the four power figures come from (needed with them): datasheets, estimates, or
    the ``scripts/calibrate_gpu.py --power`` fit."""

    POWER: ClassVar[tuple[str, ...]] = ("tdp_w", "idle_w", "pj_per_flop", "pj_per_hbm_byte")
    """The power model's figures: all given (with ``power_source``) or none."""

    DERIVED: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("hbm_gbs", "mem_efficiency", "GB/s"), ("bf16_tflops", "linear_efficiency", "TFLOP/s"),
        ("bf16_tflops", "attn_efficiency", "TFLOP/s"))
    """The achieved rates the time models divide by (peak x efficiency): each must meet the
    floor of a stated rate (``RATE``), or a tiny efficiency (5e-324) makes every time infinite."""

    def __post_init__(self) -> None:
        _check(self)
        for peak, share, unit in self.DERIVED:
            rate = getattr(self, peak) * getattr(self, share)
            if not rate >= (RATE.least or 0):
                raise HardwareError(f"GpuHw {self.name!r}: {share} {getattr(self, share)!r} "
                                    f"makes the achieved rate ({peak} x {share}) {rate:g} "
                                    f"{unit}: it must be at least {RATE.least:g}")
        for key in ("source", "power_source", "device_name"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise HardwareError(f"GpuHw {self.name!r}: {key} must be a non-empty string, "
                                    f"got {v!r}")
        if self.calibrated_on is not None:
            try:
                date.fromisoformat(self.calibrated_on)
            except (TypeError, ValueError):
                raise HardwareError(f"GpuHw {self.name!r}: calibrated_on must be a date "
                                    f"YYYY-MM-DD, got {self.calibrated_on!r}") from None
        given = [k for k in self.POWER if getattr(self, k) is not None]
        if given and len(given) < len(self.POWER):
            missing = next(k for k in self.POWER if getattr(self, k) is None)
            raise HardwareError(f"GpuHw {self.name!r}: {given[0]} is given but {missing} is "
                                f"not: the power model needs {', '.join(self.POWER)}")
        if given and self.power_source is None:
            raise HardwareError(f"GpuHw {self.name!r}: the power figures need a power_source "
                                "(where they come from)")
        if given and self.idle_w >= self.tdp_w:  # type: ignore[operator]
            raise HardwareError(f"GpuHw {self.name!r}: idle_w ({self.idle_w}) must be below "
                                f"tdp_w ({self.tdp_w})")

    @property
    def has_power(self) -> bool:
        """Whether the power model's figures are given."""
        return self.tdp_w is not None


@dataclass(frozen=True)
class PnmHw:
    """A PNM tier: devices of one kind and the node software around them."""

    NEED_WITHOUT_DEVICE: ClassVar[tuple[str, ...]] = ("bw_eff_gbs", "capacity_gb")
    """Fields an entry without a ``device`` must give."""
    name: str
    """Preset name."""
    t_base_us: float = _num(DURATION_US)
    """Fixed cost of one layer's PNM request on the node (host software); the link's round
    trip is added from the link description."""
    t_dev_us: float = _num(DURATION_US)
    """Incremental cost per device and layer (its CXL transfers)."""
    t_host_us: float = _num(DURATION_US)
    """Host dispatch and aggregation per layer, only with more than one device."""
    bw_eff_gbs: float | None = _num(RATE, None)
    """Effective read bandwidth of one device under sparse random cluster reads (BW_PNM^eff),
    GB/s; None (with a ``device``): measured on the device's cycle model at the latency
    model's workload point (``measured``)."""
    capacity_gb: float | None = _num(RATE, None)
    """KV capacity of one device, GB; None (with a ``device``): the device's memory."""
    device: dict[str, Any] | None = field(default=None, compare=False)
    """The device: ``units``, ``ddr5`` (a speed grade), ``ddr5_overrides``, ``subchannels``
    (``description.PnmDevice``); what the bandwidth is measured on and `node up` boots."""
    bw_source: str | None = field(default=None, compare=False)
    """Where ``bw_eff_gbs`` comes from (a measurement's provenance)."""

    def __post_init__(self) -> None:
        _check(self)
        if self.device is not None:
            try:
                dev = pnm_device(self.device)
            except DescriptionError as e:
                raise HardwareError(f"PnmHw {self.name!r}: {e}") from None
            object.__setattr__(self, "device", dev.model_dump())
            if self.capacity_gb is None:
                object.__setattr__(self, "capacity_gb",
                                   round(dev.device_config().mem_bytes / 1e9, 2))
        for name in ("bw_eff_gbs", "capacity_gb"):
            if getattr(self, name) is None and self.device is None:
                raise HardwareError(f"PnmHw {self.name!r}: missing field {name!r} (or a "
                                    "'device' to derive it from)")
        if self.bw_source is not None and not isinstance(self.bw_source, str):
            raise HardwareError(f"PnmHw {self.name!r}: bw_source must be a string")

    @property
    def measured(self) -> bool:
        """Whether the bandwidth is left to a measurement on the device."""
        return self.bw_eff_gbs is None

    def device_config(self):
        """The device as the model device's DeviceConfig (None without a device)."""
        return None if self.device is None else pnm_device(self.device).device_config()


@dataclass(frozen=True)
class LinkHw:
    """The GPU node <-> PNM node link."""

    name: str
    """Preset name."""
    gbps: float = _num(RATE)
    """Line rate, Gb/s."""
    latency_us: float = _num(DURATION_US)
    """One-way base latency."""

    def __post_init__(self) -> None:
        _check(self)

    @classmethod
    def of(cls, spec: LinkSpec) -> LinkHw:
        """The latency model's view of an emulated link technology."""
        return cls(spec.name, gbps=spec.bandwidth_gbps, latency_us=spec.latency_ns / 1000)


@dataclass(frozen=True)
class EnergyHw:
    """Energy figures beyond the GPU's (``GpuHw`` holds its power model): the PNM engine's
    operations and buffer, the DDR5 reads as one average (a run with counted DDR5 commands
    replaces it: ``emu/energy.py``), the links per bit, the PNM node's host and devices.
    ``sources`` names where each figure comes from (every field needs one; estimates say
    so)."""

    name: str
    """Entry name (``default``: the one the reports use; a file's ``default`` replaces it)."""
    engine_pj_fp32_add: float = _num(ENERGY_PJ)
    """One fp32 add of the engine (score tree, running sums), pJ."""
    engine_pj_fp32_mul: float = _num(ENERGY_PJ)
    """One fp32 multiply (p_j * v_j, rescales), pJ."""
    engine_pj_bf16_mul: float = _num(ENERGY_PJ)
    """One bf16 product (q * k), pJ."""
    engine_pj_exp2: float = _num(ENERGY_PJ)
    """One exp2 of the piecewise-quadratic function unit, pJ."""
    engine_pj_log2: float = _num(ENERGY_PJ)
    """One log2, pJ."""
    engine_pj_recip: float = _num(ENERGY_PJ)
    """One reciprocal, pJ."""
    engine_pj_sram_byte: float = _num(ENERGY_PJ)
    """One KV byte buffered by the engine (written to and read from its SRAM), pJ."""
    ddr5_pj_per_byte: float = _num(ENERGY_PJ)
    """DDR5 energy per byte read, an average over a device's traffic (commands, I/O), pJ."""
    ddr5_background_w: float = _num(ENERGY_PJ)
    """DDR5 background power of one device's memory (standby, refresh), W."""
    cxl_pj_per_bit: float = _num(ENERGY_PJ)
    """One bit over the CXL link between the PNM node's host and a device, pJ."""
    roce_pj_per_bit: float = _num(ENERGY_PJ)
    """One bit over the RoCE link between a GPU node and a PNM node, pJ."""
    pnm_host_w: float = _num(POWER_W)
    """The PNM node's host (CPU, memory, NIC, fans) while it serves, W."""
    pnm_device_static_w: float = _num(ENERGY_PJ)
    """One PNM device's static power beyond its DDR5 (CXL controller, engine clocks and
    leakage), W."""
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Where each figure comes from, by field name."""

    def __post_init__(self) -> None:
        _check(self)
        if not isinstance(self.sources, dict):
            raise HardwareError(f"EnergyHw {self.name!r}: sources must be an object of field: "
                                f"source, got {type(self.sources).__name__}")
        figures = [f.name for f in fields(self) if f.name not in ("name", "sources")]
        for key, text in self.sources.items():
            if key not in figures:
                raise HardwareError(f"EnergyHw {self.name!r}: sources: unknown field {key!r} "
                                    f"(known: {', '.join(figures)})")
            if not isinstance(text, str) or not text.strip():
                raise HardwareError(f"EnergyHw {self.name!r}: sources.{key} must be a "
                                    f"non-empty string, got {text!r}")
        missing = [k for k in figures if k not in self.sources]
        if missing:
            raise HardwareError(f"EnergyHw {self.name!r}: sources: no source for {missing[0]!r} "
                                "(every figure names where it comes from)")


BOARD_FAMILIES = {"xcup": "AMD UltraScale+ (synth_xilinx -family xcup)",
                  "ecp5": "Lattice ECP5 (synth_ecp5, nextpnr-ecp5)"}
"""FPGA families a board may hold: the synthesis the project runs for each."""
RESOURCE = Num("a positive integer", integer=True, lo=1, most=1 << 40)
CLOCK_MHZ = Num("a positive number", lo=0, lo_open=True, most=2000)


@dataclass(frozen=True)
class BoardHw:
    """A PCIe FPGA board the FPGA top (rtl/top/nelssa_fpga_top.sv) can be built for: its part's
    resources and its memory. ``nelssa fpga plan --board NAME`` sizes the device for it
    (hw/fpga/plan.py); every figure names its source in ``source``."""

    name: str
    """Preset name (the manifest's ``board``)."""
    part: str
    """FPGA part number, as the vendor flow takes it."""
    family: str
    """Synthesis family (``BOARD_FAMILIES``)."""
    luts: int = _num(RESOURCE)
    """Look-up tables of the part (LUT6 on UltraScale+, LUT4 on ECP5)."""
    ffs: int = _num(RESOURCE)
    """Flip-flops (registers)."""
    dsps: int = _num(RESOURCE)
    """DSP slices (DSP48E2) or 18x18 multipliers (ECP5)."""
    bram_kbit: int = _num(RESOURCE)
    """Block RAM, kbit (UltraRAM not counted)."""
    memory: str
    """The board's device memory, e.g. ``HBM2`` or ``DDR4-2400``."""
    mem_channels: int = _num(COUNT)
    """Memory channels the FPGA top drives (its NumChannels: 1, 2, 4 or 8)."""
    mem_gbs: float = _num(RATE)
    """Peak bandwidth of all those channels together, GB/s."""
    mem_gb: float = _num(RATE)
    """Device memory, GB."""
    pcie: str
    """The PCIe link the board's edge connector and the part give, e.g. ``Gen3 x16``."""
    clock_mhz: float = _num(CLOCK_MHZ)
    """Core clock the plan sizes for: the P&R's achieved clock where one ran here (ECP5), else
    a target no timing run here has checked (``clock_source`` says which)."""
    clock_source: str
    """Where ``clock_mhz`` comes from."""
    source: str
    """Where the part's and the memory's figures come from (data sheets by number)."""
    fp_latency_source: str
    """Where ``fp_latency`` comes from (a timing run, or why none)."""
    fp_latency: dict[str, int] = field(default_factory=dict)
    """Cycles of each kind of the engines' arithmetic units at ``clock_mhz`` (the engine's
    *Latency parameters: bf16_mul, add, mul, exp2, log2, recip; omitted: 0, combinational);
    the engines' cycles follow them (hw/model/engine_cycles.py)."""
    compute_lanes: int = 32
    """Lanes of a beat each engine computes a cycle (the engine's ComputeLanes: 1, 2, 4, ...,
    32; 32, a beat a cycle, unless the part holds no full-width engine): the lanes ``nelssa
    fpga plan`` chooses for the board (hw/fpga/plan.py, tests/test_fpga_boards.py holds the
    two equal)."""
    compute_lanes_source: str = "a beat a cycle: the full-width engine"
    """Where ``compute_lanes`` comes from."""

    def __post_init__(self) -> None:
        _check(self)
        try:
            fp_latency(self.fp_latency)
        except (TypeError, ValueError) as e:
            raise HardwareError(f"BoardHw {self.name!r}: fp_latency: {e}") from None
        if self.family not in BOARD_FAMILIES:
            raise HardwareError(f"BoardHw {self.name!r}: family {self.family!r}; known: "
                                f"{', '.join(BOARD_FAMILIES)}")
        from nelssa.hw.model.engine import COMPUTE_LANES

        if isinstance(self.compute_lanes, bool) or self.compute_lanes not in COMPUTE_LANES:
            raise HardwareError(f"BoardHw {self.name!r}: compute_lanes must be one of "
                                f"{COMPUTE_LANES}, got {self.compute_lanes!r}")
        if self.mem_channels not in (1, 2, 4, 8):
            raise HardwareError(f"BoardHw {self.name!r}: mem_channels must be 1, 2, 4 or 8 "
                                f"(the FPGA top's NumChannels), got {self.mem_channels}")
        for name in ("part", "memory", "pcie", "clock_source", "source", "fp_latency_source",
                     "compute_lanes_source"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise HardwareError(f"BoardHw {self.name!r}: {name} must be a non-empty "
                                    "string")


def measured_pnm(pnm: PnmHw, selection: float, cluster_tokens: float, group: int,
                 head_dim: int) -> PnmHw:
    """``pnm`` with the bandwidth its device's cycle model measures at the workload point
    (``selection`` of clusters of ``cluster_tokens`` tokens, ``group`` query heads per KV head
    of ``head_dim``), and that measurement's provenance (cached: hw/model/bandwidth.py)."""
    from nelssa.hw.model.bandwidth import Workload, measure

    w = Workload(selection=selection, cluster_tokens=max(2, round(cluster_tokens)),
                 q_heads=max(1, min(group, 8)), head_dim=head_dim if head_dim in (64, 128)
                 else 128)
    m = measure(pnm.device_config(), w)
    return replace(pnm, bw_eff_gbs=round(m.gbs, 2), bw_source=m.provenance())


def link_presets() -> dict[str, LinkHw]:
    """The GPU node <-> PNM node links of the link layer's table."""
    return {name: LinkHw.of(LINK_PRESETS[name]) for name in GPU_PNM_LINKS}


@dataclass(frozen=True)
class ModelHw:
    """What the latency model needs of an LLM."""

    name: str
    """Preset name."""
    layers: int = _num(COUNT)
    """Decoder layers."""
    kv_heads: int = _num(COUNT)
    """KV heads."""
    q_heads: int = _num(COUNT)
    """Query heads."""
    head_dim: int = _num(COUNT)
    """Head width."""
    params_b: float = _num(PARAMS_B)
    """Parameters in billions (bf16 weights are read once per decode step)."""
    max_context: int = _num(CONTEXT)
    """Longest context the model takes."""
    embedding_b: float = _num(EMBED_B, 0.0)
    """Of ``params_b``, the input embedding's (billions): a decode step gathers one row of it
    per token instead of reading it whole (the output head is read whole, tied or not)."""
    hf: dict[str, Any] | None = field(default=None, compare=False)
    """The shape as a Hugging Face ``config.json`` dictionary (``description.ModelShape``),
    for the decoder's random weights; None for an entry of the fields above only."""

    def __post_init__(self) -> None:
        _check(self)
        if self.embedding_b >= self.params_b:
            raise HardwareError(f"ModelHw {self.name!r}: embedding_b ({self.embedding_b}) must "
                                f"be below params_b ({self.params_b})")
        if self.q_heads % self.kv_heads:
            raise HardwareError(f"ModelHw {self.name!r}: q_heads ({self.q_heads}) must be a "
                                f"multiple of kv_heads ({self.kv_heads})")

    @property
    def kv_bytes_per_token(self) -> int:
        """M_kv: K and V of every layer in bf16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def weight_bytes(self) -> float:
        """bf16 weights a decode step reads: every parameter but the input embedding's."""
        return (self.params_b - self.embedding_b) * 1e9 * 2

    @property
    def resident_bytes(self) -> float:
        """bf16 weights the GPU holds: every parameter."""
        return self.params_b * 1e9 * 2


def _build(cls: type[T], name: str, raw: Any, where: str) -> T:
    if not isinstance(raw, dict):
        raise HardwareError(f"{where}: {name} must be an object, got {type(raw).__name__}")
    spec = {f.name: f for f in fields(cls) if f.name != "name"}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise HardwareError(f"{where}: {name}: unknown field {unknown[0]!r} (known: "
                            f"{', '.join(spec)})")
    need = [n for n, f in spec.items() if f.default is MISSING]
    if "device" not in raw:
        need = [*getattr(cls, "NEED_WITHOUT_DEVICE", ()), *need]
    missing = [n for n in need if n not in raw]
    if missing:
        raise HardwareError(f"{where}: {name}: missing field {missing[0]!r}")
    try:
        return cls(name=name, **raw)
    except ValueError as e:
        raise HardwareError(f"{where}: {name}: {e}") from None


def model_of_shape(name: str, shape: ModelShape, layers: int | None = None,
                   vocab_size: int | None = None, **latency: Any) -> ModelHw:
    """A model entry from a shape: ``layers`` and ``vocab_size`` cut it; ``latency`` (params_b,
    embedding_b, max_context) replaces what the shape gives."""
    cut = {k: v for k, v in (("num_hidden_layers", layers), ("vocab_size", vocab_size))
           if v is not None}
    for key, value in cut.items():
        if value > getattr(shape, key):
            raise ValueError(f"{'layers' if key == 'num_hidden_layers' else key} {value}: "
                             f"the shape has {getattr(shape, key)} (a cut keeps fewer)")
    if cut:
        shape = ModelShape(**{**shape.model_dump(by_alias=True), **cut})
    given = {k: v for k, v in latency.items() if v is not None}
    m = ModelHw(name, layers=shape.num_hidden_layers, kv_heads=shape.kv_heads,
                q_heads=shape.num_attention_heads, head_dim=shape.dim,
                params_b=given.get("params_b", shape.params / 1e9),
                max_context=given.get("max_context", shape.max_position_embeddings),
                embedding_b=given.get("embedding_b",
                                      shape.vocab_size * shape.hidden_size / 1e9),
                hf=shape.hf())
    return m


def _build_model(name: str, raw: Any, where: str, models: dict[str, ModelHw],
                 base: Path) -> ModelHw:
    """A model entry: the latency model's fields (``_build``), or a shape (ModelEntry)."""
    if not isinstance(raw, dict) or not any(k in raw for k in SHAPE_KEYS):
        return _build(ModelHw, name, raw, where)
    try:
        e = validated(ModelEntry, raw, "", name)
        if e.config is not None:
            shape, _ = read_config(e.config, base)
        elif e.hf is not None:
            shape = shape_of(e.hf, "hf")
        else:
            other = models.get(e.preset or "")
            if other is None or other.hf is None:
                shaped = sorted(n for n, m in models.items() if m.hf)
                raise DescriptionError(f"preset: {e.preset!r} is not a model entry with a "
                                       f"shape (those: {', '.join(shaped)})")
            shape = shape_of(other.hf, e.preset or "")
            if e.layers is None and e.vocab_size is None:  # the other entry's own figures
                return ModelHw(name, **{f.name: getattr(other, f.name) for f in fields(other)
                                        if f.name != "name"})
        return model_of_shape(name, shape, e.layers, e.vocab_size, params_b=e.params_b,
                              embedding_b=e.embedding_b, max_context=e.max_context)
    except (DescriptionError, ValueError) as err:
        raise HardwareError(f"{where}: {name}: {err}") from None


def _read(p: Path) -> dict[str, Any]:
    """One hardware file's top-level object."""
    try:
        raw = read_document(p)
    except DescriptionError as e:
        raise HardwareError(str(e)) from None
    if not isinstance(raw, dict):
        raise HardwareError(f"hardware file {p}: the top level must be an object, got "
                            f"{type(raw).__name__}")
    return raw


SECTIONS = {"gpus": "gpu", "pnm": "pnm", "models": "model", "links": "link"}
"""Each section of entries and the ``use`` field (and option) that picks one of them."""


@dataclass(frozen=True)
class HardwareCatalog:
    gpus: dict[str, GpuHw]
    pnm: dict[str, PnmHw]
    links: dict[str, LinkHw]
    models: dict[str, ModelHw]
    use: dict[str, str] = field(default_factory=dict)
    """What the files' ``use`` sections pick, by section (``gpus``: a GPU entry, ...)."""
    fleet: Any = None
    """The last file's ``fleet`` section (``fleet_description.FleetSpec``), if any."""
    energy: dict[str, EnergyHw] = field(default_factory=dict)
    """The ``energy`` section's entries (``DEFAULT_ENERGY``: what the reports use)."""
    boards: dict[str, BoardHw] = field(default_factory=dict)
    """FPGA boards (``nelssa fpga plan``)."""

    @classmethod
    def load(cls, *paths: str | Path) -> HardwareCatalog:
        """The presets, then each file in turn (later entries override earlier ones); a file
        that cannot be used raises HardwareError naming it and the entry and field."""
        kinds = {"gpus": GpuHw, "pnm": PnmHw, "links": LinkHw, "models": ModelHw,
                 "energy": EnergyHw, "boards": BoardHw}
        sections: dict[str, dict[str, Any]] = {k: {} for k in kinds}
        sections["links"].update(link_presets())
        use: dict[str, str] = {}
        fleet = None
        for path in (PRESETS_FILE, *paths):
            p = Path(path)
            raw = _read(p)
            for key in raw:
                if key not in sections and key not in ("use", "fleet"):
                    raise HardwareError(f"hardware file {p}: unknown section {key!r} (known: "
                                        f"{', '.join(sections)}, use, fleet)")
            if "fleet" in raw:
                from nelssa.emu.latency.fleet_description import fleet_spec

                try:
                    fleet = fleet_spec(raw["fleet"], str(p))
                except DescriptionError as e:
                    raise HardwareError(str(e)) from None
            for key, kind in kinds.items():
                entries = raw.get(key, {})
                if not isinstance(entries, dict):
                    raise HardwareError(f"hardware file {p}: section {key!r} must be an object "
                                        f"of named entries, got {type(entries).__name__}")
                for name, entry in entries.items():
                    where = f"{p} [{key}]"
                    sections[key][name] = (_build_model(name, entry, where, sections[key],
                                                        p.parent) if kind is ModelHw
                                           else _build(kind, name, entry, where))
            if "use" in raw:
                chosen = selection(raw["use"], str(p)).model_dump()
                for section, key in SECTIONS.items():
                    name = chosen[key]
                    if name is None:
                        continue
                    if name not in sections[section]:
                        raise HardwareError(f"hardware file {p} [use]: {key}: unknown "
                                            f"{key} {name!r}; choose one of "
                                            f"{sorted(sections[section])}")
                    use[section] = name
        return cls(**sections, use=use, fleet=fleet)

    def chosen(self, section: str, name: str | None, default: str) -> Any:
        """The entry an option names (``name``), else the one ``use`` picks, else
        ``default``."""
        return self.get(section, name or self.use.get(section, default))

    def get(self, section: str, name: str) -> Any:
        table = getattr(self, section)
        if name not in table:
            raise HardwareError(f"unknown {section[:-1] if section.endswith('s') else section} "
                                f"{name!r}; choose one of {sorted(table)}")
        return table[name]
