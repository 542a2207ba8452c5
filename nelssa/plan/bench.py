"""The planner's speed (issue 43 point 5): a space of more than 100 fleet mixes planned from
scratch on the local process pool, its mixes, fleet runs, CPU seconds (each worker's own) and
wall time; and the run length each probe needs, found by planning a few mixes at several
numbers of requests per probe. Writes docs/results/plan_bench.md
(``scripts/bench_plan.py`` is the command line)."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nelssa.options import POSITIVE_INT
from nelssa.plan.run import PlanSpace, executor, run_plan
from nelssa.plan.search import ADAPTIVE, CROSSOVER, Mix, PlanSettings, PlanSlo
from nelssa.provenance import code_version, file_sha256

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1].parent
PAGE = ROOT / "docs/results/plan_bench.md"
TRACE = ROOT.parent / "shared/traces/mooncake_conversation_trace.jsonl"
SLO = PlanSlo(ttft_s=20.0, tpot_s=0.175, goodput=0.99)
"""MLPerf's long-context TPOT; TTFT 20 s, above the longest prompts' own prefill (at 6 s or
10 s fewer than 99 % of the trace's requests meet it even on an idle fleet, so the TTFT tail
of a handful of prompts, not the load, decides the rate)."""
SPACE = PlanSpace(decode=(1, 2, 3, 4), prefill_gpus=(0, 2), nodes=(0, 1, 2),
                  devices=(2, 4, 8), policies=(CROSSOVER, ADAPTIVE))
STABILITY_MIXES = (Mix(2), Mix(2, 0, 1, 4, CROSSOVER), Mix(4), Mix(4, 0, 2, 4, ADAPTIVE))
LENGTHS = (500, 1000, 2000, 4000)


def settings(trace: Path, requests: int) -> PlanSettings:
    return PlanSettings(str(trace.resolve()), file_sha256(str(trace.resolve())), SLO,
                        requests=requests)


def speed(trace: Path, requests: int, workers: int, folder: Path,
          budget_s: float | None = None) -> dict[str, Any]:
    mixes = SPACE.mixes()
    load0 = os.getloadavg()[0]
    c0, w0 = time.process_time(), time.perf_counter()
    done = run_plan(settings(trace, requests), mixes, folder, executor(workers, None),
                    budget_s=budget_s)
    parent = time.process_time() - c0
    if workers == 1:  # the searches ran in this process: their CPU is in its own
        parent = max(0.0, parent - done.cpu_s)
    return {"mixes": len(mixes), "ran": len(done.points) + len(done.failed),
            "probes": done.probes,
            "worker_cpu_s": done.cpu_s, "parent_cpu_s": parent,
            "wall_s": time.perf_counter() - w0, "failed": len(done.failed),
            "load": (load0, os.getloadavg()[0]),
            "sustaining": sum(p.rate > 0 for p in done.points)}


def stability(trace: Path, workers: int, folder: Path) -> dict[int, dict[str, float]]:
    """Each stability mix's sustained rate at each run length."""
    out: dict[int, dict[str, float]] = {}
    for n in LENGTHS:
        done = run_plan(settings(trace, n), list(STABILITY_MIXES), folder / str(n),
                        executor(workers, None))
        out[n] = {p.mix.label(): p.rate for p in done.points}
        log.info("%d requests a probe: %s", n, out[n])
    return out


def page(res: dict[str, Any], command: str, commit: str) -> str:
    s = res["speed"]
    cpu = s["worker_cpu_s"] + s["parent_cpu_s"]
    per_mix = cpu / max(1, s["ran"])
    lines = [
        "# The planner's speed (issue 43, point 5)", "",
        f"Written by `{command}` at {commit} on {platform.machine()} "
        f"({os.cpu_count()} cores, shared with other work: the wall time is noisy, the CPU "
        f"time is not), Python {platform.python_version()}.", "",
        f"`nelssa plan`'s search over {s['mixes']} fleet mixes of the Mooncake conversation "
        f"trace (decode instances {', '.join(map(str, SPACE.decode))}; prefill on the "
        f"instance or a pool of 2 GPUs; 0, 1 or 2 PNM nodes of 2, 4 or 8 devices; T_input "
        f"crossover or fleet-adaptive), SLO {SLO.label()}, {res['requests']:,} requests a "
        f"probe, from an empty store on {res['workers']} local processes:", "",
        "| mixes | searched | fleet runs | CPU s (workers + parent) | wall s | mixes sustaining "
        "some rate | failed |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {s['mixes']} | {s['ran']} | {s['probes']:,} | {cpu:,.0f} | {s['wall_s']:,.0f} | "
        f"{s['sustaining']} | {s['failed']} |", "",
        f"{s['ran']} of {s['mixes']} mixes searched in {s['wall_s'] / 60:.1f} min wall"
        + (f" (stopped at the budget of {s['budget_min']:g} min)" if s['ran'] < s['mixes']
           else "")
        + f", the machine's load average {s['load'][0]:.1f} at the start and "
        f"{s['load'][1]:.1f} at the end (other work on its {os.cpu_count()} cores): the wall "
        f"time is this machine's load, not the planner's. {per_mix:.1f} CPU s a mix, "
        f"{s['worker_cpu_s'] / max(1, s['probes']):.2f} CPU s a fleet run: **{s['mixes']} "
        f"mixes take {per_mix * s['mixes'] / 60:.0f} min of CPU, "
        f"{per_mix * s['mixes'] / 2 / 60:.1f} min on the 2 cores alone** (the goal: 100 in 30 "
        "min on this machine)" + ("; the CPU a mix is that of the mixes searched, the space's "
                                  "first" if s["ran"] < s["mixes"] else "") + ".", ""]
    st = res.get("stability")
    if st:
        labels = list(next(iter(st.values())))
        lines += [
            "## Run length", "",
            "The sustained rate (requests/s) the search finds for a few mixes at each number "
            "of requests per probe (the same seed):", "",
            "| mix | " + " | ".join(f"{n:,} requests" for n in st) + " |",
            "| --- | " + " | ".join("---:" for _ in st) + " |"]
        for lab in labels:
            lines.append(f"| {lab} | " + " | ".join(f"{st[n].get(lab, 0):.3g}" for n in st)
                         + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trace", type=Path, default=TRACE)
    p.add_argument("--requests", type=POSITIVE_INT, default=1000,
                   help="requests per probe of the speed run")
    p.add_argument("--workers", type=POSITIVE_INT, default=2)
    p.add_argument("--budget-min", type=float, default=None,
                   help="start no search after this many minutes of the speed run (the page "
                   "then gives the mixes done, their CPU time and the whole space's)")
    p.add_argument("--stability", action="store_true",
                   help="also the run-length table (the stability mixes at each length)")
    p.add_argument("--store", type=Path,
                   help="keep the points here: the run-length plans resume from DIR/s (the "
                   "speed run's DIR/speed must not exist: it is timed from scratch) [default: "
                   "a temporary folder]")
    p.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    code = code_version()
    commit = str(code["commit"])[:7] + (" (modified)" if code["modified"] is True else "")
    res: dict[str, Any] = {"requests": args.requests, "workers": args.workers}
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        store = args.store or Path(tmp)
        if (store / "speed").exists():
            p.error(f"--store {store}: {store / 'speed'} exists (the speed run starts empty)")
        if args.stability:
            res["stability"] = stability(args.trace, args.workers, store / "s")
        res["speed"] = speed(args.trace, args.requests, args.workers, store / "speed",
                             args.budget_min * 60 if args.budget_min else None)
        res["speed"]["budget_min"] = args.budget_min
    shown = sys.argv[1:] if argv is None else argv
    text = page(res, " ".join(["python scripts/bench_plan.py", *shown]), commit)
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
    return 0
