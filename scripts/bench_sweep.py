"""Sweep rate of `nelssa sweep` on this machine (issue 26): the same spec run on a local process
pool and on a local Ray instance, points per minute of each, and whether their rows agree (they
must: a point's result depends only on the point). Writes docs/results/sweep.md.

    .venv/bin/python scripts/bench_sweep.py                  # docs/examples/sweep.toml, 2 workers
    .venv/bin/python scripts/bench_sweep.py --workers 2 --repeat 2
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from nelssa.options import POSITIVE_INT, Parser, input_file
from nelssa.provenance import commit_label
from nelssa.sweep.run import run_sweep
from nelssa.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def _rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", type=input_file, default=str(ROOT / "docs/examples/sweep.toml"))
    ap.add_argument("--workers", type=POSITIVE_INT, default=2)
    ap.add_argument("--repeat", type=POSITIVE_INT, default=2,
                    help="runs of each (the best is reported)")
    ap.add_argument("--out", default=str(ROOT / "docs/results/sweep.md"))
    args = ap.parse_args(argv)
    spec = load_spec(args.spec)
    load = os.getloadavg()[0]
    best: dict[str, float] = {}
    rows: dict[str, list[dict[str, str]]] = {}
    for where in ("pool", "ray"):
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                done = run_sweep(spec, Path(d), args.workers,
                                 "local" if where == "ray" else None)
                wall = time.perf_counter() - t0
            if done.failed:
                print(f"error: {done.failed} points failed on {where}", file=sys.stderr)
                return 1
            best[where] = min(best.get(where, float("inf")), wall)
            rows[where] = _rows(done.rows)
            print(f"{where}: {len(spec.points)} points in {wall:.1f} s", flush=True)
    same = rows["pool"] == rows["ray"]
    n = len(spec.points)
    rel = os.path.relpath(args.spec, ROOT)
    text = "\n".join([
        "# Sweep rate", "",
        f"Command: `python scripts/bench_sweep.py --spec {rel} --workers {args.workers} "
        f"--repeat {args.repeat}` (written by scripts/bench_sweep.py at commit "
        f"{commit_label()})", "",
        f"`nelssa sweep` over `{rel}`: {n} points, each a serving-emulator replay "
        f"({spec.limit or 'all'} requests of `{os.path.relpath(spec.trace, ROOT)}`), "
        f"{args.workers} workers, the best of {args.repeat} runs. This machine: "
        f"{os.cpu_count()} cores, load average {load:.1f} at the start.", "",
        "| where | wall s | points per minute |", "|---|---:|---:|",
        f"| local process pool | {best['pool']:.1f} | {n / best['pool'] * 60:.0f} |",
        f"| local Ray instance (its start included) | {best['ray']:.1f} | "
        f"{n / best['ray'] * 60:.0f} |", "",
        f"Rows of the two, `wall_s` aside: **{'identical' if same else 'DIFFERENT'}**.", ""])
    Path(args.out).write_text(text)
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
