"""Runs too long to keep: finished requests written out as they finish and dropped, their metrics
kept as sketches of bounded size, so a run's memory is bounded by the requests in flight (issue
42: a million requests on a fleet of 64 instances).

``QuantileSketch`` is a log-bucketed histogram (DDSketch's scheme: bucket ``i`` holds the values
in (gamma^(i-1), gamma^i]): every quantile it returns is within ``rel`` of the true one, in
memory that grows with the logarithm of the values' range, not with their count.
``RecordSink`` writes each finished or rejected request as a row of ``requests.csv`` (the
columns of ``records.py``, as a whole run writes them) and each time-series sample to
``samples.csv``.
"""

from __future__ import annotations

import csv
import math
from array import array
from dataclasses import dataclass, field, fields
from operator import attrgetter
from pathlib import Path
from typing import IO, Any

import numpy as np

from nelssa.emu.serving.config import MetricsConfig
from nelssa.emu.serving.itl import itl_stats
from nelssa.emu.serving.metrics import slo_met
from nelssa.emu.serving.records import columns, csv_cells, finished_cells, rejected_row
from nelssa.emu.serving.results import RequestResult, Sample
from nelssa.emu.serving.sim import Rejection

__all__ = ["QuantileSketch", "RecordSink"]

_SAMPLE_FIELDS = attrgetter(*(f.name for f in fields(Sample)))
"""A sample's fields in order (all numbers or None: what ``astuple`` gives, without its
recursive copy)."""


@dataclass
class QuantileSketch:
    """Quantiles of positive values to a relative accuracy ``rel``; zeros are counted apart."""

    rel: float = 0.005
    buckets: dict[int, int] = field(default_factory=dict)
    zeros: int = 0
    count: int = 0
    total: float = 0.0
    lo: float = math.inf
    hi: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.rel < 1:
            raise ValueError(f"rel must be in (0, 1), got {self.rel}")
        self._gamma = (1 + self.rel) / (1 - self.rel)
        self._log_gamma = math.log(self._gamma)

    def add(self, x: float) -> None:
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"a sketch takes finite values >= 0, got {x}")
        self.count += 1
        self.total += x
        self.lo, self.hi = min(self.lo, x), max(self.hi, x)
        if x == 0.0:
            self.zeros += 1
            return
        i = math.ceil(math.log(x) / self._log_gamma)
        self.buckets[i] = self.buckets.get(i, 0) + 1

    def add_many(self, values: np.ndarray) -> None:
        """Every value of ``values`` (finite, >= 0), in one pass."""
        if not values.size:
            return
        if not (np.isfinite(values).all() and (values >= 0).all()):
            raise ValueError("a sketch takes finite values >= 0")
        self.count += int(values.size)
        self.total += float(values.sum())
        self.lo, self.hi = min(self.lo, float(values.min())), max(self.hi, float(values.max()))
        zeros = int(values.size - np.count_nonzero(values))
        self.zeros += zeros
        if zeros == values.size:
            return
        # (in place, a pass less where there is no zero: a streamed run's every gap comes here)
        x = np.log(values[values > 0] if zeros else values)
        x /= self._log_gamma
        np.ceil(x, out=x)
        idx = x.astype(np.int64)
        lo = int(idx.min())
        idx -= lo
        n = np.bincount(idx)  # (a count per bucket without sorting: buckets are few)
        b = self.buckets
        for i in np.flatnonzero(n).tolist():
            b[i + lo] = b.get(i + lo, 0) + int(n[i])

    def quantile(self, q: float) -> float:
        """The value at quantile ``q`` (0..1); NaN when empty."""
        if not self.count:
            return math.nan
        rank = q * (self.count - 1)
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen > rank:
                # the bucket's value of least relative error, kept inside what was seen
                x = 2 * self._gamma ** i / (self._gamma + 1)
                return min(max(x, self.lo), self.hi)
        return self.hi

    def stats(self) -> dict[str, float]:
        """Mean and the percentiles a summary shows (``metrics._stats``'s keys)."""
        return {"mean": self.total / self.count if self.count else math.nan,
                "p50": self.quantile(0.50), "p95": self.quantile(0.95),
                "p99": self.quantile(0.99)}


class RecordSink:
    """Where a streamed run's requests and samples go: ``requests.csv`` and ``samples.csv`` in
    ``folder``, and sketches of TTFT, TPOT, end-to-end latency and inter-token latency (every
    gap of every request, as ``vllm bench serve`` takes ITL)."""

    def __init__(self, folder: str | Path, metrics: MetricsConfig | None = None,
                 rel: float = 0.005, mode: str = "nelssa") -> None:
        metrics = metrics or MetricsConfig()
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.metrics, self.percentiles, self.mode = metrics, metrics.all_percentiles, mode
        self._slo = (metrics.goodput_ttft_s, metrics.goodput_tpot_s, metrics.goodput_e2el_s)
        self._ttft, self._tpot, self._e2e, self.itl = (QuantileSketch(rel) for _ in range(4))
        self.requests = 0
        """Requests finished."""
        self.rejected = 0
        self.pnm_requests = 0
        self.met = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self._itl_buf = array("d")
        """Gaps not yet in the ITL sketch."""
        self._ttft_buf, self._tpot_buf, self._e2e_buf = array("d"), array("d"), array("d")
        """Latencies not yet in their sketches."""
        self._npct = len(self.percentiles)
        self._files: list[IO[str]] = []
        self._cols = columns(self.percentiles)
        self._req = self._writer("requests.csv", tuple(self._cols))
        self._smp = self._writer("samples.csv",
                                 ("instance", *(f.name for f in fields(Sample))))

    def _writer(self, name: str, header: tuple[str, ...]) -> Any:
        fh = (self.folder / name).open("w", newline="")
        self._files.append(fh)
        w = csv.writer(fh)
        w.writerow(header)
        return w

    def request(self, instance: str, r: RequestResult, line: int | str = "",
                gaps: array | None = None) -> None:
        """One finished request (``gaps``: its inter-token gaps, if they were recorded): a
        row, and its figures into the sketches."""
        self._req.writerow(finished_cells(self.mode, instance, r, line,
                                          itl_stats(gaps, self.percentiles), self._npct))
        tpot = r.tpot_s
        self.requests += 1
        self.pnm_requests += r.tier == "pnm"
        self.input_tokens += r.input_len
        self.output_tokens += r.output_len
        # into the sketches a batch at a time (their cost is per call)
        self._ttft_buf.append(r.ttft_s)
        self._e2e_buf.append(r.finish_s - r.arrival_s)
        if tpot is not None:
            self._tpot_buf.append(tpot)
        if gaps is not None:
            self._itl_buf.extend(gaps)
            if len(self._itl_buf) >= 1 << 18:
                self._flush_itl()
        if len(self._ttft_buf) >= 1 << 14:
            self._flush()
        self.met += slo_met(r, *self._slo)

    def _flush_itl(self) -> None:
        if self._itl_buf:
            self.itl.add_many(np.maximum(np.frombuffer(self._itl_buf, dtype=np.float64), 0.0))
        self._itl_buf = array("d")

    def _flush(self) -> None:
        """The buffered TTFT, TPOT and end-to-end latencies into their sketches (a negative
        one, a clock's rounding, as 0)."""
        for sketch, buf in ((self._ttft, self._ttft_buf), (self._tpot, self._tpot_buf),
                            (self._e2e, self._e2e_buf)):
            if buf:
                sketch.add_many(np.maximum(np.frombuffer(buf, dtype=np.float64), 0.0))
        self._ttft_buf, self._tpot_buf, self._e2e_buf = array("d"), array("d"), array("d")

    def itl_stats(self) -> dict[str, float]:
        """ITL over every gap of every request so far."""
        self._flush_itl()
        return self.itl.stats()

    @property
    def ttft(self) -> QuantileSketch:
        """TTFT of the requests so far."""
        self._flush()
        return self._ttft

    @property
    def tpot(self) -> QuantileSketch:
        """TPOT of the requests so far (those of two output tokens or more)."""
        self._flush()
        return self._tpot

    @property
    def e2e(self) -> QuantileSketch:
        """End-to-end latency of the requests so far."""
        self._flush()
        return self._e2e

    def reject(self, x: Rejection) -> None:
        """A request refused before it ran (it misses the SLO)."""
        self._req.writerow(csv_cells(rejected_row(self.mode, x), self._cols))
        self.rejected += 1

    def sample(self, instance: str, s: Sample) -> None:
        self._smp.writerow((instance, *_SAMPLE_FIELDS(s)))  # (astuple's, of its scalars)

    @property
    def attainment(self) -> float:
        """Share of the requests (finished and rejected) that met the SLO."""
        n = self.requests + self.rejected
        return self.met / n if n else math.nan

    def close(self) -> None:
        self._flush_itl()
        self._flush()
        for fh in self._files:
            fh.close()
        self._files = []

    def __enter__(self) -> RecordSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
