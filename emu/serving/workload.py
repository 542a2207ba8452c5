"""Workloads: Mooncake traces (one JSON object per line: ``timestamp`` in ms, ``input_length``,
``output_length``, and ``hash_ids``, one id per 512-token block of the prompt), Poisson
resampling at a chosen rate (the paper's method), a long-request
fraction sweep, and injected bursts of long requests. Bad lines are refused by line number:
any bytes give requests the replay can use or a TraceError naming the file and line."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nelssa.emu.files import InputFileError, read_lines
from nelssa.emu.latency.fields import FieldError, Num, load_json
from nelssa.emu.policy.prefix import HASH_BLOCK_TOKENS


@dataclass(frozen=True, slots=True)
class TraceRequest:
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


MAX_TIME_S = 1e9
"""Latest arrival the replay takes (about 32 years): emulated time is float seconds, which
past this resolve less than a microsecond."""
TIMESTAMP_MS = Num("a finite number >= 0", lo=0, most=MAX_TIME_S * 1e3)
ARRIVAL_S = Num("a time in seconds >= 0", lo=0, most=MAX_TIME_S)
TOKENS = Num("a positive integer", integer=True, lo=1, most=(1 << 31) - 1)
"""A prompt or output length."""
HASH_ID = Num("an integer >= 0", integer=True, lo=0, most=(1 << 63) - 1)
BURST_COUNT = Num("a positive integer", integer=True, lo=1, most=100_000)
"""Requests of one injected burst."""
RATE = Num("> 0 requests/s (a finite number)", lo=0, lo_open=True)
"""Requests per second of Poisson arrivals."""


def _hash_ids(obj: dict, inp: int, where: str) -> tuple[int, ...]:
    ids = obj.get("hash_ids")
    if ids is None:
        raise TraceError(f"{where}: missing field 'hash_ids' (prefix caching needs it; replay "
                         "with prefix caching off)")
    bad = f"{where}: hash_ids must be a list of integers >= 0 (below 2^63)"
    if not isinstance(ids, list):
        raise TraceError(f"{bad}, got {type(ids).__name__}")
    for i, h in enumerate(ids):
        try:
            HASH_ID.check(h)
        except FieldError:
            raise TraceError(f"{bad}; item {i} is {h!r}") from None
    need = -(-inp // HASH_BLOCK_TOKENS)
    if len(ids) < need:
        raise TraceError(f"{where}: hash_ids has {len(ids)} ids, fewer than the {need} that "
                         f"{inp} prompt tokens need (one per {HASH_BLOCK_TOKENS} tokens)")
    return tuple(ids[:need])


def _request(text: bytes, where: str, rid: int, line: int, last_ms: float,
             hash_ids: bool) -> tuple[TraceRequest, float]:
    """One trace line, checked whole; with its timestamp in ms."""
    try:
        obj = load_json(text)
    except FieldError as e:
        raise TraceError(f"{where}: {str(e).replace('not valid JSON', 'not JSON', 1)}") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: a line must be a JSON object")
    for key in ("timestamp", "input_length", "output_length"):
        if key not in obj:
            raise TraceError(f"{where}: missing field {key!r}")
    try:
        ts = TIMESTAMP_MS.check(obj["timestamp"], "timestamp")
        inp = TOKENS.check(obj["input_length"], "input_length")
        outp = TOKENS.check(obj["output_length"], "output_length")
    except FieldError as e:
        raise TraceError(f"{where}: {e}") from None
    if ts < last_ms:
        raise TraceError(f"{where}: timestamp {obj['timestamp']} is before the previous line's "
                         f"{last_ms:g} (the trace must be sorted by time)")
    return TraceRequest(rid, ts / 1000.0, int(inp), int(outp), line,
                   _hash_ids(obj, int(inp), where) if hash_ids else None), ts


def iter_trace(path: str | Path, hash_ids: bool = False) -> Iterator[TraceRequest]:
    """The trace's requests as they are read (a trace of any length in bounded memory), each
    line checked whole; a bad one raises TraceError naming it."""
    p = Path(path)
    last, rid = 0.0, 0
    try:
        for n, text in read_lines(p, "trace"):
            if not text.strip():
                continue
            req, last = _request(text, f"{p}:{n}", rid, n, last, hash_ids)
            rid += 1
            yield req
    except InputFileError as e:
        raise TraceError(str(e)) from None


def load_trace(path: str | Path, limit: int | None = None,
               hash_ids: bool = False) -> list[TraceRequest]:
    """Read a trace; every line is checked and a bad one raises TraceError naming it. With
    ``hash_ids`` (prefix caching), each line's hash ids are read and checked too."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 1):
        raise TraceError(f"limit must be an integer >= 1, got {limit!r}")
    out = list(itertools.islice(iter_trace(path, hash_ids), limit))
    if not out:
        raise TraceError(f"trace {path} has no requests")
    return out


def resample(source: Sequence[TraceRequest], count: int, rate: float,
             seed: int = 0) -> Iterator[TraceRequest]:
    """``count`` requests arriving as a Poisson process of ``rate``/s, each a draw (with
    replacement) of one of ``source``'s requests (its lengths, prefix blocks and trace line),
    made as they are taken: a million-request workload in the memory of its source."""
    RATE.check(rate, "rate")
    if not source:
        raise ValueError("resampling needs at least one request to draw from")
    if (count - 1) / rate > MAX_TIME_S:
        raise ValueError(f"at {rate:g} requests/s the {count} requests arrive over "
                         f"{(count - 1) / rate:.3g} s, past the {MAX_TIME_S:g} s the "
                         "replay's clock covers")
    rng = np.random.default_rng(seed)
    t, rid, chunk = 0.0, 0, 65536
    while rid < count:
        n = min(chunk, count - rid)
        gaps = rng.exponential(1.0 / rate, n)
        picks = rng.integers(0, len(source), n)
        for gap, k in zip(gaps.tolist(), picks.tolist(), strict=True):
            if rid:
                t += gap
            r = source[k]
            yield TraceRequest(rid, t, r.input_len, r.output_len, r.line, r.hash_ids)
            rid += 1


def poisson(requests: list[TraceRequest], rate: float, seed: int = 0) -> list[TraceRequest]:
    """The same requests in the same order, arriving as a Poisson process of ``rate``/s."""
    RATE.check(rate, "rate")
    least = (len(requests) - 1) / MAX_TIME_S
    if rate < least:  # the draw's own span would be inf or NaN at a subnormal rate
        raise ValueError(f"{rate:g} requests/s is too low for {len(requests)} requests: their "
                         f"arrivals would span past the {MAX_TIME_S:g} s the replay's clock "
                         f"covers; use at least {least:.3g} requests/s")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(requests))
    times = np.cumsum(gaps) - gaps[0]
    if len(times) and not (math.isfinite(times[-1]) and times[-1] <= MAX_TIME_S):
        raise ValueError(f"at {rate:g} requests/s the {len(requests)} requests arrive over "
                         f"{times[-1]:.3g} s, past the {MAX_TIME_S:g} s the replay's clock "
                         "covers")
    return [replace(r, arrival_s=float(t)) for r, t in zip(requests, times, strict=True)]


def long_fraction_mix(requests: list[TraceRequest], fraction: float, threshold: int, count: int,
                      seed: int = 0) -> list[TraceRequest]:
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
            seed: int = 0) -> list[TraceRequest]:
    """Requests that start short and grow while decoding (reasoning, agents): inputs uniform in
    [input_lo, input_hi], outputs ``output_ratio`` times their input (the paper's 1:2)."""
    if not 1 <= input_lo <= input_hi or output_ratio <= 0 or count < 1:
        raise ValueError(f"need count >= 1, 1 <= input_lo <= input_hi and output_ratio > 0, got "
                         f"{count}, {input_lo}, {input_hi}, {output_ratio}")
    rng = np.random.default_rng(seed)
    inputs = rng.integers(input_lo, input_hi + 1, count)
    return [TraceRequest(i, 0.0, int(n), max(1, round(output_ratio * int(n))))
            for i, n in enumerate(inputs)]


def inject_burst(requests: list[TraceRequest], at_s: float, count: int, input_len: int,
                 output_len: int) -> list[TraceRequest]:
    """Add ``count`` long requests all arriving at ``at_s``."""
    ARRIVAL_S.check(at_s, "at_s")
    BURST_COUNT.check(count, "count")
    TOKENS.check(input_len, "input_len")
    TOKENS.check(output_len, "output_len")
    extra = [TraceRequest(0, at_s, input_len, output_len) for _ in range(count)]
    merged = sorted(requests + extra, key=lambda r: r.arrival_s)
    return [replace(r, rid=i) for i, r in enumerate(merged)]
