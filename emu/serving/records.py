"""Per-request records of a run, as ``vllm bench serve --save-result`` and Vidur's
``request_metrics.csv`` keep them: one row per request of the trace (finished, rejected before
the run, or shed waiting past its TTFT SLO), with its arrival, tier and instance, TTFT, TPOT,
inter-token latency statistics, end-to-end latency, preemptions and migrations. Written as
``requests.csv``, and ``requests.parquet`` as well where pyarrow is installed."""

from __future__ import annotations

import csv
import importlib.util
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nelssa.emu.serving.itl import pkey, request_itl
from nelssa.emu.serving.results import RequestResult, RunResult
from nelssa.emu.serving.sim import Rejection
from nelssa.emu.serving.workload import TraceRequest

log = logging.getLogger(__name__)

FINISHED, REJECTED, SHED = "finished", "rejected", "shed"
BASE = ("mode", "instance", "request_id", "trace_line", "status", "arrival_s", "input_tokens",
        "output_tokens", "tier", "first_token_s", "finish_s", "ttft_s", "tpot_s",
        "itl_mean_s")
"""The columns before the ITL percentiles; ``TAIL`` follows them."""
TAIL = ("itl_max_s", "e2el_s", "preemptions", "migrations", "error")


def float_cell(v: float) -> str:
    """A finite float as requests.csv writes it: ``repr(round(v, 9))``. Between 1e-4 and 1e6
    in magnitude that is ``v`` to 9 decimals (correctly rounded, as ``round`` rounds) less
    its trailing zeros: the doubles there lie closer than 1e-9 apart, so no shorter decimal
    reads back as the same double, and ``repr`` writes no exponent; formatted so, at a third
    of the cost (a streamed run writes a dozen a request). Elsewhere, ``repr(round(v, 9))``."""
    if 1e-4 <= (v if v >= 0.0 else -v) < 1e6:
        s = f"{v:.9f}".rstrip("0")
        return s + "0" if s[-1] == "." else s
    return repr(round(v, 9))


def columns(percentiles: Iterable[float]) -> list[str]:
    return [*BASE, *(f"itl_{pkey(p)}_s" for p in percentiles), *TAIL]


def request_rows(mode: str, runs: list[tuple[str, RunResult]], admitted: list[TraceRequest],
                 rejected: list[Rejection], percentiles: tuple[float, ...]
                 ) -> list[dict[str, Any]]:
    """The rows of one mode: each instance's finished requests (``runs``: instance name and
    its run; one run of name "" for a single instance), the admitted ones with no result
    (shed), the rejected ones; by request id."""
    rows: dict[int, dict[str, Any]] = {}
    lines = {r.rid: r.line for r in admitted}
    for name, run in runs:
        gaps = run.token_gaps or {}
        for r in run.results:
            itl = request_itl(gaps.get(r.rid), percentiles) if run.token_gaps is not None else {}
            rows[r.rid] = finished_row(mode, name, r, lines.get(r.rid, ""), itl, percentiles)
    for r in admitted:
        if r.rid not in rows:
            rows[r.rid] = _unserved(mode, r, SHED, "waited past the TTFT SLO for its first "
                                    "token (shed_late)")
    for x in rejected:
        rows[x.request.rid] = _unserved(mode, x.request, REJECTED, x.reason)
    return [rows[k] for k in sorted(rows)]


def finished_row(mode: str, instance: str, r: RequestResult, line: int | str,
                 itl: dict[str, float], percentiles: tuple[float, ...]) -> dict[str, Any]:
    """The row of a finished request (``itl``: its ``request_itl``, empty without gaps)."""
    row = {"mode": mode, "instance": instance, "request_id": r.rid, "trace_line": line,
           "status": FINISHED, "arrival_s": r.arrival_s, "input_tokens": r.input_len,
           "output_tokens": r.output_len, "tier": r.tier, "first_token_s": r.first_token_s,
           "finish_s": r.finish_s, "ttft_s": r.ttft_s, "tpot_s": r.tpot_s,
           "itl_mean_s": itl.get("mean"), "itl_max_s": itl.get("max"),
           "e2el_s": r.finish_s - r.arrival_s, "preemptions": r.preemptions,
           "migrations": int(r.migrated)}
    for p in percentiles:
        row[f"itl_{pkey(p)}_s"] = itl.get(pkey(p))
    return row


def finished_cells(mode: str, instance: str, r: RequestResult, line: int | str,
                   itl: tuple[float, float, list[float]] | None, n_percentiles: int
                   ) -> list[Any]:
    """``csv_cells(finished_row(...), columns(percentiles))`` without the row between
    (``itl``: ``itl_stats``'s figures, None without gaps): a streamed run writes a row a
    request."""
    if itl is None:
        mean = top = None
        at: list[Any] = [None] * n_percentiles
    else:
        mean, top, at = itl
    finite, cell = math.isfinite, float_cell
    return ["" if v is None else (cell(v) if finite(v) else "")
            if isinstance(v, float) else v
            for v in (mode, instance, r.rid, line, FINISHED, r.arrival_s, r.input_len,
                      r.output_len, r.tier, r.first_token_s, r.finish_s, r.ttft_s, r.tpot_s,
                      mean, *at, top, r.finish_s - r.arrival_s, r.preemptions,
                      int(r.migrated), None)]


def rejected_row(mode: str, x: Rejection) -> dict[str, Any]:
    return _unserved(mode, x.request, REJECTED, x.reason)


def csv_cells(row: dict[str, Any], cols: list[str]) -> list[Any]:
    """A row's cells in ``cols``' order, as requests.csv writes them (``_cell``, inlined: a
    streamed run writes a row a request)."""
    out: list[Any] = []
    add, get, finite = out.append, row.get, math.isfinite
    for c in cols:
        v = get(c)
        if v is None:
            add("")
        elif isinstance(v, float):
            add(float_cell(v) if finite(v) else "")
        else:
            add(v)
    return out


def _unserved(mode: str, r: TraceRequest, status: str, why: str) -> dict[str, Any]:
    return {"mode": mode, "instance": "", "request_id": r.rid, "trace_line": r.line or "",
            "status": status, "arrival_s": r.arrival_s, "input_tokens": r.input_len,
            "output_tokens": r.output_len, "error": why}


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, float):
        return float_cell(v)
    return v


def write_records(rows: list[dict[str, Any]], percentiles: tuple[float, ...],
                  out: Path) -> list[str]:
    """``out``/requests.csv (and requests.parquet with pyarrow); the names written."""
    cols = columns(percentiles)
    path = out / "requests.csv"
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for row in rows:
            w.writerow({c: _cell(row.get(c)) for c in cols})
    os.replace(tmp, path)
    names = [path.name]
    if parquet_available():
        _write_parquet(rows, cols, out / "requests.parquet")
        names.append("requests.parquet")
    return names


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def _write_parquet(rows: list[dict[str, Any]], cols: list[str], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def value(v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    text = {"mode", "instance", "status", "tier", "error"}
    table = pa.table({c: pa.array([value(r.get(c)) if c in text or r.get(c) != "" else None
                                   for r in rows],
                                  type=pa.string() if c in text else None) for c in cols})
    pq.write_table(table, path)
