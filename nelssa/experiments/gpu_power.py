"""The GPU power model's fit (``GpuHw``: ``idle_w``, ``pj_per_flop``, ``pj_per_hbm_byte``,
``tdp_w``; ``emu/energy.py``) from NVML power samples: ``scripts/calibrate_gpu.py --power``.

The GPU runs loops of kernels of known work, each for a few seconds (idle; a large copy, its
bytes; square bf16 GEMMs of a few sizes, their FLOPs and operand bytes), while a thread samples
``nvmlDeviceGetPowerUsage``. Each loop gives one point (FLOP/s, byte/s, mean watts); the model
``P = idle_w + pj_per_flop * FLOP/s + pj_per_hbm_byte * byte/s`` is fitted to the points by
least squares, leaving out points at the power limit (there the GPU slows its clocks and the
model's cap applies, not its slope). ``tdp_w`` is NVML's enforced power limit. pynvml is
optional (``pip install nvidia-ml-py``); without it, or without a GPU, ``--power`` says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PowerFit", "PowerPoint", "fit_power", "measure_power"]

AT_LIMIT = 0.97
"""A point drawing this share of the power limit or more is left out of the fit."""


@dataclass(frozen=True)
class PowerPoint:
    """One loop of kernels: its rates and the mean power sampled while it ran."""

    what: str
    flops_per_s: float
    bytes_per_s: float
    watts: float


@dataclass(frozen=True)
class PowerFit:
    idle_w: float
    pj_per_flop: float
    pj_per_hbm_byte: float
    used: int
    """Points the fit used (those below the limit)."""
    rms_w: float
    """Root-mean-square residual over those points, W."""


def fit_power(points: Sequence[PowerPoint], tdp_w: float) -> PowerFit:
    """Least-squares ``idle_w``, ``pj_per_flop``, ``pj_per_hbm_byte`` over the points below
    ``AT_LIMIT`` of ``tdp_w``; ValueError with fewer than three such points, or points that do
    not tell FLOPs from bytes apart (a singular fit)."""
    use = [p for p in points if p.watts < AT_LIMIT * tdp_w]
    if len(use) < 3:
        raise ValueError(f"{len(use)} power points below {AT_LIMIT:.0%} of the {tdp_w:g} W "
                         "limit: the fit needs at least 3 (idle, bytes, FLOPs)")
    a = np.array([[1.0, p.flops_per_s * 1e-12, p.bytes_per_s * 1e-12] for p in use])
    y = np.array([p.watts for p in use])
    coef, _, rank, _ = np.linalg.lstsq(a, y, rcond=None)
    if rank < 3:
        raise ValueError("the power points do not separate idle, FLOPs and bytes (rank "
                         f"{rank}): run kernels of different FLOPs per byte")
    resid = y - a @ coef
    idle, pj_flop, pj_byte = (float(c) for c in coef)
    return PowerFit(idle_w=idle, pj_per_flop=pj_flop, pj_per_hbm_byte=pj_byte, used=len(use),
                    rms_w=float(np.sqrt(np.mean(resid ** 2))))


def _sampled(handle: Any, nvml: Any, body: Callable[[], tuple[float, float]],
             period_s: float = 0.02) -> tuple[float, float, float]:
    """Run ``body`` (it returns its FLOPs and bytes) while sampling the power every
    ``period_s``: (FLOPs, bytes, mean watts over the samples, the first quarter dropped as
    the ramp)."""
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
            time.sleep(period_s)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        flops, nbytes = body()
    finally:
        stop.set()
        t.join()
    kept = samples[len(samples) // 4:] or samples
    return flops, nbytes, float(np.mean(kept)) if kept else float("nan")


def measure_power(seconds: float = 3.0, index: int = 0) -> tuple[list[PowerPoint], float, str]:
    """The points on CUDA device ``index`` and its enforced power limit (W) and NVML's name;
    RuntimeError where pynvml or the GPU is missing."""
    try:
        import pynvml as nvml  # optional: nvidia-ml-py
    except ImportError:
        raise RuntimeError("--power needs pynvml (pip install nvidia-ml-py)") from None
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("--power needs a CUDA GPU")
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        tdp = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
        name = nvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        dev = torch.device("cuda", index)

        def loop(step: Callable[[], None], flops: float, nbytes: float
                 ) -> Callable[[], tuple[float, float]]:
            def body() -> tuple[float, float]:
                step()
                torch.cuda.synchronize(dev)
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    for _ in range(8):
                        step()
                    torch.cuda.synchronize(dev)
                    n += 8
                dt = time.perf_counter() - t0
                return flops * n / dt, nbytes * n / dt
            return body

        points = []
        f, b, w = _sampled(handle, nvml, lambda: (time.sleep(seconds), (0.0, 0.0))[1])
        points.append(PowerPoint("idle", f, b, w))
        a = torch.ones(256 << 20, dtype=torch.float32, device=dev)  # 1 GiB each
        c = torch.empty_like(a)
        f, b, w = _sampled(handle, nvml, loop(lambda: c.copy_(a), 0.0, 2 * a.numel() * 4))
        points.append(PowerPoint("copy 1 GiB", f, b, w))
        for m in (1024, 2048, 4096, 8192):
            x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
            y = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
            f, b, w = _sampled(handle, nvml, loop(lambda x=x, y=y: x @ y, 2 * m ** 3,
                                                  3 * m * m * 2))
            points.append(PowerPoint(f"GEMM {m}^3", f, b, w))
        return points, tdp, name
    finally:
        nvml.nvmlShutdown()
