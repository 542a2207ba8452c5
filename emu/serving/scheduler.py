"""The scheduler interface of the serving emulator, and our scheduler behind it.

A replay (``replay.py``) hands jobs to a scheduler and asks it, step after step, what to run; it
costs the step and tells the scheduler which jobs produced a token. Two schedulers sit behind the
interface: vLLM's own v1 Scheduler (``vllm_sched.py``, in the vLLM environment) and ours, which
follows vLLM v1's algorithm so that it can stand in for it at a fraction of the cost:

- running jobs first, in order: each asks for the rest of its prefill (or one decode token) within
  the step's token budget; when its blocks do not fit, the newest running job is preempted
  (recompute: its blocks freed, its computed tokens forgotten, back to the front of the waiting
  queue) until they fit or it was itself the newest;
- then, if nothing was preempted this step, waiting jobs in FCFS order while the budget and
  ``max_running`` allow: the longest cached prefix is taken from the prefix cache, the whole
  sequence must fit in the free blocks (vLLM's ``scheduler_reserve_full_isl``), and blocks are
  allocated for the chunk scheduled now; the head that does not fit blocks the queue;
- a job whose computed tokens reach its token count samples a token; it finishes at
  ``max_tokens`` and frees its blocks (cached blocks stay in the prefix cache until evicted).

Where ours goes beyond vLLM v1: swap preemption (the job's KV kept in host memory and brought
back over PCIe when it is admitted again).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from nelssa.emu.serving.prefix import BlockKeys, BlockPool, Content

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """What a scheduler is given: one vLLM request."""

    jid: str
    prompt_tokens: int
    max_tokens: int
    content: Content


@dataclass
class Planned:
    jid: str
    start: int
    """Tokens computed before this step (the chunk attends to them)."""
    tokens: int


@dataclass
class StepPlan:
    """What one step runs."""

    scheduled: list[Planned] = field(default_factory=list)
    preempted: list[tuple[str, int]] = field(default_factory=list)
    """Jobs preempted this step, with the tokens they held (to be computed again)."""
    swap_in_tokens: int = 0
    prefix_hit_tokens: int = 0
    """Tokens of newly admitted jobs found in the prefix cache."""


class Scheduler(Protocol):
    """What a replay needs of a scheduler."""

    def add(self, spec: JobSpec, front: bool = False) -> None:
        """Queue a job, at the back of the waiting queue or (a request already in service
        that continues as a new job) at its front."""
        ...

    def schedule(self) -> StepPlan: ...

    def update(self, plan: StepPlan) -> list[tuple[str, bool]]:
        """Jobs of ``plan`` that sampled a token, each with whether it finished."""
        ...

    def abort(self, jid: str) -> None: ...

    def used_blocks(self) -> int: ...

    def counts(self) -> tuple[int, int]:
        """Running and waiting jobs."""
        ...


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"


@dataclass(eq=False)
class _Job:
    spec: JobSpec
    keys: BlockKeys | None
    computed: int = 0
    outputs: int = 0
    blocks: list[int] = field(default_factory=list)
    nblocks: int = 0
    status: Status = Status.WAITING
    swapped: int = 0
    """Computed tokens held in host memory after a swap preemption."""

    @property
    def num_tokens(self) -> int:
        return self.spec.prompt_tokens + self.outputs


class OurScheduler:
    """vLLM v1's scheduling algorithm over a block count (or, with prefix caching, a block
    pool of vLLM's kind)."""

    def __init__(self, blocks: int, block_tokens: int, max_running: int, max_batched_tokens: int,
                 prefix_caching: bool = False, swap: bool = False) -> None:
        self.total = blocks
        self.bt = block_tokens
        self.max_running = max_running
        self.budget = max_batched_tokens
        self.swap = swap
        self.pool = BlockPool(blocks) if prefix_caching else None
        self.free = blocks - 1  # without a pool (vLLM's null block is never free)
        self.jobs: dict[str, _Job] = {}
        self.running: list[_Job] = []
        self.waiting: deque[_Job] = deque()

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.bt)

    def _free(self) -> int:
        return self.free if self.pool is None else self.pool.free_blocks()

    def add(self, spec: JobSpec, front: bool = False) -> None:
        keys = (spec.content.block_keys(spec.prompt_tokens, self.bt) if self.pool is not None
                else None)
        job = _Job(spec, keys)
        self.jobs[spec.jid] = job
        if front:
            self.waiting.appendleft(job)
        else:
            self.waiting.append(job)

    def counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    def used_blocks(self) -> int:
        return self.total - self._free()

    def _grow(self, job: _Job, tokens: int) -> None:
        """Give ``job`` the blocks for ``tokens`` (they are known to fit)."""
        need = self._blocks(tokens) - job.nblocks
        if need > 0:
            if self.pool is None:
                self.free -= need
            else:
                job.blocks += self.pool.allocate(need)
            job.nblocks += need
        if self.pool is not None:
            assert job.keys is not None
            self.pool.cache(job.blocks, job.keys, 0, min(tokens, job.num_tokens) // self.bt)

    def _release(self, job: _Job) -> None:
        if self.pool is None:
            self.free += job.nblocks
        else:
            self.pool.release(job.blocks)
            job.blocks = []
        job.nblocks = 0

    def _preempt(self, job: _Job, plan: StepPlan) -> None:
        plan.preempted.append((job.spec.jid, job.num_tokens))
        self._release(job)
        if self.swap:
            job.swapped = job.computed
        job.computed = 0
        job.status = Status.PREEMPTED
        self.waiting.appendleft(job)

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.budget
        i = 0
        while i < len(self.running) and budget > 0:
            job = self.running[i]
            n = min(job.num_tokens - job.computed, budget)
            while self._blocks(job.computed + n) - job.nblocks > self._free():
                victim = self.running.pop()
                self._preempt(victim, plan)
                if victim is job:
                    break
            if job.status is not Status.RUNNING:
                break
            self._grow(job, job.computed + n)
            plan.scheduled.append(Planned(job.spec.jid, job.computed, n))
            budget -= n
            i += 1
        if not plan.preempted:
            while self.waiting and budget > 0 and len(self.running) < self.max_running:
                job = self.waiting[0]
                hits: list[int] = []
                computed = 0
                evictable = 0
                if job.swapped:
                    computed = job.swapped
                elif self.pool is not None:
                    assert job.keys is not None
                    hits = self.pool.hits(job.keys, (job.num_tokens - 1) // self.bt)
                    computed = len(hits) * self.bt
                    evictable = sum(1 for b in hits if self.pool.ref[b] == 0)
                n = min(job.num_tokens - computed, budget)
                if self._blocks(job.num_tokens) - len(hits) + evictable > self._free():
                    break  # the whole sequence must fit
                self.waiting.popleft()
                if self.pool is not None:
                    self.pool.touch(hits)
                    job.blocks, job.nblocks = hits, len(hits)
                job.computed = computed
                self._grow(job, computed + n)
                if job.swapped:
                    plan.swap_in_tokens += job.swapped
                    job.swapped = 0
                else:
                    plan.prefix_hit_tokens += computed
                job.status = Status.RUNNING
                self.running.append(job)
                plan.scheduled.append(Planned(job.spec.jid, computed, n))
                budget -= n
        for p in plan.scheduled:
            self.jobs[p.jid].computed += p.tokens
        return plan

    def update(self, plan: StepPlan) -> list[tuple[str, bool]]:
        out = []
        done = set()
        for p in plan.scheduled:
            job = self.jobs[p.jid]
            if job.computed < job.num_tokens:
                continue  # a prefill chunk short of the end
            job.outputs += 1
            finished = job.outputs >= job.spec.max_tokens
            out.append((p.jid, finished))
            if finished:
                self._release(job)
                del self.jobs[p.jid]
                done.add(p.jid)
        if done:
            self.running = [j for j in self.running if j.spec.jid not in done]
        return out

    def abort(self, jid: str) -> None:
        job = self.jobs.pop(jid)
        self._release(job)
        if job.status is Status.RUNNING:
            self.running.remove(job)
        else:
            self.waiting.remove(job)
