"""The adaptive routing threshold (emu/policy/adaptive.py, issue 26 item 1) against a small
two-tier plant: it lowers T_input when the GPU saturates and the PNM tier has room (and raises
it the other way), comes back to the crossover when the pressure is gone, stays in its bounds,
and settles instead of cycling after a step change of load and under a square wave."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from nelssa.emu.policy.adaptive import AdaptiveConfig, AdaptiveThreshold, Move, Pressure, TierLoad

CROSSOVER = 32768


def share_above(t: int) -> float:
    """Share of prompts of at least ``t`` tokens: log-uniform prompts over 1K..1M tokens."""
    lo, hi = math.log(1024), math.log(1 << 20)
    return min(1.0, max(0.0, (hi - math.log(max(t, 1))) / (hi - lo)))


def plant(t: int, demand: float, gpu_cap: float = 1.0, pnm_cap: float = 1.0) -> TierLoad:
    """What the tiers show at time 0 when ``demand`` is split at ``t``: each tier's memory use
    (its share over its capacity), a preemption when the GPU's runs over, a PNM queue wait when
    the PNM tier's does; the decode step stays well inside the TPOT SLO (memory binds)."""
    p = share_above(t)
    gpu, pnm = (1 - p) * demand / gpu_cap, p * demand / pnm_cap
    return TierLoad(0.0, min(1.0, gpu), int(gpu > 1), min(1.0, pnm), max(0.0, pnm - 1) * 20,
                    gpu_attn_s=0.01 * gpu, pnm_s=0.01 * pnm, step_s=0.02)


GPU_SHORT = {"gpu_cap": 0.7, "pnm_cap": 2.0}
"""A plant whose GPU tier saturates first when the demand grows."""
PNM_SHORT = {"gpu_cap": 2.0, "pnm_cap": 0.6}
RAISING = AdaptiveConfig()
"""A full PNM tier raises the threshold, guarded (the GPU clear of pressure for
``raise_hold_s``), in steps of at most ``raise_step``."""


def drive(a: AdaptiveThreshold, demand, seconds: int, **caps) -> list[int]:
    trace = []
    for t in range(seconds):
        load = replace(plant(a.t_input, demand(t), **caps), t_s=float(t))
        a.observe(load)
        trace.append(a.t_input)
    return trace


def reversals(a: AdaptiveThreshold, after: float = -1) -> int:
    moves = [m for t, _, m in a.history if t >= after]
    return sum(1 for x, y in itertools.pairwise(moves) if x != y)


def test_a_saturating_gpu_lowers_the_threshold_and_it_settles() -> None:
    a = AdaptiveThreshold(CROSSOVER)
    trace = drive(a, lambda t: 0.8 if t < 100 else 1.6, 900, **GPU_SHORT)
    assert set(trace[:100]) == {CROSSOVER}  # neither tier short: the crossover holds
    assert a.history[0][2] is Move.DOWN and a.history[0][0] >= 100
    assert trace[-1] < CROSSOVER
    end = plant(trace[-1], 1.6, **GPU_SHORT)
    p = Pressure.of(end, AdaptiveConfig())
    assert not p.gpu_short and not p.pnm_short  # the split it found leaves neither tier short
    late = [t for t, _, _ in a.history if t >= 400]
    assert late == [], a.history  # settled: no move in the last 500 s
    assert len(a.history) <= 12 and reversals(a) <= 5


def test_a_saturating_pnm_tier_raises_it_within_its_bounds() -> None:
    a = AdaptiveThreshold(CROSSOVER, RAISING)
    trace = drive(a, lambda t: 1.6, 600, gpu_cap=3.0, pnm_cap=0.3)
    assert a.history[0][2] is Move.UP and trace[-1] > CROSSOVER
    assert max(trace) <= a.hi == CROSSOVER * 4 and min(trace) >= a.lo


def test_when_the_pressure_is_gone_it_comes_back_to_the_crossover() -> None:
    a = AdaptiveThreshold(CROSSOVER)
    trace = drive(a, lambda t: 1.6 if t < 200 else 0.6, 800, **GPU_SHORT)
    assert min(trace[:200]) < CROSSOVER
    assert trace[-1] == CROSSOVER and max(trace[200:]) <= CROSSOVER  # home, not past it


@pytest.mark.parametrize("demand", [1.2, 1.6, 2.0, 2.4, 3.0])
@pytest.mark.parametrize("caps", [GPU_SHORT, PNM_SHORT])
def test_under_any_steady_load_it_settles(demand: float, caps: dict) -> None:
    """No limit cycle: under a constant load the steps shrink at each reversal and stop, so
    the threshold comes to rest (a tracked input that itself oscillates is followed, which
    is not this)."""
    a = AdaptiveThreshold(CROSSOVER, RAISING)
    trace = drive(a, lambda t: demand, 1200, **caps)
    assert reversals(a) <= 5 and len(a.history) <= 14, a.history
    assert len(set(trace[-600:])) == 1  # at rest for the last 10 minutes


def test_it_never_moves_during_its_cooldown() -> None:
    a = AdaptiveThreshold(CROSSOVER)
    drive(a, lambda t: 2.0, 300, **GPU_SHORT)
    times = [t for t, _, _ in a.history]
    assert all(b - x >= a.config.cooldown_s for x, b in itertools.pairwise(times))


@pytest.mark.parametrize("strain", [
    {"step_s": 0.1},  # decode steps not calm (prefill chunks: the GPU's compute)
    {"gpu_kv": 0.6},  # the GPU's KV past raise_kv_room
    {"gpu_wait_s": 3.0},  # a queue for the GPU's compute
])
def test_a_full_pnm_tier_does_not_raise_it_while_the_gpu_shows_pressure(strain: dict) -> None:
    """Measured (docs/results/adaptive.md, the long-fraction sweep): a raise while the GPU's
    compute binds lost goodput; the guard keeps the threshold where it is."""
    a = AdaptiveThreshold(CROSSOVER)
    for t in range(300):
        a.observe(TierLoad(float(t), strain.get("gpu_kv", 0.3), 0, 1.0, 5.0,
                           gpu_wait_s=strain.get("gpu_wait_s", 0.0), gpu_attn_s=0.01,
                           pnm_s=0.01, step_s=strain.get("step_s", 0.02)))
    assert a.history == [] and a.t_input == CROSSOVER


def test_a_raise_is_guarded_small_and_comes_back_at_the_first_gpu_pressure() -> None:
    """A full PNM tier and a clear GPU: raises of at most ``raise_step``, each after the GPU
    has been clear ``raise_hold_s`` since the last move; a preemption brings it back toward
    the crossover (not below it)."""
    c = AdaptiveConfig()
    a = AdaptiveThreshold(CROSSOVER)
    clear = {"gpu_attn_s": 0.01, "pnm_s": 0.01, "step_s": 0.02}
    for t in range(60):
        a.observe(TierLoad(float(t), 0.3, 0, 1.0, 5.0, **clear))
    ups = [(t, v) for t, v, m in a.history if m is Move.UP]
    assert len(ups) == len(a.history) >= 3
    assert all(b - x >= c.raise_hold_s for (x, _), (b, _) in itertools.pairwise(ups))
    values = [CROSSOVER] + [v for _, v in ups]
    assert all(y <= math.ceil(x * c.raise_step) for x, y in itertools.pairwise(values))
    top = a.t_input
    for t in range(60, 200):
        a.observe(TierLoad(float(t), 0.95, 1, 1.0, 5.0, **clear))  # preempting, PNM still full
    assert a.history[-1][2] is Move.DOWN and CROSSOVER <= a.t_input < top
    assert a.t_input == CROSSOVER  # back home, not past it


def _step(a: AdaptiveThreshold, t: float, gpu_attn: float, pnm: float, step: float) -> Move:
    """Memory with room on both tiers; only the step's parts speak."""
    return a.observe(TierLoad(t, 0.5, 0, 0.5, 0.0, gpu_attn_s=gpu_attn, pnm_s=pnm, step_s=step))


def test_a_slow_step_moves_attention_off_the_tier_that_sets_it() -> None:
    slo = AdaptiveConfig().tpot_s
    a = AdaptiveThreshold(CROSSOVER)
    assert _step(a, 0, 0.10, 0.02, 0.9 * slo) is Move.DOWN  # the GPU's attention sets it
    b = AdaptiveThreshold(CROSSOVER)
    assert _step(b, 0, 0.02, 0.10, 0.9 * slo) is Move.UP  # the PNM tier's does
    c = AdaptiveThreshold(CROSSOVER)
    # neither sets it (GEMMs, prefill chunks): compute, no move; nor far past the SLO
    assert _step(c, 0, 0.010, 0.011, 0.9 * slo) is Move.HOLD
    assert _step(c, 10, 0.30, 0.02, 2.5 * slo) is Move.HOLD
    assert c.history == []


def test_a_step_change_of_the_step_time_settles_too() -> None:
    """The PNM tier's attention grows with its share; a step of load that makes it set a slow
    step raises the threshold until it no longer does, then it rests."""
    slo = AdaptiveConfig().tpot_s
    a = AdaptiveThreshold(CROSSOVER)
    for t in range(900):
        load = 1.0 if t < 100 else 3.0
        p = share_above(a.t_input) * load * 0.1
        g = (1 - share_above(a.t_input)) * load * 0.05
        _step(a, float(t), g, p, 0.02 + max(g, p))
    assert a.history and a.history[0][2] is Move.UP and a.history[0][0] >= 100
    assert [x for x, _, _ in a.history if x >= 400] == [], a.history
    assert reversals(a) <= 5 and a.t_input <= a.hi
    share = share_above(a.t_input)
    end = 0.02 + max(share * 0.3, (1 - share) * 0.15)
    assert end < AdaptiveConfig().step_hot * slo  # where it rests, the step is not slow


@pytest.mark.parametrize("kw, words", [
    ({"lo_factor": 0}, "lo_factor"), ({"hi_factor": 0.5}, "hi_factor"),
    ({"step": 1.0}, "min_step < step"), ({"gpu_kv_cool": 0.95}, "gpu_kv_cool < gpu_kv_hot"),
    ({"cooldown_s": 0.5}, "interval_s <= cooldown_s"), ({"step": math.nan}, "step must be"),
    ({"wait_hot_s": True}, "wait_hot_s must be"), ({"overload": 0.5}, "overload > step_hot"),
    ({"step_cool": 0.9}, "step_cool < step_hot"),
    ({"raise_step": 1.01}, "min_step < raise_step"), ({"raise_kv_room": 0.8}, "raise_kv_room"),
    ({"raise_hold_s": -1.0}, "raise_hold_s >= 0"),
])
def test_bad_settings_are_refused_naming_the_field(kw: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        AdaptiveConfig(**kw)
    with pytest.raises(ValueError, match="crossover"):
        AdaptiveThreshold(0)


# -- wired into the serving emulator --------------------------------------------------------------
def _sim(**kw):
    from nelssa.emu.latency.hardware import HardwareCatalog
    from nelssa.emu.latency.model import LatencyModel, Sparsity
    from nelssa.emu.serving.config import ServingConfig
    from nelssa.emu.serving.sim import ServingSim

    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                      cat.get("models", "llama-3-8b"), Sparsity(), cat.get("links", "roce-400g"))
    return ServingSim(lm, ServingConfig(mode="nelssa", **kw))


def _trace(rate: float, seed: int = 1):
    from pathlib import Path

    from nelssa.emu.serving.workload import load_trace, poisson

    head = Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl"
    return poisson(load_trace(head, hash_ids=True), rate, seed)


DECODE_GPU = {"devices": 1, "prefill": "disaggregated", "prefill_gpus": 8}
"""The paper's Prefill Node: the decode GPU's steps are decode only, so what binds is memory
and attention, which routing moves (with one PNM device the crossover is ~77K tokens)."""


def test_adaptive_beats_static_where_a_tier_saturates_and_does_not_lose_when_light() -> None:
    """Issue 26 item 2 on a small trace (the 200-request conversation head, Poisson): at 8/s
    the static crossover fills the GPU's KV (and it preempts); the adaptive threshold lowers
    T_input, the PNM tier takes the mid-length requests, and more requests meet the SLO. At
    1/s nothing is short: it never moves and the goodput is the static one. The replay is
    deterministic (two runs identical)."""
    from nelssa.emu.serving.metrics import goodput
    from nelssa.emu.serving.sweeps import saturated_tiers

    heavy = _trace(8.0, seed=0)
    static_sim = _sim(**DECODE_GPU)
    static = static_sim.run(heavy)
    runs = [_sim(adaptive=True, **DECODE_GPU).run(heavy) for _ in range(2)]
    assert "gpu-kv" in saturated_tiers(static, static_sim)
    g_static, g_adaptive = goodput(static)["goodput_rps"], goodput(runs[0])["goodput_rps"]
    assert g_adaptive > 1.05 * g_static, (g_static, g_adaptive)
    seen = [s.t_input for s in runs[0].samples]
    assert {s.t_input for s in static.samples} == {static.t_input}
    assert min(seen) < static.t_input and min(seen) >= static.t_input // 4  # lowered, bounded
    pnm = [sum(r.tier == "pnm" for r in run.results) for run in (static, *runs)]
    assert pnm[1] > pnm[0]  # more requests placed on the PNM tier
    a, b = runs
    assert [(r.rid, r.tier, r.first_token_s, r.finish_s) for r in a.results] == \
        [(r.rid, r.tier, r.first_token_s, r.finish_s) for r in b.results]
    assert [s.t_input for s in a.samples] == [s.t_input for s in b.samples]
    light = _trace(1.0, seed=0)
    calm = _sim(adaptive=True, **DECODE_GPU).run(light)
    assert {s.t_input for s in calm.samples} == {static.t_input}
    assert goodput(calm)["goodput_rps"] >= 0.99 * goodput(_sim(**DECODE_GPU).run(light))[
        "goodput_rps"]


def test_an_adaptive_run_checks_every_tier_a_request_may_fall_on() -> None:
    """A prompt between the threshold's bounds may go to either tier: the run is refused
    up front (naming the trace line) if one of them cannot hold it, not midway."""
    import pytest as _pytest

    from nelssa.emu.serving.sim import CapacityError
    from nelssa.emu.serving.workload import TraceRequest

    small_gpu = {"gpu_mem_util": 0.19, "prefill": "disaggregated", "prefix_caching": False}
    static = _sim(**small_gpu)
    big = TraceRequest(0, 0.0, static.router.t_input * 2, 4, line=7)  # PNM-tier, beyond the GPU
    assert static.tiers(big) == {static.tier(big)}
    static.run([big])  # placed on the PNM tier: it runs
    adaptive = _sim(adaptive=True, **small_gpu)
    assert len(adaptive.tiers(big)) == 2
    with _pytest.raises(CapacityError, match=r"trace line 7: .* exceed the GPU's KV capacity"):
        adaptive.run([big])
