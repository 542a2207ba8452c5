"""Running a sweep: each point one serving-emulator replay, on a local process pool or a Ray
cluster, results appended to a CSV as they come (so an interrupted sweep resumes where it
stopped), a point that fails recorded with its error while the sweep goes on.

A point's key is a hash of its resolved configuration (``Spec.key``: the shared settings with
the trace's SHA-256, the point, the values of the hardware entries it names), so a point
resumes only when nothing it depends on changed. ``results.csv`` holds the rows of every spec
run into the folder (a second spec adds its rows, by key), and ``configs.jsonl`` each key's
resolved configuration and the code (version, commit) that ran it.

A point's result depends only on the point and the spec's shared settings (the replay is
deterministic), never on where it ran: a pool and Ray give the same rows but ``wall_s``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from nelssa.emu.files import TRACE_BYTES, open_bounded
from nelssa.sweep.metrics import METRICS
from nelssa.sweep.spec import PARAMS, Spec

log = logging.getLogger(__name__)

CONFIGS = "configs.jsonl"
"""Each key's resolved configuration, a JSON object a line."""
HARDWARE = {"gpu": "gpus", "pnm": "pnm", "model": "models", "link": "links"}
"""The point parameters that name hardware entries, and their catalog sections."""
COLUMNS = ("key", "status", *PARAMS, *METRICS, "wall_s", "error")


@dataclass(frozen=True)
class SweepJob:
    """What a worker needs for one point (picklable: it crosses to processes and to Ray)."""

    key: str
    point: dict[str, Any]
    settings: dict[str, Any]
    hardware: tuple[str, ...]


@cache
def _trace(path: str, limit: int | None, hash_ids: bool) -> list[Any]:
    from nelssa.emu.serving.workload import load_trace

    return load_trace(path, limit, hash_ids=hash_ids)


@cache
def _catalog(files: tuple[str, ...]) -> Any:
    from nelssa.emu.latency.hardware import HardwareCatalog

    return HardwareCatalog.load(*files)


def run_point(job: SweepJob) -> dict[str, Any]:
    """One replay; the row of the results table (``status`` ``failed`` with the error if it
    raised)."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"key": job.key, **job.point}
    try:
        row.update(_measure(job))
        row["status"] = "ok"
    except Exception as e:  # a point that fails is recorded, the sweep goes on
        row["status"] = "failed"
        row["error"] = f"{type(e).__name__}: {e}"
        log.debug("point %s failed:\n%s", job.key, traceback.format_exc())
    row["wall_s"] = round(time.perf_counter() - t0, 3)
    return row


def _measure(job: SweepJob) -> dict[str, Any]:
    from nelssa.emu.latency.model import LatencyModel, Sparsity
    from nelssa.emu.serving.config import MetricsConfig, SchedulerKind, ServingConfig
    from nelssa.emu.serving.metrics import summarize
    from nelssa.emu.serving.sim import ServingSim
    from nelssa.emu.serving.workload import poisson

    p, st = job.point, job.settings
    cat = _catalog(job.hardware)
    lm = LatencyModel(cat.get("gpus", p["gpu"]), cat.get("pnm", p["pnm"]),
                      cat.get("models", p["model"]), replace(Sparsity(), selection=p["selection"]),
                      cat.get("links", p["link"]))
    reqs = _trace(st["trace"], st["limit"], True)
    if p["rate"] != "trace":
        reqs = poisson(reqs, p["rate"], st["seed"])
    cfg = ServingConfig(mode=p["mode"], devices=p["devices"], max_running=p["max_running"],
                        prefill=p["prefill"], migration=p["migration"] and p["mode"] == "nelssa",
                        t_input=None if isinstance(p["t_input"], str) else p["t_input"],
                        adaptive=p["t_input"] == "adaptive",
                        tpot_budget=p["tpot_budget"], shed_late=p["shed_late"],
                        scheduler=SchedulerKind(st["scheduler"]))
    run, _ = ServingSim(lm, cfg).run_admitted(reqs)
    s = summarize(run, MetricsConfig(goodput_ttft_s=st["slo"]["ttft_s"],
                                     goodput_tpot_s=st["slo"]["tpot_s"]))
    g, itl = s["goodput"], s["itl_s"] or {}
    return {"requests": s["requests"], "pnm_requests": s["pnm_requests"],
            "t_input_tokens": s["t_input"], "duration_s": s["duration_s"],
            "decode_throughput_tps": s["decode_throughput_tps"],
            "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
            "tpot_p50_s": s["tpot_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
            "slo_attainment": g["attainment"], "slo_met": g["met"],
            "goodput_rps": g["goodput_rps"], "shed": s["shed"],
            "preemptions": s["preemptions"], "migrations": s["migrations"],
            "cost_devices": p["devices"] if p["mode"] == "nelssa" else 0,
            "rejected": s["rejected"], "request_throughput_rps": s["request_throughput_rps"],
            "output_throughput_tps": s["output_throughput_tps"],
            "itl_p50_s": itl.get("p50"), "itl_p99_s": itl.get("p99"),
            "e2el_p50_s": s["e2el_s"]["p50"], "e2el_p99_s": s["e2el_s"]["p99"],
            "overloaded": s["overload"]["overloaded"]}


# -- where the points run -------------------------------------------------------------------------
def pool_map(jobs: list[Any], workers: int, fn: Callable[[Any], Any] = run_point
             ) -> Iterator[Any]:
    """``fn`` over ``jobs`` on ``workers`` local processes, results as they finish (in this
    process when there is one worker or one job)."""
    if workers == 1 or len(jobs) == 1:
        for job in jobs:
            yield fn(job)
        return
    with ProcessPoolExecutor(workers) as pool:
        todo = iter(jobs)
        running: set[Future[Any]] = set()
        while True:  # a bounded number in flight: results come back as they finish
            while len(running) < 2 * workers and (job := next(todo, None)) is not None:
                running.add(pool.submit(fn, job))
            if not running:
                return
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                yield f.result()


RAY_AUTH = "RAY_AUTH_MODE"
"""Ray's own setting of its token authentication: when it is unset Ray picks a mode and prints
a notice about it at every start; set, it says nothing."""


def ray_auth_mode(address: str, environ: dict[str, str] | os._Environ[str],
                  home: Path) -> str | None:
    """The ``RAY_AUTH_MODE`` a sweep gives Ray: the user's own if set; else what Ray would pick
    by itself, stated, so that it prints no notice: ``token`` for a cluster started here (Ray
    makes the token), or for a cluster joined with a token of this user's; None (Ray's
    default, no notice) for one joined without."""
    if RAY_AUTH in environ:
        return environ[RAY_AUTH]
    if address == "local" or (home / ".ray" / "auth_token").exists() or any(
            k in environ for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return "token"
    return None


def ray_map(jobs: list[Any], address: str, workers: int, fn: Callable[[Any], Any] = run_point
            ) -> Iterator[Any]:
    """``fn`` over ``jobs`` on a Ray cluster (``local``: one started here with ``workers``
    CPUs), results as they finish; RuntimeError when Ray is not installed."""
    mode = ray_auth_mode(address, os.environ, Path.home())
    if mode is not None and "ray" not in sys.modules:  # Ray reads it once, when imported
        os.environ[RAY_AUTH] = mode  # Ray's setting: its token notice not printed
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs Ray (pip install ray; make venv installs it)") from None
    local = address == "local"
    if local:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(num_cpus=1)(fn)
        todo = iter(jobs)
        running: list[Any] = []
        while True:
            while len(running) < 2 * workers and (job := next(todo, None)) is not None:
                running.append(remote.remote(job))
            if not running:
                return
            done, running = ray.wait(running, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        ray.shutdown()


# -- the results table ----------------------------------------------------------------------------
def read_rows(path: Path) -> dict[str, dict[str, str]]:
    """Rows already in a results file, by key (a row cut short by an interruption is
    dropped)."""
    if not path.exists():
        return {}
    rows = {}
    with open_bounded(path, "results file", TRACE_BYTES) as raw:
        for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline="")):
            if None in row or any(v is None for v in row.values()) or not row.get("key"):
                continue  # a torn last line
            rows[row["key"]] = row
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(round(v, 9))
    return str(v)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({c: _cell(row.get(c)) for c in COLUMNS})
    os.replace(tmp, path)


@dataclass
class SweepOutcome:
    rows: list[dict[str, str]]
    """Every point's row, in the spec's order."""
    ran: int
    """Points run now (the rest were in the results file already)."""
    failed: int
    wall_s: float


def hardware_values(point: dict[str, Any], hardware: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values of the hardware entries ``point`` names (from the presets and the
    ``hardware`` files), not only their names."""
    from nelssa.provenance import jsonable

    cat = _catalog(hardware)
    return {name: jsonable(cat.get(section, point[name])) for name, section in HARDWARE.items()}


def point_keys(spec: Spec, hardware: tuple[str, ...] = ()) -> list[str]:
    """Each point's key, in the spec's order (``Spec.key`` over its resolved hardware)."""
    return [spec.key(p, hardware_values(p, hardware)) for p in spec.points]


def _config_line(spec: Spec, key: str, point: dict[str, Any],
                 hardware: tuple[str, ...]) -> str:
    from nelssa.provenance import code_version, file_record, jsonable

    return json.dumps(jsonable({
        "key": key, "spec": str(spec.path), "settings": spec.settings(), "point": point,
        "hardware": hardware_values(point, hardware),
        "hardware_files": [file_record(f) for f in hardware], "nelssa": code_version()}),
        sort_keys=True) + "\n"


def known_configs(path: Path) -> set[str]:
    """Keys whose configuration ``configs.jsonl`` holds already."""
    if not path.exists():
        return set()
    keys = set()
    with open_bounded(path, "configs file", TRACE_BYTES) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8"):
            try:
                keys.add(json.loads(line)["key"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line
    return keys


def run_sweep(spec: Spec, out: Path, workers: int = 1, ray_address: str | None = None,
              hardware: tuple[str, ...] = (),
              progress: Callable[[int, int], None] | None = None) -> SweepOutcome:
    """Run the points of ``spec`` not yet in ``out``/results.csv (a point that failed there is
    run again); the file holds every point's row when this returns, and after each point
    while it runs, beside the rows of other specs run into ``out`` before."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.csv"
    before = read_rows(path)
    keyed = list(zip(point_keys(spec, hardware), spec.points, strict=True))
    mine = {k for k, _ in keyed}
    others = [r for k, r in before.items() if k not in mine]  # other specs' rows stay
    have = {k: r for k, r in before.items() if k in mine and r["status"] == "ok"}
    todo = {k: p for k, p in keyed if k not in have}  # a point given twice runs once
    jobs = [SweepJob(k, p, spec.settings(), hardware) for k, p in todo.items()]
    results = dict(have)
    start = time.perf_counter()
    write_rows(path, others + list(have.values()))
    configs = out / CONFIGS
    logged = known_configs(configs)
    with configs.open("a") as f:
        for k, p in keyed:
            if k not in logged:
                f.write(_config_line(spec, k, p, hardware))
                logged.add(k)
    source = (ray_map(jobs, ray_address, workers) if ray_address
              else pool_map(jobs, workers))
    failed = 0
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        for i, row in enumerate(source, 1):
            cells = {c: _cell(row.get(c)) for c in COLUMNS}
            w.writerow(cells)
            f.flush()  # an interruption loses at most the point being written
            results[row["key"]] = cells
            failed += row["status"] != "ok"
            if progress is not None:
                progress(i, len(jobs))
    ordered = [results[k] for k, _ in dict(keyed).items() if k in results]
    write_rows(path, others + ordered)
    return SweepOutcome(ordered, len(jobs), failed, time.perf_counter() - start)
