"""Measure a GPU's parameters for the latency model with PyTorch and write a hardware file
(``{"gpus": {NAME: {...}}}``) for `nelssa crossover --hardware` and `nelssa serve-sim
--hardware`: memory bandwidth from large copies, bf16 GEMM throughput, and the share of that
bandwidth a decode-attention kernel (SDPA over a long KV cache) reaches. It uses CUDA when
present; on a machine without a GPU it measures the CPU, which checks the procedure, not a GPU.

    .venv/bin/python scripts/calibrate_gpu.py [--name NAME] [--out FILE] [--memory-gb N]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def _time(fn, device: torch.device, reps: int) -> float:
    fn()  # warm up
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def measure(device: torch.device, scale: float = 1.0) -> dict[str, float]:
    n = int(256e6 * scale) // 4  # bytes of one copy buffer / 4
    a = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    b = torch.empty_like(a)
    t = _time(lambda: b.copy_(a), device, 5)
    bw = 2 * a.numel() * 4 / t  # read + write
    m = int(4096 * scale ** 0.5) if device.type == "cuda" else int(1024 * scale ** 0.5)
    x = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    tg = _time(lambda: x @ y, device, 5)
    flops = 2 * m ** 3 / tg
    # decode attention: one query token, 32 heads x 128 over a KV cache of `ctx` tokens
    ctx = int(32768 * scale) if device.type == "cuda" else int(8192 * scale)
    q = torch.randn(1, 32, 1, 128, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 32, ctx, 128, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    ta = _time(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), device, 5)
    attn_bw = 2 * k.numel() * 2 / ta
    return {"hbm_gbs": bw / 1e9, "bf16_tflops": flops / 1e12,
            "mem_efficiency": min(1.0, attn_bw / bw)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="preset name (default: measured-cuda or measured-cpu)")
    parser.add_argument("--out", default="gpu-measured.json")
    parser.add_argument("--memory-gb", type=float,
                        help="memory to record (default: what the device reports)")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink the buffers (tests)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    got = measure(device, args.scale)
    if args.memory_gb:
        mem = args.memory_gb
    elif device.type == "cuda":
        mem = torch.cuda.get_device_properties(0).total_memory / 1e9
    else:
        import os

        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    name = args.name or f"measured-{device.type}"
    entry = {"hbm_gbs": round(got["hbm_gbs"], 2), "memory_gb": round(mem, 1),
             "bf16_tflops": round(got["bf16_tflops"], 4),
             "mem_efficiency": round(got["mem_efficiency"], 3)}
    Path(args.out).write_text(json.dumps({"gpus": {name: entry}}, indent=2) + "\n")
    what = torch.cuda.get_device_name(0) if device.type == "cuda" else "the CPU (no GPU here)"
    print(f"measured {what}: {entry}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
