"""The vLLM environment's end of the vLLM-driven replay: ``python -m nelssa.emu.serving.vllm_sched``
there reads replay jobs as JSON on standard input, replays each with vLLM's own scheduler
(``emu/policy/vllm_scheduler.VllmScheduler``) and writes the runs' results as JSON on standard
output (``vllm_env.py`` is the other end).
"""

from __future__ import annotations

import json
import logging
import sys


def main() -> int:
    """Read replay jobs (``{"jobs": [...]}``) on stdin, replay each through vLLM, write
    ``{"runs": [...]}`` with their results and wall and CPU times (``replay`` measures them, as
    for ours) on stdout."""
    from nelssa.emu.serving.itl import timed_replay
    from nelssa.emu.serving.replay_json import job_from_json

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    runs = []
    for job in json.load(sys.stdin)["jobs"]:
        sim, requests = job_from_json(job)
        runs.append(timed_replay(sim, requests).to_json())
    json.dump({"runs": runs}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
