"""The adaptive routing threshold (emu/policy/adaptive.py, issue 26 item 1) against a small
two-tier plant: it lowers T_input when the GPU saturates and the PNM tier has room (and raises
it the other way), comes back to the crossover when the pressure is gone, stays in its bounds,
and settles instead of cycling after a step change of load and under a square wave."""

from __future__ import annotations

import itertools
import math

import pytest

from nelssa.emu.policy.adaptive import AdaptiveConfig, AdaptiveThreshold, Move, TierLoad

CROSSOVER = 32768


def share_above(t: int) -> float:
    """Share of prompts of at least ``t`` tokens: log-uniform prompts over 1K..1M tokens."""
    lo, hi = math.log(1024), math.log(1 << 20)
    return min(1.0, max(0.0, (hi - math.log(max(t, 1))) / (hi - lo)))


def plant(t: int, demand: float, gpu_cap: float = 1.0, pnm_cap: float = 1.0) -> tuple:
    """(GPU KV use, GPU wait, PNM utilization, PNM wait) of ``demand`` split at ``t``."""
    p = share_above(t)
    gpu, pnm = (1 - p) * demand / gpu_cap, p * demand / pnm_cap
    return (min(1.0, gpu), max(0.0, gpu - 1) * 20, min(1.0, pnm), max(0.0, pnm - 1) * 20)


GPU_SHORT = {"gpu_cap": 0.7, "pnm_cap": 2.0}
"""A plant whose GPU tier saturates first when the demand grows."""


def drive(a: AdaptiveThreshold, demand, seconds: int, **caps) -> list[int]:
    trace = []
    for t in range(seconds):
        kv, gw, util, pw = plant(a.t_input, demand(t), **caps)
        a.observe(TierLoad(float(t), kv, gw, util, pw))
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
    _kv, gw, _util, pw = plant(trace[-1], 1.6, **GPU_SHORT)
    assert gw < 2.0 and pw < 2.0  # the split it found leaves neither tier hot
    late = [t for t, _, _ in a.history if t >= 400]
    assert late == [], a.history  # settled: no move in the last 500 s
    assert len(a.history) <= 12 and reversals(a) <= 5


def test_a_saturating_pnm_tier_raises_it_within_its_bounds() -> None:
    a = AdaptiveThreshold(CROSSOVER)
    trace = drive(a, lambda t: 1.6, 600, gpu_cap=3.0, pnm_cap=0.3)
    assert a.history[0][2] is Move.UP and trace[-1] > CROSSOVER
    assert max(trace) <= a.hi == CROSSOVER * 4 and min(trace) >= a.lo


def test_when_the_pressure_is_gone_it_comes_back_to_the_crossover() -> None:
    a = AdaptiveThreshold(CROSSOVER)
    trace = drive(a, lambda t: 1.6 if t < 200 else 0.6, 800, **GPU_SHORT)
    assert min(trace[:200]) < CROSSOVER
    assert trace[-1] == CROSSOVER and max(trace[200:]) <= CROSSOVER  # home, not past it


@pytest.mark.parametrize("demand", [1.2, 1.6, 2.0, 2.4, 3.0])
@pytest.mark.parametrize("caps", [GPU_SHORT, {"gpu_cap": 2.0, "pnm_cap": 0.6}])
def test_under_any_steady_load_it_settles(demand: float, caps: dict) -> None:
    """No limit cycle: under a constant load the steps shrink at each reversal and stop, so
    the threshold comes to rest (a tracked input that itself oscillates is followed, which
    is not this)."""
    a = AdaptiveThreshold(CROSSOVER)
    trace = drive(a, lambda t: demand, 1200, **caps)
    assert reversals(a) <= 5 and len(a.history) <= 14, a.history
    assert len(set(trace[-600:])) == 1  # at rest for the last 10 minutes


def test_it_never_moves_during_its_cooldown() -> None:
    a = AdaptiveThreshold(CROSSOVER)
    drive(a, lambda t: 2.0, 300, **GPU_SHORT)
    times = [t for t, _, _ in a.history]
    assert all(b - x >= a.config.cooldown_s for x, b in itertools.pairwise(times))


@pytest.mark.parametrize("kw, words", [
    ({"lo_factor": 0}, "lo_factor"), ({"hi_factor": 0.5}, "hi_factor"),
    ({"step": 1.0}, "min_step < step"), ({"gpu_kv_cool": 0.95}, "gpu_kv_cool < gpu_kv_hot"),
    ({"cooldown_s": 0.5}, "interval_s <= cooldown_s"), ({"step": math.nan}, "step must be"),
    ({"wait_hot_s": True}, "wait_hot_s must be"),
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


def _trace(rate: float):
    from pathlib import Path

    from nelssa.emu.serving.workload import load_trace, poisson

    head = Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl"
    return poisson(load_trace(head, hash_ids=True), rate, 1)


def test_the_replay_moves_its_threshold_under_load_and_repeats_itself() -> None:
    """ServingConfig.adaptive: the replay observes the tiers at each sample and routes new
    arrivals by the moved threshold; the samples record it; two runs are identical."""
    reqs = _trace(2.0)
    static = _sim().run(reqs)
    runs = [_sim(adaptive=True).run(reqs) for _ in range(2)]
    seen = [s.t_input for s in runs[0].samples]
    assert {s.t_input for s in static.samples} == {static.t_input}
    assert len(set(seen)) > 1 and min(seen) < static.t_input  # the GPU was hot: lowered
    assert min(seen) >= static.t_input // 4
    pnm = [sum(r.tier == "pnm" for r in run.results) for run in (static, *runs)]
    assert pnm[1] > pnm[0]  # more requests placed on the PNM tier
    a, b = runs
    assert [(r.rid, r.tier, r.first_token_s, r.finish_s) for r in a.results] == \
        [(r.rid, r.tier, r.first_token_s, r.finish_s) for r in b.results]
    assert [s.t_input for s in a.samples] == [s.t_input for s in b.samples]


def test_an_adaptive_run_checks_every_tier_a_request_may_fall_on() -> None:
    """A prompt between the threshold's bounds may go to either tier: the run is refused
    up front (naming the trace line) if one of them cannot hold it, not midway."""
    import pytest as _pytest

    from nelssa.emu.serving.sim import CapacityError
    from nelssa.emu.serving.workload import Request

    small_gpu = {"gpu_mem_util": 0.19, "prefill": "disaggregated", "prefix_caching": False}
    static = _sim(**small_gpu)
    big = Request(0, 0.0, static.router.t_input * 2, 4, line=7)  # PNM-tier, beyond the GPU
    assert static.tiers(big) == {static.tier(big)}
    static.run([big])  # placed on the PNM tier: it runs
    adaptive = _sim(adaptive=True, **small_gpu)
    assert len(adaptive.tiers(big)) == 2
    with _pytest.raises(CapacityError, match=r"trace line 7: .* exceed the GPU's KV capacity"):
        adaptive.run([big])
