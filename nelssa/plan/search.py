"""A plan's points: fleet mixes (decode GPUs, prefill pool, PNM nodes and devices, T_input
policy), each searched for the highest request rate it sustains under the SLO.

The search is Vidur-Search's capacity search (``vidur/config_optimizer/config_explorer/
capacity_search.py``): probe the rate up (doubling) until the SLO fails, or down (halving)
until it holds, then bisect between the last rate that held and the first that failed until
they are within ``granularity`` of each other. Each probe is one fleet run: ``requests``
requests drawn from the trace (``workload.resample``: Poisson arrivals at the rate, each
request's lengths and prefix blocks a draw from the trace), the same seed at every rate.

A point's key is a hash of its fully resolved configuration (the settings with the trace's
SHA-256 and the values of the hardware entries, the mix), so a stored point is reused only
when nothing it depends on changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

from nelssa.emu.policy.slo import MLPERF_SLO
from nelssa.plan.prices import Parts, TierPower

log = logging.getLogger(__name__)

CROSSOVER, ADAPTIVE = "crossover", "fleet-adaptive"
"""T_input policies: the crossover of the node's devices, static; the fleet orchestrator's."""
GPU_ONLY = "-"
"""The T_input policy of a fleet without PNM nodes."""


@dataclass(frozen=True)
class Mix:
    """One fleet mix: ``decode`` instances of one GPU each, prefilled on their own GPU
    (``prefill_gpus`` 0) or on a shared pool of ``prefill_gpus``, and ``nodes`` PNM nodes of
    ``devices`` devices each (0: GPU only) under a T_input ``policy``."""

    decode: int
    prefill_gpus: int = 0
    nodes: int = 0
    devices: int = 0
    policy: str = GPU_ONLY

    @property
    def gpu_only(self) -> bool:
        return self.nodes == 0

    @property
    def parts(self) -> Parts:
        return Parts(self.decode, self.prefill_gpus, self.nodes, self.nodes * self.devices)

    def label(self) -> str:
        pre = f"+{self.prefill_gpus}p" if self.prefill_gpus else ""
        if self.gpu_only:
            return f"{self.decode}d{pre}"
        return f"{self.decode}d{pre} {self.nodes}x{self.devices} {self.policy}"


@dataclass(frozen=True)
class PlanSlo:
    """What a rate must meet to be sustained. With ``goodput``: at least that share of the
    requests meet TTFT <= ``ttft_s`` and their own TPOT <= ``tpot_s`` (serve-sim's goodput, a
    rejected request a miss). Else with ``percentile``: the run's P``percentile`` TTFT <=
    ``ttft_s`` and P``percentile`` TPOT <= ``tpot_s``. In both, a run whose queue grows without
    bound (``metrics.overload``) fails."""

    ttft_s: float | None = MLPERF_SLO.ttft_s
    tpot_s: float | None = MLPERF_SLO.tpot_s
    goodput: float | None = 0.99
    percentile: float | None = None

    def __post_init__(self) -> None:
        if (self.goodput is None) == (self.percentile is None):
            raise ValueError("an SLO takes goodput or a percentile, one of them")
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("an SLO needs ttft or tpot")

    def label(self) -> str:
        parts = [f"TTFT {_time(self.ttft_s)}" if self.ttft_s is not None else "",
                 f"TPOT {_time(self.tpot_s)}" if self.tpot_s is not None else ""]
        bounds = " and ".join(p for p in parts if p)
        if self.goodput is not None:
            return f"goodput >= {self.goodput:.0%} at {bounds}"
        return f"P{self.percentile:g} {bounds}"


def _time(s: float) -> str:
    return f"{s:g} s" if s >= 1 else f"{s * 1e3:g} ms"


@dataclass(frozen=True)
class PlanSettings:
    """What every point of a plan shares (each point's key holds it all)."""

    trace: str
    trace_sha256: str
    slo: PlanSlo = field(default_factory=PlanSlo)
    requests: int = 2000
    """Requests per probe."""
    seed: int = 0
    long_share: float | None = None
    """The trace redrawn so that this share of its requests have inputs of at least
    ``long_threshold`` tokens (``workload.long_fraction_mix``, the Figure 16 sweep); None: as
    it is."""
    long_threshold: int = 32768
    model: str = "llama-3-8b"
    gpu: str = "h100-nvl"
    pnm: str = "prototype"
    link: str = "roce-400g"
    dispatch: str = "round-robin"
    hardware: tuple[str, ...] = ()
    granularity: float = 0.05
    """The search stops when the failing rate is within this share above the passing one."""
    start_per_gpu: float = 0.5
    """The first probe's rate per GPU of the mix (requests/s)."""
    most_probes: int = 12
    max_rate: float = 1000.0
    halvings: int = 5
    """Below the first probe's rate the search halves at most this many times: a mix that
    fails at 1/32 of it is taken to sustain nothing (an SLO the trace's requests miss even
    alone, such as a TTFT under the longest prompts' own prefill)."""


@dataclass(frozen=True)
class Probe:
    """One fleet run at one rate."""

    rate: float
    passed: bool
    attainment: float
    ttft_s: float
    tpot_s: float
    """The SLO's percentile of TTFT and TPOT (P99 under a goodput SLO)."""
    overloaded: bool | None
    mean_output: float
    """Mean output tokens per request of the run."""
    cpu_s: float
    power: TierPower | None = None
    """The run's per-tier average power (``fleet_power``)."""


@dataclass(frozen=True)
class PointResult:
    """A mix's search: its highest sustained rate and the probes that found it."""

    key: str
    mix: Mix
    rate: float
    """Highest rate that met the SLO (0: none did down to the least probed)."""
    probes: tuple[Probe, ...]
    output_tps: float
    """Output tokens/s at ``rate`` (rate x the mean output tokens of that run)."""
    cpu_s: float
    wall_s: float
    power: TierPower | None = None
    """Per-tier average power at ``rate`` (``fleet_power``; None where no rate was met)."""

    @property
    def parts(self) -> Parts:
        return self.mix.parts


def resolved(settings: PlanSettings, mix: Mix) -> dict[str, Any]:
    """The point's fully resolved configuration: settings, mix and the values of the
    hardware entries they name (a hardware file changing an entry under its name changes
    the configuration)."""
    from nelssa.provenance import jsonable

    cat = _catalog(settings.hardware)
    hw = {"gpu": cat.get("gpus", settings.gpu), "pnm": cat.get("pnm", settings.pnm),
          "model": cat.get("models", settings.model), "link": cat.get("links", settings.link)}
    return jsonable({"settings": settings, "mix": mix, "hardware": hw})


def point_key(config: dict[str, Any]) -> str:
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# -- the capacity search --------------------------------------------------------------------------
def capacity(passes: Callable[[float], bool], start: float, granularity: float,
             most_probes: int, max_rate: float, least: float = 1e-3
             ) -> tuple[float, list[tuple[float, bool]]]:
    """The highest rate ``passes`` holds at, to within ``granularity`` (a share of it), and
    the probes in order. Doubling from ``start`` until it fails (or ``max_rate`` holds), or
    halving until it holds (0 when it fails down to ``least``), then bisection."""
    probes: list[tuple[float, bool]] = []

    def probe(rate: float) -> bool:
        ok = passes(rate)
        probes.append((rate, ok))
        return ok

    rate = min(start, max_rate)
    lo, hi = 0.0, math.inf
    if probe(rate):
        lo = rate
        while len(probes) < most_probes and lo < max_rate:
            rate = min(2 * lo, max_rate)
            if probe(rate):
                lo = rate
            else:
                hi = rate
                break
        if hi == math.inf:
            return lo, probes
    else:
        hi = rate
        while len(probes) < most_probes:
            rate = hi / 2
            if rate < least:
                return 0.0, probes
            if probe(rate):
                lo = rate
                break
            hi = rate
        if lo == 0.0:
            return 0.0, probes
    while len(probes) < most_probes and (hi - lo) > granularity * lo:
        mid = (lo + hi) / 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


# -- one probe: a fleet run -----------------------------------------------------------------------
@cache
def _catalog(files: tuple[str, ...]) -> Any:
    from nelssa.emu.latency.hardware import HardwareCatalog

    return HardwareCatalog.load(*files)


@cache
def _source(trace: str, long_share: float | None, threshold: int, seed: int) -> list[Any]:
    """The requests a probe draws from: the trace, or its long-share redraw."""
    from nelssa.emu.serving.workload import load_trace, long_fraction_mix

    reqs = load_trace(trace, hash_ids=True)
    if long_share is not None:
        reqs = long_fraction_mix(reqs, long_share, threshold, len(reqs), seed)
    return reqs


def fleet_of(mix: Mix, settings: PlanSettings) -> tuple[Any, Any]:
    """The mix as a fleet description and its serving configuration."""
    from nelssa.emu.latency.fleet_description import FleetSpec
    from nelssa.emu.serving.config import ServingConfig

    inst: dict[str, Any] = {"count": mix.decode, "gpu": settings.gpu}
    if mix.prefill_gpus:
        inst["prefill"] = "pool"
    spec = FleetSpec(
        instances=[inst],
        prefill_pool={"gpu": settings.gpu, "gpus": mix.prefill_gpus} if mix.prefill_gpus
        else None,
        pnm_nodes=[{"name": "pnm", "count": mix.nodes, "devices": mix.devices,
                    "pnm": settings.pnm}] if mix.nodes else [],
        fabric={"link": settings.link}, dispatch=settings.dispatch,
        orchestrator=ADAPTIVE if mix.policy == ADAPTIVE else "static")
    t_input = int(mix.policy) if mix.policy.isdigit() else None
    cfg = ServingConfig(mode="gpu" if mix.gpu_only else "nelssa",
                        devices=mix.devices if mix.nodes else ServingConfig.devices,
                        t_input=t_input)
    return spec, cfg


def fleet_power(fleet: Any, result: Any, catalog: Any) -> TierPower:
    """A fleet run's per-tier average power (decode GPUs, prefill GPUs, PNM nodes): the
    fleet's energy model over the run (``FleetSim.energy``, emu/energy.py, the hardware
    description's power figures)."""
    from nelssa.emu.energy import energy_entry

    e = fleet.energy(result, energy_entry(catalog))
    return TierPower(e.decode_gpu_w, e.prefill_gpu_w, e.pnm_node_w,
                     ("decode_gpus", "prefill_gpus", "pnm_nodes"),
                     "the fleet's energy model (emu/energy.py) over the run at this rate")


def run_probe(mix: Mix, rate: float, settings: PlanSettings) -> Probe:
    """The mix's fleet on ``settings.requests`` requests at ``rate``, held to the SLO."""
    import numpy as np

    from nelssa.emu.latency.model import LatencyModel
    from nelssa.emu.serving.fleet import FleetSim
    from nelssa.emu.serving.metrics import goodput, overload
    from nelssa.emu.serving.workload import resample

    c0 = time.process_time()
    cat = _catalog(settings.hardware)
    lm = LatencyModel(cat.get("gpus", settings.gpu), cat.get("pnm", settings.pnm),
                      cat.get("models", settings.model), link=cat.get("links", settings.link))
    spec, cfg = fleet_of(mix, settings)
    source = _source(settings.trace, settings.long_share, settings.long_threshold,
                     settings.seed)
    reqs = list(resample(source, settings.requests, rate, settings.seed))
    fleet = FleetSim(spec, cat, lm, cfg)
    admitted, rejected = fleet.admit(reqs)
    res = fleet.run(admitted)
    run = res.merged()
    run.rejected = len(rejected)
    slo = settings.slo
    g = goodput(run, slo.ttft_s, slo.tpot_s)
    pct = slo.percentile if slo.percentile is not None else 99.0
    ttfts = [r.ttft_s for r in run.results]
    tpots = [r.tpot_s for r in run.results if r.tpot_s is not None]
    ttft = float(np.percentile(ttfts, pct)) if ttfts else math.inf
    tpot = float(np.percentile(tpots, pct)) if tpots else 0.0
    over = overload(run)["overloaded"]
    if slo.goodput is not None:
        ok = g["attainment"] >= slo.goodput
    else:
        ok = ((slo.ttft_s is None or ttft <= slo.ttft_s)
              and (slo.tpot_s is None or tpot <= slo.tpot_s) and not rejected)
    mean_out = (sum(r.output_len for r in run.results) / len(run.results)
                if run.results else 0.0)
    return Probe(rate, bool(ok and not over), g["attainment"], ttft, tpot, over, mean_out,
                 time.process_time() - c0, fleet_power(fleet, res, cat))


def search_point(key: str, mix: Mix, settings: PlanSettings,
                 probe_fn: Callable[[Mix, float, PlanSettings], Probe] = run_probe
                 ) -> PointResult:
    """The mix's capacity search (``capacity`` over ``probe_fn``)."""
    t0, c0 = time.perf_counter(), time.process_time()
    done: dict[float, Probe] = {}

    def passes(rate: float) -> bool:
        done[rate] = probe_fn(mix, rate, settings)
        log.debug("%s at %.4g/s: %s", mix.label(), rate, done[rate])
        return done[rate].passed

    gpus = mix.decode + mix.prefill_gpus
    start = settings.start_per_gpu * gpus
    rate, _ = capacity(passes, start, settings.granularity, settings.most_probes,
                       settings.max_rate, least=start / 2 ** settings.halvings)
    at = done[rate] if rate > 0 else None
    return PointResult(key, mix, rate, tuple(done.values()),
                       rate * at.mean_output if at is not None else 0.0,
                       time.process_time() - c0, time.perf_counter() - t0,
                       at.power if at is not None else None)


def point_json(p: PointResult, config: dict[str, Any]) -> dict[str, Any]:
    """A point as its stored line: key, resolved configuration, the search and its probes."""
    from nelssa.provenance import jsonable

    return jsonable({"key": p.key, "config": config, "mix": asdict(p.mix), "rate": p.rate,
                     "output_tps": p.output_tps, "cpu_s": p.cpu_s, "wall_s": p.wall_s,
                     "power": p.power, "probes": [asdict(x) for x in p.probes]})


def _power(doc: dict[str, Any] | None) -> TierPower | None:
    return TierPower(**{**doc, "counted": tuple(doc["counted"])}) if doc else None


def point_from_json(doc: dict[str, Any]) -> PointResult:
    """A stored line back as a point (KeyError/TypeError/ValueError when it is not one)."""
    probes = tuple(Probe(**{**x, "ttft_s": math.inf if x["ttft_s"] is None else x["ttft_s"],
                            "power": _power(x.get("power"))}) for x in doc["probes"])
    return PointResult(doc["key"], Mix(**doc["mix"]), float(doc["rate"]), probes,
                       float(doc["output_tps"]), float(doc["cpu_s"]), float(doc["wall_s"]),
                       _power(doc.get("power")))
