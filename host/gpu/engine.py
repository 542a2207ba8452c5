"""The co-simulation's engine, split as vLLM splits its own: this loop owns a scheduler of the
policy core (``emu/policy/schedule.JobScheduler``: the project's ``V1Scheduler`` or vLLM's own),
the executor (``executor.HybridExecutor``: PyTorch and the PNM node) and the KV transfers
(``transfers.KvTransfers``). Each step it asks the scheduler for a plan of job ids and token
counts, turns it into the executor's work in request ids, hands that over, and follows the
output: tokens, KV the node lost, failures. The executor never calls the scheduler.

Requests become jobs by the policy core's job model (``emu/policy/jobs.py``), the one the serving
emulator's replay uses: a GPU-tier request is one job; a PNM-tier request is a prefill job (its
prompt's KV on the GPU while the prefill runs, one token), then a resident job of what the GPU
keeps, at the front of the waiting queue; a migration or a recovery that completes ends the GPU
job and queues a resident job; a request whose KV the node lost comes back as a GPU job whose KV
is there (the executor recomputed it). Routing is the policy core's router and migration its
migration policy.

Prefills run on the prefill node, which takes no time of this GPU: a scheduler step whose work
is only prefills is not a decode step, so ``step`` runs the scheduler's steps until one decodes
(the prefills before it are reported with it), and ``prefill`` runs those of a batch added
together before the first decode step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.emu.policy.adaptive import AdaptiveThreshold, TierLoad
from nelssa.emu.policy.capacity import blocks_for, resident_tokens
from nelssa.emu.policy.jobs import JobKind, job_id, job_spec
from nelssa.emu.policy.migration import MigrationPolicy
from nelssa.emu.policy.router import Router, Source
from nelssa.emu.policy.schedule import JobScheduler, StepPlan
from nelssa.emu.policy.schedulers import SCHEDULERS, SchedulerSpec, make_scheduler
from nelssa.emu.policy.states import Fallback, SeqState, Tier, Transfer
from nelssa.host.gpu.executor import HybridExecutor, StepOutput, StepWork, fit_to_devices
from nelssa.host.gpu.model import Llama
from nelssa.host.gpu.report import DecodeTracer, StepReport, TraceRecorder
from nelssa.host.gpu.request import DecodeConfig, Request, RequestKv
from nelssa.host.gpu.routing import model_hw
from nelssa.host.gpu.transfers import Settled, TransferNews
from nelssa.host.pnm_node.client import NodeClient

__all__ = ["DecodeConfig", "DecodeEngine", "Request"]
log = logging.getLogger(__name__)

NO_RETRY = (Fallback.MIGRATION_FAILED, Fallback.RECOVERY_FAILED)
"""A request whose transfer to the node failed is not moved again."""
UNLIMITED_BLOCKS = 1 << 40
"""KV blocks of a GPU without limit, for our scheduler (nothing is refused or preempted)."""
MAX_RUNNING = 1 << 16
"""Requests running at once: the co-simulation runs every one it can hold."""
BUDGET_TOKENS = (1 << 31) - 1
"""A step's token budget: whole prompts, however many (the prefill node makes them)."""


class DecodeEngine:
    """Decode requests on the GPU and the PNM node behind ``client``, planned by a scheduler of
    the policy core (``scheduler``: ``ours``, the project's vLLM v1 algorithm, or ``vllm``,
    vLLM's own in its environment)."""

    def __init__(self, model: Llama, config: DecodeConfig, client: NodeClient | None,
                 trace: TraceRecorder | None = None, router: Router | None = None,
                 adaptive: AdaptiveThreshold | None = None, scheduler: str = "ours") -> None:
        """``router``: how requests are placed (default: by ``config.t_input``); ``adaptive``:
        the threshold moves with the tiers' load from there (``emu/policy/adaptive.py``, the
        serving emulator's policy), and new requests are routed by where it is."""
        clock_hz: float | None = None  # the devices' core clock, from the node
        if client is not None:  # the devices' facts, from their registers (CAPS) via the node
            try:  # over a connection of its own: emulated times do not depend on it
                status = client.probe_status()
            except (LinkTimeoutError, RemoteError) as e:  # requests state their fallback later
                log.warning("PNM node status unavailable (%s): device limits not checked", e)
            else:
                config, clock_hz = fit_to_devices(model.c, config, status)
        if router is not None and router.t_input != config.t_input:
            raise ValueError(f"the router's T_input ({router.t_input}) is not the config's "
                             f"({config.t_input})")
        if adaptive is not None and adaptive.t_input != config.t_input:
            raise ValueError(f"the adaptive threshold starts at {adaptive.t_input}, not at the "
                             f"config's T_input ({config.t_input})")
        if adaptive is not None and adaptive.lo <= config.sink + config.recent:
            raise ValueError(f"the adaptive threshold's lowest ({adaptive.lo}) must exceed sink "
                             f"+ recent ({config.sink + config.recent})")
        self.model, self.cfg, self.client = model, config, client
        self.trace = trace or TraceRecorder()
        self.tracer = DecodeTracer(self.trace, lambda cycles: (
            round(cycles * 1e12 / clock_hz) if clock_hz else 0))
        self.executor = HybridExecutor(model, config, client, self.tracer)
        if scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {scheduler!r}: one of {', '.join(SCHEDULERS)}")
        self.scheduler = scheduler
        self._sched: JobScheduler | None = None
        self.router = router or Router(config.t_input)
        self.migration = MigrationPolicy(config.migrate_at)
        self.adaptive = adaptive
        self.pnm = client is not None
        """A PNM node is there to send long requests to."""
        self.gpu_blocks = config.gpu_kv_blocks
        """The GPU's KV blocks (None: without limit)."""
        self.requests: list[Request] = []
        """Every request added, in order (its id is its place)."""
        self.running: list[Request] = []
        """Requests whose current job runs, in the order they were admitted."""
        self._jobs: dict[str, Request] = {}
        """Live jobs' requests, by job id."""
        self._used_ids: set[str] = set()
        self._planned: tuple[StepPlan, StepWork] | None = None
        """A plan made by ``prefill`` that decodes: the next step runs it."""
        self._pending: list[tuple[Request, JobKind]] = []
        """Requests added, not yet handed to the scheduler."""
        self._sized = False
        """The scheduler's KV was sized for the requests added before the first step."""
        self._preempted = 0
        """Preemptions since the tiers were last observed."""
        self._step_preempted = 0
        self.steps = 0
        self.events: list[str] = []
        """Migration and recovery events, in order, for the caller to print."""

    @property
    def sched(self) -> JobScheduler:
        """The scheduler, made when first asked for: vLLM's sizes its block pool then, so a
        GPU without limit gets the blocks of every request added before the first step."""
        if self._sched is None:
            blocks = self.gpu_blocks
            if blocks is None:
                blocks = (UNLIMITED_BLOCKS if self.scheduler == "ours" else 1 + sum(
                    blocks_for(r.length + r.max_new, self.cfg.block_tokens)
                    for r in self.requests))
            self._sched = make_scheduler(self.scheduler, SchedulerSpec(
                model_hw(self.model.c), blocks, self.cfg.block_tokens, MAX_RUNNING,
                BUDGET_TOKENS))
            self._sized = self.gpu_blocks is None and self.scheduler != "ours"
        return self._sched

    @property
    def now_ps(self) -> int:
        return self.executor.now_ps

    def kv(self, rid: int) -> RequestKv:
        """What the executor keeps for request ``rid`` (its KV, its place on the node)."""
        return self.executor.kv[rid]

    def unfinished(self) -> bool:
        """Some request still runs or waits."""
        return bool(self._jobs or self._pending)

    def kv_blocks_in_use(self) -> int:
        """The GPU's KV blocks in use (the null block among them)."""
        return self.sched.used_blocks()

    # -- admission -----------------------------------------------------------------------------
    def add(self, prompt: list[int], max_new: int) -> Request:
        """Queue a request, routed; it is prefilled (and makes its first token) in the step
        that admits it."""
        c = self.model.c
        if not prompt:
            raise ValueError("empty prompt: a request needs at least one token")
        if max_new < 1:
            raise ValueError(f"max_new must be >= 1, got {max_new}")
        if len(prompt) + max_new > c.max_position_embeddings:
            raise ValueError(f"prompt of {len(prompt)} tokens plus {max_new} new ones exceeds the "
                             f"model's maximum of {c.max_position_embeddings}")
        bad = [t for t in prompt if not 0 <= t < c.vocab_size]
        if bad:
            raise ValueError(f"token {bad[0]} outside the vocabulary (0..{c.vocab_size - 1})")
        req = Request(len(self.requests), list(prompt), max_new)
        kind = JobKind.GPU
        if self.router.past(len(prompt)):
            if self.pnm:
                req.tier, kind = Tier.PNM, JobKind.PNM_PREFILL
            else:
                req.fallback = Fallback.NO_NODE
                req.note = "no PNM node: long request kept on the GPU"
        if self._sized:
            raise ValueError(f"the {self.scheduler} scheduler sized the GPU's KV for the "
                             "requests added before the first step: add every request before "
                             "it, or give the GPU a KV capacity (gpu_kv_tokens)")
        self.requests.append(req)
        self._pending.append((req, kind))
        return req

    def _hand_over(self) -> None:
        """Requests added since the last step, to the scheduler (made now if it is not yet)."""
        pending, self._pending = self._pending, []
        for r, kind in pending:
            self._queue(r, kind, front=False)

    def _queue(self, r: Request, kind: JobKind, front: bool) -> None:
        """Give ``r`` a new job of ``kind``, waiting (at the front: a request in service)."""
        nth = 0
        while job_id(r.rid, kind, nth) in self._used_ids:
            nth += 1
        jid = job_id(r.rid, kind, nth)
        self._used_ids.add(jid)
        if kind is JobKind.PNM_RESIDENT:
            prompt = resident_tokens(r.length, self.cfg.sink + self.cfg.recent,
                                     self.cfg.cluster.tokens_per_cluster)
        elif kind.kv_arrives:
            prompt = r.length
        else:
            prompt = len(r.prompt)
        r.job, r.jid, r.job_prompt, r.job_generated = kind, jid, prompt, len(r.generated)
        r.status, r.admitted, r.recompute = SeqState.WAITING, False, False
        self._jobs[jid] = r
        self.sched.add(job_spec(jid, r.rid, kind, prompt, r.max_new - len(r.generated)),
                       front=front)

    def _end_job(self, r: Request) -> None:
        """``r``'s current job is gone from the scheduler (finished or aborted)."""
        self._jobs.pop(r.jid, None)
        if r in self.running:
            self.running.remove(r)
        r.admitted = False

    # -- one step ------------------------------------------------------------------------------
    def prefill(self, each: Callable[[], None] | None = None) -> None:
        """Run the scheduler's steps that only prefill (a batch added together, before its
        first decode step); ``each`` is called after each request's prefill."""
        self._hand_over()
        self.executor.on_prefill = each
        try:
            while self._jobs and self._run(StepReport(0, 0), prefill_only=True) is not None:
                pass
        finally:
            self.executor.on_prefill = None

    def step(self) -> StepReport:
        """The scheduler's next decode step (the prefills planned before it run first): one
        token for every request it decodes."""
        if not self.unfinished():
            raise RuntimeError("no running request to decode")
        start = self.now_ps
        rep = StepReport(0, 0)
        rep.migrating = [r.rid for r in self.requests if r.transfer is not None]
        self.executor.step = self.steps
        self._step_preempted = 0
        while self._jobs or self._pending:
            if self._run(rep):
                break
        rep.step_ps = self.now_ps - start
        self.steps += 1
        self._transfers()
        if self.adaptive is not None:
            self._adapt(rep, self._step_preempted)
        return rep

    def _run(self, rep: StepReport, prefill_only: bool = False) -> bool | None:
        """One scheduler step: plan, run, follow the output; whether it decoded. With
        ``prefill_only``, a plan that decodes is kept for the next step, not run (None)."""
        if self._planned is not None:
            plan, work = self._planned
            self._planned = None
        else:
            self._hand_over()
            plan = self.sched.schedule()
            if not (plan.scheduled or plan.decodes or plan.preempted):
                head = min(self._jobs.values(), key=lambda r: r.rid)
                raise RuntimeError(f"request {head.rid} can never be admitted: its KV does not "
                                   "fit the GPU's")
            work = self._work(plan)
        if prefill_only and work.decodes:
            self._planned = plan, work
            return None
        out = self.executor.run(work, {r.rid: r for r in self.requests}, rep)
        self._follow(plan, out)
        return bool(work.decodes)

    def _work(self, plan: StepPlan) -> StepWork:
        """The plan in request ids: preemptions taken note of, admissions sorted into
        prefills, recomputes and KV that is there."""
        for jid, _ in plan.preempted:
            r = self._jobs[jid]
            r.preemptions += 1
            r.status, r.admitted, r.recompute = SeqState.WAITING, False, True
            if r in self.running:
                self.running.remove(r)
            if r.transfer is not None:  # a transfer under way is abandoned
                self.executor.transfers.cancel(r.rid, self.kv(r.rid))
                r.transfer = None
            self._step_preempted += 1
            log.info("request %d preempted (GPU KV full)", r.rid)
        work = StepWork()
        decodes: list[int] = []
        items = [(p.jid, p.start, p.tokens) for p in plan.scheduled]
        items += [(jid, -1, 1) for jid in plan.decodes]
        for jid, start, tokens in items:
            r = self._jobs[jid]
            if r.admitted:
                if tokens != 1:
                    raise RuntimeError(f"job {jid}: {tokens} tokens planned for a decode")
                decodes.append(r.rid)
                continue
            whole = r.job_prompt + len(r.generated) - r.job_generated
            if start != 0 or tokens != whole:
                raise RuntimeError(
                    f"job {jid}: tokens [{start}, {start + tokens}) planned of {whole}: the "
                    "co-simulation runs whole prefills (a token budget of whole prompts)")
            r.admitted, r.status = True, SeqState.RUNNING
            self.running.append(r)
            if r.recompute and r.job is not JobKind.PNM_RESIDENT:
                work.recomputes.append(r.rid)
                decodes.append(r.rid)
            elif r.job.kv_arrives or r.recompute:
                decodes.append(r.rid)
            else:
                work.prefills.append(r.rid)
            r.recompute = False
        work.decodes = sorted(decodes)  # in request order (it changes no row's result)
        return work

    def _follow(self, plan: StepPlan, out: StepOutput) -> None:
        """What the step's output changes: tokens, fallbacks, jobs that end, failures, KV the
        node lost."""
        for rid, token in out.tokens.items():
            self.requests[rid].generated.append(token)
        for rid, note in out.offload_failed.items():  # it goes on as a GPU job
            r = self.requests[rid]
            r.tier, r.fallback, r.note = Tier.GPU, Fallback.OFFLOAD_FAILED, note
        self.events += out.events
        for jid, finished in self.sched.update(plan):
            if finished:
                self._job_finished(self._jobs[jid])
        for rid, note in out.failed.items():
            r = self.requests[rid]
            r.status, r.note = SeqState.FAILED, note
            if r.jid in self._jobs:
                self.sched.abort(r.jid)
                self._end_job(r)
            self.executor.release(rid)
        for rid in out.recovered:
            r = self.requests[rid]
            r.recoveries += 1
            r.tier = Tier.GPU
            if r.status is not SeqState.RUNNING:
                continue  # it finished with this step's token
            # its whole context is on the GPU again: a job whose KV is there, first in line
            self.sched.abort(r.jid)
            self._end_job(r)
            self._queue(r, JobKind.GPU_KV_IN, front=True)

    def _job_finished(self, r: Request) -> None:
        """``r``'s job made its last token: the request is done, or goes on as its next job
        (a PNM-tier request's resident job; a GPU job if its KV stayed on the GPU)."""
        self._end_job(r)
        if len(r.generated) >= r.max_new:
            r.status = SeqState.DONE
            self.executor.release(r.rid)
        elif r.tier is Tier.PNM:
            self._queue(r, JobKind.PNM_RESIDENT, front=True)
        else:
            self._queue(r, JobKind.GPU_KV_IN, front=True)

    # -- transfers -----------------------------------------------------------------------------
    def _transfers(self) -> None:
        """What follows a step: switch to the node a transfer whose writes are all confirmed
        (in wall and emulated time); put back the KV of requests that recovered; start the
        migration the policy chooses."""
        moves = self.executor.transfers
        for r in self.requests:
            kv = self.executor.kv.get(r.rid)
            if kv is None or kv.migration is None or not self._in_service(r):
                continue
            news = moves.settle(r.rid, kv, self.now_ps, self.steps)
            if news is not None:
                self._transfer_news(r, news)
        for r in self.requests:
            kv = self.executor.kv.get(r.rid)
            if (kv is not None and kv.recovering and kv.migration is None
                    and self._in_service(r)):
                self._start(r, Transfer.RECOVERY)
        if moves.bulk is None or self.gpu_blocks is None:
            return
        busy = any(r.transfer is not None for r in self.requests)
        cands = ((r.length, r) for r in self.running
                 if r.tier is Tier.GPU and r.transfer is None and r.fallback not in NO_RETRY)
        used = self.sched.used_blocks()
        chosen = self.migration.choose(self.router, busy, used, self.gpu_blocks, cands)
        if chosen is not None and self._start(chosen[1], Transfer.MIGRATION):
            self.events.append(
                f"step {self.steps}: GPU KV at {used:,} of {self.gpu_blocks:,} blocks: migrating "
                f"request {chosen[1].rid} ({chosen[1].length} tokens) to the PNM tier in the "
                "background")

    def _in_service(self, r: Request) -> bool:
        """``r`` has a job that holds, or is about to take again, KV the GPU keeps: running,
        or queued first after a recovery (not preempted, not ended)."""
        return r.jid in self._jobs and not r.recompute

    def _start(self, r: Request, kind: Transfer) -> bool:
        news = self.executor.transfers.start(r, self.kv(r.rid), kind, self.now_ps, self.steps)
        if news is not None:
            self._transfer_news(r, news)
            return False
        r.transfer = kind
        return True

    def _transfer_news(self, r: Request, news: TransferNews) -> None:
        self.events.append(news.event)
        r.transfer = None
        if news.settled is Settled.FAILED:  # its KV stays whole on the GPU; not moved again
            r.fallback = (Fallback.MIGRATION_FAILED if news.kind is Transfer.MIGRATION
                          else Fallback.RECOVERY_FAILED)
            r.note = news.note
            return
        self.tracer.transfer(news.what, r.rid, news.start_ps, news.done_ps - news.start_ps)
        r.tier = Tier.PNM
        r.migrated |= news.kind is Transfer.MIGRATION
        if self._in_service(r):  # its GPU job ends, its resident job goes first
            self.sched.abort(r.jid)
            self._end_job(r)
            self._queue(r, JobKind.PNM_RESIDENT, front=True)

    # -- the GPU's memory and the tiers' load --------------------------------------------------
    def blocks_to_grow(self, tokens: int) -> int:
        """KV blocks that hold what runs and waits now once each has grown by ``tokens``, the
        null block among them."""
        bt = self.cfg.block_tokens
        return 1 + sum(blocks_for(r.job_prompt + len(r.generated) - r.job_generated + tokens,
                                  bt) for r in self._jobs.values())

    def set_gpu_blocks(self, blocks: int) -> None:
        """Give the emulated GPU ``blocks`` KV blocks from now on (what is held stays)."""
        resize = getattr(self.sched, "set_blocks", None)
        if resize is None:
            raise ValueError(f"the {self.scheduler} scheduler's KV blocks are fixed when it "
                             "starts")
        resize(blocks)
        self.gpu_blocks = blocks

    def _adapt(self, rep: StepReport, preempted: int) -> None:
        """What the GPU node sees of the tiers, to the adaptive threshold: its KV blocks and
        preemptions, the node's memory (its STATUS, over a connection of its own), and this
        step's attention on either side. The node places what it is sent or refuses it (a
        stated fallback): no request queues for its memory."""
        assert self.adaptive is not None
        self._preempted += preempted
        t_s = self.now_ps * 1e-12
        if not self.adaptive.due(t_s):
            return
        kv_used = self.sched.used_blocks() / self.gpu_blocks if self.gpu_blocks else 0.0
        pnm_used = 0.0
        if self.client is not None:
            try:
                devs = [d for d in self.client.probe_status().devices if d.alive]
            except (LinkTimeoutError, RemoteError) as e:
                log.warning("PNM node status unavailable (%s): its memory read as full", e)
                devs = []
            total = sum(d.mem_bytes for d in devs)
            pnm_used = sum(d.used_bytes for d in devs) / total if total else 1.0
        load = TierLoad(t_s, kv_used, self._preempted, pnm_used, pnm_wait_s=0.0,
                        gpu_attn_s=rep.gpu_attn_ps * 1e-12, pnm_s=rep.node_ps * 1e-12,
                        step_s=rep.step_ps * 1e-12)
        self._preempted = 0
        if self.adaptive.observe(load):
            self.router = Router(self.adaptive.t_input, Source.ADAPTIVE)
            self.events.append(f"T_input -> {self.adaptive.t_input} tokens (adaptive, "
                               f"{load.t_s * 1e3:.3f} ms)")

    def close(self) -> None:
        self.executor.close()
        close = getattr(self.sched, "close", None)
        if close is not None:
            close()
