"""Fit a GPU's parameters for the latency model from measured kernel times (PyTorch) and write a
hardware file (``{"gpus": {NAME: {...}}, "use": {"gpu": NAME}}``: a preset with the device's
name and the date, which every command given ``--hardware FILE`` takes as its GPU unless
``--gpu`` names another: `nelssa crossover`, `nelssa serve-sim`, `nelssa decode`).

It times kernels at the shapes of one decoder layer of the model (Llama-3-8B by default: hidden
4096, 32 query and 8 KV heads of 128, FFN 14336):

- the peaks: a large copy (read + write) for ``hbm_gbs`` and a large square bf16 GEMM for
  ``bf16_tflops``. ``--peak-hbm-gbs`` and ``--peak-tflops`` give the datasheet values instead,
  and the efficiencies are then shares of those; on a real GPU pass them, since the latency
  model multiplies the datasheet peaks by the efficiencies;
- ``linear_efficiency``: the layer's prefill GEMMs (fused QKV, O, fused gate+up, down) for a
  chunk of each of ``--chunks`` tokens;
- ``attn_efficiency``: causal ``scaled_dot_product_attention`` over prompts of those lengths
  (on CUDA the fastest of the cuDNN, flash and memory-efficient backends; FLOPs counted as the
  FlashAttention papers do, 4 * S^2 * head_dim * heads / 2);
- ``mem_efficiency``: a decode step's layer GEMMs at batch ``--decode-batch`` (they read the
  weights) and decode attention (one query token) over a KV cache of ``--context`` tokens.

Each efficiency is the least-squares fit, in relative error, of t = work / (peak * efficiency)
to the measured times, clipped to (0, 1]. ``kernel_us`` is written as GpuHw's default (not
measured). It runs on CUDA when present; without a GPU it measures the CPU, which checks the
procedure, not a GPU, at ``--scale`` 0.01 unless told (every GEMM dimension and prompt length
shrinks by scale^(1/3), the copy (at least 64 MB) and the KV cache by scale). On a GPU:

    .venv/bin/python scripts/calibrate_gpu.py --name h200-measured --out gpu-h200.json \
        --peak-tflops 989 --peak-hbm-gbs 4800

    .venv/bin/python scripts/calibrate_gpu.py [--name NAME] [--out FILE] [--memory-gb N]
        [--peak-tflops T] [--peak-hbm-gbs B] [--scale S] [--chunks 2048,4096,8192]
        [--context N] [--decode-batch N] [--reps N] [--device auto|cpu|cuda]
        [--hidden N] [--q-heads N] [--kv-heads N] [--head-dim N] [--ffn N]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from torch.nn.functional import linear, scaled_dot_product_attention

from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog

BF16 = torch.bfloat16
_PRESETS = HardwareCatalog.load().gpus
DATASHEETS = {**{part: (_PRESETS[name].bf16_tflops, _PRESETS[name].hbm_gbs)
                 for part, name in (("H200", "h200"), ("H100 NVL", "h100-nvl"))},
              "H100 80GB HBM3": (989, 3350), "H100 PCIe": (756, 2000)}
"""Dense bf16 TFLOP/s and HBM GB/s of some parts by the device name's ending, for a hint (the
parts with a preset from the hardware description)."""


@dataclass(frozen=True)
class Layer:
    """The shapes of one decoder layer (after --scale)."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    def linears(self) -> list[tuple[int, int]]:
        """(out, in) of the layer's GEMMs: fused QKV, O, fused gate+up, down."""
        q, kv = self.q_heads * self.head_dim, self.kv_heads * self.head_dim
        return [(q + 2 * kv, self.hidden), (self.hidden, q), (2 * self.ffn, self.hidden),
                (self.hidden, self.ffn)]


@dataclass(frozen=True)
class KernelTime:
    """One measurement: what was run, its work (FLOPs or bytes) and its time."""

    what: str
    work: float
    seconds: float

    @property
    def rate(self) -> float:
        return self.work / self.seconds


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Best of three runs of ``reps`` calls, after a warm-up call, in seconds per call."""
    fn()
    _sync(device)
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        _sync(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _dim(x: float, to: int = 16) -> int:
    return max(to, round(x / to) * to)


def _fit(points: list[KernelTime], peak: float) -> float:
    """Efficiency e minimising sum((t - work / (peak e)) / t)^2 over the points."""
    rates = [p.rate for p in points]
    return sum(r * r for r in rates) / (peak * sum(rates))


def measure_copy(device: torch.device, scale: float, reps: int) -> KernelTime:
    """Copy bandwidth (bytes read + written), buffers well beyond the caches."""
    n = int(max(64e6, 512e6 * scale)) // 4
    a = torch.ones(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    return KernelTime(f"copy {n * 4 / 1e6:.0f} MB", 2 * n * 4,
                      _time(lambda: b.copy_(a), device, reps))


def measure_square_gemm(device: torch.device, scale: float, reps: int) -> KernelTime:
    m = _dim(8192 * scale ** (1 / 3), 64)
    x = torch.randn(m, m, device=device, dtype=BF16)
    y = torch.randn(m, m, device=device, dtype=BF16)
    return KernelTime(f"GEMM {m}^3", 2 * m ** 3, _time(lambda: x @ y, device, reps))


def measure_linear(device: torch.device, layer: Layer, chunks: list[int],
                   reps: int) -> list[KernelTime]:
    """The layer's prefill GEMMs, one chunk of each length, timed together."""
    ws = [torch.randn(o, i, device=device, dtype=BF16) for o, i in layer.linears()]
    points = []
    for t in chunks:
        xs = [torch.randn(t, i, device=device, dtype=BF16) for _, i in layer.linears()]

        def run(xs: list[torch.Tensor] = xs) -> None:
            for x, w in zip(xs, ws, strict=True):
                linear(x, w)

        flops = sum(2 * t * o * i for o, i in layer.linears())
        points.append(KernelTime(f"prefill GEMMs, {t} tokens", flops, _time(run, device, reps)))
        del xs
    return points


def _sdpa_backends(device: torch.device) -> list[tuple[str, Callable[[], AbstractContextManager]]]:
    """(name, context manager factory) of the SDPA backends to try."""
    if device.type != "cuda":
        return [("default", nullcontext)]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")
    backends = [getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)]
    return [(b.name.lower(), lambda b=b: sdpa_kernel(b)) for b in backends]


def _best_sdpa(fn: Callable[[], object], device: torch.device, reps: int) -> tuple[float, str]:
    best, name = math.inf, ""
    for backend, ctx in _sdpa_backends(device):
        try:
            with ctx():
                t = _time(fn, device, reps)
        except RuntimeError:  # the backend does not take these inputs here
            continue
        if t < best:
            best, name = t, backend
    if not name:
        raise RuntimeError("no scaled_dot_product_attention backend ran")
    return best, name


def measure_attention(device: torch.device, layer: Layer, lengths: list[int],
                      reps: int) -> tuple[list[KernelTime], set[str]]:
    """Causal prefill attention of one prompt of each length (K and V expanded to the query
    heads, as FlashAttention benchmarks run it)."""
    h, d = layer.q_heads, layer.head_dim
    points, used = [], set()
    for s in lengths:
        q, k, v = (torch.randn(1, h, s, d, device=device, dtype=BF16) for _ in range(3))
        t, backend = _best_sdpa(
            lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v, is_causal=True),
            device, reps)
        used.add(backend)
        points.append(KernelTime(f"causal attention, {s} tokens ({backend})",
                                 4 * s * s * d * h / 2, t))
        del q, k, v
    return points, used


def measure_decode_gemms(device: torch.device, layer: Layer, batch: int, reps: int) -> KernelTime:
    """A decode step's layer GEMMs; bytes: the weights and the activations."""
    ws = [torch.randn(o, i, device=device, dtype=BF16) for o, i in layer.linears()]
    xs = [torch.randn(batch, i, device=device, dtype=BF16) for _, i in layer.linears()]

    def run() -> None:
        for x, w in zip(xs, ws, strict=True):
            linear(x, w)

    nbytes = sum(2 * (o * i + batch * (o + i)) for o, i in layer.linears())
    return KernelTime(f"decode GEMMs, batch {batch}", nbytes, _time(run, device, reps))


def measure_decode_attention(device: torch.device, layer: Layer, batch: int, context: int,
                             reps: int) -> tuple[KernelTime, str]:
    """One query token per sequence over a KV cache; bytes: K and V."""
    h, d = layer.q_heads, layer.head_dim
    q = torch.randn(batch, h, 1, d, device=device, dtype=BF16)
    k = torch.randn(batch, h, context, d, device=device, dtype=BF16)
    v = torch.randn_like(k)
    t, backend = _best_sdpa(lambda: scaled_dot_product_attention(q, k, v), device, reps)
    return KernelTime(f"decode attention, {batch} x {context} tokens ({backend})",
                      2 * k.numel() * 2, t), backend


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return "CPU"


def _memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def _share(x: float) -> float:
    """An efficiency for the file: three significant digits, clipped to (0, 1]."""
    return min(1.0, max(1e-3, float(f"{x:.3g}")))


def _power_entry(what: str) -> dict[str, object]:
    """The power model's fields fitted on the GPU (``gpu_power.py``), printed as measured."""
    from nelssa.experiments.gpu_power import fit_power, measure_power

    try:
        points, tdp, name = measure_power()
        fit = fit_power(points, tdp)
    except (RuntimeError, ValueError) as e:
        raise SystemExit(f"error: --power: {e}") from None
    for p in points:
        print(f"  power {p.what}: {p.watts:.1f} W at {p.flops_per_s / 1e12:.4g} TFLOP/s, "
              f"{p.bytes_per_s / 1e9:.4g} GB/s")
    print(f"  power fit on {fit.used} points: idle {fit.idle_w:.1f} W, {fit.pj_per_flop:.4f} "
          f"pJ/FLOP, {fit.pj_per_hbm_byte:.2f} pJ/byte, rms {fit.rms_w:.1f} W; limit {tdp:g} W")
    return {"tdp_w": tdp, "idle_w": round(max(fit.idle_w, 1e-3), 1),
            "pj_per_flop": round(max(fit.pj_per_flop, 0.0), 4),
            "pj_per_hbm_byte": round(max(fit.pj_per_hbm_byte, 0.0), 2),
            "power_source": f"scripts/calibrate_gpu.py --power on {what} ({name}), "
                            f"{datetime.date.today().isoformat()}: least squares over "
                            f"{fit.used} NVML-sampled loops (idle, a copy, bf16 GEMMs), rms "
                            f"{fit.rms_w:.1f} W; tdp_w is NVML's enforced power limit"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="preset name (default: measured-cuda or measured-cpu)")
    parser.add_argument("--out", default="gpu-measured.json")
    parser.add_argument("--memory-gb", type=float,
                        help="memory to record (default: what the device reports)")
    parser.add_argument("--peak-tflops", type=float,
                        help="datasheet dense bf16 peak (default: the measured square GEMM)")
    parser.add_argument("--peak-hbm-gbs", type=float,
                        help="datasheet HBM bandwidth (default: the measured copy)")
    parser.add_argument("--datasheet", action="store_true",
                        help="take both peaks from the datasheet of the part the device's name "
                             "ends with (DATASHEETS: H200, H100 NVL, H100 80GB HBM3, H100 PCIe) "
                             "where --peak-tflops and --peak-hbm-gbs leave them out; a part not "
                             "listed keeps the measured peaks")
    parser.add_argument("--scale", type=float,
                        help="shrink the shapes (default: 1 on CUDA, 0.01 on the CPU)")
    parser.add_argument("--chunks", default="2048,4096,8192",
                        help="prefill chunk lengths in tokens, before --scale")
    parser.add_argument("--context", type=int, default=32768,
                        help="decode KV cache length in tokens, before --scale")
    parser.add_argument("--decode-batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5, help="calls per timed run")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--power", action="store_true",
                        help="also fit the power model (idle_w, pj_per_flop, pj_per_hbm_byte, "
                        "tdp_w) from NVML power samples (a CUDA GPU and pynvml; "
                        "nelssa/experiments/gpu_power.py)")
    for flag, default in (("hidden", 4096), ("q-heads", 32), ("kv-heads", 8), ("head-dim", 128),
                          ("ffn", 14336)):
        parser.add_argument(f"--{flag}", type=int, default=default,
                            help=f"model shape (default: Llama-3-8B, {default})")
    args = parser.parse_args(argv)
    for flag in ("peak_tflops", "peak_hbm_gbs", "memory_gb", "scale"):
        v = getattr(args, flag)
        if v is not None and not (math.isfinite(v) and v > 0):
            parser.error(f"--{flag.replace('_', '-')} must be a positive number, got {v}")
    if min(args.reps, args.context, args.decode_batch, args.hidden, args.q_heads, args.kv_heads,
           args.head_dim, args.ffn) < 1:
        parser.error("counts and shapes must be positive")
    try:
        chunks = [int(c) for c in args.chunks.split(",")]
    except ValueError:
        parser.error(f"--chunks must be comma-separated integers, got {args.chunks!r}")
    if not chunks or min(chunks) < 1:
        parser.error("--chunks must be positive")
    want = args.device
    if want == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    if args.power and (want == "cpu" or not torch.cuda.is_available()):
        parser.error("--power: NVML samples a CUDA GPU's power, and there is none here")
    device = torch.device("cuda" if want == "cuda" or (want == "auto"
                                                        and torch.cuda.is_available()) else "cpu")
    scale = args.scale if args.scale is not None else (1.0 if device.type == "cuda" else 0.01)
    f = scale ** (1 / 3)
    layer = Layer(hidden=_dim(args.hidden * f), q_heads=max(1, round(args.q_heads * f)),
                  kv_heads=max(1, round(args.kv_heads * f)), head_dim=args.head_dim,
                  ffn=_dim(args.ffn * f))
    if layer.q_heads % layer.kv_heads:
        layer = replace(layer, kv_heads=1)
    chunks = [_dim(c * f) for c in chunks]
    context = _dim(args.context * scale)
    what = _device_name(device)
    print(f"measuring {what}, scale {scale:g}: {layer}, chunks {chunks}, context {context}")
    hint = next((v for k, v in DATASHEETS.items() if what.endswith(k)), None)
    if hint and args.datasheet:
        args.peak_tflops = args.peak_tflops or hint[0]
        args.peak_hbm_gbs = args.peak_hbm_gbs or hint[1]
        print(f"datasheet peaks of {what}: {args.peak_tflops:g} TFLOP/s, "
              f"{args.peak_hbm_gbs:g} GB/s")
    elif args.datasheet:
        print(f"note: no datasheet listed for {what!r}: the peaks are the measured ones")
    if hint and not (args.peak_tflops and args.peak_hbm_gbs):
        print(f"hint: the datasheet peaks of this part are --peak-tflops {hint[0]:g} "
              f"--peak-hbm-gbs {hint[1]:g}; without them the peaks are the measured ones")

    with torch.inference_mode():
        copy = measure_copy(device, scale, args.reps)
        square = measure_square_gemm(device, scale, args.reps)
        gemms = measure_linear(device, layer, chunks, args.reps)
        attn, backends = measure_attention(device, layer, chunks, args.reps)
        decode = [measure_decode_gemms(device, layer, args.decode_batch, args.reps)]
        point, backend = measure_decode_attention(device, layer, args.decode_batch, context,
                                                  args.reps)
        decode.append(point)
        backends.add(backend)
    hbm = args.peak_hbm_gbs * 1e9 if args.peak_hbm_gbs else copy.rate
    tflops = args.peak_tflops * 1e12 if args.peak_tflops else square.rate
    rows = [(p, "GB/s", 1e9, hbm) for p in (copy, *decode)]
    rows += [(p, "TFLOP/s", 1e12, tflops) for p in (square, *gemms, *attn)]
    for p, unit, div, peak in rows:
        print(f"  {p.what}: {p.seconds * 1e3:.3f} ms, {p.rate / div:.4g} {unit} "
              f"({p.rate / peak:.3f} of the peak)")
    raw = {"linear_efficiency": _fit(gemms, tflops), "attn_efficiency": _fit(attn, tflops),
           "mem_efficiency": _fit(decode, hbm)}
    for k, v in raw.items():
        if v > 1:
            print(f"note: fitted {k} {v:.3f} > 1 (the peak is below these kernels); written as 1")
    today = datetime.date.today().isoformat()
    tf = "datasheet (--peak-tflops)" if args.peak_tflops else f"measured ({square.what})"
    bw = "datasheet (--peak-hbm-gbs)" if args.peak_hbm_gbs else f"measured ({copy.what})"
    peaks = f"bf16_tflops {tf}, hbm_gbs {bw}"
    source = (f"scripts/calibrate_gpu.py on {what}, {today}, torch {torch.__version__}, scale "
              f"{scale:g}: efficiencies fitted to the kernel times of one layer (hidden "
              f"{layer.hidden}, FFN {layer.ffn}, {layer.q_heads}/{layer.kv_heads} heads of "
              f"{layer.head_dim}) at prefill chunks of {chunks} tokens and a decode batch of "
              f"{args.decode_batch} over {context} tokens, SDPA backends {sorted(backends)}; "
              f"{peaks}; kernel_us is the default, not measured")
    default_kernel_us = next(fl.default for fl in fields(GpuHw) if fl.name == "kernel_us")
    entry = {"hbm_gbs": float(f"{hbm / 1e9:.4g}"),
             "memory_gb": round(args.memory_gb or _memory_gb(device), 1),
             "bf16_tflops": float(f"{tflops / 1e12:.4g}"), "kernel_us": default_kernel_us,
             **{k: _share(v) for k, v in raw.items()}, "source": source,
             "device_name": what, "calibrated_on": today}
    if args.power:
        entry.update(_power_entry(what))
    name = args.name or f"measured-{device.type}"
    GpuHw(name=name, **entry)  # refuse to write what the latency model would refuse to load
    Path(args.out).write_text(json.dumps({"gpus": {name: entry}, "use": {"gpu": name}},
                                         indent=2) + "\n")
    print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in entry.items() if k != "source"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
