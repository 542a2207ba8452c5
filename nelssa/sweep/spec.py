"""What a design-space sweep covers: a TOML file naming the workload, the SLO and the
parameters to vary, as a grid (every combination) or a random search (``points`` draws).

    trace = "../../shared/traces/conversation_trace.jsonl"  # relative to this file
    limit = 400             # first requests of the trace
    rate = 2.0              # or [grid] rate: Poisson arrivals per second; "trace": timestamps
    [slo]
    ttft_s = 6.0
    tpot_s = 0.175
    [grid]
    devices = [2, 4, 8]
    link = ["roce-200g", "roce-400g"]
    t_input = ["crossover", 16384]
    [random]                # instead of (or beside) [grid]
    points = 20
    selection = {min = 0.01, max = 0.08}
    gpu = ["h100-nvl", "a100-80g"]

Every parameter has a default (PARAMS); a parameter given at the top level is fixed for all
points. A refusal (``SpecError``) names the file and the table and parameter at fault.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nelssa.config_args import field_docs
from nelssa.emu.files import InputFileError, read_text
from nelssa.emu.latency.fields import FieldError, Num
from nelssa.emu.latency.hardware import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_PNM
from nelssa.emu.latency.model import DEVICE_COUNT
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK
from nelssa.emu.policy.slo import MLPERF_SLO
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.workload import RATE

MAX_POINTS = 100_000
"""Points one sweep may have (a grid's product is checked before it is expanded)."""


class SpecError(ValueError):
    """A sweep specification that cannot be run; the message names what is wrong."""


@dataclass(frozen=True)
class Param:
    """One parameter a point sets."""

    default: Any
    doc: str
    check: Callable[[Any], Any]
    """The value as the point uses it, or FieldError saying what is accepted."""
    catalog: str | None = None
    """The hardware catalog section the value names (checked against the catalog)."""
    span: Num | None = None
    """For a random search's ``{min, max}``: the numbers it may draw from."""


def _num(spec: Num) -> Callable[[Any], Any]:
    return lambda v: spec.check(v)


def _choice(*allowed: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in allowed:
            raise FieldError(f"must be one of {', '.join(map(repr, allowed))}, got {v!r}")
        return v
    return check


def _name(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise FieldError(f"must be a preset name (a string), got {v!r}")
    return v


def _or_word(words: tuple[str, ...], spec: Num) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v in words:
            return v
        try:
            return spec.check(v)
        except FieldError:
            said = " or ".join(map(repr, words))
            raise FieldError(f"must be {said} or {spec.what}, got {v!r}") from None
    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise FieldError(f"must be true or false, got {v!r}")
    return v


SELECTION = Num("in (0, 1]", lo=0, lo_open=True, hi=1)
T_INPUT = Num("an integer >= 1 token", integer=True, lo=1, most=1 << 30)
RUNNING = Num("an integer in 1..65536", integer=True, lo=1, hi=65536)

PARAMS: dict[str, Param] = {
    "mode": Param("nelssa", "`nelssa` or `gpu` (the GPU-only baseline)",
                  _choice("nelssa", "gpu")),
    "gpu": Param(DEFAULT_GPU, "GPU preset", _name, "gpus"),
    "pnm": Param(DEFAULT_PNM, "PNM device preset", _name, "pnm"),
    "model": Param(DEFAULT_MODEL, "model preset", _name, "models"),
    "link": Param(DEFAULT_GPU_PNM_LINK, "GPU node <-> PNM node link preset", _name, "links"),
    "devices": Param(4, "PNM devices", _num(DEVICE_COUNT), span=DEVICE_COUNT),
    "selection": Param(0.04, "share of a PNM request's clusters attended", _num(SELECTION),
                       span=SELECTION),
    "t_input": Param("crossover", "routing threshold: `crossover` (the latency model's), "
                     "`adaptive` (moved by the tiers' load from the crossover) or tokens",
                     _or_word(("crossover", "adaptive"), T_INPUT), span=T_INPUT),
    "rate": Param("trace", "arrivals: `trace` (its timestamps) or Poisson requests/s",
                  _or_word(("trace",), RATE), span=RATE),
    "prefill": Param("colocated", "`colocated` or `disaggregated` prefill",
                     _choice("colocated", "disaggregated")),
    "migration": Param(False, "migrate grown GPU requests to the PNM tier (paper 4.3)", _bool),
    "max_running": Param(256, "most requests in the running batch", _num(RUNNING),
                         span=RUNNING),
    # the adaptive orchestrator's two knobs beside T_input (emu/policy/budget.py, shed.py)
    **{name: Param(getattr(ServingConfig, name), field_docs(ServingConfig)[name], _bool)
       for name in ("tpot_budget", "shed_late")},
}

LIMIT = Num("an integer >= 1", integer=True, lo=1, most=10_000_000)
SLO_S = Num("a finite number of seconds > 0", lo=0, lo_open=True, most=1e6)
POINTS = Num(f"an integer in 1..{MAX_POINTS}", integer=True, lo=1, hi=MAX_POINTS)
SEED = Num("an integer >= 0", integer=True, lo=0, most=(1 << 63) - 1)
TOP_KEYS = {"trace", "limit", "seed", "slo", "grid", "random", "scheduler"}
SLO_KEYS = MLPERF_SLO.as_dict()
"""The default SLO (``emu/policy/slo.py``)."""


@dataclass(frozen=True)
class Spec:
    """A parsed sweep specification."""

    path: Path
    trace: Path
    limit: int | None
    seed: int
    scheduler: str
    slo: dict[str, float]
    fixed: dict[str, Any]
    points: list[dict[str, Any]] = field(repr=False)
    """Every point's full parameter set, in the order the sweep runs them."""
    trace_sha256: str = ""
    """The trace file's SHA-256 (part of every key: an edited trace is new points)."""

    def settings(self) -> dict[str, Any]:
        """What every point shares (part of each point's key: a changed trace file, limit or
        SLO is a new point)."""
        return {"trace": str(self.trace), "trace_sha256": self.trace_sha256,
                "limit": self.limit, "seed": self.seed, "scheduler": self.scheduler,
                "slo": self.slo}

    def key(self, point: dict[str, Any], hardware: dict[str, Any] | None = None) -> str:
        """The point's key: a hash of its resolved configuration, the shared settings, the
        point and (``hardware``) the values of the hardware entries it names, so a hardware
        file that changes an entry's values under the same name makes a new point."""
        text = json.dumps({"settings": self.settings(), "point": point,
                           "hardware": hardware}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fail(path: Path, where: str, text: str) -> SpecError:
    return SpecError(f"{path}: {where}: {text}")


def _value(path: Path, where: str, name: str, value: Any) -> Any:
    if name not in PARAMS:
        raise _fail(path, where, f"unknown parameter {name!r} (parameters: "
                    f"{', '.join(PARAMS)})")
    try:
        return PARAMS[name].check(value)
    except FieldError as e:
        raise _fail(path, f"{where} {name}", str(e)) from None


def _grid(path: Path, table: Any) -> dict[str, list[Any]]:
    if not isinstance(table, dict):
        raise _fail(path, "[grid]", "must be a table of parameter = [values]")
    axes: dict[str, list[Any]] = {}
    for name, values in table.items():
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise _fail(path, f"[grid] {name}", "an empty range (give at least one value)")
        axes[name] = [_value(path, "[grid]", name, v) for v in values]
        if len(set(map(repr, axes[name]))) != len(axes[name]):
            raise _fail(path, f"[grid] {name}", f"a value given twice: {values}")
    return axes


def _draws(path: Path, table: Any, rng: random.Random) -> list[dict[str, Any]]:
    if not isinstance(table, dict):
        raise _fail(path, "[random]", "must be a table: points = N and parameter ranges")
    try:
        n = POINTS.check(table.get("points"), "points")
    except FieldError as e:
        raise _fail(path, "[random]", str(e)) from None
    draws: dict[str, Callable[[], Any]] = {}
    for name, rule in table.items():
        if name == "points":
            continue
        if name not in PARAMS:
            _value(path, "[random]", name, None)  # names the unknown parameter
        p = PARAMS[name]
        if isinstance(rule, list):
            if not rule:
                raise _fail(path, f"[random] {name}", "an empty range (give at least one "
                            "value)")
            values = [_value(path, "[random]", name, v) for v in rule]
            draws[name] = lambda values=values: rng.choice(values)
        elif isinstance(rule, dict) and set(rule) == {"min", "max"} and p.span is not None:
            lo, hi = (_value(path, "[random]", name, rule[k]) for k in ("min", "max"))
            if not isinstance(lo, int | float) or not isinstance(hi, int | float) or lo > hi:
                raise _fail(path, f"[random] {name}", f"an empty range: min {rule['min']!r} "
                            f"> max {rule['max']!r}, or not numbers")
            if p.span.integer:
                draws[name] = lambda lo=lo, hi=hi: rng.randint(lo, hi)
            else:
                draws[name] = lambda lo=lo, hi=hi: rng.uniform(lo, hi)
        else:
            how = "{min = .., max = ..} or " if p.span is not None else ""
            raise _fail(path, f"[random] {name}", f"must be {how}a list of values, got "
                        f"{rule!r}")
    return [{name: draw() for name, draw in draws.items()} for _ in range(n)]


def load_spec(path: str | Path, defaults: dict[str, Any] | None = None) -> Spec:
    """Read and check a sweep specification (SpecError naming what is wrong); ``defaults``
    replace parameters' own defaults (a hardware file's ``use`` choices)."""
    path = Path(path)
    try:
        raw = tomllib.loads(read_text(path, "sweep spec"))
    except InputFileError as e:
        raise SpecError(str(e)) from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    unknown = set(raw) - TOP_KEYS - set(PARAMS)
    if unknown:
        raise _fail(path, "top level", f"unknown key {sorted(unknown)[0]!r} (keys: "
                    f"{', '.join(sorted(TOP_KEYS))}, or a parameter: {', '.join(PARAMS)})")
    if not isinstance(raw.get("trace"), str):
        raise _fail(path, "trace", "give the trace file (a path, relative to this file)")
    trace = (path.parent / raw["trace"]).resolve()
    if not trace.is_file():
        raise _fail(path, "trace", f"{trace} is not a file")
    try:
        limit = None if "limit" not in raw else LIMIT.check(raw["limit"], "limit")
        seed = SEED.check(raw.get("seed", 0), "seed")
    except FieldError as e:
        raise _fail(path, "top level", str(e)) from None
    scheduler = raw.get("scheduler", "ours")
    if scheduler not in ("ours", "vllm"):
        raise _fail(path, "scheduler", f"must be 'ours' or 'vllm', got {scheduler!r}")
    slo_raw = raw.get("slo", {})
    if not isinstance(slo_raw, dict) or set(slo_raw) - set(SLO_KEYS):
        raise _fail(path, "[slo]", f"takes {', '.join(SLO_KEYS)}, got {slo_raw!r}")
    try:
        slo = {k: SLO_S.check(slo_raw.get(k, d), k) for k, d in SLO_KEYS.items()}
    except FieldError as e:
        raise _fail(path, "[slo]", str(e)) from None
    fixed = {name: _value(path, "top level", name, raw[name]) for name in PARAMS if name in raw}
    axes = _grid(path, raw["grid"]) if "grid" in raw else {}
    clash = (set(axes) | set(raw.get("random", {}) or {})) & set(fixed)
    if clash:
        raise _fail(path, sorted(clash)[0], "given both fixed (top level) and varied")
    size = 1
    for values in axes.values():
        size *= len(values)
    if size > MAX_POINTS:
        raise _fail(path, "[grid]", f"{size:,} points, more than a sweep takes ({MAX_POINTS:,})")
    rng = random.Random(seed)
    grid = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
    drawn = _draws(path, raw["random"], rng) if "random" in raw else [{}]
    if len(grid) * len(drawn) > MAX_POINTS:
        raise _fail(path, "[random]", f"{len(grid) * len(drawn):,} points with the grid, more "
                    f"than a sweep takes ({MAX_POINTS:,})")
    base = {name: p.default for name, p in PARAMS.items()} | (defaults or {})
    points = [{**base, **fixed, **g, **d} for g in grid for d in drawn]
    from nelssa.provenance import file_sha256

    return Spec(path, trace, limit, seed, scheduler, slo, fixed, points,
                file_sha256(str(trace)))


def check_catalog(spec: Spec, catalog: Any) -> None:
    """Every preset a point names exists in the hardware catalog (SpecError naming it)."""
    for name, p in PARAMS.items():
        if p.catalog is None:
            continue
        for value in dict.fromkeys(pt[name] for pt in spec.points):
            try:
                catalog.get(p.catalog, value)
            except ValueError as e:
                raise _fail(spec.path, name, str(e)) from None
