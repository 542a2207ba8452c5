"""Our scheduler against vLLM's own (0.33.0, unmodified, in its environment: make vllm) on the
agreement regimes: decode throughput, TPOT P50/P99, preemptions and steps side by side with
their relative differences and goals, and the wall and CPU time of each replay (ours must be
>= 20x faster; CPU time is what a machine shared with other work disturbs least). Then the whole
conversation trace through vLLM, timed. Writes docs/results/vllm_agreement.md.

    .venv/bin/python scripts/bench_vllm.py [--scale 1.0] [--no-whole] [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from nelssa.emu.serving.agreement import GOALS, compare, latency_model, regimes
from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.vllm_env import run_many_in_vllm_env
from nelssa.emu.serving.workload import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared/traces/mooncake_conversation_trace.jsonl"
NAMES = {"decode_tps": "decode tok/s", "tpot_p50": "TPOT P50 ms", "tpot_p99": "TPOT P99 ms",
         "preemptions": "preemptions", "steps": "steps"}


def _fmt(key: str, v: float) -> str:
    return f"{v * 1e3:.2f}" if key.startswith("tpot") else f"{v:,.1f}" if key == "decode_tps" \
        else f"{v:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the request counts")
    ap.add_argument("--no-whole", action="store_true", help="skip the whole-trace vLLM replay")
    ap.add_argument("--repeat", type=int, default=3,
                    help="replays of ours per regime (one before vLLM's, the rest after; "
                    "the median times)")
    ap.add_argument("--out", default=str(ROOT / "docs/results/vllm_agreement.md"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    rows = compare(regimes(TRACE, args.scale), repeat=args.repeat)
    lines = ["# Our scheduler against vLLM's", "",
             "Written by `.venv/bin/python scripts/bench_vllm.py"
             + (f" --scale {args.scale:g}" if args.scale != 1 else "") + "`: each regime "
             "replayed through our scheduler and through vLLM 0.33.0's own v1 Scheduler and "
             "KVCacheManager (unmodified), the same cost model pricing every step. Goals: "
             + ", ".join(f"{NAMES[k]} within {g:.0%}" for k, g in GOALS.items())
             + "; ours at least 20x faster. Wall and CPU: the replay alone (vLLM's process "
             "start, about 7 s, not counted); vLLM's replays once, ours "
             f"{args.repeat} time(s) (once before vLLM's replays, the rest after), its median "
             "given. CPU time is the replay's process's, which other work on the machine "
             "disturbs less than wall time.", "",
             "| regime | requests | figure | ours | vLLM | difference | goal met |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        for i, k in enumerate(GOALS):
            lines.append(f"| {r['regime'] if i == 0 else ''} | {r['requests'] if i == 0 else ''}"
                         f" | {NAMES[k]} | {_fmt(k, r['ours'][k])} | {_fmt(k, r['vllm'][k])} | "
                         f"{r['diff'][k]:.2%} | {'yes' if r['met'][k] else '**no**'} |")
        for key, name, ratio in (("wall_s", "wall s", "speedup"), ("cpu_s", "CPU s",
                                                                      "cpu_speedup")):
            lines.append(f"| | | {name} | {r['ours'][key]:.2f} | {r['vllm'][key]:.2f} | "
                         f"x{r[ratio]:.0f} faster | {'yes' if r[ratio] >= 20 else '**no**'} |")
    lines += ["", "Regimes:", ""] + [f"- **{r['regime']}**: {r['what']}" for r in rows]
    print("\n".join(lines))
    if not args.no_whole:
        reqs = load_trace(TRACE, hash_ids=True)
        lm = latency_model()
        cfg = ServingConfig(scheduler=SchedulerKind.VLLM)
        (run,) = run_many_in_vllm_env([(ServingSim(lm, cfg), reqs)])
        ours = ServingSim(lm, ServingConfig()).run(reqs)
        whole = (f"Whole conversation trace ({len(reqs):,} requests by timestamp, GPU only, "
                 f"prefix caching on): vLLM {run.steps:,} steps in {run.wall_s:.0f} s of wall "
                 f"time ({run.cpu_s:.0f} s CPU), ours {ours.steps:,} steps in "
                 f"{ours.wall_s:.1f} s ({ours.cpu_s:.1f} s CPU; x{run.wall_s / ours.wall_s:.0f} "
                 f"wall, x{run.cpu_s / ours.cpu_s:.0f} CPU); decode "
                 f"{run.decode_tokens / run.end_s:,.1f} "
                 f"vs {ours.decode_tokens / ours.end_s:,.1f} tok/s.")
        print(whole)
        lines += ["", whole]
    lines += ["", f"Run took {time.perf_counter() - t0:.0f} s on this machine."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
