"""Workloads: Mooncake traces (one JSON object per line: ``timestamp`` in ms, ``input_length``,
``output_length``, and ``hash_ids``, one id per 512-token block of the prompt), Poisson
resampling at a chosen rate (the paper's method), a long-request
fraction sweep, and injected bursts of long requests. Bad lines are refused by line number."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Request:
    rid: int
    arrival_s: float
    input_len: int
    output_len: int
    line: int = 0
    """Line of the trace it came from (0 when made up)."""
    hash_ids: tuple[int, ...] | None = None
    """The prompt's 512-token blocks by content (read when prefix caching asks for them)."""


class TraceError(ValueError):
    """A trace line that cannot be used."""


HASH_BLOCK_TOKENS = 512
"""Prompt tokens per Mooncake hash id."""


def _hash_ids(obj: dict, inp: int, where: str) -> tuple[int, ...]:
    ids = obj.get("hash_ids")
    if ids is None:
        raise TraceError(f"{where}: missing field 'hash_ids' (prefix caching needs it; replay "
                         "with prefix caching off)")
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                            and h >= 0 for h in ids):
        raise TraceError(f"{where}: hash_ids must be a list of integers >= 0")
    need = -(-inp // HASH_BLOCK_TOKENS)
    if len(ids) < need:
        raise TraceError(f"{where}: hash_ids has {len(ids)} ids, fewer than the {need} that "
                         f"{inp} prompt tokens need (one per {HASH_BLOCK_TOKENS} tokens)")
    return tuple(ids[:need])


def load_trace(path: str | Path, limit: int | None = None,
               hash_ids: bool = False) -> list[Request]:
    """Read a trace; every line is checked and a bad one raises TraceError naming it. With
    ``hash_ids`` (prefix caching), each line's hash ids are read and checked too."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 1):
        raise TraceError(f"limit must be an integer >= 1, got {limit!r}")
    p = Path(path)
    out: list[Request] = []
    last = -1.0
    try:
        f = p.open()
    except FileNotFoundError:
        raise TraceError(f"trace {p} does not exist") from None
    with f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            where = f"{p}:{n}"
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceError(f"{where}: not JSON ({e})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: a line must be a JSON object")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in obj:
                    raise TraceError(f"{where}: missing field {key!r}")
            ts, inp, outp = obj["timestamp"], obj["input_length"], obj["output_length"]
            if (not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts)
                    or ts < 0):
                raise TraceError(f"{where}: timestamp must be a finite number >= 0, got {ts!r}")
            for key, v in (("input_length", inp), ("output_length", outp)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise TraceError(f"{where}: {key} must be a positive integer, got {v!r}")
            if ts < last:
                raise TraceError(f"{where}: timestamp {ts} is before the previous line's {last} "
                                 "(the trace must be sorted by time)")
            last = ts
            out.append(Request(len(out), ts / 1000.0, inp, outp, n,
                               _hash_ids(obj, inp, where) if hash_ids else None))
            if limit is not None and len(out) >= limit:
                break
    if not out:
        raise TraceError(f"trace {p} has no requests")
    return out


def poisson(requests: list[Request], rate: float, seed: int = 0) -> list[Request]:
    """The same requests in the same order, arriving as a Poisson process of ``rate``/s."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(requests))
    times = np.cumsum(gaps) - gaps[0]
    return [replace(r, arrival_s=float(t)) for r, t in zip(requests, times, strict=True)]


def long_fraction_mix(requests: list[Request], fraction: float, threshold: int, count: int,
                      seed: int = 0) -> list[Request]:
    """``count`` requests drawn from the trace so that ``fraction`` of them have inputs of at
    least ``threshold`` tokens (arrival times are left to ``poisson``)."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    longs = [r for r in requests if r.input_len >= threshold]
    shorts = [r for r in requests if r.input_len < threshold]
    n_long = round(fraction * count)
    if (n_long and not longs) or (count - n_long and not shorts):
        raise ValueError(f"the trace has {len(longs)} requests of >= {threshold} tokens and "
                         f"{len(shorts)} shorter: cannot make {fraction:.0%} of {count}")
    rng = np.random.default_rng(seed)
    picks = ([longs[i] for i in rng.integers(0, len(longs), n_long)]
             + [shorts[i] for i in rng.integers(0, len(shorts), count - n_long)])
    order = rng.permutation(count)
    return [replace(picks[i], rid=k, arrival_s=0.0) for k, i in enumerate(order)]


def growing(count: int, input_lo: int, input_hi: int, output_ratio: float = 2.0,
            seed: int = 0) -> list[Request]:
    """Requests that start short and grow while decoding (reasoning, agents): inputs uniform in
    [input_lo, input_hi], outputs ``output_ratio`` times their input (the paper's 1:2)."""
    if not 1 <= input_lo <= input_hi or output_ratio <= 0 or count < 1:
        raise ValueError(f"need count >= 1, 1 <= input_lo <= input_hi and output_ratio > 0, got "
                         f"{count}, {input_lo}, {input_hi}, {output_ratio}")
    rng = np.random.default_rng(seed)
    inputs = rng.integers(input_lo, input_hi + 1, count)
    return [Request(i, 0.0, int(n), max(1, round(output_ratio * int(n))))
            for i, n in enumerate(inputs)]


def inject_burst(requests: list[Request], at_s: float, count: int, input_len: int,
                 output_len: int) -> list[Request]:
    """Add ``count`` long requests all arriving at ``at_s``."""
    extra = [Request(0, at_s, input_len, output_len) for _ in range(count)]
    merged = sorted(requests + extra, key=lambda r: r.arrival_s)
    return [replace(r, rid=i) for i, r in enumerate(merged)]
