"""Energy of what a run did, by component: the one place the co-simulation (``nelssa decode``)
and the serving emulator (``serve-sim``, the fleet) turn work into joules.

Figures come from the hardware description (``emu/latency/hardware.json``): the GPU's power
model on its entry (``GpuHw``: idle power, energy per FLOP and per HBM byte, the power limit),
everything else on the ``energy`` entry (``EnergyHw``: the PNM engine's operations and buffer,
DDR5, the CXL and RoCE links per bit, the PNM node's host and devices).

GPU: ``P(t) = idle_w + pj_per_flop * FLOP/s + pj_per_hbm_byte * byte/s``, the part above idle
capped at ``tdp_w - idle_w`` over the time the GPU is busy (a GPU at its power limit slows its
clocks, so its energy per operation does not exceed the limit's). The co-simulation applies the
cap step by step; the serving emulator over its busy time in all.

DDR5: the average ``ddr5_pj_per_byte`` per byte read plus ``ddr5_background_w`` per device,
unless the run counted its DDR5 commands, whose energy then replaces both (``pnm_split``'s
``ddr5_counted_j``: the one place where it does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from nelssa.emu.latency.hardware import DEFAULT_ENERGY, EnergyHw, GpuHw, HardwareCatalog

__all__ = ["EnergyError", "EnergySplit", "EngineOps", "TierEnergy", "check_power", "energy_entry",
           "gpu_split", "pnm_split"]

PJ = 1e-12


class EnergyError(ValueError):
    """Energy asked of a description that lacks the figures; the message names them."""


def energy_entry(catalog: HardwareCatalog, name: str = DEFAULT_ENERGY) -> EnergyHw:
    """The catalog's energy entry ``name``."""
    if name not in catalog.energy:
        raise EnergyError(f"no energy entry {name!r} in the hardware description (entries: "
                          f"{', '.join(sorted(catalog.energy)) or 'none'})")
    return catalog.energy[name]


def check_power(gpu: GpuHw) -> tuple[float, float, float, float]:
    """The GPU's power figures (tdp_w, idle_w, pj_per_flop, pj_per_hbm_byte), or EnergyError
    naming them where its entry lacks them."""
    if not gpu.has_power:
        raise EnergyError(f"GPU {gpu.name!r} has no power figures (tdp_w, idle_w, pj_per_flop, "
                          "pj_per_hbm_byte) in the hardware description: add them to its "
                          "entry to report energy")
    return gpu.tdp_w, gpu.idle_w, gpu.pj_per_flop, gpu.pj_per_hbm_byte  # type: ignore[return-value]


@dataclass(frozen=True)
class EnergySplit:
    """Joules by component (the paper's Figure-11 breakdown, in energy)."""

    gpu_compute_j: float = 0.0
    """GPU FLOPs above idle."""
    gpu_memory_j: float = 0.0
    """GPU HBM bytes above idle."""
    gpu_idle_j: float = 0.0
    """The GPUs' idle power over the run."""
    pnm_engine_j: float = 0.0
    """The PNM engines' arithmetic and buffer."""
    ddr5_j: float = 0.0
    """The devices' DDR5: reads and background, or their counted commands."""
    cxl_j: float = 0.0
    """Bits between the PNM node's host and its devices."""
    roce_j: float = 0.0
    """Bits between GPU nodes and PNM nodes."""
    pnm_static_j: float = 0.0
    """The PNM nodes' hosts and the devices' static power."""

    @property
    def total_j(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def __add__(self, other: EnergySplit) -> EnergySplit:
        return EnergySplit(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                              for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def figure11(self) -> dict[str, float]:
        """The split as the reports show it: GPU compute, GPU memory, PNM engine, DDR5, links,
        idle (the GPUs' idle power and the PNM nodes' static power)."""
        return {"GPU compute": self.gpu_compute_j, "GPU memory": self.gpu_memory_j,
                "PNM engine": self.pnm_engine_j, "DDR5": self.ddr5_j,
                "links": self.cxl_j + self.roce_j,
                "idle": self.gpu_idle_j + self.pnm_static_j}


def gpu_split(gpu: GpuHw, wall_s: float, busy_s: float, flops: float, hbm_bytes: float,
              count: int = 1) -> EnergySplit:
    """``count`` GPUs alike over ``wall_s``, busy ``busy_s`` in all (summed over them), doing
    ``flops`` and moving ``hbm_bytes`` in all: idle power throughout, the work's energy above
    it, capped at the power limit over the busy time."""
    tdp, idle, pj_flop, pj_byte = check_power(gpu)
    compute, memory = flops * pj_flop * PJ, hbm_bytes * pj_byte * PJ
    cap = (tdp - idle) * busy_s
    if compute + memory > cap:  # at its limit the GPU slows rather than draws more
        scale = cap / (compute + memory)
        compute, memory = compute * scale, memory * scale
    return EnergySplit(gpu_compute_j=compute, gpu_memory_j=memory,
                       gpu_idle_j=idle * wall_s * count)


@dataclass(frozen=True)
class EngineOps:
    """The PNM engines' operations, in the RTL's order (``hw/model/engine.py``): per KV token
    and query head ``head_dim`` bf16 products, their fp32 sum, the scale, ``exp2(t - m)``,
    ``O += p * v`` and ``l += p``; per cluster and query head the rescale by ``alpha``; per
    command and query head ``O *= recip(l)`` and ``LSE = (m + log2(l)) * ln 2``."""

    bf16_mul: float = 0.0
    fp32_mul: float = 0.0
    fp32_add: float = 0.0
    exp2: float = 0.0
    log2: float = 0.0
    recip: float = 0.0
    sram_bytes: float = 0.0
    """KV bytes buffered (each read from DDR5 once)."""

    @classmethod
    def of(cls, head_tokens: float, head_clusters: float, head_commands: float, group: int,
           head_dim: int, kv_bytes: float) -> EngineOps:
        """Operations of reading ``head_tokens`` (KV head x token pairs) in ``head_clusters``
        clusters over ``head_commands`` commands (KV head x layer x request), ``group``
        query heads per KV head of width ``head_dim``."""
        d = head_dim
        tok, clu, cmd = head_tokens * group, head_clusters * group, head_commands * group
        return cls(bf16_mul=tok * d,
                   fp32_mul=tok * (d + 1) + clu * (d + 1) + cmd * (d + 1),
                   fp32_add=tok * (2 * d + 2) + clu + cmd,
                   exp2=tok + clu, log2=cmd, recip=cmd, sram_bytes=kv_bytes)

    def __add__(self, other: EngineOps) -> EngineOps:
        return EngineOps(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                            for f in fields(self)})

    def energy_j(self, e: EnergyHw) -> float:
        return PJ * (self.bf16_mul * e.engine_pj_bf16_mul + self.fp32_mul * e.engine_pj_fp32_mul
                     + self.fp32_add * e.engine_pj_fp32_add + self.exp2 * e.engine_pj_exp2
                     + self.log2 * e.engine_pj_log2 + self.recip * e.engine_pj_recip
                     + self.sram_bytes * e.engine_pj_sram_byte)


def pnm_split(e: EnergyHw, wall_s: float, ops: EngineOps, ddr5_bytes: float, devices: int,
              nodes: int, cxl_bytes: float, roce_bytes: float,
              ddr5_counted_j: float | None = None) -> EnergySplit:
    """The PNM tier over ``wall_s``: ``nodes`` hosts and ``devices`` devices in all, the
    engines' ``ops``, ``ddr5_bytes`` read, the bytes over each link. ``ddr5_counted_j``: the
    DDR5 energy of the run's counted commands and state residencies, which replaces the
    average (per byte read and background) where a run has counts."""
    ddr5 = (ddr5_counted_j if ddr5_counted_j is not None
            else ddr5_bytes * e.ddr5_pj_per_byte * PJ + e.ddr5_background_w * devices * wall_s)
    return EnergySplit(
        pnm_engine_j=ops.energy_j(e), ddr5_j=ddr5,
        cxl_j=cxl_bytes * 8 * e.cxl_pj_per_bit * PJ,
        roce_j=roce_bytes * 8 * e.roce_pj_per_bit * PJ,
        pnm_static_j=(e.pnm_host_w * nodes + e.pnm_device_static_w * devices) * wall_s)


@dataclass(frozen=True)
class TierEnergy:
    """A serving run's energy by tier, as plain figures: the decode GPUs, the prefill GPUs
    (disaggregated prefill; 0 with colocated prefill) and the PNM nodes (their hosts, devices
    and the links to them), each tier's energy and average power over the run, and joules per
    output token. What a planner prices electricity from."""

    duration_s: float
    output_tokens: int
    decode_gpus: int
    decode_gpu_j: float
    decode_gpu_w: float
    prefill_gpus: int
    prefill_gpu_j: float
    prefill_gpu_w: float
    pnm_nodes: int
    pnm_devices: int
    pnm_node_j: float
    pnm_node_w: float
    total_j: float
    total_w: float
    j_per_output_token: float
    split: EnergySplit

    @classmethod
    def of(cls, duration_s: float, output_tokens: int, decode: tuple[int, EnergySplit],
           prefill: tuple[int, EnergySplit], pnm: tuple[int, int, EnergySplit]) -> TierEnergy:
        d, p, n = decode[1].total_j, prefill[1].total_j, pnm[2].total_j

        def watts(j: float) -> float:
            return j / duration_s if duration_s > 0 else 0.0

        total = d + p + n
        return cls(duration_s=duration_s, output_tokens=output_tokens,
                   decode_gpus=decode[0], decode_gpu_j=d, decode_gpu_w=watts(d),
                   prefill_gpus=prefill[0], prefill_gpu_j=p, prefill_gpu_w=watts(p),
                   pnm_nodes=pnm[0], pnm_devices=pnm[1], pnm_node_j=n, pnm_node_w=watts(n),
                   total_j=total, total_w=watts(total),
                   j_per_output_token=total / output_tokens if output_tokens else math.nan,
                   split=decode[1] + prefill[1] + pnm[2])

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)
                                if f.name != "split"}
        if not math.isfinite(self.j_per_output_token):
            d["j_per_output_token"] = None
        d["split_j"] = self.split.as_dict()
        d["figure11_j"] = self.split.figure11()
        return d
