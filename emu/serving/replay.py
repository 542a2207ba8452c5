"""A trace replay in emulated time: arrivals, routing, the PNM tier's capacity and migrations on
one side, a scheduler (ours or vLLM's) on the other, the cost model in between. Both schedulers
see the same jobs and every step is costed by the same model, so they differ only in what they
schedule.

Requests become vLLM requests ("jobs") as the paper put NELSSA into an unmodified vLLM (8.3):

- a GPU-tier request is one job: its prompt, then ``output_len`` tokens;
- a PNM-tier request is prefilled on the GPU as a job of one output token (chunked, its prompt's
  KV on the GPU while it is built, as chunked prefill needs), then decodes as a second job whose
  prompt is what it keeps on the GPU: sink and recent tokens and its centroids. That prompt's KV
  comes from the prefill (no compute is charged for it), but it passes through the token budget
  and the FCFS queue as vLLM would take it; each decode step costs the PNM tier's attention over
  the whole context;
- with disaggregated prefill, a request reaches the decode GPU when a prefill GPU is done with it
  (its first token made there): a GPU-tier request as a job whose prompt KV arrives (no compute,
  unless a preemption makes the decode GPU recompute it), a PNM-tier request straight as its
  second job;
- a migration (paper 4.3) ends the GPU job and starts the second job of the PNM tier.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nelssa.emu.policy.adaptive import AdaptiveThreshold, TierLoad
from nelssa.emu.policy.budget import TpotBudget
from nelssa.emu.policy.jobs import JobKind, job_id, job_spec
from nelssa.emu.policy.router import Router, Source
from nelssa.emu.policy.schedule import JobScheduler
from nelssa.emu.policy.schedulers import SchedulerSpec, make_scheduler
from nelssa.emu.policy.shed import Shedder
from nelssa.emu.policy.v1_scheduler import V1Scheduler
from nelssa.emu.serving.cost import Chunk, Tier
from nelssa.emu.serving.decode_runs import DecodeRuns
from nelssa.emu.serving.fabric import SwitchPort
from nelssa.emu.serving.gcscope import fewer_collections
from nelssa.emu.serving.pnm_nodes import PnmNode, place, pnm_time
from nelssa.emu.serving.results import Activity, RequestResult, RunResult, Sample
from nelssa.emu.serving.workload import TraceRequest

if TYPE_CHECKING:
    from nelssa.emu.serving.sim import ServingSim

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Req:
    req: TraceRequest
    tier: Tier
    generated: int = 0
    first_token_s: float | None = None
    preemptions: int = 0
    migrated: bool = False
    pnm_reserved: int = 0
    node: PnmNode | None = None
    """The PNM node its reservation is on."""
    migrating_until: float | None = None
    gaps: Any = None
    """Its gaps between output tokens so far, an ``array('d')``, where a ``TimedReplay``
    records them (None before its second token); kept here, not looked up by id, as every
    token of a busy replay appends one."""
    last_s: float = 0.0
    """When its latest token was made (with ``gaps``)."""


@dataclass(eq=False, slots=True)
class _Job:
    rq: _Req
    kind: JobKind
    prompt: int
    outputs: int = 0
    decoding: bool = False
    recomputes: bool = False
    """Preempted at least once: prompt KV that arrived must now be computed."""


def make_replay_scheduler(sim: ServingSim, aggregate: bool = True) -> JobScheduler:
    """The configuration's scheduler (vLLM's runs in this process: the replay runs in the vLLM
    environment when it is asked for)."""
    cfg = sim.cfg
    return make_scheduler(cfg.scheduler.value, SchedulerSpec(
        sim.lm.model, sim.gpu_blocks, cfg.block_tokens, cfg.max_running,
        cfg.max_batched_tokens, cfg.prefix_caching, cfg.preemption == "swap", aggregate,
        in_process=True))


def prefill_ready(sim: ServingSim, requests: list[TraceRequest],
                  pool: Activity | None = None) -> list[tuple[float, TraceRequest]]:
    """Disaggregated prefill: when each request's KV is ready (the prefill GPUs serve the
    requests FCFS, each to the first one free), in order; each prefill's work added to
    ``pool``."""
    ready, servers = [], [0.0] * sim.cfg.prefill_gpus
    for r in sorted(requests, key=lambda r: (r.arrival_s, r.rid)):
        took = sim.prefill_s(r.input_len)
        if pool is not None:
            pool.add(Activity.prefill(r.input_len, sim.cfg.max_batched_tokens, took))
        done = max(heapq.heappop(servers), r.arrival_s) + took
        heapq.heappush(servers, done)
        ready.append((done, r))
    return sorted(ready, key=lambda x: (x[0], x[1].rid))


class Replay(DecodeRuns):
    """One run of ``requests`` through ``sim``'s configuration; with ``nodes``, one decode
    instance of a fleet (``fleet.py``), its PNM-tier requests placed on those nodes and its
    arrivals handed to it (``offer``) as the fleet's dispatcher routes them."""

    def __init__(self, sim: ServingSim, requests: list[TraceRequest], fast: bool = True,
                 nodes: list[PnmNode] | None = None) -> None:
        self.sim, self.cfg, self.cost = sim, sim.cfg, sim.cost
        self.nodes = nodes if nodes is not None else [
            PnmNode("pnm", sim.pnm_tokens, sim.cost, sim.cfg.devices)]
        """The PNM nodes its requests' KV may be placed on."""
        self._node_priced = len(self.nodes) > 1 or self.nodes[0].cost is not sim.cost
        """Price the PNM tier node by node (the slowest node's time), not on ``sim``'s."""
        self.contended = False
        """Other instances share its nodes' devices (a fleet sets it)."""
        self.port: SwitchPort | None = None
        """Its way through its fleet's shared switch (``fabric.py``; None: no switch)."""
        self.node_weights: tuple[float, ...] | None = None
        """A fleet orchestrator's preference over ``nodes`` for new KV (None: ``place``'s)."""
        self._loaded: set[PnmNode] = set()
        """The nodes its latest step put load on."""
        self.pnm_held = 0
        """PNM-tier tokens this replay holds reserved."""
        self.work_left = 0
        """Prompt tokens not yet prefilled and output tokens not yet made, of the requests
        handed to it and not finished."""
        self.lazy = False
        """A fleet's instance: a run of pure decode steps is planned, not taken, until the
        fleet settles it (``settle``): whole, or cut at an arrival dispatched to it."""
        self.run_times: list[float] = []
        """The end of each step of the run of pure decode steps planned last."""
        self.decoded: list[_Req] = []
        """The requests of the last step's ``plan.decodes``, in its order."""
        self.run_jobs: list[_Job] = []
        """The jobs of the run of pure decode steps planned last, in the scheduler's running
        order (they do not change until it is taken)."""
        self._pending: tuple[list[float], int] | None = None
        """A planned run: each step's end time, and the tokens a step makes."""
        self.sched = make_replay_scheduler(sim, aggregate=fast)
        self.out = RunResult(self.cfg, sim.t_input, gpu_blocks=sim.gpu_blocks,
                             scheduler=self.cfg.scheduler.value)
        self.jobs: dict[str, _Job] = {}
        self.resident_jobs = 0
        """Jobs of PNM-tier requests decoding (for the time series)."""
        self.pnm_queue: deque[tuple[_Req, JobKind]] = deque()
        self._stuck: tuple[int, _Req | None] = (-1, None)
        """The nodes' releases when the PNM queue's head found no room, and that head."""
        self.router = sim.router
        """Routes arrivals and bounds migrations; with ``adaptive`` its T_input moves."""
        self.adaptive = (AdaptiveThreshold(sim.t_input) if self.cfg.adaptive
                         and sim.t_input is not None else None)
        self.budget = (TpotBudget(self.cfg.max_batched_tokens,
                                  lambda n: self.cost.step_s(0, [], [Chunk(0, n)]))
                       if self.cfg.tpot_budget and self.cfg.prefill == "colocated" else None)
        """With ``tpot_budget`` and colocated prefill: each step's token budget, held to the
        TPOT SLO while requests decode (``emu/policy/budget.py``; disaggregated, the decode
        GPU's steps carry no prefill chunks to hold)."""
        self.shedder = Shedder() if self.cfg.shed_late else None
        """With ``shed_late``: drops requests past their TTFT SLO without a first token
        (``emu/policy/shed.py``)."""
        self.gpu_wait_s = 0.0
        """The oldest wait for a first token on the GPU, as last observed (each sample)."""
        self._seen = (0.0, 0, 0)
        """Time, steps and preemptions when the tiers were last observed."""
        self.live: list[_Req] = []
        self.now = 0.0
        self.arrivals: list[tuple[float, int, int, TraceRequest]] = []
        """Requests handed to it, by when they reach it (a heap)."""
        self._offered = 0
        self.horizon = math.inf
        """When the next request not yet handed to it may arrive (its fleet's next arrival)."""
        if self.cfg.prefill == "disaggregated":  # the prefill GPUs' FCFS queue
            for t, r in prefill_ready(sim, requests, self.out.prefill_activity):
                self.offer(t, r)
        else:
            for r in sorted(requests, key=lambda r: (r.arrival_s, r.rid)):
                self.offer(r.arrival_s, r)
        self.total = len(requests)
        self.fast = self.sched if fast and isinstance(self.sched, V1Scheduler) else None
        """Our scheduler takes runs of pure decode steps many at a time (``fastpath.py``)."""
        self.progress: Callable[[float], None] | None = None
        self.next_sample = self.cfg.sample_s
        self.tokens_since = 0
        """Decode tokens since the last sample."""
        self.finished = 0
        """Requests finished."""
        self.record: Callable[[RequestResult], None] | None = None
        """Where finished requests go instead of ``out.results`` (a streamed run)."""
        self.record_sample: Callable[[Sample], None] | None = None
        """Where samples go instead of ``out.samples`` (a streamed run)."""

    def offer(self, t: float, r: TraceRequest) -> None:
        """``r`` reaches this instance at ``t`` (its arrival, or its KV from a prefill GPU)."""
        heapq.heappush(self.arrivals, (t, r.rid, self._offered, r))
        self._offered += 1
        self.work_left += r.input_len + r.output_len

    def outstanding_at(self, t: float) -> int:
        """Prompt tokens not yet prefilled and output tokens not yet made of its requests, at
        the end of the step it is in at ``t`` (for the fleet's dispatcher)."""
        if self._pending is None:
            return self.work_left
        times, batch = self._pending
        return self.work_left - min(bisect.bisect_left(times, t) + 1, len(times)) * batch

    # -- jobs ----------------------------------------------------------------------------------
    def _add_job(self, rq: _Req, kind: JobKind) -> None:
        r = rq.req
        prompt = (self.cost.pnm_resident_tokens(r.input_len + rq.generated)
                  if kind is JobKind.PNM_RESIDENT else r.input_len)
        jid = job_id(r.rid, kind)
        self.jobs[jid] = _Job(rq, kind, prompt)
        self.resident_jobs += kind is JobKind.PNM_RESIDENT
        if kind is JobKind.PNM_RESIDENT and not rq.migrated:  # its prompt's KV to the node
            self.out.activity.offload_tokens += r.input_len
        # a PNM-tier request prefilled here, or migrated, is in service: it goes on first
        front = rq.migrated or (kind is JobKind.PNM_RESIDENT and self.cfg.prefill == "colocated")
        self.sched.add(job_spec(jid, r.rid, kind, prompt, r.output_len - rq.generated,
                                r.hash_ids), front=front)

    def _arrive(self, t: float, r: TraceRequest) -> None:
        tier = self.router.tier(r.input_len)
        rq = _Req(r, tier)
        self.live.append(rq)
        disagg = self.cfg.prefill == "disaggregated"
        if disagg:  # first token from the prefill GPU
            rq.generated, rq.first_token_s = 1, t
            self.work_left -= 1 + r.input_len
            if r.output_len == 1:
                self._finish(rq, t)
                return
        if tier is Tier.GPU:
            self._add_job(rq, JobKind.GPU_KV_IN if disagg else JobKind.GPU)
        else:
            self.pnm_queue.append((rq, JobKind.PNM_RESIDENT if disagg else JobKind.PNM_PREFILL))

    def _admit_pnm(self) -> None:
        """The PNM tier's FCFS queue: a request enters vLLM once a node can hold it. A head
        that no node could hold is not tried again until a node gives room back (a fleet's
        nodes count every release: ``PnmNode.tally``); reservations only take room."""
        tally = self.nodes[0].tally
        releases, head = self._stuck
        if tally is not None and head is self.pnm_queue[0][0] and releases == tally[0]:
            self.out.peak_pnm_tokens = max(self.out.peak_pnm_tokens, self.pnm_held)
            return
        while self.pnm_queue:
            rq, kind = self.pnm_queue[0]
            need = rq.req.input_len + rq.req.output_len
            if not self._reserve(rq, need):
                if tally is not None:
                    self._stuck = (tally[0], rq)
                break
            self.pnm_queue.popleft()
            self._add_job(rq, kind)
        self.out.peak_pnm_tokens = max(self.out.peak_pnm_tokens, self.pnm_held)

    def _reserve(self, rq: _Req, need: int) -> bool:
        """Reserve ``need`` tokens for ``rq`` on the node with the most room; False if none
        has it."""
        node = place(need, self.nodes, self.node_weights)
        if node is None:
            return False
        node.reserve(need)
        rq.node, rq.pnm_reserved = node, need
        self.pnm_held += need
        return True

    def _release(self, rq: _Req) -> None:
        if rq.node is not None:
            rq.node.release(rq.pnm_reserved, self.now)
            self.pnm_held -= rq.pnm_reserved
        rq.node, rq.pnm_reserved = None, 0

    def pnm_used_share(self) -> float:
        """Share of the memory of the nodes it reaches that is held (by any instance)."""
        if len(self.nodes) == 1:
            return self.nodes[0].used_share
        tokens = sum(n.tokens for n in self.nodes)
        return 1 - sum(n.free for n in self.nodes) / tokens if tokens else 0.0

    def _finish(self, rq: _Req, now: float) -> None:
        self._release(rq)
        self.live.remove(rq)
        self.work_left -= rq.req.output_len - rq.generated
        assert rq.first_token_s is not None
        r = rq.req
        res = RequestResult(r.rid, r.input_len, r.output_len, rq.tier.value, r.arrival_s,
                            rq.first_token_s, now, rq.preemptions, rq.migrated)
        self.finished += 1
        self.out.activity.output_tokens += r.output_len
        if self.record is None:
            self.out.results.append(res)
        else:
            self.record(res)

    # -- one step ------------------------------------------------------------------------------
    def _step_cost(self, plan: Any) -> float:
        """The step's cost. It also credits each job of ``plan.decodes`` with the token it
        samples (they make no event: none is a first token, each sampled one before, and none
        finishes)."""
        gpu_ctx = 0
        pnm_ctxs: list[int] = []
        by_node = self._node_priced
        # with several nodes, each node's PNM contexts: [their sum, how many], in the order the
        # nodes first come (pnm_terms' sums)
        on: dict[PnmNode, list[int]] | None = {} if by_node and len(self.nodes) > 1 else None
        chunks: list[Chunk] = []
        jobs = self.jobs
        decodes = 0
        resident = JobKind.PNM_RESIDENT
        self.decoded = decoded = []
        keep = decoded.append
        for jid in plan.decodes:
            job = jobs[jid]
            rq = job.rq
            keep(rq)
            if job.kind is resident:
                ctx = rq.req.input_len + rq.generated
                pnm_ctxs.append(ctx)
                if on is not None:
                    s = on.get(rq.node)  # type: ignore[arg-type]
                    if s is None:
                        on[rq.node] = [ctx, 1]  # type: ignore[index]
                    else:
                        s[0] += ctx
                        s[1] += 1
            else:
                decodes += 1
                gpu_ctx += job.prompt + job.outputs
            job.outputs += 1
            job.decoding = True  # (a preempted job recomputed up to its last token)
            rq.generated += 1
        self.work_left -= len(plan.decodes)
        for p in plan.scheduled:
            job = self.jobs[p.jid]
            end = p.start + p.tokens
            samples = end >= job.prompt + job.outputs
            if job.kind is JobKind.PNM_RESIDENT or (job.kind is JobKind.GPU_KV_IN
                                                    and not job.recomputes):
                # KV that arrived: only the step that samples computes (one decode token)
                if samples:
                    if job.kind is JobKind.PNM_RESIDENT:
                        ctx = job.rq.req.input_len + job.rq.generated
                        pnm_ctxs.append(ctx)
                        if on is not None:
                            s = on.get(job.rq.node)  # type: ignore[arg-type]
                            if s is None:
                                on[job.rq.node] = [ctx, 1]  # type: ignore[index]
                            else:
                                s[0] += ctx
                                s[1] += 1
                    else:
                        gpu_ctx += end
                        chunks.append(Chunk(end - 1, 1))
            elif p.tokens == 1:
                gpu_ctx += end
                chunks.append(Chunk(p.start, 1))
            else:
                chunks.append(Chunk(p.start, p.tokens))
        agg = self.cost.step_sums(gpu_ctx, pnm_ctxs, chunks, decodes)
        self.out.activity.count_step(agg, plan.swap_in_tokens)
        if not by_node:
            return self.cost.step_agg_s(*agg, plan.swap_in_tokens)
        if on is None:  # one node: its sums are the step's, no pass over the contexts
            sums = [(self.nodes[0], agg[2], agg[3])] if pnm_ctxs else []
        else:
            sums = [(n, c, k) for n, (c, k) in on.items()]
        key = id(self) if self.contended else None
        t_pnm = pnm_time(sums, 0, key)
        if self.port is not None:  # the shared switch's wait for the step's queries
            t_pnm += self.port.wait_s(len(pnm_ctxs), self.now)
        step = self.cost.step_agg_s(*agg, plan.swap_in_tokens, t_pnm)
        if key is not None:
            self._book(sums, 0, step)
        if self.port is not None:
            self.port.book(len(pnm_ctxs), step)
        return step

    def _on_preempted(self, plan: Any) -> None:
        for jid, tokens in plan.preempted:
            job = self.jobs[jid]
            rq = job.rq
            rq.preemptions += 1
            job.decoding = False
            job.recomputes = True
            self.out.preemptions += 1
            if self.cfg.preemption == "recompute":
                self.out.recompute_tokens += tokens
            if rq.migrating_until is not None:  # a migration under way is abandoned
                self._release(rq)
                rq.migrating_until = None

    def _on_tokens(self, events: list[tuple[str, bool]], now: float) -> int:
        tokens = 0
        for jid, finished in events:
            job = self.jobs[jid]
            rq = job.rq
            job.outputs += 1
            job.decoding = True
            rq.generated += 1
            self.work_left -= 1
            if rq.first_token_s is None:
                rq.first_token_s = now
                self.work_left -= rq.req.input_len
            else:
                tokens += 1
            if finished:
                del self.jobs[jid]
                self.resident_jobs -= job.kind is JobKind.PNM_RESIDENT
                if rq.generated >= rq.req.output_len:
                    self._finish(rq, now)
                elif job.kind is JobKind.PNM_PREFILL:
                    self._add_job(rq, JobKind.PNM_RESIDENT)
        return tokens

    def _migrate(self, now: float) -> None:
        """Finish migrations that are done; start the one the migration policy chooses
        (``emu/policy/migration.py``) if the PNM tier has room for it."""
        busy = False
        for rq in self.live:
            if rq.migrating_until is None:
                continue
            if now < rq.migrating_until:
                busy = True
                continue
            rq.migrating_until = None
            self.sched.abort(str(rq.req.rid))
            del self.jobs[str(rq.req.rid)]
            rq.tier, rq.migrated = Tier.PNM, True
            self.out.migrations += 1
            self._add_job(rq, JobKind.PNM_RESIDENT)
        chosen = self.sim.migration.choose(self.router, busy, self.sched.used_blocks(),
                                           self.sim.gpu_blocks, self._decoding_gpu_requests())
        if chosen is None:
            return
        ctx, rq = chosen
        if not self._reserve(rq, rq.req.input_len + rq.req.output_len):
            return
        took = self.cost.migration_s(ctx)
        if self.port is not None:  # its KV through the shared switch
            took += self.port.switch.bulk_wait_s(ctx * self.cost.kv_bytes,
                                                 self.cost.migration_link_s(ctx), now, now + took)
        rq.migrating_until = now + took
        self.out.migrated_tokens += ctx

    def _decoding_gpu_requests(self) -> Iterator[tuple[int, _Req]]:
        """The decoding GPU-tier requests not migrating yet, with their contexts, in the order
        they were queued: the migration policy's candidates."""
        for job in self.jobs.values():
            rq = job.rq
            if (job.kind in (JobKind.GPU, JobKind.GPU_KV_IN) and job.decoding
                    and rq.migrating_until is None):
                yield rq.req.input_len + rq.generated, rq

    def _after_step(self, made: int) -> None:
        """What follows every step: decode tokens counted, migration, a sample when due."""
        out, cfg = self.out, self.cfg
        out.decode_tokens += made
        self.tokens_since += made
        if cfg.migration:
            self._migrate(self.now)
        if self.now >= self.next_sample:
            if self.shedder is not None:
                self._shed()
            running, waiting = self.sched.counts()
            kv_used = self.sched.used_blocks() / self.sim.gpu_blocks
            pnm_used = self.pnm_used_share()
            if self.adaptive is not None or self.budget is not None:
                self.gpu_wait_s = self.gpu_wait()
            if self.budget is not None:
                self.budget.observe(self.now, self.gpu_wait_s)
            if self.adaptive is not None:
                self._adapt(kv_used, pnm_used)
            sample = Sample(
                self.now, running, waiting + len(self.pnm_queue), kv_used, self.tokens_since,
                self.resident_jobs, self.router.t_input, len(self.pnm_queue), pnm_used)
            if self.record_sample is None:
                out.samples.append(sample)
            else:
                self.record_sample(sample)
            self.tokens_since = 0
            self.next_sample = self.now + cfg.sample_s
            if self.progress is not None:
                self.progress((self.finished + out.shed) / self.total)

    def _shed(self) -> None:
        """Drop the requests the shedding policy finds past their TTFT SLO: their jobs
        aborted in the scheduler, their place in the PNM tier's queue or memory given back."""
        assert self.shedder is not None
        late = list(self.shedder.late(self.now, ((rq.req.arrival_s, rq) for rq in self.live
                                                 if rq.first_token_s is None)))
        if not late:
            return
        for rq in late:
            jid = str(rq.req.rid)
            if jid in self.jobs:
                self.sched.abort(jid)
                del self.jobs[jid]
            self._release(rq)
            self.live.remove(rq)
            self.work_left -= rq.req.input_len + rq.req.output_len - rq.generated
        gone = set(map(id, late))
        self.pnm_queue = deque(x for x in self.pnm_queue if id(x[0]) not in gone)
        self.out.shed += len(late)

    def gpu_wait(self) -> float:
        """How long the oldest request waiting for the GPU has waited: GPU-tier requests, and
        PNM-tier ones admitted to their tier whose prefill has not made a token yet."""
        now = self.now
        return max((now - rq.req.arrival_s for rq in self.live if rq.first_token_s is None
                    and (rq.tier is Tier.GPU or rq.pnm_reserved)), default=0.0)

    def decode_parts(self) -> tuple[int, list[int], Any]:
        """The decoding jobs' GPU context, PNM-tier contexts, and a decode step of them by
        component (``CostModel.step_parts``): what an orchestrator reads of a step."""
        gpu_ctx, pnm_ctxs, decodes = 0, [], 0
        for job in self.jobs.values():
            if not job.decoding:
                continue
            if job.kind is JobKind.PNM_RESIDENT:
                pnm_ctxs.append(job.rq.req.input_len + job.rq.generated)
            else:
                gpu_ctx += job.prompt + job.outputs
                decodes += 1
        return gpu_ctx, pnm_ctxs, self.cost.step_parts(gpu_ctx, pnm_ctxs, decodes)

    def _adapt(self, kv_used: float, used: float) -> None:
        """What an orchestrator sees of the tiers, to the adaptive threshold (arrivals from
        now on are routed by where it moves)."""
        assert self.adaptive is not None
        now = self.now
        pnm_wait = now - self.pnm_queue[0][0].req.arrival_s if self.pnm_queue else 0.0
        gpu_wait = self.gpu_wait_s
        gpu_ctx, pnm_ctxs, parts = self.decode_parts()
        # the steps since the last look, prefill chunks and all: what a decoding request's TPOT
        # is made of
        t0, steps0, preempted0 = self._seen
        steps = self.out.steps - steps0
        step_s = (now - t0) / steps if steps and (gpu_ctx or pnm_ctxs) else 0.0
        self._seen = (now, self.out.steps, self.out.preemptions)
        load = TierLoad(now, kv_used, self.out.preemptions - preempted0, used, pnm_wait,
                        gpu_wait_s=gpu_wait, gpu_attn_s=parts.gpu_attn_s, pnm_s=parts.pnm_s,
                        step_s=step_s)
        if self.adaptive.observe(load):
            self.router = Router(self.adaptive.t_input, Source.ADAPTIVE)

    def busy(self) -> bool:
        return bool(self.arrivals or self.pnm_queue or self.jobs)

    def blocked(self) -> bool:
        """Nothing to run but requests waiting for room on a PNM node (another instance of a
        fleet may give it back)."""
        return not self.jobs and not self.arrivals and bool(self.pnm_queue)

    def advance(self, horizon: float = math.inf, steps: int | None = None) -> None:
        """Step until the clock reaches ``horizon`` (when a request not yet handed to it may
        arrive), or ``steps`` steps (a run of pure decode steps counts as one) are taken, or
        there is nothing it can do before then."""
        out, sched = self.out, self.sched
        self.settle()
        self.horizon = horizon
        taken = 0
        while self.now < horizon and (steps is None or taken < steps):
            while self.arrivals and self.arrivals[0][0] <= self.now:
                t, _, _, r = heapq.heappop(self.arrivals)
                self._arrive(t, r)
            if self.pnm_queue:
                self._admit_pnm()
            elif self.pnm_held > out.peak_pnm_tokens:  # (_admit_pnm's peak, without a call)
                out.peak_pnm_tokens = self.pnm_held
            if not self.jobs:
                if not self.arrivals:  # idle, or waiting for a PNM node's room
                    return
                self._wait_for_arrival()
                continue
            taken += 1
            if self.fast is not None:
                k = self._decode_run(self.next_sample)
                if k:
                    if self._pending is not None:
                        return  # the fleet settles it
                    self._after_step(k * len(self.fast.running))
                    continue
            if self.budget is not None:
                sched.set_budget(self.budget.tokens(
                    any(job.decoding for job in self.jobs.values()), self.gpu_wait_s))
            plan = sched.schedule()
            self._on_preempted(plan)
            out.prefix_hit_tokens += plan.prefix_hit_tokens
            if not plan.scheduled and not plan.decodes:
                if not self._wait_for_arrival():
                    raise RuntimeError("scheduler stalled with requests that can never run")
                continue
            out.peak_gpu_blocks = max(out.peak_gpu_blocks, sched.used_blocks())
            step = self._step_cost(plan)
            self.now += step
            out.activity.busy_s += step
            out.steps += 1
            self._after_step(len(plan.decodes) + self._on_tokens(sched.update(plan), self.now))
        out.end_s = self.now

    def _wait_for_arrival(self) -> bool:
        """Nothing can run now: the clock moves to the next arrival (or to the horizon, where
        one may yet be handed to it); False if none can come."""
        nxt = min(self.arrivals[0][0] if self.arrivals else math.inf, self.horizon)
        if nxt == math.inf:
            return False
        self.now = max(self.now, nxt)
        return True

    def run(self, progress: Callable[[float], None] | None = None) -> RunResult:
        """Every request, to the end (they were all handed to it)."""
        self.progress = progress
        self.next_sample = self.cfg.sample_s
        self.tokens_since = 0
        with fewer_collections():
            self.advance()
        if self.pnm_queue:
            raise RuntimeError("the PNM tier cannot hold the request at its queue's head")
        self.out.end_s = self.now
        return self.out


def replay(sim: ServingSim, requests: list[TraceRequest],
           progress: Callable[[float], None] | None = None, fast: bool = True) -> RunResult:
    """Run the replay; ``fast=False`` steps our scheduler one step at a time and takes every
    job of a step through its general pass (the reference the fast paths are held to)."""
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    run = Replay(sim, requests, fast).run(progress)
    run.wall_s, run.cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return run
