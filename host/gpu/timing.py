"""Emulated GPU time from a roofline model (DESIGN.md: Time accounting): an operation takes the
longer of its bytes over HBM bandwidth and its FLOPs over peak, plus a fixed kernel overhead.
Weights and KV are counted in bf16, as a serving GPU holds them (the emulator computes in float32
on the CPU, which says nothing about GPU time)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    """One GPU (or a tensor-parallel group, as one)."""

    name: str
    """Preset name."""
    hbm_gbs: float
    """HBM bandwidth, GB/s."""
    bf16_tflops: float
    """Dense bf16 peak, TFLOP/s."""
    memory_gb: float
    """HBM capacity, GB."""
    kernel_us: float = 2.0
    """Fixed cost per operation (launch, synchronisation), microseconds."""

    def __post_init__(self) -> None:
        if min(self.hbm_gbs, self.bf16_tflops, self.memory_gb) <= 0 or self.kernel_us < 0:
            raise ValueError(f"GPU {self.name}: bandwidth, peak and memory must be > 0 and the "
                             "kernel overhead >= 0")

    def op_ps(self, nbytes: float, flops: float = 0.0, kernels: int = 1) -> int:
        """Emulated picoseconds of an operation."""
        mem = nbytes / (self.hbm_gbs * 1e9)
        compute = flops / (self.bf16_tflops * 1e12)
        return round((max(mem, compute) + kernels * self.kernel_us * 1e-6) * 1e12)


GPUS: dict[str, GpuSpec] = {
    "h100-nvl": GpuSpec("h100-nvl", 3900.0, 835.0, 94.0),
    "2x-h100-nvl": GpuSpec("2x-h100-nvl", 7800.0, 1670.0, 188.0),
    "h200": GpuSpec("h200", 4800.0, 989.0, 141.0),
}
"""H100 NVL: 94 GB, 3.9 TB/s; H200: 141 GB, 4.8 TB/s (DESIGN.md); dense bf16 peaks."""


def gpu_preset(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}; choose one of {sorted(GPUS)}") from None
