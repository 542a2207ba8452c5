"""A fleet under vLLM's own scheduler, one per decode instance: the whole fleet run
(``fleet.FleetSim``) goes to the vLLM environment's process, as a single replay does
(``vllm_env.py``), and its result comes back as JSON. There each instance's replay makes its
scheduler in process (``replay.make_replay_scheduler``): one vLLM v1 Scheduler per instance,
unmodified (``emu/policy/vllm_scheduler.py``); the dispatcher, the PNM nodes, the orchestrator
and the cost model are the same code as under ours.

What crosses: the fleet description, the hardware the fleet names (its GPUs, its PNM entries
as their figures, the bandwidth measured here and without their device model, as
``replay_json.job_to_json`` sends them; its link), the latency model, the serving configuration and
the requests. ``python -m nelssa.emu.serving.fleet_vllm`` is the vLLM environment's end.

``run_fleet`` picks the process by the configuration's scheduler (``RUNNERS``).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from typing import TYPE_CHECKING, Any

from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.fleet import FleetResult, FleetSim, NodeResult
from nelssa.emu.serving.results import Activity, RunResult
from nelssa.emu.serving.workload import TraceRequest

if TYPE_CHECKING:
    from nelssa.emu.latency.model import LatencyModel

__all__ = ["RUNNERS", "fleet_from_json", "fleet_to_json", "result_from_json", "result_to_json",
           "run_fleet", "run_fleet_in_vllm_env"]

log = logging.getLogger(__name__)


# -- the pieces as JSON ------------------------------------------------------------------------
def config_to_json(cfg: ServingConfig) -> dict[str, Any]:
    d = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    d["scheduler"] = cfg.scheduler.value
    return d


def config_from_json(d: dict[str, Any]) -> ServingConfig:
    return ServingConfig(**{**d, "scheduler": SchedulerKind(d["scheduler"])})


def _pnm_json(lm: LatencyModel, pnm: Any) -> dict[str, Any]:
    """A PNM entry as its figures: its bandwidth as ``lm``'s workload point measures it here
    (the vLLM environment has no device model), the device left out."""
    return {**asdict(replace(lm, pnm=pnm).pnm), "device": None}


def latency_to_json(lm: LatencyModel) -> dict[str, Any]:
    return {"gpu": asdict(lm.gpu), "pnm": _pnm_json(lm, lm.pnm), "model": asdict(lm.model),
            "link": asdict(lm.link) if lm.link else None, "sparsity": asdict(lm.sparsity)}


def latency_from_json(d: dict[str, Any]) -> LatencyModel:
    from nelssa.emu.latency.hardware import GpuHw, LinkHw, ModelHw, PnmHw
    from nelssa.emu.latency.model import LatencyModel, Sparsity

    return LatencyModel(GpuHw(**d["gpu"]), PnmHw(**d["pnm"]), ModelHw(**d["model"]),
                        Sparsity(**d["sparsity"]), LinkHw(**d["link"]) if d["link"] else None)


def requests_to_json(requests: list[TraceRequest]) -> list[list[Any]]:
    return [[r.rid, r.arrival_s, r.input_len, r.output_len, r.line,
             list(r.hash_ids) if r.hash_ids is not None else None] for r in requests]


def requests_from_json(rows: list[list[Any]]) -> list[TraceRequest]:
    return [TraceRequest(rid, t, i, o, line, tuple(h) if h is not None else None)
            for rid, t, i, o, line, h in rows]


def fleet_to_json(fleet: FleetSim, requests: list[TraceRequest]) -> dict[str, Any]:
    """The fleet run as JSON: only the catalog entries its description names."""
    spec, cat, lm = fleet.spec, fleet._catalog, fleet.lm
    gpus = {g.gpu for g in spec.instances if g.gpu}
    if spec.prefill_pool is not None and spec.prefill_pool.gpu:
        gpus.add(spec.prefill_pool.gpu)
    pnm = {g.pnm for g in spec.pnm_nodes if g.pnm}
    return {"spec": spec.model_dump(mode="json"), "latency": latency_to_json(lm),
            "config": config_to_json(fleet.cfg),
            "gpus": {n: asdict(cat.get("gpus", n)) for n in sorted(gpus)},
            "pnm": {n: _pnm_json(lm, cat.get("pnm", n)) for n in sorted(pnm)},
            "links": ({spec.fabric.link: asdict(cat.get("links", spec.fabric.link))}
                      if spec.fabric.link else {}),
            "requests": requests_to_json(requests)}


def fleet_from_json(d: dict[str, Any]) -> tuple[FleetSim, list[TraceRequest]]:
    from nelssa.emu.latency.fleet_description import FleetSpec
    from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog, LinkHw, PnmHw

    cat = HardwareCatalog(gpus={n: GpuHw(**g) for n, g in d["gpus"].items()},
                          pnm={n: PnmHw(**p) for n, p in d["pnm"].items()},
                          links={n: LinkHw(**k) for n, k in d["links"].items()}, models={})
    return (FleetSim(FleetSpec.model_validate(d["spec"]), cat, latency_from_json(d["latency"]),
                     config_from_json(d["config"])),
            requests_from_json(d["requests"]))


def result_to_json(res: FleetResult) -> dict[str, Any]:
    return {"instances": [[name, run.to_json(), config_to_json(run.config)]
                          for name, run in res.instances],
            "nodes": [asdict(n) for n in res.nodes],
            "node_samples": [list(s) for s in res.node_samples],
            "dispatch": res.dispatch, "orchestrator": res.orchestrator,
            "t_inputs": [[t, list(x)] for t, x in res.t_inputs],
            "switch_peak_load": res.switch_peak_load,
            "pool_activity": asdict(res.pool_activity),
            "wall_s": res.wall_s, "cpu_s": res.cpu_s}


def result_from_json(d: dict[str, Any]) -> FleetResult:
    out = FleetResult([(name, RunResult.from_json(config_from_json(cfg), run))
                       for name, run, cfg in d["instances"]],
                      [NodeResult(**n) for n in d["nodes"]],
                      [(t, used, load) for t, used, load in d["node_samples"]],
                      d["dispatch"], d["orchestrator"],
                      [(t, tuple(x)) for t, x in d["t_inputs"]])
    out.wall_s, out.cpu_s = d["wall_s"], d["cpu_s"]
    out.switch_peak_load = d["switch_peak_load"]
    out.pool_activity = Activity(**d.get("pool_activity", {}))
    return out


# -- the two processes -------------------------------------------------------------------------
def run_fleet_in_vllm_env(fleet: FleetSim, requests: list[TraceRequest],
                          progress: Callable[[float], None] | None = None) -> FleetResult:
    """The fleet run in one process of the vLLM environment, each instance with its own vLLM
    scheduler. The requests are checked here first (refused by trace line, as under ours)."""
    from nelssa.emu.policy.vllm_scheduler import VllmEnvError, vllm_env, vllm_python

    ours = FleetSim(fleet.spec, fleet._catalog, fleet.lm,
                    replace(fleet.cfg, scheduler=SchedulerKind.OURS))
    ours.check(requests)
    python = vllm_python()
    job = json.dumps(fleet_to_json(fleet, requests))
    proc = subprocess.run([str(python), "-m", "nelssa.emu.serving.fleet_vllm"], input=job,
                          capture_output=True, text=True, env=vllm_env(), check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise VllmEnvError(f"the vLLM-driven fleet run failed (exit {proc.returncode}):\n{tail}")
    for line in proc.stderr.splitlines():
        log.debug("vllm: %s", line)
    if progress is not None:
        progress(1.0)
    return result_from_json(json.loads(proc.stdout))


def _run_here(fleet: FleetSim, requests: list[TraceRequest],
              progress: Callable[[float], None] | None = None) -> FleetResult:
    return fleet.run(requests, progress=progress)


RUNNERS: dict[SchedulerKind, Callable[..., FleetResult]] = {
    SchedulerKind.OURS: _run_here, SchedulerKind.VLLM: run_fleet_in_vllm_env}
"""Where a fleet runs, by its scheduler: ours in this process, vLLM's in its environment's."""


def run_fleet(fleet: FleetSim, requests: list[TraceRequest],
              progress: Callable[[float], None] | None = None) -> FleetResult:
    """The fleet run with its configuration's scheduler (``RUNNERS``)."""
    return RUNNERS[fleet.cfg.scheduler](fleet, requests, progress)


def main() -> int:
    """The vLLM environment's end: a fleet run as JSON on stdin, its result on stdout."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    fleet, requests = fleet_from_json(json.load(sys.stdin))
    json.dump(result_to_json(fleet.run(requests)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
