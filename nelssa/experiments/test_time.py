"""How long `make test` takes on a fresh clone (the goal: 20 minutes; CI stops at 30): clone this
checkout's HEAD into a temporary folder, run `make test` there (both virtual environments, every
Verilator build, the synthesis), and write docs/results/test_time.md with the wall time, the
pytest summary, its slowest tests by wall time and by CPU time (their own and their
children's: the Verilator builds they waited for), and the machine's load before and after.

    .venv/bin/python scripts/test_time.py                 # about 20-30 minutes
    .venv/bin/python scripts/test_time.py --keep          # leave the clone and its log
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nelssa.options import Parser

ROOT = Path(__file__).resolve().parents[2]
GOAL_S = 20 * 60
CPU_LOG_ENV = "NELSSA_TEST_CPU_LOG"
"""tests/conftest.py appends a JSON line per test here when it is set."""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, text=True, capture_output=True,
                          check=True).stdout.strip()


def _cpu_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cpu_table(rows: list[dict], top: int = 30) -> list[str]:
    """The tests that took the most CPU (own + children), and the total by file."""
    if not rows:
        return ["(no CPU figures: the test run wrote none)", ""]
    total = sum(r["own"] + r["children"] for r in rows)
    by_file: dict[str, float] = {}
    for r in rows:
        f = r["test"].split("::")[0]
        by_file[f] = by_file.get(f, 0.0) + r["own"] + r["children"]
    rows = sorted(rows, key=lambda r: -(r["own"] + r["children"]))
    files = sorted(by_file.items(), key=lambda kv: -kv[1])
    return [
        f"CPU time of pytest's tests: {total / 60:.1f} min in all ({len(rows)} tests), by the "
        "tests' processes and the children they waited for (Verilator, the C++ compiler, "
        "servers); the synthesis check and set-up are not in it.", "",
        "| CPU s | own | children | wall s | test |", "|---:|---:|---:|---:|---|",
        *[f"| {r['own'] + r['children']:.1f} | {r['own']:.1f} | {r['children']:.1f} | "
          f"{r['wall']:.1f} | `{r['test']}` |" for r in rows[:top]], "",
        "| CPU s | file |", "|---:|---|",
        *[f"| {s:.1f} | `{f}` |" for f, s in files[:top]], ""]


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs/results/test_time.md"))
    ap.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = ap.parse_args(argv)
    rev = _git("rev-parse", "--short", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        sys.stderr.write("note: uncommitted changes are not in the clone (it is of HEAD)\n")
    folder = Path(tempfile.mkdtemp(prefix="nelssa-test-time-"))
    clone = folder / "nelssa"
    log = folder / "make_test.log"
    cpu_log = folder / "test_cpu.jsonl"
    load0 = os.getloadavg()
    t0 = time.monotonic()
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        with log.open("w") as f:
            rc = subprocess.run(["make", "test"], cwd=clone, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, CPU_LOG_ENV: str(cpu_log)}).returncode
        wall = time.monotonic() - t0
        text = log.read_text(errors="replace")
        cpu_rows = _cpu_rows(cpu_log)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    load1 = os.getloadavg()
    summary = re.findall(r"^(?:=+ )?(\d+ (?:passed|failed).*?) in ([\d.]+)s", text, re.M)
    slow = re.findall(r"^([\d.]+)s (call|setup|teardown) +(\S+)", text, re.M)
    result, pytest_s = (summary[-1][0], float(summary[-1][1])) if summary else ("no summary", 0)
    lines = [
        "# Set-up and test time", "",
        "Command: `python scripts/test_time.py` (written by scripts/test_time.py): `make test` "
        "on a fresh clone of HEAD in a temporary folder, both virtual environments, every "
        "Verilator build and the synthesis included.", "",
        f"Code: {rev}, {time.strftime('%Y-%m-%d')}. Machine: {os.cpu_count()} cores, load "
        f"average {load0[0]:.1f} before and {load1[0]:.1f} after (other work on the machine "
        "slows the run; CI runs it alone).", "",
        f"- `make test`: **{int(wall // 60)} min {int(wall % 60):02d} s** "
        f"(exit status {rc}; the goal is {GOAL_S // 60} minutes)",
        f"- pytest: {result}, {int(pytest_s // 60)} min {int(pytest_s % 60):02d} s", "",
        "Slowest (pytest --durations):", "",
        "| seconds | phase | test |", "|---:|---|---|",
        *[f"| {s} | {phase} | `{name}` |" for s, phase, name in slow[:30]], "",
        *_cpu_table(cpu_rows)]
    Path(args.out).write_text("\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")
    if args.keep:
        sys.stdout.write(f"kept {clone} and {log}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
