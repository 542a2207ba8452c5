"""How long `make test` takes on a fresh clone (CI's budget: 30 minutes): clone this checkout's
HEAD into a temporary folder, run `make test` there (both virtual environments, every
Verilator build, the synthesis), and write docs/results/test_time.md with the wall time, the
pytest summary and its slowest tests, and the machine's load before and after.

    .venv/bin/python scripts/test_time.py                 # about 20-30 minutes
    .venv/bin/python scripts/test_time.py --keep          # leave the clone and its log
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nelssa.options import Parser

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 30 * 60


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, text=True, capture_output=True,
                          check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs/results/test_time.md"))
    ap.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = ap.parse_args(argv)
    rev = _git("rev-parse", "--short", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        print("note: uncommitted changes are not in the clone (it is of HEAD)", file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix="nelssa-test-time-"))
    clone = folder / "nelssa"
    log = folder / "make_test.log"
    load0 = os.getloadavg()
    t0 = time.monotonic()
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        with log.open("w") as f:
            rc = subprocess.run(["make", "test"], cwd=clone, stdout=f,
                                stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - t0
        text = log.read_text(errors="replace")
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
        f"(exit status {rc}; the budget is {BUDGET_S // 60} minutes)",
        f"- pytest: {result}, {int(pytest_s // 60)} min {int(pytest_s % 60):02d} s", "",
        "Slowest (pytest --durations):", "",
        "| seconds | phase | test |", "|---:|---|---|",
        *[f"| {s} | {phase} | `{name}` |" for s, phase, name in slow[:30]], ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    if args.keep:
        print(f"kept {clone} and {log}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
