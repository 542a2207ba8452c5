"""The co-simulation's scheduler: the engine split as vLLM splits it, this module plans each step
and ``decode.py`` executes the plan (GPU compute in PyTorch, node requests, the merge). It holds
no tensors and talks to no node, so it runs (and is tested) alone.

Each request is a sequence of vLLM-like jobs over the GPU's KV blocks (``emu/policy/capacity``),
the same jobs the serving emulator's replay gives its scheduler (``emu/serving/replay.py``):

- a GPU-tier request is one job: its prompt, then its generated tokens;
- a PNM-tier request is a prefill job (its prompt's KV on the GPU while the prefill runs, one
  token), then a resident job whose KV is what the GPU keeps (sink and recent tokens, the
  centroids: ``resident_tokens``), queued at the front of the waiting queue;
- a migration or a recovery that completes ends the GPU job and queues a resident job.

A step: the running jobs first, in order, each needing a block for its next token, the newest
preempted (recompute) when none is free; then, if none was preempted, waiting jobs in FCFS order
while the blocks of their whole sequence fit. After the step, finished jobs free their blocks,
and the migration policy (``emu/policy/migration``) may pick a request to move. Routing is the
policy core's router (``emu/policy/router``).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field

from nelssa.emu.policy.capacity import KvBlocks, resident_tokens
from nelssa.emu.policy.migration import MigrationPolicy
from nelssa.emu.policy.router import Router
from nelssa.emu.policy.states import Fallback, SeqState, Tier, Transfer

log = logging.getLogger(__name__)

NO_RETRY = (Fallback.MIGRATION_FAILED, Fallback.RECOVERY_FAILED)
"""A request whose transfer to the node failed is not moved again."""


class Job(enum.IntEnum):
    """What a request's current job is."""

    GPU = 1
    """Its whole context on the GPU."""
    PNM_PREFILL = 2
    """A PNM-tier request's prefill: its prompt's KV on the GPU, one token."""
    PNM_RESIDENT = 3
    """A PNM-tier request decoding: the GPU holds its resident tokens."""


class Admit(enum.IntEnum):
    """How an admitted job gets its KV."""

    PREFILL = 1
    """A new request: its prompt is prefilled (and its first token made)."""
    RECOMPUTE = 2
    """A preempted request: the KV it held is computed again, then it decodes."""
    RESIDENT = 3
    """A resident job: its window and centroids came with the prefill or the transfer."""


@dataclass(eq=False)
class Seq:
    """A request as the scheduler sees it (``request.Request`` adds its tensors)."""

    rid: int
    prompt: list[int]
    max_new: int
    generated: list[int] = field(default_factory=list)
    tier: Tier = Tier.GPU
    """Where its attention runs; a request moves back only while it recovers KV the node
    lost."""
    status: SeqState = SeqState.WAITING
    fallback: Fallback = Fallback.NONE
    """Why a request routed to the PNM tier is on the GPU."""
    note: str = ""
    """Why it failed or fell back, in words, for people (control flow reads ``fallback``)."""
    migrated: bool = False
    """It started on the GPU and moved to the PNM tier while decoding."""
    preemptions: int = 0
    transfer: Transfer | None = None
    """A background transfer of its KV to the node under way."""
    job: Job = Job.GPU
    job_base: int = 0
    """Prompt tokens of its current job."""
    job_start: int = 0
    """Tokens it had generated when its current job started."""
    computed: int = 0
    """Tokens of its current job whose KV is on the GPU."""

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.generated)

    @property
    def job_tokens(self) -> int:
        """Its current job's prompt and generated tokens."""
        return self.job_base + len(self.generated) - self.job_start


@dataclass
class StepPlan:
    """What one step runs."""

    decodes: list[Seq] = field(default_factory=list)
    """Running requests that decode one token, in order."""
    admitted: list[tuple[Seq, Admit]] = field(default_factory=list)
    """Waiting requests admitted this step, in order, with how their KV comes."""
    preempted: list[Seq] = field(default_factory=list)
    """Requests preempted this step (their GPU KV freed; to be recomputed)."""

    @property
    def token_makers(self) -> list[Seq]:
        """Requests that decode a token in this step's batch (a prefill makes its own)."""
        return self.decodes + [s for s, how in self.admitted if how is not Admit.PREFILL]


class DecodeScheduler:
    """Routing, admission, KV blocks, preemption and migration choices of the co-simulation."""

    def __init__(self, router: Router, migration: MigrationPolicy, kv: KvBlocks, kept: int,
                 compression: float, pnm: bool = True) -> None:
        self.router, self.policy, self.kv = router, migration, kv
        self.kept, self.compression = kept, compression
        self.pnm = pnm
        """A PNM node is there to send long requests to."""
        self.requests: list[Seq] = []
        self.running: list[Seq] = []
        self.waiting: deque[Seq] = deque()
        self._ending: list[Seq] = []
        """Prefill jobs of the admissions made outside a step, ended when the next step is
        planned (the step they belong to ends there)."""

    # -- admission -----------------------------------------------------------------------------
    def add(self, seq: Seq) -> list[Seq]:
        """Route a new request and queue it; the requests admitted now (prefills outside a
        step, as the serving emulator's first step admits what arrived before it): this one
        if nothing queued before it waits and its prompt's blocks fit."""
        if self.router.past(len(seq.prompt)):
            if self.pnm:
                seq.tier, seq.job = Tier.PNM, Job.PNM_PREFILL
            else:
                seq.fallback = Fallback.NO_NODE
                seq.note = "no PNM node: long request kept on the GPU"
        seq.job_base = len(seq.prompt)
        self.requests.append(seq)
        waiting_new = any(s.job is not Job.PNM_RESIDENT for s in self.waiting)
        self.waiting.append(seq)
        if waiting_new or not self.kv.admit(seq, seq.job_tokens):
            return []
        self.waiting.remove(seq)
        self._run(seq)
        self._ending.append(seq)
        return [seq]

    def prefilled(self, seq: Seq) -> bool:
        """A request admitted by ``add`` has its first token; True if that finished it."""
        if len(seq.generated) < seq.max_new:
            return False
        seq.status = SeqState.DONE
        self._drop(seq)
        self._ending.remove(seq)
        return True

    def end_outside_step(self) -> bool:
        """End the jobs of the admissions made outside a step (PNM-tier prefills hand over to
        their resident jobs), as a step's end would; True if there were any (the caller then
        does what follows a step: the migration check)."""
        if not self._ending:
            return False
        self._end_jobs(self._ending)
        self._ending = []
        return True

    def stay_on_gpu(self, seq: Seq, why: Fallback, note: str) -> None:
        """A PNM-tier prefill whose offload failed: it goes on as a GPU job, holding its KV."""
        seq.tier, seq.fallback, seq.note = Tier.GPU, why, note
        if seq.job is Job.PNM_PREFILL:
            seq.job = Job.GPU

    def _run(self, seq: Seq) -> None:
        seq.status = SeqState.RUNNING
        seq.computed = seq.job_tokens
        self.running.append(seq)

    # -- one step ------------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        """The next step's plan (empty when nothing is left)."""
        plan = StepPlan()
        self.end_outside_step()
        running = self.running
        i = 0
        while i < len(running):
            seq = running[i]
            victims = self.kv.grow(seq, seq.computed + 1, running)
            for v in victims:
                self._preempt(v, plan)
            if seq.status is not SeqState.RUNNING:
                break
            seq.computed += 1
            plan.decodes.append(seq)
            i += 1
        if not plan.preempted:
            while self.waiting:
                seq = self.waiting[0]
                if not self.kv.admit(seq, seq.job_tokens):
                    break
                self.waiting.popleft()
                how = (Admit.RESIDENT if seq.job is Job.PNM_RESIDENT
                       else Admit.RECOMPUTE if seq.generated else Admit.PREFILL)
                self._run(seq)
                plan.admitted.append((seq, how))
        return plan

    def _preempt(self, seq: Seq, plan: StepPlan) -> None:
        """Recompute preemption: its blocks are freed (by ``KvBlocks.grow``), it waits at the
        front; a transfer under way is abandoned."""
        seq.status = SeqState.WAITING
        seq.computed = 0
        seq.preemptions += 1
        seq.transfer = None
        self.waiting.appendleft(seq)
        plan.preempted.append(seq)
        log.info("request %d preempted (GPU KV full)", seq.rid)

    def finish(self, plan: StepPlan) -> list[Seq]:
        """After the step ran (every token maker has its token): finished and failed requests
        free their blocks, prefill jobs of PNM-tier requests end. The requests that finished."""
        made = plan.decodes + [s for s, _ in plan.admitted]
        return self._end_jobs(made)

    def _end_jobs(self, seqs: list[Seq]) -> list[Seq]:
        done = []
        for seq in seqs:
            if seq.status is not SeqState.RUNNING:
                continue
            if len(seq.generated) >= seq.max_new:
                seq.status = SeqState.DONE
                done.append(seq)
            elif seq.job is Job.PNM_PREFILL:  # its resident job goes first
                self._requeue_resident(seq)
                continue
            else:
                continue
            self._drop(seq)
        failed = [s for s in self.running if s.status is SeqState.FAILED]
        for seq in failed:
            self._drop(seq)
        return done

    def _drop(self, seq: Seq) -> None:
        self.kv.release(seq)
        self.running.remove(seq)

    def _requeue_resident(self, seq: Seq) -> None:
        """Its GPU job ends; a resident job of what the GPU keeps waits at the front."""
        self._drop(seq)
        seq.status = SeqState.WAITING
        seq.job = Job.PNM_RESIDENT
        seq.job_base = resident_tokens(seq.length, self.kept, self.compression)
        seq.job_start = len(seq.generated)
        seq.computed = 0
        self.waiting.appendleft(seq)

    # -- transfers -----------------------------------------------------------------------------
    def busy(self) -> bool:
        """A transfer is on the link (one at a time)."""
        return any(s.transfer is not None for s in self.requests)

    def choose_migration(self) -> Seq | None:
        """The running GPU-tier request to migrate now, by the migration policy, or None
        (never without a capacity or a node)."""
        if self.kv.total is None or not self.pnm:
            return None
        cands = ((s.length, s) for s in self.running
                 if s.tier is Tier.GPU and s.transfer is None and s.fallback not in NO_RETRY)
        chosen = self.policy.choose(self.router, self.busy(), self.kv.used(), self.kv.total,
                                    cands)
        return None if chosen is None else chosen[1]

    def transfer_started(self, seq: Seq, kind: Transfer) -> None:
        seq.transfer = kind

    def transfer_failed(self, seq: Seq, kind: Transfer, note: str) -> None:
        """Its KV stays whole on the GPU; it is not moved again."""
        seq.transfer = None
        seq.fallback = (Fallback.MIGRATION_FAILED if kind is Transfer.MIGRATION
                        else Fallback.RECOVERY_FAILED)
        seq.note = note

    def transfer_done(self, seq: Seq) -> None:
        """The node holds its KV: its GPU job ends, its resident job waits at the front."""
        kind, seq.transfer = seq.transfer, None
        seq.tier = Tier.PNM
        seq.migrated |= kind is Transfer.MIGRATION
        if seq.status is SeqState.RUNNING:
            self._requeue_resident(seq)

    def recovered(self, seq: Seq) -> list[Seq]:
        """The node lost its KV and the GPU recomputed the whole context: it is a GPU job
        again (until its KV is back on the node); the blocks it now needs may preempt the
        newest running requests (itself among them). The preempted."""
        seq.tier, seq.job = Tier.GPU, Job.GPU
        seq.job_base, seq.job_start = len(seq.prompt), 0
        if seq.status is not SeqState.RUNNING:
            return []
        seq.computed = seq.length - 1
        plan = StepPlan()
        for v in self.kv.grow(seq, seq.computed, self.running):
            self._preempt(v, plan)
        return plan.preempted

    def blocks_to_grow(self, tokens: int) -> int:
        """KV blocks that hold what runs and waits now once each has grown by ``tokens``
        (PNM-tier requests by their resident jobs), the null block among them."""
        total = 1
        for s in self.running + list(self.waiting):
            held = (resident_tokens(s.length, self.kept, self.compression)
                    if s.tier is Tier.PNM and s.job is Job.PNM_PREFILL else s.job_tokens)
            total += self.kv.blocks(held + tokens)
        return total

    def set_capacity(self, blocks: int) -> None:
        """Give the emulated GPU ``blocks`` KV blocks from now on (what is held stays)."""
        used = self.kv.used()
        if blocks < used:
            raise ValueError(f"{blocks} KV blocks cannot hold the {used} in use")
        self.kv.total = blocks
        self.kv.free = blocks - used

    def unfinished(self) -> bool:
        return bool(self.running or self.waiting)
