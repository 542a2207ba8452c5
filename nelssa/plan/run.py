"""Running a plan: each mix's capacity search a job, on a local process pool or a Ray cluster
(the sweep's executors, ``sweep.run.pool_map`` / ``ray_map``), each finished point appended to
``points.jsonl`` with its key and fully resolved configuration, so that a plan run again into
the same folder skips the points it holds (a failed point is run again)."""

from __future__ import annotations

import io
import itertools
import json
import logging
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nelssa.emu.files import TRACE_BYTES, open_bounded
from nelssa.plan.search import (
    ADAPTIVE,
    CROSSOVER,
    GPU_ONLY,
    Mix,
    PlanSettings,
    PointResult,
    point_from_json,
    point_json,
    point_key,
    resolved,
    search_point,
)

log = logging.getLogger(__name__)

STORE = "points.jsonl"
"""Each evaluated point, a JSON object a line: key, resolved configuration, the search."""


@dataclass(frozen=True)
class PlanSpace:
    """The fleet mixes a plan searches: every combination of the values below, the GPU-only
    fleets (``nodes`` 0) once per decode and prefill count."""

    decode: tuple[int, ...] = (1, 2, 4)
    """Decode instances (one GPU each)."""
    prefill_gpus: tuple[int, ...] = (0,)
    """Prefill GPUs of a shared pool (0: each instance prefills on its own GPU)."""
    nodes: tuple[int, ...] = (0, 1, 2)
    """PNM nodes (0: the GPU-only baseline)."""
    devices: tuple[int, ...] = (2, 4)
    """PNM devices per node."""
    policies: tuple[str, ...] = (CROSSOVER, ADAPTIVE)
    """T_input policies: crossover (static, the crossover of the node's devices),
    fleet-adaptive (the fleet orchestrator), or a number of tokens (static)."""

    def mixes(self) -> list[Mix]:
        out: list[Mix] = []
        for d, p, n in itertools.product(self.decode, self.prefill_gpus, self.nodes):
            if n == 0:
                out.append(Mix(d, p, 0, 0, GPU_ONLY))
                continue
            out += [Mix(d, p, n, v, pol) for v, pol in itertools.product(self.devices,
                                                                          self.policies)]
        return list(dict.fromkeys(out))


@dataclass(frozen=True)
class PlanJob:
    """One mix's search (picklable: it crosses to processes and to Ray)."""

    key: str
    mix: Mix
    settings: PlanSettings
    config: dict[str, Any] = field(compare=False)


def run_job(job: PlanJob) -> dict[str, Any]:
    """One mix's search as its stored line (``error`` instead of the search when it raised:
    the plan goes on)."""
    try:
        return point_json(search_point(job.key, job.mix, job.settings), job.config)
    except Exception as e:  # recorded, the plan goes on
        log.debug("point %s failed:\n%s", job.key, traceback.format_exc())
        return {"key": job.key, "config": job.config, "error": f"{type(e).__name__}: {e}"}


def read_store(path: Path) -> dict[str, dict[str, Any]]:
    """The points a store holds, by key (a torn or foreign line is skipped)."""
    if not path.exists():
        return {}
    out: dict[str, dict[str, Any]] = {}
    with open_bounded(path, "points file", TRACE_BYTES) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8"):
            try:
                doc = json.loads(line)
                out[doc["key"]] = doc
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by an interruption
    return out


Mapper = Callable[[list[PlanJob], Callable[[PlanJob], dict[str, Any]]], Iterator[dict[str, Any]]]
"""Where jobs run: a job list and the function to run on each in, results as they finish."""


def executor(workers: int, ray_address: str | None) -> Mapper:
    """A process pool of ``workers``, or Ray at ``ray_address`` (``local``: started here)."""
    from nelssa.sweep.run import pool_map, ray_map

    if ray_address:
        return lambda jobs, fn: ray_map(jobs, ray_address, workers, fn)
    return lambda jobs, fn: pool_map(jobs, workers, fn)


@dataclass
class PlanOutcome:
    points: list[PointResult]
    """Every mix's point that holds a search, in the space's order."""
    failed: list[tuple[Mix, str]]
    ran: int
    """Points searched now (the others were in the store)."""
    cpu_s: float
    """CPU seconds of the searches run now (each worker's own)."""
    wall_s: float
    probes: int
    """Fleet runs of the searches run now."""


def plan_jobs(settings: PlanSettings, mixes: list[Mix]) -> list[PlanJob]:
    out = []
    for mix in mixes:
        config = resolved(settings, mix)
        out.append(PlanJob(point_key(config), mix, settings, config))
    return out


def run_plan(settings: PlanSettings, mixes: list[Mix], out: Path, mapper: Mapper,
             progress: Callable[[int, int], None] | None = None,
             budget_s: float | None = None) -> PlanOutcome:
    """Search every mix not yet in ``out``/points.jsonl; the store holds each point as it
    finishes. With ``budget_s``, no search starts after that many seconds (those running
    finish and are stored; a second run resumes the rest)."""
    out.mkdir(parents=True, exist_ok=True)
    store = out / STORE
    # a point that met a rate but holds no measured power was stored before the fleet's
    # energy model priced it: searched again
    have = {k: d for k, d in read_store(store).items()
            if "error" not in d and not (d.get("rate", 0) > 0 and d.get("power") is None)}
    jobs = plan_jobs(settings, mixes)
    todo = list({j.key: j for j in jobs if j.key not in have}.values())
    if budget_s is not None and budget_s <= 0:
        todo = []  # no time left: what the store holds
    t0 = time.perf_counter()
    cpu = 0.0
    probes = 0
    failed: dict[str, str] = {}
    with store.open("a") as f:
        for i, doc in enumerate(mapper(todo, run_job), 1):
            f.write(json.dumps(doc, sort_keys=True) + "\n")
            f.flush()  # an interruption loses at most the point being written
            if "error" in doc:
                failed[doc["key"]] = doc["error"]
            else:
                have[doc["key"]] = doc
                cpu += doc["cpu_s"]
                probes += len(doc["probes"])
            if progress is not None:
                progress(i, len(todo))
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                break  # the mapper closed: no new search starts
    points = [point_from_json(have[j.key]) for j in jobs if j.key in have]
    return PlanOutcome(points, [(j.mix, failed[j.key]) for j in jobs if j.key in failed],
                       len(todo), cpu, time.perf_counter() - t0, probes)
