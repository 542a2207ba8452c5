"""How far a real forward pass reaches on this host (issue 24, items 2 and 3): chunked prefills
of the small default model and of the Llama-3-8B shape with few layers, random weights.

Each run is SHAPE:LAYERS:TOKENS; it prints the wall time, tokens per minute, the rate in
GFLOP/s (FLOPs from ``host/gpu/prefill.estimate_prefill``), the process's peak memory against
the estimate, and per shape the longest prompt the decode command's checks would let start at
the rate measured (``PrefillConfig.prefill_limit_s``, the host's MemAvailable). ``--write``
writes docs/results/prefill.md.

    .venv/bin/python scripts/bench_prefill.py
    .venv/bin/python scripts/bench_prefill.py --run small:4:32768 --run llama-3-8b:4:8192 --write
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

from nelssa.host.gpu.config import PRESETS, LlamaConfig, PrefillConfig, preset_name
from nelssa.host.gpu.model import Llama, random_weights
from nelssa.host.gpu.prefill import available_memory, check_run, estimate_prefill, estimate_run
from nelssa.options import Parser, int_range

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results" / "prefill.md"
GIB = 1 << 30


def run_spec(text: str) -> tuple[str, int, int]:
    """SHAPE:LAYERS:TOKENS."""
    parts = text.split(":")
    if len(parts) != 3 or preset_name(parts[0]) not in PRESETS \
            or not all(p.isdigit() for p in parts[1:]) or min(int(parts[1]), int(parts[2])) < 1:
        raise argparse.ArgumentTypeError(f"must be SHAPE:LAYERS:TOKENS with SHAPE one of "
                                         f"{', '.join(PRESETS)}, got {text!r}")
    return parts[0], int(parts[1]), int(parts[2])


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def largest_prompt(c: LlamaConfig, cfg: PrefillConfig, available: int | None) -> int:
    """The longest single prompt (a long request, nothing else) the decode command's checks
    let start under ``cfg`` (bisection over the estimates)."""
    lo, hi = 1, c.max_position_embeddings
    if check_run(estimate_run(c, [], [1], cfg), cfg, available):
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if check_run(estimate_run(c, [], [mid], cfg), cfg, available):
            hi = mid - 1
        else:
            lo = mid
    return lo


def measure(shape: str, layers: int, tokens: int, chunk: int) -> dict:
    c = PRESETS[preset_name(shape)](layers=layers)
    t0 = time.perf_counter()
    model = Llama(c, random_weights(c, 0), prefill=PrefillConfig(prefill_chunk=chunk))
    weights_s = time.perf_counter() - t0
    prompt = torch.randint(0, c.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    with torch.inference_mode():
        logits, kv = model.prefill(prompt, last_only=True)
    wall = time.perf_counter() - t0
    assert logits.shape == (1, c.vocab_size) and kv[0][0].shape[0] == tokens
    est = estimate_prefill(c, tokens, chunk)
    return {"shape": shape, "layers": layers, "tokens": tokens, "chunk": chunk, "wall": wall,
            "weights_s": weights_s, "tok_min": tokens / wall * 60,
            "gflops": est.flops / wall / 1e9, "peak": _peak_rss(), "est": est.total_bytes}


def main() -> int:
    parser = Parser(description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=run_spec, action="append",
                        help="SHAPE:LAYERS:TOKENS, repeatable (default: small:4:4096 and "
                             "llama-3-8b:2:2048)")
    parser.add_argument("--chunk", type=int_range(1, 1 << 20),
                        default=PrefillConfig.prefill_chunk, help="prefill chunk (tokens)")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    runs = args.run or [("small", 4, 4096), ("llama-3-8b", 2, 2048)]
    rows = []
    load = [os.getloadavg()[0]]
    for shape, layers, tokens in runs:  # each in a process of its own: peak memory is its own
        if os.environ.get("BENCH_PREFILL_ONE"):
            break
        import json
        import subprocess
        env = dict(os.environ, BENCH_PREFILL_ONE=f"{shape}:{layers}:{tokens}:{args.chunk}")
        out = subprocess.run([sys.executable, __file__], env=env, capture_output=True,
                             text=True, check=False)
        if out.returncode:
            print(out.stdout + out.stderr, file=sys.stderr)
            return 1
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{shape} {layers} layers, {tokens:,} tokens (chunk {args.chunk}): "
              f"{r['wall']:.1f} s = {r['tok_min']:,.0f} tokens/min, {r['gflops']:.0f} GFLOP/s; "
              f"peak memory {r['peak'] / GIB:.2f} GiB (estimate {r['est'] / GIB:.2f}); random "
              f"weights {r['weights_s']:.1f} s", flush=True)
    load.append(os.getloadavg()[0])
    print(f"load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after: other processes "
          f"on the {os.cpu_count()} cores slow the runs")
    available = available_memory()
    reach = []
    for shape, layers in dict.fromkeys((r["shape"], r["layers"]) for r in rows):
        rate = min(r["gflops"] for r in rows if (r["shape"], r["layers"]) == (shape, layers))
        cfg = PrefillConfig(host_gflops=rate, prefill_chunk=args.chunk)
        n = largest_prompt(PRESETS[preset_name(shape)](layers=layers), cfg, available)
        reach.append((shape, layers, rate, n))
        print(f"{shape} {layers} layers: at {rate:.0f} GFLOP/s the longest prompt `nelssa decode`"
              f" lets start ({cfg.prefill_limit_s:g} s of prefill, {cfg.memory_share:.0%} of "
              f"{(available or 0) / GIB:.1f} GiB) is {n:,} tokens")
    if args.write:
        write(rows, reach, sys.argv[1:], load)
        print(f"wrote {RESULTS}")
    return 0


def write(rows: list[dict], reach: list[tuple], argv: list[str], load: list[float]) -> None:
    cmd = " ".join([".venv/bin/python scripts/bench_prefill.py", *argv])
    lines = ["# Chunked prefill on the host", "",
             f"Written by `{cmd}` on {platform.machine()}, {os.cpu_count()} CPU cores, "
             f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads): random weights, "
             "float32, the last token's logits; FLOPs from `estimate_prefill`. Load average "
             f"(1 min) {load[0]:.1f} before the runs and {load[1]:.1f} after (other work on "
             "the host's cores slows them).", "",
             "| shape | layers | prompt tokens | chunk | wall | tokens/min | GFLOP/s | "
             "peak memory | estimate |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['layers']} | {r['tokens']:,} | {r['chunk']} | "
                     f"{r['wall']:.1f} s | {r['tok_min']:,.0f} | {r['gflops']:.0f} | "
                     f"{r['peak'] / GIB:.2f} GiB | {r['est'] / GIB:.2f} GiB |")
    lines += ["", "The longest single prompt `nelssa decode` lets start on this host at the "
              "slowest rate measured for the shape (PrefillConfig's time limit and memory "
              "share):", "", "| shape | layers | GFLOP/s | longest prompt |", "|---|---|---|---|"]
    lines += [f"| {s} | {n_l} | {g:.0f} | {n:,} tokens |" for s, n_l, g, n in reach]
    RESULTS.write_text("\n".join(lines) + "\n")


def _one() -> int:
    import json
    shape, layers, tokens, chunk = os.environ["BENCH_PREFILL_ONE"].split(":")
    print(json.dumps(measure(shape, int(layers), int(tokens), int(chunk))))
    return 0


if __name__ == "__main__":
    sys.exit(_one() if os.environ.get("BENCH_PREFILL_ONE") else main())
