"""Runs too long to keep: finished requests written out as they finish and dropped, their metrics
kept as sketches of bounded size, so a run's memory is bounded by the requests in flight (issue
42: a million requests on a fleet of 64 instances).

``QuantileSketch`` is a log-bucketed histogram (DDSketch's scheme: bucket ``i`` holds the values
in (gamma^(i-1), gamma^i]): every quantile it returns is within ``rel`` of the true one, in
memory that grows with the logarithm of the values' range, not with their count.
``RecordSink`` writes each finished request as a CSV row (the columns of Vidur's
request_metrics.csv and vLLM's saved results) and each time-series sample to a second CSV.
"""

from __future__ import annotations

import csv
import math
from dataclasses import astuple, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from nelssa.emu.policy.slo import MLPERF_SLO, Slo
from nelssa.emu.serving.results import RequestResult, Sample

__all__ = ["REQUEST_COLUMNS", "QuantileSketch", "RecordSink"]

REQUEST_COLUMNS = ("rid", "instance", "tier", "input_len", "output_len", "arrival_s",
                   "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "preemptions",
                   "migrated")
"""The per-request CSV's columns (times in seconds of emulated time)."""


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
    """Where a streamed run's finished requests and samples go: CSV files in ``folder``
    (``requests.csv``, ``samples.csv``), and sketches of TTFT, TPOT and end-to-end latency."""

    def __init__(self, folder: str | Path, slo: Slo = MLPERF_SLO, rel: float = 0.005) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.slo = slo
        self.ttft, self.tpot, self.e2e = (QuantileSketch(rel), QuantileSketch(rel),
                                          QuantileSketch(rel))
        self.requests = 0
        self.pnm_requests = 0
        self.met = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self._files: list[IO[str]] = []
        self._req = self._writer("requests.csv", REQUEST_COLUMNS)
        self._smp = self._writer("samples.csv",
                                 ("instance", *(f.name for f in fields(Sample))))

    def _writer(self, name: str, header: tuple[str, ...]) -> Any:
        fh = (self.folder / name).open("w", newline="")
        self._files.append(fh)
        w = csv.writer(fh)
        w.writerow(header)
        return w

    def request(self, instance: str, r: RequestResult) -> None:
        """One finished request: a row, and its figures into the sketches."""
        ttft, tpot, e2e = r.ttft_s, r.tpot_s, r.finish_s - r.arrival_s
        self._req.writerow((r.rid, instance, r.tier, r.input_len, r.output_len,
                            repr(r.arrival_s), repr(r.first_token_s), repr(r.finish_s),
                            repr(ttft), "" if tpot is None else repr(tpot), repr(e2e),
                            r.preemptions, int(r.migrated)))
        self.requests += 1
        self.pnm_requests += r.tier == "pnm"
        self.input_tokens += r.input_len
        self.output_tokens += r.output_len
        self.ttft.add(max(ttft, 0.0))
        self.e2e.add(max(e2e, 0.0))
        if tpot is not None:
            self.tpot.add(max(tpot, 0.0))
        self.met += self.slo.meets(ttft, tpot)

    def sample(self, instance: str, s: Sample) -> None:
        self._smp.writerow((instance, *astuple(s)))

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        self._files = []

    def __enter__(self) -> RecordSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
