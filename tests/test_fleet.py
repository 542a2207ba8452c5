"""The fleet emulator (emu/serving/fleet.py): its equivalences with single runs, the shared PNM
nodes' bounds, the dispatch policies, the fleet description's refusals."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from nelssa.emu.energy import energy_entry
from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.policy.dispatch import InstanceLoad, make_dispatcher
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.fleet import FleetSim
from nelssa.emu.serving.pnm_nodes import contention_s
from nelssa.emu.serving.power import run_energy
from nelssa.emu.serving.results import RunResult
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.workload import load_trace, poisson

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/data/mooncake_conversation_head.jsonl"


def _reqs(n: int, rate: float):
    return poisson(load_trace(TRACE, n, hash_ids=True), rate, 1)


def _figures(run: RunResult) -> dict:
    """Everything a run reports but its wall and CPU times, its configuration and its
    inter-token gaps (``_same_gaps``)."""
    d = run.to_json()
    for k in ("wall_s", "cpu_s", "token_gaps"):
        d.pop(k)
    return d


def _same_gaps(a: RunResult, b: RunResult) -> bool:
    """The same inter-token gaps to a nanosecond: a fleet's instance may take a run of decode
    steps in two parts (cut where a request reached the fleet), each spread evenly (itl.py)."""
    from nelssa.emu.serving.itl import expand

    ga, gb = a.token_gaps or {}, b.token_gaps or {}
    return set(ga) == set(gb) and all(
        np.allclose(expand([ga[k]]), expand([gb[k]]), rtol=0, atol=1e-9) for k in ga)


CONFIGS = {
    "colocated": ServingConfig(mode="nelssa"),
    "migration": ServingConfig(mode="nelssa", migration=True, t_input=6000, devices=2),
    "adaptive": ServingConfig(mode="nelssa", adaptive=True, tpot_budget=True, shed_late=True,
                              preemption="swap", max_running=24),
    "pool": ServingConfig(mode="nelssa", prefill="disaggregated", prefill_gpus=2),
    "gpu": ServingConfig(mode="gpu", max_running=16),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_one_instance_one_node_is_serve_sim_bit_for_bit(cat, lm, name: str) -> None:
    """One instance and one PNM node of the configuration's devices give the single run's
    every figure (each request's times, counters, time series)."""
    cfg = CONFIGS[name]
    reqs = _reqs(200, 5.0)
    single = ServingSim(lm, cfg).run(reqs)
    pool = cfg.prefill == "disaggregated"
    spec = FleetSpec(instances=[{"prefill": "pool" if pool else "colocated"}],
                     prefill_pool={"gpus": cfg.prefill_gpus} if pool else None,
                     pnm_nodes=[{"name": "n", "devices": cfg.devices}])
    sim = FleetSim(spec, cat, lm, cfg)
    fleet = sim.run(reqs)
    (_, run), = fleet.instances
    # the prefill pool's work: on the fleet (its pool is shared), on a single run its own
    assert fleet.pool_activity == single.prefill_activity
    assert (fleet.pool_activity.busy_s > 0) == pool
    a, b = _figures(run), _figures(single)
    a.pop("prefill_activity"), b.pop("prefill_activity")
    assert single.results and a == b
    assert _same_gaps(run, single)
    assert fleet.nodes[0].peak_used_tokens == single.peak_pnm_tokens
    # and the same energy, tier by tier (one instance, one node: the same parts)
    e = energy_entry(cat)
    mine, its = sim.energy(fleet, e).as_dict(), run_energy(single, ServingSim(lm, cfg).cost,
                                                           e).as_dict()
    assert mine.pop("split_j") == pytest.approx(its.pop("split_j"))
    assert mine.pop("figure11_j") == pytest.approx(its.pop("figure11_j"))
    assert mine == pytest.approx(its)


@pytest.mark.parametrize("private_nodes", [False, True])
def test_round_robin_without_a_shared_node_is_n_single_runs(cat, lm, private_nodes) -> None:
    """N instances under round robin, none sharing a PNM node (GPU only, or each its own
    node), give the figures of N single runs over the trace dealt out in turn."""
    n = 3
    cfg = CONFIGS["colocated"] if private_nodes else CONFIGS["gpu"]
    reqs = _reqs(180, 9.0)
    nodes = [{"name": f"n{k}", "devices": cfg.devices} for k in range(n)] if private_nodes else []
    groups = ([{"pnm_nodes": [f"n{k}"]} for k in range(n)] if private_nodes
              else [{"count": n}])
    spec = FleetSpec(instances=groups, pnm_nodes=nodes, dispatch="round-robin")
    fleet = FleetSim(spec, cat, lm, cfg).run(reqs)
    ordered = sorted(reqs, key=lambda r: (r.arrival_s, r.rid))
    for k, (_, run) in enumerate(fleet.instances):
        single = ServingSim(lm, cfg).run(ordered[k::n])
        assert run.results and _figures(run) == _figures(single) and _same_gaps(run, single)


def test_instances_sharing_a_node_never_hold_more_than_it_has(cat, lm) -> None:
    """Two instances on one small node: the node's reservations stay within its memory, the
    requests that found it full waited (later first tokens than on a node of ample room), and
    every request finishes."""
    reqs = _reqs(200, 8.0)
    cfg = ServingConfig(mode="nelssa", t_input=3000)
    big = FleetSpec(instances=[{"count": 2}], pnm_nodes=[{"name": "n", "devices": 4}],
                    dispatch="least-work")
    roomy = FleetSim(big, cat, lm, cfg).run(reqs)
    longest = max(r.input_len + r.output_len for r in reqs if r.input_len >= 3000)
    # room for the longest request and a half: the node is full at times
    small_lm = replace(lm, pnm=replace(lm.pnm, capacity_gb=1.5 * longest
                                       * lm.model.kv_bytes_per_token / 4e9))
    tight = FleetSim(big, cat, small_lm, cfg)
    node_tokens = tight.nodes[0].tokens
    res = tight.run(reqs)
    assert res.nodes[0].peak_used_tokens <= node_tokens < roomy.nodes[0].peak_used_tokens
    done = res.merged()
    assert len(done.results) == len(reqs)
    ttft = {r.rid: r.ttft_s for r in done.results if r.tier == "pnm"}
    ttft0 = {r.rid: r.ttft_s for r in roomy.merged().results if r.tier == "pnm"}
    assert ttft and sum(ttft.values()) > sum(ttft0[k] for k in ttft)


def test_length_aware_sends_long_requests_to_the_roomiest_node(cat, lm) -> None:
    """Two instances, each on its own node, one node twice the size: length-aware dispatch
    puts the long requests on the instance whose node has more room, round robin alternates."""
    reqs = _reqs(200, 4.0)
    cfg = ServingConfig(mode="nelssa", t_input=4000)
    spec = {"instances": [{"pnm_nodes": ["a"]}, {"pnm_nodes": ["b"]}],
            "pnm_nodes": [{"name": "a", "devices": 2}, {"name": "b", "devices": 8}]}
    placed = {}
    for policy in ("length-aware", "round-robin"):
        res = FleetSim(FleetSpec(**spec, dispatch=policy), cat, lm, cfg).run(reqs)
        placed[policy] = [n.placed for n in res.nodes]
    la, rr = placed["length-aware"], placed["round-robin"]
    assert la[1] > la[0] and la[1] > rr[1] and abs(rr[0] - rr[1]) <= max(3, sum(rr) // 5)


def test_dispatch_policies() -> None:
    loads = [InstanceLoad(500, 10, False), InstanceLoad(100, 90, False),
             InstanceLoad(300, 50, False)]
    rr = make_dispatcher("round-robin")
    assert [rr.choose(3, loads.__getitem__) for _ in range(4)] == [0, 1, 2, 0]
    assert make_dispatcher("least-work").choose(3, loads.__getitem__) == 1
    long = [replace(x, long=True) for x in loads]
    long[1] = replace(long[1], pnm_room_tokens=5)
    assert make_dispatcher("length-aware").choose(3, long.__getitem__) == 2  # the most room
    assert make_dispatcher("length-aware").choose(3, loads.__getitem__) == 1  # short: least work
    with pytest.raises(ValueError, match="round-robin"):
        make_dispatcher("random")


@pytest.mark.parametrize(("fleet", "says"), [
    ("{dispatch: fastest, instances: [{}]}", "[fleet]: dispatch: unknown dispatch policy"),
    ("{instances: [{pnm_nodes: [x]}], pnm_nodes: [{name: y}]}", "no node group 'x'"),
    ("{instances: [{prefill: pool}]}", "needs a prefill_pool"),
    ("{instances: []}", "[fleet]: instances:"),
    ("{instances: [{count: 0}]}", "instances.0.count"),
    ("{instances: [{tp: 2, colour: red}]}", "instances.0.colour"),
    ("[1, 2]", "[fleet]: must be an object"),
])
def test_bad_fleet_descriptions_are_refused_by_field(tmp_path, fleet: str, says: str) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(f"fleet: {fleet}\n")
    done = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(TRACE), "--limit", "5", "--fleet", str(f), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and str(f) in done.stderr and "Traceback" not in done.stderr


def test_serve_sim_fleet_reports_instances_and_nodes(tmp_path) -> None:
    """`serve-sim --fleet` on the example fleet: a line per instance and node, the fleet's
    summary, results.json with every instance and node, a plot per mode."""
    import json

    done = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(TRACE), "--limit", "120", "--rate", "6", "--fleet",
                           str(ROOT / "docs/examples/fleet.yaml"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert ("nelssa fleet (6 instances, 3 PNM nodes, dispatch length-aware, orchestrator "
            "static)") in out
    assert out.count("node big:") == 2 and "g1-1:" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["nelssa"]["fleet"]["requests"] == 120 == sum(
        d["summary"]["requests"] for d in doc["nelssa"]["instances"].values())
    assert sum(n["placed"] for n in doc["nelssa"]["nodes"]) >= doc["nelssa"]["fleet"][
        "pnm_requests"] > 0
    assert (tmp_path / "fleet_nelssa.png").stat().st_size > 0


def test_instances_sharing_a_node_share_its_devices(cat, lm) -> None:
    """Two instances on one node of 4 devices against each on its own: the same requests on
    the PNM tier decode slower when they share devices they load past their capacity (what
    the other's work queues ahead of a step's attention); below it they interleave
    (pnm_nodes.contention_s)."""
    reqs = _reqs(160, 6.0)
    cfg = ServingConfig(mode="nelssa", t_input=3000)
    # devices a fiftieth as fast: the node's attention most of a PNM-tier step
    lm = replace(lm, pnm=replace(lm.pnm, bw_eff_gbs=lm.pnm.bw_eff_gbs / 50))
    shared = FleetSpec(instances=[{"count": 2}], pnm_nodes=[{"name": "n", "devices": 4}])
    apart = FleetSpec(instances=[{"pnm_nodes": ["a"]}, {"pnm_nodes": ["b"]}],
                      pnm_nodes=[{"name": "a", "devices": 4}, {"name": "b", "devices": 4}])

    def tpot(spec: FleetSpec, tier: str) -> float:
        res = FleetSim(spec, cat, lm, cfg).run(reqs).merged().results
        vals = [r.tpot_s for r in res if r.tier == tier and r.tpot_s is not None]
        assert vals
        return sum(vals) / len(vals)

    slower = tpot(shared, "pnm") / tpot(apart, "pnm")
    assert slower > 1.03, slower
    node = FleetSim(shared, cat, lm, cfg).nodes[0]
    node.set_load(1, 0.25)
    node.set_load(2, 0.5)
    assert node.others_load(1) == 0.5 and node.others_load(2) == 0.25
    assert node.slowdown(1) == node.slowdown(2) == 1.0  # the other's work fits the gap
    node.set_load(1, 0.6)
    node.set_load(2, 0.6)  # 0.6 of a step's work arrives, 0.4 of it is free: 0.2 queues
    assert node.slowdown(1) == pytest.approx(1 + 0.2 / 0.6)
    assert contention_s(0.6, 1.0, 0.6) == pytest.approx(0.2)
    assert node.cost.pnm_s(1000, 1, 1.5) - node.cost.pnm_s(0, 1) == pytest.approx(
        1.5 * node.cost.pnm_attn_s(1000))


def _pnm_decode_s(res) -> float:
    """The PNM-tier requests' decode time in all (first token to finish)."""
    rs = [r for r in res.merged().results if r.tier == "pnm"]
    assert rs
    return sum(r.finish_s - r.first_token_s for r in rs)


def test_shared_switch_slows_a_fleet_past_its_bandwidth_only(cat, lm) -> None:
    """The fabric's switch (fabric.py): with none, or one wider than the offered load, every
    figure is today's; three instances past a switch one alone stays below decode their
    PNM-tier requests slower, the more the narrower it is; the instance alone on it does not
    move (its peak load under 1)."""
    reqs = _reqs(150, 8.0)
    cfg = ServingConfig(mode="nelssa", t_input=3000)

    def run(count: int, switch: float | None, reqs=reqs):
        spec = FleetSpec(instances=[{"count": count}], pnm_nodes=[{"name": "n", "devices": 4}],
                         fabric={"link": "roce-400g", "switch_gbs": switch})
        return FleetSim(spec, cat, lm, cfg).run(reqs)

    three = {sw: run(3, sw) for sw in (None, 1e6, 3.0, 0.3)}
    assert three[None].switch_peak_load is None
    assert three[1e6].switch_peak_load < 1
    assert [_figures(r) for _, r in three[1e6].instances] == [
        _figures(r) for _, r in three[None].instances]
    assert 1 < three[3.0].switch_peak_load < three[0.3].switch_peak_load
    slower = [_pnm_decode_s(three[sw]) for sw in (None, 3.0, 0.3)]
    assert slower[0] < slower[1] < slower[2], slower
    alone, alone_switched = run(1, None, reqs[::3]), run(1, 3.0, reqs[::3])
    assert alone_switched.switch_peak_load < 1
    assert _figures(alone_switched.instances[0][1]) == _figures(alone.instances[0][1])


def test_shared_switch_delays_bulk_kv(cat, lm) -> None:
    """A pool-prefilled PNM-tier request's KV to its node and a migration's KV cross the
    switch: a switch narrower than the link delays the pooled requests' first tokens, none
    earlier (migrations run beside them, their KV through the same switch)."""
    reqs = _reqs(150, 8.0)
    cfg = ServingConfig(mode="nelssa", t_input=3000, migration=True, migrate_at=0.05)
    spec = {"instances": [{"count": 2}, {"prefill": "pool"}], "prefill_pool": {"gpus": 1},
            "pnm_nodes": [{"name": "n", "devices": 4}]}
    runs = {sw: FleetSim(FleetSpec(**spec, fabric={"switch_gbs": sw}), cat, lm, cfg).run(reqs)
            for sw in (None, 5.0)}
    pooled = {sw: {r.rid: r.ttft_s for r in dict(res.instances)["g1-0"].results
                   if r.tier == "pnm"} for sw, res in runs.items()}
    assert pooled[None] and all(pooled[5.0][k] >= v for k, v in pooled[None].items())
    assert sum(pooled[5.0].values()) > sum(pooled[None].values())
    assert runs[5.0].switch_peak_load > 1
    assert sum(r.migrations for _, r in runs[None].instances) > 0


@pytest.mark.parametrize("bad", ["0", "-1", ".inf", ".nan", "fast", "2000000"])
def test_bad_switch_bandwidth_is_refused_by_field(tmp_path, bad: str) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(f"fleet: {{instances: [{{}}], fabric: {{switch_gbs: {bad}}}}}\n")
    done = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(TRACE), "--limit", "5", "--fleet", str(f), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "fabric.switch_gbs" in done.stderr and "Traceback" not in done.stderr


def test_a_steps_pnm_time_is_the_slowest_nodes_pnm_s_bit_for_bit(cat, lm) -> None:
    """``pnm_nodes.pnm_time`` prices each node inline (every step of a fleet's instance): the
    same float as the cost model's ``pnm_s`` stretched by the node's ``slowdown``, the
    slowest node's, for random loads and contexts (0.0 with no PNM-tier context)."""
    from nelssa.emu.serving.pnm_nodes import pnm_time

    spec = FleetSpec(instances=[{"count": 3}],
                     pnm_nodes=[{"name": "n", "count": 3, "devices": 4},
                                {"name": "m", "devices": 2}])
    nodes = FleetSim(spec, cat, lm, ServingConfig(mode="nelssa")).nodes
    rng = np.random.default_rng(11)
    assert pnm_time([], 0, 1) == 0.0
    for _ in range(500):
        for n in nodes:
            for key in (1, 2, 3):
                n.set_load(key, float(rng.random() * 1.5) if rng.random() < 0.8 else 0.0)
        sums = [(n, int(rng.integers(0, 1 << 20)), int(rng.integers(0, 30)))
                for n in nodes if rng.random() < 0.7]
        for key in (None, 1, 2):
            want = max((n.cost.pnm_s(c, k) if key is None
                        else n.cost.pnm_s(c, k, n.slowdown(key)) for n, c, k in sums),
                       default=0.0)
            assert pnm_time(sums, 0, key) == want
