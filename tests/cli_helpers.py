"""The `nelssa` command line run in the test's own process: what a test reads of a child
process (exit status, stdout, stderr) without the ~1 CPU second each `python -m nelssa.cli`
takes to start. For checks of what a command prints and returns; tests of the process boundary
itself (signals, sockets and files left behind, a parent that dies) still start processes."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
from pathlib import Path

from nelssa.cli import main


def run_cli(*argv: str, cwd: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    """``nelssa ARGV`` as main() runs it in a process of its own: its return value or
    SystemExit code (argparse's refusals: 2), and stdout and stderr, where the log records a
    fresh process's logging.basicConfig would show land too (so a check that an error is one
    line still sees a warning logged beside it). An exception main() lets through is raised
    here: the test fails on it, as it would on a child's traceback."""
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as e:  # sys.exit(TEXT) prints TEXT and exits 1
                code = e.code if isinstance(e.code, int) or e.code is None else 1
                if isinstance(e.code, str):
                    print(e.code, file=err)
    finally:
        os.chdir(here)
        root.removeHandler(handler)
    return subprocess.CompletedProcess(["nelssa", *argv], code or 0, out.getvalue(),
                                       err.getvalue())
