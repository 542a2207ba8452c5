"""The other end of the vLLM-driven replay: find the vLLM environment (``make vllm``), hand it the
replay as JSON, read the run back. vLLM never enters this process's environment."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from nelssa.emu.policy.vllm_scheduler import VllmEnvError, vllm_env, vllm_python
from nelssa.emu.serving.results import RunResult

if TYPE_CHECKING:
    from nelssa.emu.serving.sim import ServingSim
    from nelssa.emu.serving.workload import TraceRequest

log = logging.getLogger(__name__)

def run_in_vllm_env(sim: ServingSim, requests: list[TraceRequest],
                    progress: Callable[[float], None] | None = None) -> RunResult:
    (run,) = run_many_in_vllm_env([(sim, requests)])
    if progress is not None:
        progress(1.0)
    return run


def run_many_in_vllm_env(replays: list[tuple[ServingSim, list[TraceRequest]]]) -> list[RunResult]:
    """Several replays in one process of the vLLM environment (its start takes seconds)."""
    from nelssa.emu.serving.replay_json import job_to_json

    python = vllm_python()
    job = json.dumps({"jobs": [job_to_json(sim, reqs) for sim, reqs in replays]})
    env = vllm_env()
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
