"""The other end of the vLLM-driven replay: find the vLLM environment (``make vllm``), hand it the
replay as JSON, read the run back. vLLM never enters this process's environment."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nelssa.emu.serving.results import RunResult

if TYPE_CHECKING:
    from nelssa.emu.serving.sim import ServingSim
    from nelssa.emu.serving.workload import TraceRequest

log = logging.getLogger(__name__)

ENV_VAR = "NELSSA_VLLM_PYTHON"
"""The vLLM environment's python, where it is not the checkout's ``.venv-vllm``."""


class VllmEnvError(RuntimeError):
    """The vLLM environment is missing or broken."""


def vllm_python() -> Path:
    """The vLLM environment's interpreter, or a VllmEnvError that says how to make it."""
    given = os.environ.get(ENV_VAR)
    path = (Path(given) if given else
            Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise VllmEnvError(f"vLLM's scheduler needs its own environment and {path} is not "
                           f"there: run `make vllm` in the checkout (or set {ENV_VAR})")
    return path


def run_in_vllm_env(sim: ServingSim, requests: list[TraceRequest],
                    progress: Callable[[float], None] | None = None) -> RunResult:
    (run,) = run_many_in_vllm_env([(sim, requests)])
    if progress is not None:
        progress(1.0)
    return run


def run_many_in_vllm_env(replays: list[tuple[ServingSim, list[TraceRequest]]]) -> list[RunResult]:
    """Several replays in one process of the vLLM environment (its start takes seconds)."""
    from nelssa.emu.serving.replay import job_to_json

    python = vllm_python()
    job = json.dumps({"jobs": [job_to_json(sim, reqs) for sim, reqs in replays]})
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.run([str(python), "-m", "nelssa.emu.serving.vllm_sched"], input=job,
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise VllmEnvError(f"the vLLM-driven replay failed (exit {proc.returncode}):\n{tail}")
    for line in proc.stderr.splitlines():
        log.debug("vllm: %s", line)
    runs = json.loads(proc.stdout)["runs"]
    return [RunResult.from_json(sim.cfg, d) for (sim, _), d in zip(replays, runs, strict=True)]


if __name__ == "__main__":  # pragma: no cover - a look at where it is
    sys.stdout.write(f"{vllm_python()}\n")
