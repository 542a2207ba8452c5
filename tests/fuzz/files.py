"""Fuzzers of the files users hand the emulator, through their loaders: request traces
(emu/serving/workload.load_trace, then a replay of what it accepts) and hardware descriptions
(emu/latency/hardware.HardwareCatalog.load, then the latency model on what it accepts).

Each input is a file built from records that are valid by the loader's documentation, some of
them spoiled (NaN, Infinity, ``true``, floats where integers belong, zero, negatives, huge
numbers, wrong types, missing and unknown fields, unsorted times, bytes that are not JSON or not
UTF-8, nesting too deep, sections that are not objects). The reference knows which record is
the first bad one.

Oracles: a bad file refused with the loader's documented error (TraceError, a ValueError for
hardware) naming the file (and for a trace the line), anything else raised is a crash; a good
file accepted whole with the values written (wrong result); what is accepted replays (traces)
or prices (hardware) within a time bound (hang) without an exception (crash) to finite times.
Values only a practical limit refuses (a prompt of 10^30 tokens) may go either way, but what
is accepted must then replay.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from hypothesis import strategies as st

from tests.fuzz.oracle import Finding, Kind, guarded

REPLAY_S = 30.0
"""Wall time a replay of an accepted trace may take."""
PRICE_S = 10.0

# -- values -------------------------------------------------------------------------------------
BAD = "bad"
EDGE = "edge"
"""Verdicts of a value: bad by the documentation, or inside the documented kind but past what
a practical limit may refuse."""


_NOT_NUMBERS = st.sampled_from(["true", "false", "null", '"12"', "[]", "{}", "[1]"])
_NON_FINITE = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])


@cache
def _value(kind: str) -> st.SearchStrategy[tuple[str, str | None]]:
    """(JSON text, verdict) for a field of ``kind``: ``ts`` (finite >= 0), ``count`` (an
    integer >= 1), ``pos`` (a number > 0), ``nonneg`` (>= 0), ``share`` (in (0, 1]),
    ``posint`` (an integer > 0)."""
    good = {
        "ts": st.one_of(st.integers(0, 10**7), st.floats(0, 1e7)),
        "count": st.integers(1, 2000),
        "pos": st.one_of(st.integers(1, 10**5), st.floats(0.01, 1e5)),
        "nonneg": st.one_of(st.integers(0, 10**4), st.floats(0, 1e4)),
        "share": st.floats(0.01, 1.0),
        "posint": st.integers(1, 128),
    }[kind]
    good_text = good.map(lambda v: (json.dumps(v), None))
    bad = st.one_of(_NOT_NUMBERS, _NON_FINITE).map(lambda t: (t, BAD))
    negative = st.sampled_from(["-1", "-0.5", "-1e300"]).map(lambda t: (t, BAD))
    zero = st.sampled_from(["0", "0.0", "-0.0"]).map(
        lambda t: (t, None if kind in ("ts", "nonneg") else BAD))
    if kind in ("count", "posint"):
        edge = st.sampled_from([str(10**30), str(2**63), str(2**31), str(10**15)]).map(
            lambda t: (t, EDGE))
    else:
        edge = st.sampled_from(["1e300", "1e-300", "5e-324", str(10**30), str(2**63),
                                str(2**31), "1e15"]).map(lambda t: (t, EDGE))
    parts = [good_text, good_text, good_text, bad, negative, zero, edge]
    if kind in ("count", "posint"):
        parts.append(st.sampled_from(["1.5", "8.0", "1e2", "1e300", "5e-324"]).map(
            lambda t: (t, BAD)))
    if kind == "share":
        parts.append(st.sampled_from(["1.0000001", "2", "1e9"]).map(lambda t: (t, BAD)))
    return st.one_of(parts)


def _worst(*verdicts: str | None) -> str | None:
    return BAD if BAD in verdicts else EDGE if EDGE in verdicts else None


def _obj(fields: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields) + "}"


# -- traces -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceLine:
    text: bytes
    verdict: str | None
    """None (good), EDGE or BAD; a blank line is good and holds no request."""
    request: tuple[float, int, int] | None = None
    """(timestamp ms, input, output) of a good or edge line."""
    hash_ids: bool = True
    """Whether its hash_ids are good (checked only with prefix caching)."""


@dataclass(frozen=True)
class TraceCase:
    lines: tuple[TraceLine, ...]
    prefix_caching: bool

    @property
    def units(self) -> int:
        return 1

    def data(self) -> bytes:
        return b"\n".join(line.text for line in self.lines) + b"\n"


@st.composite
def _trace_line(draw, last_ts: float) -> TraceLine:
    form = draw(st.sampled_from(["good", "good", "good", "fields", "fields", "shape", "bytes",
                                 "blank", "unsorted"]))
    if form == "blank":
        return TraceLine(draw(st.sampled_from([b"", b"  ", b"\t"])), None)
    if form == "bytes":
        raw = draw(st.one_of(st.binary(min_size=1, max_size=30).filter(lambda b: b.strip()),
                             st.sampled_from([b"\xff\xfe{}", b"{\"timestamp\": 1,", b"[" * 5000
                                              + b"]" * 5000, b"{" * 3000, b"\x00"])))
        raw = raw.replace(b"\n", b" ").replace(b"\r", b" ")
        try:
            ok = isinstance(json.loads(raw), dict)
        except (ValueError, RecursionError):
            ok = False
        return TraceLine(raw, None if False else (EDGE if ok else BAD))
    ts = draw(_value("ts")) if form == "fields" else (json.dumps(
        draw(st.floats(last_ts, last_ts + 1e4)) if last_ts else draw(st.integers(0, 10**4))),
        None)
    inp = draw(_value("count")) if form == "fields" else (json.dumps(draw(st.integers(
        1, 20000))), None)
    out = draw(_value("count")) if form == "fields" else (json.dumps(draw(st.sampled_from(
        [1, 1, 2, 16, 300]))), None)
    if form == "unsorted" and last_ts > 0:
        ts = (json.dumps(last_ts / 2), BAD)
    fields = [("timestamp", ts[0]), ("input_length", inp[0]), ("output_length", out[0])]
    n_ids = -(-int(json.loads(inp[0])) // 512) if inp[1] is None else 1
    ids_good = draw(st.booleans()) or form == "good"
    ids = (json.dumps(list(range(n_ids))) if ids_good else draw(st.sampled_from(
        ["[]", "[-1]", "[1.5]", "[true]", '"x"', "null", "[NaN]"])))
    fields.append(("hash_ids", ids))
    verdict = _worst(ts[1], inp[1], out[1])
    if form == "shape":
        choice = draw(st.sampled_from(["missing", "list", "number", "string", "duplicate"]))
        if choice == "missing":
            fields.pop(draw(st.integers(0, 2)))
            verdict = BAD
        elif choice == "duplicate":
            fields.append(("timestamp", ts[0]))
            verdict = _worst(verdict, EDGE)  # JSON leaves duplicate keys undefined
        else:
            return TraceLine({"list": b"[1, 2, 3]", "number": b"5",
                              "string": b'"x"'}[choice], BAD)
    if verdict is None and form != "unsorted":
        t = float(json.loads(ts[0]))
        if t < last_ts:
            verdict = BAD
    request = None
    if verdict != BAD:
        request = (float(json.loads(ts[0])), int(json.loads(inp[0])), int(json.loads(out[0])))
    return TraceLine(_obj(fields).encode(), verdict, request, ids_good)


@st.composite
def trace_cases(draw, max_lines: int = 8) -> TraceCase:
    lines: list[TraceLine] = []
    last = 0.0
    for _ in range(draw(st.integers(0, max_lines))):
        line = draw(_trace_line(last))
        lines.append(line)
        if line.request is not None and math.isfinite(line.request[0]):
            last = max(last, line.request[0])
    return TraceCase(tuple(lines), draw(st.booleans()))


def _trace_verdict(case: TraceCase) -> tuple[str | None, set[int]]:
    """The verdict of the file, and the lines a refusal may name: the first bad one and any
    edge line before it (0 for the file as a whole)."""
    edges: set[int] = set()
    requests = 0
    for n, line in enumerate(case.lines, 1):
        v = line.verdict
        if v is None and case.prefix_caching and line.request is not None and not line.hash_ids:
            v = BAD
        if v == BAD:
            return BAD, edges | {n}
        if v == EDGE:
            edges.add(n)
        requests += line.request is not None
    if edges:
        return EDGE, edges
    return (None, set()) if requests else (BAD, {0})  # a trace with no requests is refused


def run_trace_case(case: TraceCase) -> list[Finding]:
    from nelssa.emu.serving.workload import TraceError, load_trace

    findings: list[Finding] = []
    verdict, lines = _trace_verdict(case)
    with tempfile.TemporaryDirectory(prefix="nelssa-fuzz-") as d:
        path = Path(d) / "trace.jsonl"
        path.write_bytes(case.data())
        got = None
        with guarded(findings, REPLAY_S, "load_trace") as g:
            try:
                got = load_trace(path, hash_ids=case.prefix_caching)
            except TraceError as e:
                got = e
        if not g.passed:
            return findings
        if isinstance(got, TraceError):
            text = str(got)
            if verdict is None:
                findings.append(Finding(Kind.WRONG, f"a valid trace refused: {text}"))
            elif verdict == BAD and 0 not in lines and not any(f"{path}:{n}:" in text
                                                                for n in lines):
                findings.append(Finding(Kind.WRONG, f"refusal does not name line "
                                                    f"{max(lines)}, the first bad one: {text}"))
            elif str(path) not in text:
                findings.append(Finding(Kind.WRONG, f"refusal does not name the file: {text}"))
            return findings
        if verdict == BAD:
            findings.append(Finding(Kind.WRONG, f"a trace whose line {max(lines)} is bad was "
                                                f"accepted ({len(got)} requests)"))
            return findings
        want = [line.request for line in case.lines if line.request is not None]
        have = [(r.arrival_s * 1000.0, r.input_len, r.output_len) for r in got]
        if len(have) != len(want) or any(
                h[1:] != w[1:] or not math.isclose(h[0], w[0], rel_tol=1e-12, abs_tol=1e-9)
                for h, w in zip(have, want, strict=False)):
            findings.append(Finding(Kind.WRONG, f"accepted as {have[:4]}..., the file holds "
                                                f"{want[:4]}..."))
            return findings
        with guarded(findings, REPLAY_S, "replaying the accepted trace"):
            _replay(got, case.prefix_caching, findings)
    return findings


def _replay(requests, prefix_caching: bool, findings: list[Finding]) -> None:
    from nelssa.emu.latency.hardware import HardwareCatalog
    from nelssa.emu.latency.model import LatencyModel
    from nelssa.emu.serving.metrics import summarize
    from nelssa.emu.serving.sim import ServingConfig, ServingSim

    cat = HardwareCatalog.load()
    gpu, pnm, model, link = (sorted(getattr(cat, s).values(), key=lambda h: h.name)[0]
                             for s in ("gpus", "pnm", "models", "links"))
    lm = LatencyModel(gpu, pnm, model, link=link)
    for mode in ("gpu", "nelssa"):
        run = ServingSim(lm, ServingConfig(mode=mode, devices=2,
                                           prefix_caching=prefix_caching)).run(requests)
        s = summarize(run)
        if s["requests"] != len(requests):
            findings.append(Finding(Kind.WRONG, f"{mode} replay finished {s['requests']} of "
                                                f"{len(requests)} requests"))
        # TPOT and ITL count tokens after the first: with none they are undefined (NaN by
        # design, as a mean of nothing)
        undefined = (("tpot_s.", "itl_s.") if all(r.output_len == 1 for r in requests)
                     else ())
        bad = [k for k, v in _numbers(s) if not math.isfinite(v)
               and not k.startswith(undefined)]
        if bad:
            findings.append(Finding(Kind.WRONG, f"{mode} replay summary has non-finite "
                                                f"{bad[:3]}"))


def _numbers(obj, prefix: str = ""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{prefix}{k}.")
    elif isinstance(obj, bool):
        return
    elif isinstance(obj, int | float):
        yield prefix.rstrip("."), float(obj)


# -- hardware files ------------------------------------------------------------------------------
SCHEMA = {
    "gpus": {"hbm_gbs": ("pos", True), "memory_gb": ("pos", True), "bf16_tflops": ("pos", True),
             "kernel_us": ("nonneg", False), "mem_efficiency": ("share", False),
             "linear_efficiency": ("share", False), "attn_efficiency": ("share", False)},
    "pnm": {"bw_eff_gbs": ("pos", True), "capacity_gb": ("pos", True),
            "t_base_us": ("nonneg", True), "t_dev_us": ("nonneg", True),
            "t_host_us": ("nonneg", True)},
    "links": {"gbps": ("pos", True), "latency_us": ("nonneg", True)},
    "models": {"layers": ("posint", True), "kv_heads": ("posint", True),
               "q_heads": ("posint", True), "head_dim": ("posint", True),
               "params_b": ("pos", True), "max_context": ("posint", True)},
}
"""Each section's fields as emu/latency/hardware.py documents them: (kind, required)."""


@dataclass(frozen=True)
class HardwareCase:
    text: bytes
    verdict: str | None

    @property
    def units(self) -> int:
        return 1


@st.composite
def _entry(draw, section: str) -> tuple[str, str | None]:
    fields, verdict = [], None
    for name, (kind, required) in SCHEMA[section].items():
        if not required and draw(st.booleans()):
            continue
        if draw(st.integers(0, 3)) == 0:
            text, v = draw(_value(kind))
        else:
            text, v = draw(_value(kind).filter(lambda tv: tv[1] is None))
        fields.append((name, text))
        verdict = _worst(verdict, v)
    if section == "models":
        heads = dict(fields)
        try:
            q, kv = int(json.loads(heads["q_heads"])), int(json.loads(heads["kv_heads"]))
            if verdict is None and q % kv:
                fields = [(k, str(kv * max(1, q // kv)) if k == "q_heads" else v)
                          for k, v in fields]
        except (KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError):
            pass
    if section == "gpus" and draw(st.integers(0, 4)) == 0:
        src, v = draw(st.sampled_from([('"paper, figure 5"', None), ('""', BAD), ("5", BAD),
                                       ("null", None), ('"  "', BAD)]))
        fields.append(("source", src))
        verdict = _worst(verdict, v)
    spoil = draw(st.sampled_from(["none", "none", "none", "missing", "unknown", "list"]))
    if spoil == "missing" and fields:
        required = [i for i, (k, _) in enumerate(fields) if SCHEMA[section].get(k, ("", 0))[1]]
        if required:
            fields.pop(draw(st.sampled_from(required)))
            verdict = BAD
    elif spoil == "unknown":
        fields.append(("no_such_field", "1"))
        verdict = BAD
    elif spoil == "list":
        return "[" + ", ".join(v for _, v in fields) + "]", BAD
    return _obj(fields), verdict


@st.composite
def hardware_cases(draw) -> HardwareCase:
    shape = draw(st.sampled_from(["file", "file", "file", "file", "top", "bytes"]))
    if shape == "bytes":
        raw = draw(st.one_of(st.binary(max_size=40), st.sampled_from(
            [b"\xff\xfe", b"{", b"[" * 5000 + b"]" * 5000, b'{"gpus": 1' + b"0" * 5000 + b"}"])))
        try:
            json.loads(raw)
            verdict = EDGE
        except (ValueError, RecursionError):
            verdict = BAD
        return HardwareCase(raw, verdict)
    if shape == "top":
        return HardwareCase(draw(st.sampled_from([b"[]", b"5", b'"x"', b"null",
                                                  b'{"cpus": {}}'])), BAD)
    sections, verdict = [], None
    for section in draw(st.lists(st.sampled_from(sorted(SCHEMA)), max_size=4, unique=True)):
        form = draw(st.sampled_from(["entries", "entries", "entries", "list", "number"]))
        if form == "entries":
            entries = []
            for i in range(draw(st.integers(0, 2))):
                text, v = draw(_entry(section))
                entries.append((f"fuzz-{section}-{i}", text))
                verdict = _worst(verdict, v)
            sections.append((section, _obj(entries)))
        else:
            sections.append((section, "[]" if form == "list" else "3"))
            verdict = BAD
    return HardwareCase(_obj(sections).encode(), verdict)


def run_hardware_case(case: HardwareCase) -> list[Finding]:
    from nelssa.emu.latency.hardware import HardwareCatalog

    findings: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="nelssa-fuzz-") as d:
        path = Path(d) / "hw.json"
        path.write_bytes(case.text)
        got = None
        with guarded(findings, PRICE_S, "HardwareCatalog.load") as g:
            try:
                got = HardwareCatalog.load(path)
            except ValueError as e:
                got = e
        if not g.passed:
            return findings
        if isinstance(got, ValueError):
            if case.verdict is None:
                findings.append(Finding(Kind.WRONG, f"a valid hardware file refused: {got}"))
            elif str(path) not in str(got):
                findings.append(Finding(Kind.WRONG, f"refusal does not name the file: {got}"))
            return findings
        if case.verdict == BAD:
            findings.append(Finding(Kind.WRONG, "a bad hardware file was accepted"))
            return findings
        with guarded(findings, PRICE_S, "the latency model on the accepted file"):
            _price(got, findings)
    return findings


def _price(cat, findings: list[Finding]) -> None:
    from nelssa.emu.latency.model import LatencyModel

    fuzz = {s: [h for n, h in getattr(cat, s).items() if n.startswith("fuzz-")]
            or [sorted(getattr(cat, s).values(), key=lambda h: h.name)[0]]
            for s in ("gpus", "pnm", "models", "links")}
    for gpu in fuzz["gpus"]:
        for pnm in fuzz["pnm"]:
            for model in fuzz["models"]:
                for link in fuzz["links"]:
                    lm = LatencyModel(gpu, pnm, model, link=link)
                    for length in (1, 4096, model.max_context):
                        times = {"t_gpu": lm.t_gpu(length), "t_pnm": lm.t_pnm(length, 2)}
                        bad = {k: v for k, v in times.items()
                               if not (math.isfinite(v) and v >= 0)}
                        if bad:
                            findings.append(Finding(Kind.WRONG, f"{gpu.name}/{pnm.name}/"
                                                                f"{model.name}: {bad} at "
                                                                f"{length} tokens"))
                    lm.t_input(2)
