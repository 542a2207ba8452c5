"""Shedding requests past their TTFT SLO without a first token (emu/policy/shed.py, issue 26):
only those, whichever tier; settings refused naming the field; in the emulator nothing changes
while every request makes its first token in time, and after a step change of load into
overload it is the requests that could still meet the SLO that are served. (vLLM's scheduler
and ours take the drops the same way: tests/test_vllm_agreement.py.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nelssa.emu.policy.shed import ShedConfig, Shedder

SLO = ShedConfig().ttft_s
HEAD = Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl"


def test_it_drops_only_what_waited_the_ttft_slo() -> None:
    s = Shedder()
    waiting = [(0.0, "a"), (1.0, "b"), (10.0 - SLO, "c"), (9.5, "d")]
    assert list(s.late(10.0, waiting)) == ["a", "b", "c"]
    assert s.dropped == 3
    half = Shedder(ShedConfig(ttft_share=0.5))
    assert list(half.late(10.0, [(10.0 - 0.5 * SLO, "x"), (9.0, "y")])) == ["x"]


@pytest.mark.parametrize("field, bad", [("ttft_share", float("nan")), ("ttft_share", -1.0),
                                        ("ttft_share", 0.0), ("ttft_s", float("inf")),
                                        ("ttft_s", True), ("ttft_s", "6")])
def test_bad_settings_are_refused_naming_the_field(field: str, bad: object) -> None:
    with pytest.raises(ValueError, match=field):
        ShedConfig(**{field: bad})


def _lm():
    from nelssa.emu.latency.hardware import HardwareCatalog
    from nelssa.emu.latency.model import LatencyModel, Sparsity

    cat = HardwareCatalog.load()
    return LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                        cat.get("models", "llama-3-8b"), Sparsity(),
                        cat.get("links", "roce-400g"))


def _key(run):
    return sorted((r.rid, r.first_token_s, r.finish_s) for r in run.results)


def test_in_the_emulator_it_serves_those_that_can_still_meet_the_slo_after_a_load_step() -> None:
    """The 200-request conversation head, its first half at 0.2/s and its second at 4/s (a
    step into overload, compute-bound: FCFS makes almost every later request wait past the
    TTFT SLO). Shedding drops only requests past it, and the rest meet the SLO more often;
    while every first token comes in time (the calm first half alone) the run is the one
    without it."""
    from nelssa.emu.serving.config import ServingConfig
    from nelssa.emu.serving.metrics import goodput
    from nelssa.emu.serving.sim import ServingSim
    from nelssa.emu.serving.workload import load_trace, poisson

    trace = load_trace(HEAD, hash_ids=True)
    calm = poisson(trace[:100], 0.2, 0)
    rush = poisson(trace[100:], 4.0, 0)
    t0 = calm[-1].arrival_s
    reqs = calm + [replace(r, arrival_s=t0 + r.arrival_s) for r in rush]
    lm = _lm()
    cfg = ServingConfig(mode="nelssa")
    plain = ServingSim(lm, cfg).run(reqs)
    shed = ServingSim(lm, replace(cfg, shed_late=True)).run(reqs)
    assert shed.shed > 0 and len(shed.results) + shed.shed == len(reqs)
    # looked at each sample: a first token may come up to a sample (and a step) after the SLO
    assert all(r.ttft_s <= SLO + cfg.sample_s + 0.5 for r in shed.results)
    met = goodput(shed)["attainment"] * len(reqs)
    assert met > 1.2 * goodput(plain)["attainment"] * len(reqs)
    late = {r.rid for r in plain.results if r.ttft_s > SLO}
    assert late
    light = [r for r in calm if r.input_len < 20000]  # prompts each prefilled within the SLO
    alone = ServingSim(lm, cfg).run(light)
    assert max(r.ttft_s for r in alone.results) < SLO
    assert _key(alone) == _key(ServingSim(lm, replace(cfg, shed_late=True)).run(light))
