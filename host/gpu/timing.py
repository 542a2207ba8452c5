"""Emulated GPU time of the co-simulation (DESIGN.md: Time accounting), from the same GPU
description the latency model and the serving emulator read (``emu/latency/hardware.json``,
``GpuHw``): an operation takes the longer of its bytes over the achieved HBM bandwidth
(``hbm_gbs * mem_efficiency``) and its FLOPs over the linear layers' achieved rate
(``bf16_tflops * linear_efficiency``); a decode step adds ``kernel_us`` once (launches,
sampling). Weights and KV are counted in bf16, as a serving GPU holds them (the emulator
computes in float32 on the CPU, which says nothing about GPU time)."""

from __future__ import annotations

from dataclasses import dataclass

from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog

GPUS: dict[str, GpuHw] = dict(HardwareCatalog.load().gpus)
"""The GPUs the co-simulation knows by name: the hardware description's presets, and those
of the files a command read (``register``)."""


def register(catalog: HardwareCatalog) -> None:
    """Make the GPUs of ``catalog`` (the presets and a command's --hardware files) known by
    name, a file's entry replacing a preset of the same name."""
    GPUS.update(catalog.gpus)


@dataclass(frozen=True)
class GpuTiming:
    """The roofline of one GPU description (a GPU, or a tensor-parallel group as one)."""

    hw: GpuHw

    @property
    def name(self) -> str:
        return self.hw.name

    def op_ps(self, nbytes: float, flops: float = 0.0) -> int:
        """Emulated picoseconds of one operation."""
        g = self.hw
        mem = nbytes / (g.hbm_gbs * 1e9 * g.mem_efficiency)
        compute = flops / (g.bf16_tflops * 1e12 * g.linear_efficiency)
        return round(max(mem, compute) * 1e12)

    @property
    def step_overhead_ps(self) -> int:
        """What a decode step costs beyond its operations (``GpuHw.kernel_us``)."""
        return round(self.hw.kernel_us * 1e6)


def gpu_preset(name: str, catalog: HardwareCatalog | None = None) -> GpuTiming:
    """The timing of a GPU of the hardware description (its presets unless ``catalog``)."""
    gpus = GPUS if catalog is None else catalog.gpus
    try:
        return GpuTiming(gpus[name])
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}; choose one of {sorted(gpus)}") from None
