"""Long fuzz campaigns (tests/fuzz/; scripts/fuzz.py is its command line): for each target, inputs
drawn by hypothesis from a seed until a count of units (descriptors, frames, requests, files) or
a time budget is reached, every input judged by the oracles (hang, crash, wrong result, write
outside the region). Prints a row per target and writes the table, with the command that made it
and the first findings of each kind, to docs/results/fuzz.md. The short runs of the same fuzzers
are tests/test_fuzz_*.py.

    python scripts/fuzz.py --target descriptors-model --count 100000 --seed 1
    python scripts/fuzz.py --target all --budget 600
    python scripts/fuzz.py --target frames:100000 --target node:2000 --seed 1
    python scripts/fuzz.py --target model --count 100000 --json /tmp/model.json --out -
    python scripts/fuzz.py --page /tmp/model.json /tmp/rtl.json   # one page from several runs

A campaign's raw tallies go to ``--json``; ``--page`` writes the page from such files (runs made
at different times, or on different machines), each row naming the command and code it came
from.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, seed

from nelssa.options import POSITIVE_INT, SECONDS, SEED, Parser
from tests.fuzz.oracle import Kind, Tally
from tests.fuzz.targets import TARGETS, campaign_settings, quiet

ROOT = Path(__file__).resolve().parents[2]

GROUPS = {
    "all": list(TARGETS),
    "model": [n for n in TARGETS if not n.endswith("-rtl")],
    "rtl": [n for n in TARGETS if n.endswith("-rtl")],
}


class _Enough(BaseException):
    """A signal to stop drawing, not an error."""


def campaign(name: str, count: int | None, budget_s: float | None, first_seed: int,
             progress: bool = True) -> tuple[Tally, float]:
    """Run one target until ``count`` units or ``budget_s`` seconds; its tally and the wall
    time it took."""
    target = TARGETS[name]
    tally = Tally(name, target.unit)
    start = time.monotonic()

    def done() -> bool:
        return ((count is not None and tally.tried >= count)
                or (budget_s is not None and time.monotonic() - start >= budget_s))

    with quiet(), target.context() as ctx:
        round_ = 0
        last_print = start
        while not done():
            @seed(first_seed + round_)
            @campaign_settings(max_examples=1_000_000)
            @given(target.strategy())
            def draw(case) -> None:
                nonlocal last_print
                tally.add(case.units, target.run(case, ctx), case)
                if progress and time.monotonic() - last_print > 30:
                    last_print = time.monotonic()
                    print(f"  {name}: {tally.tried} {target.unit}, "
                          f"{sum(tally.counts.values())} findings, "
                          f"{last_print - start:.0f} s", file=sys.stderr, flush=True)
                if done():
                    raise _Enough
            try:
                draw()
            except _Enough:
                break
            round_ += 1  # hypothesis ran out of new inputs for this seed: next seed
    return tally, time.monotonic() - start


def _row(t: Tally, wall: float) -> list[str]:
    return [t.target, f"{t.tried:,} {t.unit}", f"{t.cases:,}",
            *(f"{t.counts[k]:,}" for k in Kind), f"{wall:.0f}"]


HEAD = ["target", "inputs tried", "cases", "hangs", "crashes", "wrong results",
        "writes outside the region", "wall s"]


def table(rows: list[list[str]], with_run: bool = False) -> str:
    head = [*HEAD, "run"] if with_run else HEAD
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + (" with uncommitted changes" if dirty.strip() else "")


@dataclass
class Run:
    """One invocation of this script: what it ran, on what code, and its tallies."""

    command: str
    code: str
    date: str
    results: list[tuple[Tally, float]]
    note: str | None = None

    def to_json(self) -> dict:
        return {"command": self.command, "code": self.code, "date": self.date,
                "note": self.note,
                "results": [{"target": t.target, "unit": t.unit, "tried": t.tried,
                             "cases": t.cases, "counts": {k.value: t.counts[k] for k in Kind},
                             "examples": {k.value: t.examples[k] for k in Kind}, "wall_s": w}
                            for t, w in self.results]}

    @classmethod
    def from_json(cls, d: dict) -> Run:
        results = []
        for r in d["results"]:
            t = Tally(r["target"], r["unit"], r["tried"], r["cases"],
                      {k: int(r["counts"][k.value]) for k in Kind},
                      {k: [tuple(x) for x in r["examples"][k.value]] for k in Kind})
            results.append((t, float(r["wall_s"])))
        return cls(d["command"], d["code"], d["date"], results, d.get("note"))


def report(runs: list[Run], note: str | None = None) -> str:
    several = len(runs) > 1
    lines = ["# Fuzz campaigns", "",
             "Property-based fuzzers (hypothesis) of every interface that takes input from "
             "outside (tests/fuzz/, one module per target; the oracles in tests/fuzz/oracle.py). "
             "Each row: units tried (a case, as hypothesis draws it, holds one or more), then "
             "the findings of each oracle. The goal is zero in every column but the first.", ""]
    for i, run in enumerate(runs, 1):
        lines += [f"{f'Run {i}: c' if several else 'C'}ommand: `{run.command}`  ",
                  f"Code: {run.code}, {run.date}", "", *([run.note, ""] if run.note else [])]
    if several:
        lines += [f"Page: `python scripts/fuzz.py --page <the runs' --json files>` "
                  f"({time.strftime('%Y-%m-%d')})", "", *([note, ""] if note else [])]
    results = [(t, w) for run in runs for t, w in run.results]
    rows = [[*_row(t, w), str(i)] for i, run in enumerate(runs, 1) for t, w in run.results]
    if not several:
        rows = [r[:-1] for r in rows]
    lines += [table(rows, several), "", "Targets:", ""]
    lines += [f"- `{name}`: {TARGETS[name].doc}"
              for name in dict.fromkeys(t.target for t, _ in results)]
    found = [(t, k) for t, _ in results for k in Kind if t.examples[k]]
    if found:
        lines += ["", "## Findings (first of each kind)", ""]
        for t, k in found:
            for what, case in t.examples[k]:
                shown = case if len(case) <= 400 else case[:395] + " ..."
                lines += [f"- `{t.target}` {k.value}: {what}", "", f"  input: `{shown}`", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", action="append", metavar="NAME[:COUNT]",
                    help=f"a target ({', '.join(TARGETS)}) or a group ({', '.join(GROUPS)}), "
                         "with its own count after a colon if it should differ from --count; "
                         "repeat for several (default: all)")
    ap.add_argument("--count", type=POSITIVE_INT,
                    help="units per target (descriptors, frames, ...)")
    ap.add_argument("--budget", type=SECONDS, help="seconds per target")
    ap.add_argument("--seed", type=SEED, default=0, help="hypothesis seed of the first round")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "fuzz.md"),
                    help="where the table goes ('-' for nowhere)")
    ap.add_argument("--note", help="a paragraph to put above the table (what was run where)")
    ap.add_argument("--json", help="also write the raw tallies here (for --page)")
    ap.add_argument("--page", nargs="+", metavar="JSON",
                    help="write the page (--out) from the --json files of earlier runs, "
                         "running nothing")
    args = ap.parse_args(argv)
    if args.page:
        return _page(ap, args.page, args.out, args.note)
    counts: dict[str, int | None] = {}
    for spec in args.target or ["all"]:
        t, _, n = spec.partition(":")
        try:
            count = int(n) if n else args.count
        except ValueError:
            ap.error(f"--target {spec}: the count after ':' must be an integer")
        if t not in GROUPS and t not in TARGETS:
            ap.error(f"--target: no target or group {t!r} (targets: {', '.join(TARGETS)}; "
                     f"groups: {', '.join(GROUPS)})")
        for name in GROUPS.get(t, [t]):
            counts[name] = count
    if args.budget is None and any(c is None for c in counts.values()):
        ap.error("give --count (or a count per target), --budget or both")
    if any(c is not None and c < 1 for c in counts.values()):
        ap.error("--target: a count after ':' must be >= 1")
    code = _commit()  # what the campaign loads: the code at its start, not at its end
    command = "python scripts/fuzz.py " + " ".join(shlex.quote(a) for a in
                                                   (argv if argv is not None else sys.argv[1:]))
    results = []
    print(" | ".join(HEAD))
    for name, count in counts.items():
        tally, wall = campaign(name, count, args.budget, args.seed)
        results.append((tally, wall))
        print(" | ".join(_row(tally, wall)), flush=True)
    run = Run(command, code, time.strftime("%Y-%m-%d"), results, args.note)
    if args.json:
        Path(args.json).write_text(json.dumps(run.to_json()))
    if args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report([run]))
        print(f"wrote {args.out}")
    return 0 if all(t.clean for t, _ in results) else 1


def _page(ap: argparse.ArgumentParser, files: list[str], out: str,
          note: str | None = None) -> int:
    runs = []
    for f in files:
        try:
            runs.append(Run.from_json(json.loads(Path(f).read_text())))
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--page {f}: not the --json of a campaign ({type(e).__name__}: {e})")
    text = report(runs, note)
    if out == "-":
        print(text)
    else:
        Path(out).write_text(text)
        print(f"wrote {out}")
    return 0 if all(t.clean for run in runs for t, _ in run.results) else 1


if __name__ == "__main__":
    sys.exit(main())
