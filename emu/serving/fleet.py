"""The fleet emulator: many decode instances sharing PNM nodes (paper 5.1: the GPU and PNM tiers
scale independently), stepped together in emulated time.

A global dispatcher (``emu/policy/dispatch.py``) routes each arriving request to an instance.
Each instance is one replay (``replay.Replay``): its own scheduler (ours, or vLLM's own in the
vLLM environment's process), its own router, the same cost model and job model as a single
``serve-sim`` run. A PNM-tier request's KV is placed on the node with the most room among those
its instance reaches (``pnm_nodes.place``), as is a migration's; a step's PNM time is its
slowest node's. Instances with ``prefill: pool`` get each request when the shared prefill pool
(FCFS, the first GPU free) has made its KV.

Time: the instance whose clock is earliest steps next (a run of pure decode steps counts as one
step), and no instance steps past the next arrival before it is dispatched, so what one
instance does to a shared node is seen by the others in time order (to a step). The dispatcher
sees each instance at the end of the step it is in. One instance and one node give a single
``serve-sim`` run's figures bit for bit (``tests/test_fleet.py``).

Instances sharing a node share its devices' bandwidth (``pnm_nodes.py``: each step's attention
there stretched by the other instances' offered load), and with ``fabric.switch_gbs`` they share
the fabric's switch (``fabric.py``: past its bandwidth every transfer's link part stretched by
the offered load over it).
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from nelssa.emu.energy import EnergySplit, TierEnergy
from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.latency.hardware import EnergyHw, GpuHw, HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.policy.dispatch import InstanceLoad, make_dispatcher
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.cost import CostModel
from nelssa.emu.serving.fabric import Switch, SwitchPort
from nelssa.emu.serving.gcscope import fewer_collections
from nelssa.emu.serving.itl import TimedReplay
from nelssa.emu.serving.orchestration import FleetOrchestration
from nelssa.emu.serving.pnm_nodes import PnmNode
from nelssa.emu.serving.power import decode_split, pnm_tier_split, prefill_split
from nelssa.emu.serving.replay import Replay
from nelssa.emu.serving.results import Activity, RunResult, Sample
from nelssa.emu.serving.sim import Rejection, ServingSim, admit
from nelssa.emu.serving.stream import RecordSink
from nelssa.emu.serving.workload import TraceRequest

__all__ = ["FleetResult", "FleetSim", "NodeResult", "tp_group"]

log = logging.getLogger(__name__)


def tp_group(gpu: GpuHw, tp: int) -> GpuHw:
    """``tp`` GPUs as one tensor-parallel group (memory, bandwidth, FLOP/s, power limit and
    idle power times ``tp``; their communication is not costed, as the 2x-h100-nvl
    preset)."""
    if tp == 1:
        return gpu
    power = ({} if not gpu.has_power else
             {"tdp_w": gpu.tdp_w * tp, "idle_w": gpu.idle_w * tp})  # type: ignore[operator]
    return replace(gpu, name=f"{tp}x-{gpu.name}", hbm_gbs=gpu.hbm_gbs * tp,
                   memory_gb=gpu.memory_gb * tp, bf16_tflops=gpu.bf16_tflops * tp, **power)


@dataclass(frozen=True)
class NodeResult:
    """One PNM node after a run."""

    name: str
    group: str
    devices: int
    tokens: int
    peak_used_tokens: int
    placed: int
    """Requests placed on it (arrivals and migrations)."""
    mean_device_load: float = 0.0
    """Its devices' load (the instances' offered loads added up) averaged over the samples."""


@dataclass
class FleetResult:
    instances: list[tuple[str, RunResult]]
    nodes: list[NodeResult]
    node_samples: list[tuple[float, list[float], list[float]]] = field(default_factory=list)
    """(emulated time, each node's share of memory held, each node's device load: the
    instances' offered loads added up, 1 = its devices always busy) every sample interval."""
    dispatch: str = "round-robin"
    orchestrator: str = "static"
    t_inputs: list[tuple[float, tuple[int | None, ...]]] = field(default_factory=list)
    """With an orchestrator: each instance's T_input after each of its looks."""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    rejected: int = 0
    """Requests of a streamed run refused as they came (no instance could hold them)."""
    switch_peak_load: float | None = None
    """With a shared switch: the highest offered load a transfer through it saw, over its
    bandwidth (above 1: the stretch of that transfer's link part); None without one."""
    pool_activity: Activity = field(default_factory=Activity)
    """What the prefill pool's GPUs did, summed over them (their energy's inputs)."""

    def merged(self) -> RunResult:
        """The fleet as one run: every request's result, the sums of the counters, the
        longest instance's end (for fleet-wide throughput, latency percentiles and goodput)."""
        first = self.instances[0][1]
        out = RunResult(first.config, first.t_input, scheduler=first.scheduler)
        for _, run in self.instances:
            out.results.extend(run.results)
            for name in ("steps", "preemptions", "decode_tokens", "migrations",
                         "migrated_tokens", "recompute_tokens", "prefix_hit_tokens", "shed",
                         "gpu_blocks", "peak_gpu_blocks", "peak_pnm_tokens"):
                setattr(out, name, getattr(out, name) + getattr(run, name))
            out.activity.add(run.activity)
            out.end_s = max(out.end_s, run.end_s)
        out.prefill_activity.add(self.pool_activity)
        out.results.sort(key=lambda r: r.rid)
        out.samples = self._samples(first.config.sample_s)
        out.wall_s, out.cpu_s = self.wall_s, self.cpu_s
        return out

    def _samples(self, sample_s: float) -> list[Sample]:
        """The instances' samples added up on one grid of ``sample_s`` (each in the interval
        it was taken in; shares averaged over the instances that sampled)."""
        grid: dict[int, list[Sample]] = {}
        for _, run in self.instances:
            for s in run.samples:
                grid.setdefault(int(s.t_s // sample_s), []).append(s)
        out = []
        for k in sorted(grid):
            ss = grid[k]
            out.append(Sample(
                (k + 1) * sample_s, sum(s.running for s in ss), sum(s.waiting for s in ss),
                sum(s.gpu_kv_used for s in ss) / len(ss), sum(s.decode_tokens for s in ss),
                sum(s.pnm_running for s in ss), ss[-1].t_input,
                sum(s.pnm_waiting for s in ss), sum(s.pnm_mem_used for s in ss) / len(ss)))
        return out


@dataclass(eq=False)
class _Instance:
    name: str
    replay: Replay
    pool: bool
    """Prefilled on the fleet's pool (its requests arrive with their KV)."""


class FleetSim:
    """One fleet description, one serving configuration (its scheduler, policies, mode)."""

    def __init__(self, spec: FleetSpec, catalog: HardwareCatalog, latency: LatencyModel,
                 config: ServingConfig) -> None:
        self.spec, self.cfg, self.lm = spec, config, latency
        link = catalog.get("links", spec.fabric.link) if spec.fabric.link else latency.link
        self._catalog, self._link = catalog, link
        self.switch: Switch | None = None
        self.nodes: list[PnmNode] = []
        self.node_groups: dict[str, list[PnmNode]] = {}
        self._build_nodes()
        self.replays: list[TimedReplay] = []
        """The instances' replays of the run in progress or last run (a meter reads their
        counters as it goes)."""
        self.pool_cost: CostModel | None = None
        self.pool_gpus = 0
        if spec.prefill_pool is not None:
            gpu = (catalog.get("gpus", spec.prefill_pool.gpu) if spec.prefill_pool.gpu
                   else latency.gpu)
            self.pool_cost = CostModel(replace(latency, gpu=gpu), 1, config.window_tokens,
                                       config.pcie_gbs, config.link_gbs)
            self.pool_gpus = spec.prefill_pool.gpus

    def _build_nodes(self) -> None:
        """The PNM nodes, empty (each run starts from them)."""
        cfg, lm0 = self.cfg, self.lm
        self.nodes, self.node_groups = [], {}
        self._released = [0]
        """Reservations given back on any node (``PnmNode.tally``)."""
        for g in self.spec.pnm_nodes:
            pnm = self._catalog.get("pnm", g.pnm) if g.pnm else lm0.pnm
            lm = replace(lm0, pnm=pnm, link=self._link)
            cost = CostModel(lm, g.devices, cfg.window_tokens, cfg.pcie_gbs, cfg.link_gbs)
            tokens = int(pnm.capacity_gb * 1e9 * g.devices // lm0.model.kv_bytes_per_token)
            group = [PnmNode(f"{g.name}-{k}" if g.count > 1 else g.name, tokens, cost,
                             g.devices, tally=self._released) for k in range(g.count)]
            self.node_groups[g.name] = group
            self.nodes.extend(group)
        self._group_of = {id(n): name for name, ns in self.node_groups.items() for n in ns}
        gbs = self.spec.fabric.switch_gbs
        self.switch = Switch(gbs) if gbs is not None else None
        self._s_per_byte = (8 / (self._link.gbps * 1e9) if self._link is not None
                            else 1 / (cfg.link_gbs * 1e9))
        """The fabric's link: seconds a byte (the pool's KV, the decode steps' queries)."""

    def _groups(self) -> Iterator[tuple[str, ServingSim, list[PnmNode], bool]]:
        """Each instance's name, configuration, the nodes it reaches and whether the pool
        prefills for it (no replay made: its scheduler may live in another environment)."""
        nelssa = self.cfg.mode == "nelssa" and bool(self.nodes)
        for gi, g in enumerate(self.spec.instances):
            gpu = tp_group(self._catalog.get("gpus", g.gpu) if g.gpu else self.lm.gpu, g.tp)
            reach = ([n for name in g.pnm_nodes for n in self.node_groups[name]]
                     if g.pnm_nodes is not None else list(self.nodes))
            home = reach[0] if reach else None
            lm = replace(self.lm, gpu=gpu, link=self._link,
                         pnm=(self.lm if home is None else home.cost.lm).pnm)
            cfg = replace(self.cfg, mode="nelssa" if nelssa and reach else "gpu",
                          adaptive=self.cfg.adaptive and self.spec.orchestrator == "static",
                          migration=self.cfg.migration and nelssa and bool(reach),
                          devices=home.devices if home is not None else self.cfg.devices,
                          prefill="disaggregated" if g.prefill == "pool" else "colocated",
                          prefill_gpus=max(1, self.pool_gpus))
            for k in range(g.count):
                name = f"g{gi}-{k}" if len(self.spec.instances) > 1 else f"i{k}"
                yield name, ServingSim(lm, cfg), reach, g.prefill == "pool"

    def _instances(self) -> list[_Instance]:
        out = []
        for name, sim, reach, pool in self._groups():
            out.append(_Instance(name, TimedReplay(sim, [], nodes=reach or None), pool))
            for n in reach:
                n.users += 1
        for x in out:
            x.replay.contended = any(n.users > 1 for n in x.replay.nodes)
            x.replay.lazy = True
            if self.switch is not None:
                lm = x.replay.sim.lm
                x.replay.port = SwitchPort(self.switch, id(x.replay),
                                           lm.link_bytes * lm.model.layers, self._s_per_byte)
        return out

    def _sims(self) -> list[ServingSim]:
        """One serving configuration per instance group (what a request is checked against)."""
        sims: list[ServingSim] = []
        for _, sim, _, _ in self._groups():
            if all(sim.cfg != s.cfg or sim.lm != s.lm for s in sims):
                sims.append(sim)
        return sims

    def admit(self, requests: list[TraceRequest]
              ) -> tuple[list[TraceRequest], list[Rejection]]:
        """The requests some instance can hold, and the others rejected (``sim.admit``)."""
        return admit(requests, self._sims())

    @staticmethod
    def _check_one(r: TraceRequest, sims: list[ServingSim]) -> None:
        errors = []
        for sim in sims:
            try:
                sim.check([r])
                return
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0])

    def check(self, requests: Iterable[TraceRequest]) -> None:
        """Refuse, by trace line, a request no instance could ever hold."""
        sims = self._sims()
        for r in requests:
            self._check_one(r, sims)

    def run(self, requests: Iterable[TraceRequest],
            progress: Callable[[float], None] | None = None,
            sink: RecordSink | None = None, total: int | None = None) -> FleetResult:
        """Every request through the fleet. A list is checked whole first and taken in
        arrival order; any other iterable is streamed (taken as it is read, each request
        checked when it comes, in arrival order or refused by its line), which with ``sink``
        (finished requests and samples written out, not kept) keeps the run's memory to the
        requests in flight. ``total`` (the requests to come) drives ``progress``."""
        with fewer_collections():
            return self._run(requests, progress, sink, total)

    def _run(self, requests: Iterable[TraceRequest], progress: Callable[[float], None] | None,
             sink: RecordSink | None, total: int | None) -> FleetResult:
        t0, c0 = time.perf_counter(), time.process_time()
        sims: list[ServingSim] | None = None
        if isinstance(requests, list):
            self.check(requests)
            total = len(requests)
            stream: Iterator[TraceRequest] = iter(sorted(requests,
                                                         key=lambda r: (r.arrival_s, r.rid)))
        else:
            sims = self._sims()
            stream = iter(requests)
        self._build_nodes()
        insts = self._instances()
        self.replays = [x.replay for x in insts]
        if sink is not None:
            for inst in insts:
                rep = inst.replay
                rep.record = functools.partial(_record, sink, inst.name, rep)
                rep.record_sample = functools.partial(sink.sample, inst.name)
        rejected = 0
        fits: set[tuple[int, int]] = set()
        """Prompt and output lengths a streamed request was admitted with."""
        dispatcher = make_dispatcher(self.spec.dispatch)
        orch = (FleetOrchestration(self.spec.orchestrator, [x.replay for x in insts], self.nodes)
                if self.spec.orchestrator != "static" and self.nodes else None)
        pool = [0.0] * self.pool_gpus
        pool_work = Activity()
        ready: list[tuple[float, int, int]] = []
        """Instances with work, by their clocks (a heap of (clock, index, version): an entry
        whose version is not its instance's latest is stale, dropped when it surfaces)."""
        version = [0] * len(insts)
        queued: set[int] = set()

        def push(j: int) -> None:
            version[j] += 1
            heapq.heappush(ready, (insts[j].replay.now, j, version[j]))

        def top() -> float:
            while ready and ready[0][2] != version[ready[0][1]]:
                heapq.heappop(ready)
            return ready[0][0] if ready else math.inf
        waiting: set[int] = set()
        """Instances blocked on PNM node room, by index."""
        releases = 0
        """The nodes' reservations given back, as of the step before."""
        node_samples: list[tuple[float, list[float], list[float]]] = []
        next_sample = self.cfg.sample_s
        done = 0
        for inst in insts:
            inst.replay.next_sample = self.cfg.sample_s
        r = next(stream, None)
        last = -math.inf
        while True:
            horizon = r.arrival_s if r is not None else math.inf
            if top() >= horizon:
                if r is None:
                    break
                if sims is not None:  # streamed: checked as it comes
                    if r.arrival_s < last:
                        raise ValueError(
                            f"request {r.rid} (trace line {r.line}) arrives at "
                            f"{r.arrival_s:g} s, before the one before it ({last:g} s): a "
                            "streamed trace must be in arrival order")
                    last = r.arrival_s
                    lengths = (r.input_len, r.output_len)
                    if lengths not in fits:  # (admit's answer depends on them only)
                        _, refused = admit([r], sims)
                        if refused:  # rejected, as vLLM answers it; the run goes on
                            rejected += 1
                            if sink is not None:
                                sink.reject(refused[0])
                            r = next(stream, None)
                            continue
                        if len(fits) >= 1 << 16:  # (bounded: a stream's lengths may not repeat)
                            fits.clear()
                        fits.add(lengths)
                last = t = r.arrival_s
                i = dispatcher.choose(len(insts), lambda j, r=r, t=t: InstanceLoad(
                    insts[j].replay.outstanding_at(t),
                    max((n.free for n in insts[j].replay.nodes), default=0),
                    insts[j].replay.router.past(r.input_len)))
                inst = insts[i]
                planned = inst.replay.now
                inst.replay.settle(t)  # a run planned past t stops where t finds it
                if inst.pool:
                    assert self.pool_cost is not None
                    start = max(heapq.heappop(pool), t)
                    took = self.pool_cost.prefill_s(r.input_len, self.cfg.max_batched_tokens)
                    pool_work.count_prefill(r.input_len, self.cfg.max_batched_tokens, took)
                    t = start + took
                    heapq.heappush(pool, t)
                    if self.switch is not None and inst.replay.router.past(r.input_len):
                        # a PNM-tier request's KV to its node, streamed as it is made
                        nbytes = r.input_len * self.lm.model.kv_bytes_per_token
                        t += self.switch.bulk_wait_s(nbytes, nbytes * self._s_per_byte,
                                                     start, t)
                inst.replay.offer(t, r)
                inst.replay.total += 1
                if i not in queued:
                    waiting.discard(i)
                    queued.add(i)
                    push(i)
                elif inst.replay.now != planned:  # its run cut at t: it steps from there
                    push(i)
                r = next(stream, None)
                continue
            _, i, _ = heapq.heappop(ready)
            queued.discard(i)
            rep = insts[i].replay
            before = rep.finished
            rep.advance(horizon, steps=1)
            done += rep.finished - before
            if rep.jobs or rep.arrivals:  # (busy, and not blocked: inlined)
                queued.add(i)
                version[i] += 1  # (push, inlined)
                heapq.heappush(ready, (rep.now, i, version[i]))
            elif rep.pnm_queue:  # blocked on PNM node room
                waiting.add(i)
            # a node given back room: the instances waiting for it try again from then
            now_released = self._released[0]
            if waiting and now_released != releases:
                t_free = max(n.freed_at for n in self.nodes)
                for j in sorted(waiting):
                    insts[j].replay.now = max(insts[j].replay.now, t_free)
                    queued.add(j)
                    push(j)
                waiting.clear()
            releases = now_released
            t_min = top()
            if not ready:
                t_min = horizon
            if self.nodes and next_sample <= t_min < math.inf:
                while t_min >= next_sample:
                    node_samples.append((next_sample, [n.used_share for n in self.nodes],
                                         [n.load_sum for n in self.nodes]))
                    if orch is not None:  # the orchestrator's look (paper 10)
                        orch.tick(next_sample)
                    next_sample += self.cfg.sample_s
            if progress is not None and total:
                progress(done / total)
        if waiting:
            raise RuntimeError("the PNM tier cannot hold the request at a queue's head")
        for inst in insts:
            inst.replay.settle()
            inst.replay.out.end_s = inst.replay.now
        out = FleetResult(
            [(x.name, x.replay.out) for x in insts],
            [NodeResult(n.name, self._group_of[id(n)], n.devices, n.tokens, n.peak_used,
                        n.placed, sum(x[k] for _, _, x in node_samples) / len(node_samples)
                        if node_samples else 0.0) for k, n in enumerate(self.nodes)],
            node_samples, self.spec.dispatch, self.spec.orchestrator,
            orch.looks if orch is not None else [])
        out.wall_s, out.cpu_s = time.perf_counter() - t0, time.process_time() - c0
        out.rejected = rejected
        out.pool_activity = pool_work
        if self.switch is not None:
            out.switch_peak_load = self.switch.peak_load
        return out

    def energy(self, result: FleetResult, e: EnergyHw) -> TierEnergy:
        """The run's energy by tier (``power.py``): each decode instance on its own GPU (a
        tensor-parallel group's power times its degree), the prefill pool, the PNM nodes with
        every instance's PNM-tier work (none in ``gpu`` mode, the GPU-only baseline), all over
        the fleet's run (the longest instance's)."""
        costs = {name: sim.cost for name, sim, _, _ in self._groups()}
        wall = max((run.end_s for _, run in result.instances), default=0.0)
        decode = EnergySplit()
        for name, run in result.instances:
            decode = decode + decode_split(run, costs[name], wall)
        pool = EnergySplit()
        if self.pool_cost is not None:
            pool = prefill_split(result.pool_activity, self.pool_cost, self.pool_cost.lm.gpu,
                                 self.pool_gpus, wall)
        nodes = self.nodes if self.cfg.mode == "nelssa" else []  # GPU-only: no PNM tier
        devices = sum(n.devices for n in nodes)
        runs = [(run, costs[name]) for name, run in result.instances]
        pnm = pnm_tier_split(runs, e, devices, len(nodes), wall)
        gpus = sum(g.count * g.tp for g in self.spec.instances)
        return TierEnergy.of(wall, sum(run.activity.output_tokens
                                       for _, run in result.instances),
                             (gpus, decode), (self.pool_gpus, pool),
                             (len(nodes), devices, pnm))


def _record(sink: RecordSink, name: str, rep: Replay, res: Any) -> None:
    """A streamed run's finished request to its sink, with its gaps (no longer kept)."""
    gaps = rep.pop_gaps(res.rid) if isinstance(rep, TimedReplay) else None
    sink.request(name, res, "", gaps)


def fleet_json(result: FleetResult, summarize: Callable[[RunResult], dict[str, Any]],
               series: Callable[[RunResult], dict[str, Any]]) -> dict[str, Any]:
    """The run as JSON: the fleet's summary, each instance's summary and series, each node."""
    return {
        "dispatch": result.dispatch,
        "orchestrator": result.orchestrator,
        "fleet": summarize(result.merged()),
        "instances": {name: {"summary": summarize(run), "series": series(run)}
                      for name, run in result.instances},
        "nodes": [vars(n) for n in result.nodes],
        "node_samples": {"t_s": [t for t, _, _ in result.node_samples],
                         "memory_used": [u for _, u, _ in result.node_samples],
                         "device_load": [x for _, _, x in result.node_samples]},
        "switch_peak_load": result.switch_peak_load,
        "wall_s": result.wall_s, "cpu_s": result.cpu_s,
    }


def plot_fleet(result: FleetResult, path: Any) -> None:
    """Over emulated time: each instance's running batch and waiting queue, each PNM node's
    memory held and device load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    ts = [t for t, _, _ in result.node_samples]
    for name, run in result.instances:
        t = [s.t_s for s in run.samples]
        axes[0].plot(t, [s.running for s in run.samples], lw=0.7, label=name)
        axes[1].plot(t, [s.waiting for s in run.samples], lw=0.7, label=name)
    for k, node in enumerate(result.nodes):
        axes[2].plot(ts, [u[k] for _, u, _ in result.node_samples], lw=0.8, label=node.name)
        axes[3].plot(ts, [x[k] for _, _, x in result.node_samples], lw=0.8, label=node.name)
    for ax, what in zip(axes, ("running batch", "waiting requests", "PNM node memory held",
                               "PNM node device load"), strict=True):
        ax.set_ylabel(what)
    axes[0].set_title(f"fleet of {len(result.instances)} instances and {len(result.nodes)} "
                      f"PNM nodes, dispatch {result.dispatch}")
    if len(result.instances) <= 16:
        axes[0].legend(ncol=4, fontsize=7)
    if result.nodes and len(result.nodes) <= 16:
        axes[2].legend(ncol=4, fontsize=7)
    axes[3].set_xlabel("emulated time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
