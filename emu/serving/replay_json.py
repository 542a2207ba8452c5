"""A replay's configuration and requests as JSON, for the vLLM environment's process
(``vllm_env.py`` sends them, ``vllm_sched.py`` rebuilds the replay there)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from nelssa.emu.serving.workload import TraceRequest

if TYPE_CHECKING:
    from nelssa.emu.serving.sim import ServingSim


def job_to_json(sim: ServingSim, requests: list[TraceRequest]) -> dict[str, Any]:
    lm = sim.lm
    cfg = {f.name: getattr(sim.cfg, f.name) for f in fields(sim.cfg)}
    cfg["scheduler"] = sim.cfg.scheduler.value
    # the PNM tier as its figures: the vLLM environment has no device model to derive them
    return {"config": cfg, "gpu": asdict(lm.gpu), "pnm": {**asdict(lm.pnm), "device": None},
            "model": asdict(lm.model), "link": asdict(lm.link) if lm.link else None,
            "sparsity": asdict(lm.sparsity),
            "requests": [[r.rid, r.arrival_s, r.input_len, r.output_len, r.line,
                          list(r.hash_ids) if r.hash_ids is not None else None]
                         for r in requests]}


def job_from_json(job: dict[str, Any]) -> tuple[ServingSim, list[TraceRequest]]:
    from nelssa.emu.latency.hardware import GpuHw, LinkHw, ModelHw, PnmHw
    from nelssa.emu.latency.model import LatencyModel, Sparsity
    from nelssa.emu.serving.config import SchedulerKind, ServingConfig
    from nelssa.emu.serving.sim import ServingSim

    lm = LatencyModel(GpuHw(**job["gpu"]), PnmHw(**job["pnm"]), ModelHw(**job["model"]),
                      Sparsity(**job["sparsity"]),
                      LinkHw(**job["link"]) if job["link"] else None)
    cfg = ServingConfig(**{**job["config"],
                           "scheduler": SchedulerKind(job["config"]["scheduler"])})
    reqs = [TraceRequest(rid, t, i, o, line, tuple(h) if h is not None else None)
            for rid, t, i, o, line, h in job["requests"]]
    return ServingSim(lm, cfg), reqs
