"""The fleet orchestrator (issue 42 item 4): the policy on synthetic fleet signals
(emu/policy/orchestrator.py), and in the fleet emulator: static changes nothing, fleet-adaptive
moves T_input and the node choice when a tier saturates; the fleet description's field."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.policy.adaptive import AdaptiveConfig, Pressure, TierLoad
from nelssa.emu.policy.orchestrator import (
    FleetAdaptive,
    FleetSignals,
    InstanceSignal,
    NodeSignal,
    OrchestratorConfig,
    Static,
    make_orchestrator,
)
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.fleet import FleetSim
from nelssa.emu.serving.pnm_nodes import PnmNode, place
from nelssa.emu.serving.workload import load_trace, poisson

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/data/mooncake_conversation_head.jsonl"


def _inst(crossover: int | None = 10_000, nodes: tuple[int, ...] = (0,), **kw) -> InstanceSignal:
    base = dict(gpu_kv_used=0.3, preempted=0, waiting=0, gpu_wait_s=0.0, pnm_queued=0,
                pnm_wait_s=0.0, step_s=0.02, gpu_attn_s=0.005, pnm_s=0.004)
    base.update(kw)
    return InstanceSignal(crossover, nodes, **base)  # type: ignore[arg-type]


def _run(orch, looks, nodes, insts):
    """``looks`` looks a second apart at the same signals; the last decision."""
    d = None
    for t in range(looks):
        d = orch.observe(FleetSignals(float(t), tuple(nodes), tuple(insts)))
    return d


def test_static_decides_nothing() -> None:
    assert Static().observe(FleetSignals(1.0, (NodeSignal(1.0, 3.0),), (_inst(),))) is None
    with pytest.raises(ValueError, match="unknown orchestrator 'valve'"):
        make_orchestrator("valve")


def test_calm_fleet_keeps_the_crossover_and_the_static_placement() -> None:
    d = _run(FleetAdaptive(), 120, [NodeSignal(0.3, 0.2), NodeSignal(0.4, 0.3)],
             [_inst(nodes=(0, 1)), _inst(8000, nodes=(1,)), _inst(None, nodes=())])
    assert d is not None
    assert d.t_input == (10_000, 8000, None)
    assert d.node_weights == (None, None, None)


def test_gpu_short_with_pnm_room_lowers_t_input() -> None:
    """GPU KV full and preempting, the nodes with room: more requests to the PNM tier."""
    orch = FleetAdaptive()
    d = _run(orch, 30, [NodeSignal(0.2, 0.1)],
             [_inst(gpu_kv_used=0.97, preempted=2), _inst()])
    assert d is not None and d.t_input[0] < 10_000 and d.t_input[1] == 10_000
    assert orch.moves >= 1


def test_saturated_devices_stop_a_lowering_and_raise_t_input() -> None:
    """The same GPU pressure, but the node's devices saturated by the fleet (load past 1):
    the PNM tier has no room to give; a fleet whose node is saturated while the GPU has clear
    room raises T_input (guarded, in small steps)."""
    d = _run(FleetAdaptive(), 30, [NodeSignal(0.2, 1.4)],
             [_inst(gpu_kv_used=0.97, preempted=2)])
    assert d is not None and d.t_input[0] == 10_000
    d = _run(FleetAdaptive(), 60, [NodeSignal(0.5, 1.4)], [_inst(gpu_kv_used=0.2, step_s=0.01)])
    assert d is not None and 10_000 < d.t_input[0] <= 40_000


def test_another_instances_queue_on_a_shared_node_counts_as_full() -> None:
    """Instance 1 has no queue of its own, but instance 0 waits for room on the node they
    share: both read the node as full, and both raise T_input while their GPUs have room."""
    d = _run(FleetAdaptive(), 60, [NodeSignal(0.97, 0.5)],
             [_inst(pnm_queued=4, pnm_wait_s=8.0, gpu_kv_used=0.2, step_s=0.01),
              _inst(gpu_kv_used=0.2, step_s=0.01)])
    assert d is not None and d.t_input[0] > 10_000 and d.t_input[1] > 10_000


def test_contention_stretches_the_pnm_part_of_a_step() -> None:
    """Slow steps that the PNM tier sets only once its contention is counted: T_input rises
    (the per-step rule); uncounted, the GPU would seem to set them and nothing would move."""
    slow = dict(step_s=0.16, gpu_attn_s=0.03, pnm_s=0.025, gpu_kv_used=0.3)
    load = TierLoad(0.0, 0.3, 0, 0.3, 0.0, gpu_attn_s=0.03, pnm_s=0.025 * 3, step_s=0.16)
    assert Pressure.of(load, AdaptiveConfig()).pnm_short
    d = _run(FleetAdaptive(), 20, [NodeSignal(0.3, 0.6)], [_inst(pnm_slowdown=3.0, **slow)])
    assert d is not None and d.t_input[0] > 10_000
    d = _run(FleetAdaptive(), 20, [NodeSignal(0.3, 0.6)], [_inst(pnm_slowdown=1.0, **slow)])
    assert d is not None and d.t_input[0] == 10_000


def test_node_preference_steers_new_kv_from_a_saturated_node() -> None:
    orch = FleetAdaptive()
    d = _run(orch, 10, [NodeSignal(0.3, 1.6), NodeSignal(0.5, 0.2)], [_inst(nodes=(0, 1))])
    assert d is not None and d.node_weights[0] is not None
    w = d.node_weights[0]
    assert w[1] == 1.0 and w[0] < 0.5 and orch.preferring
    # place() then picks the node with room though the other has more memory free
    a, b = PnmNode("a", 1000, None, 1), PnmNode("b", 1000, None, 1)  # type: ignore[arg-type]
    a.reserve(300)
    b.reserve(500)
    assert place(100, [a, b]) is a and place(100, [a, b], w) is b
    assert place(600, [a, b], w) is a  # only a can hold it
    # both saturated, or neither: the static choice
    for loads in ((1.3, 1.2), (0.8, 0.75)):
        d = _run(FleetAdaptive(), 10, [NodeSignal(0.3, loads[0]), NodeSignal(0.5, loads[1])],
                 [_inst(nodes=(0, 1))])
        assert d is not None and d.node_weights == (None,)
    d = _run(FleetAdaptive(OrchestratorConfig(prefer_nodes=False)), 10,
             [NodeSignal(0.3, 1.6), NodeSignal(0.5, 0.2)], [_inst(nodes=(0, 1))])
    assert d is not None and d.node_weights == (None,)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="load_cool < load_hot"):
        OrchestratorConfig(load_hot=0.5, load_cool=0.7)
    with pytest.raises(ValueError, match="load_tau_s must be a finite number"):
        OrchestratorConfig(load_tau_s=float("nan"))
    with pytest.raises(ValueError, match="pnm_load_cool < pnm_load_hot"):
        AdaptiveConfig(pnm_load_hot=0.5)


# -- in the fleet emulator ---------------------------------------------------------------------
def _busy(rate: float) -> list:
    """The trace's head four times over (800 requests) at ``rate`` a second (Poisson)."""
    head = load_trace(TRACE, hash_ids=True)
    return poisson([replace(r, rid=r.rid + k * 1000) for k in range(4) for r in head], rate, 0)


def _figures(fleet) -> list:
    out = []
    for name, run in fleet.instances:
        d = run.to_json()
        for k in ("wall_s", "cpu_s"):
            d.pop(k)
        out.append((name, d))
    return out


def test_static_is_a_fleet_without_an_orchestrator(cat, lm) -> None:
    """``orchestrator: static`` (the default) gives the figures of the fleet as it was."""
    reqs = poisson(load_trace(TRACE, 160, hash_ids=True), 8.0, 1)
    spec = dict(instances=[{"count": 3}], pnm_nodes=[{"name": "n", "devices": 2}])
    cfg = ServingConfig(mode="nelssa")
    a = FleetSim(FleetSpec(**spec), cat, lm, cfg).run(reqs)
    b = FleetSim(FleetSpec(**spec, orchestrator="static"), cat, lm, cfg).run(reqs)
    assert FleetSpec(**spec).orchestrator == "static"
    assert _figures(a) == _figures(b) and a.node_samples == b.node_samples
    assert b.t_inputs == [] and b.orchestrator == "static"


def test_fleet_adaptive_raises_t_input_when_the_pnm_tier_saturates(cat, lm) -> None:
    """Four instances, prefilled on a pool, on one node of two devices whose memory the
    conversation trace fills (requests queue for it): the orchestrator raises T_input
    (fewer requests to the saturated tier), and more requests meet the SLO."""
    from nelssa.emu.serving.metrics import goodput

    reqs = _busy(32.0)
    cfg = ServingConfig(mode="nelssa")
    spec = dict(instances=[{"count": 4, "prefill": "pool"}], prefill_pool={"gpus": 32},
                pnm_nodes=[{"name": "n", "devices": 2}], dispatch="least-work")
    static = FleetSim(FleetSpec(**spec), cat, lm, cfg).run(reqs)
    orch = FleetSim(FleetSpec(**spec, orchestrator="fleet-adaptive"), cat, lm, cfg).run(reqs)
    assert max(n.peak_used_tokens / n.tokens for n in static.nodes) > 0.99
    start = orch.t_inputs[0][1]
    assert any(t > s for _, ts in orch.t_inputs for t, s in zip(ts, start, strict=True))
    sm, om = static.merged(), orch.merged()
    assert sum(r.tier == "pnm" for r in om.results) < sum(r.tier == "pnm" for r in sm.results)
    assert goodput(om)["met"] > goodput(sm)["met"]


def test_fleet_adaptive_prefers_the_node_with_room(cat, lm) -> None:
    """Two nodes of equal devices, one of 8 times the memory (projection-512g): placed by the
    share of memory free, the large one takes most requests and its devices saturate; the
    orchestrator steers new KV to the other node."""
    reqs = _busy(32.0)
    cfg = ServingConfig(mode="nelssa")
    spec = dict(instances=[{"count": 4, "prefill": "pool"}], prefill_pool={"gpus": 32},
                pnm_nodes=[{"name": "proto", "devices": 2},
                           {"name": "dense", "devices": 2, "pnm": "projection-512g"}],
                dispatch="least-work")
    static = FleetSim(FleetSpec(**spec), cat, lm, cfg).run(reqs)
    orch = FleetSim(FleetSpec(**spec, orchestrator="fleet-adaptive"), cat, lm, cfg).run(reqs)
    share = [n.placed / sum(m.placed for m in r.nodes) for r in (static, orch)
             for n in r.nodes if n.name == "proto"]
    assert share[1] > share[0] + 0.1
    assert orch.nodes[1].mean_device_load < static.nodes[1].mean_device_load


def test_bad_orchestrator_is_refused_by_field(tmp_path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text("fleet: {orchestrator: valve, instances: [{}]}\n")
    done = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(TRACE), "--limit", "5", "--fleet", str(f), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "orchestrator: unknown orchestrator 'valve'" in done.stderr
    assert str(f) in done.stderr and "Traceback" not in done.stderr


def test_adaptive_and_an_orchestrator_are_refused_together(tmp_path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text("fleet: {orchestrator: fleet-adaptive, instances: [{}], "
                 "pnm_nodes: [{name: n}]}\n")
    done = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(TRACE), "--limit", "5", "--fleet", str(f), "--adaptive",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "--adaptive: the fleet's orchestrator" in done.stderr
