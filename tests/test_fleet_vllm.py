"""A fleet under vLLM's own scheduler, one per instance (emu/serving/fleet_vllm.py: the fleet run
in the vLLM environment's process, which `make vllm` builds and `make test` requires, as for
tests/test_vllm_agreement.py): the same per-request figures as under ours; the fleet's JSON
round trip; the CLI runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.serving import fleet as fleet_module
from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.fleet import FleetResult, FleetSim
from nelssa.emu.serving.fleet_vllm import (
    fleet_from_json,
    fleet_to_json,
    result_from_json,
    result_to_json,
    run_fleet,
)
from nelssa.emu.serving.replay import Replay
from nelssa.emu.serving.workload import load_trace, poisson

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/data/mooncake_conversation_head.jsonl"

SPEC = FleetSpec(
    instances=[{"count": 2}, {"prefill": "pool", "pnm_nodes": ["b"]}],
    prefill_pool={"gpus": 1},
    pnm_nodes=[{"name": "a", "devices": 2}, {"name": "b", "devices": 2, "pnm": "prototype"}],
    fabric={"link": "roce-400g"}, dispatch="least-work")
"""Three instances (two colocated on either node, one prefilled on the pool, on node b) over
two nodes they share, dispatched by their outstanding work: the dispatcher, the shared nodes'
memory and devices, a pool and migrations all in play."""
CFG = ServingConfig(mode="nelssa", t_input=3000, migration=True, migrate_at=0.05)


def _per_request(res: FleetResult) -> list[tuple]:
    return sorted((name, r.rid, r.tier, r.first_token_s, r.finish_s, r.preemptions, r.migrated)
                  for name, run in res.instances for r in run.results)


def _counters(res: FleetResult) -> list[tuple]:
    return [(name, run.steps, run.preemptions, run.migrations, run.prefix_hit_tokens,
             run.decode_tokens) for name, run in res.instances]


def test_fleet_under_vllm_gives_ours_figures(cat, lm) -> None:
    """Each instance with its own vLLM v1 scheduler gives the figures of ours, request for
    request: which instance took it, its tier, first token and finish, its preemptions and
    migration; each instance's steps and counters; each node's placements and peak (its
    sampled device load to 0.1 %)."""
    reqs = poisson(load_trace(TRACE, 150, hash_ids=True), 8.0, 1)
    ours = FleetSim(SPEC, cat, lm, CFG).run(reqs)
    theirs = run_fleet(FleetSim(SPEC, cat, lm, replace(CFG, scheduler=SchedulerKind.VLLM)),
                       reqs)
    assert {r.tier for _, run in ours.instances for r in run.results} == {"gpu", "pnm"}
    assert sum(run.migrations for _, run in ours.instances) > 0
    assert all(run.results for _, run in ours.instances)
    assert {run.scheduler for _, run in theirs.instances} == {"vllm"}
    assert _per_request(theirs) == _per_request(ours)
    assert _counters(theirs) == _counters(ours)
    # the nodes' device load as sampled is booked per step under vLLM's, per run of decode
    # steps under ours (the latest rate either way): the same to a few parts in 10^4
    assert [replace(n, mean_device_load=0.0) for n in theirs.nodes] == [
        replace(n, mean_device_load=0.0) for n in ours.nodes]
    assert [n.mean_device_load for n in theirs.nodes] == pytest.approx(
        [n.mean_device_load for n in ours.nodes], rel=1e-3)


def test_decode_runs_taken_whole_or_step_by_step_give_the_same_fleet(cat, lm, monkeypatch):
    """Our scheduler takes a run of pure decode steps at once, vLLM's one step at a time: a
    fleet stepped either way gives the same figures (an arrival dispatched into a planned run
    cuts it there, and the instance steps on from the cut)."""
    reqs = poisson(load_trace(TRACE, 150, hash_ids=True), 8.0, 1)
    whole = FleetSim(SPEC, cat, lm, CFG).run(reqs)

    class StepByStep(Replay):
        def __init__(self, sim, requests, fast=True, nodes=None) -> None:
            super().__init__(sim, requests, False, nodes)

    monkeypatch.setattr(fleet_module, "Replay", StepByStep)
    steps = FleetSim(SPEC, cat, lm, CFG).run(reqs)
    assert _per_request(steps) == _per_request(whole) and _counters(steps) == _counters(whole)


def test_fleet_json_round_trip(cat, lm) -> None:
    """What the vLLM environment's process is sent rebuilds the same fleet (the same run under
    ours), and a result comes back whole."""
    reqs = poisson(load_trace(TRACE, 60, hash_ids=True), 6.0, 2)
    fleet = FleetSim(SPEC, cat, lm, CFG)
    again, reqs2 = fleet_from_json(json.loads(json.dumps(fleet_to_json(fleet, reqs))))
    assert reqs2 == reqs and again.spec == SPEC and again.cfg == CFG
    res = fleet.run(reqs)
    back = result_from_json(json.loads(json.dumps(result_to_json(res))))
    assert _per_request(back) == _per_request(again.run(reqs2)) == _per_request(res)
    assert back.nodes == res.nodes and back.node_samples == res.node_samples
    assert [run.config for _, run in back.instances] == [run.config for _, run in res.instances]


def test_serve_sim_fleet_with_vllm_scheduler(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(TRACE), "--limit", "40", "--rate", "4", "--mode", "nelssa",
                           "--scheduler", "vllm", "--fleet",
                           str(ROOT / "docs/examples/fleet.yaml"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "vllm scheduler" in done.stdout and "nelssa fleet (6 instances" in done.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["nelssa"]["fleet"]["requests"] == 40 == sum(
        d["summary"]["requests"] for d in doc["nelssa"]["instances"].values())
