"""The project's implementation of vLLM v1's scheduling algorithm (``schedule.JobScheduler``), the
one the serving emulator and the co-simulation use unless vLLM's own is asked for; it follows
vLLM's so closely that it stands in for it at a fraction of the cost:

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

As in vLLM, block 0 is the null block (``blocks - 1`` to hand out, ``used_blocks`` counts it),
the longest prefix hit stops one token short of the job's tokens, a full block is cached when
it is scheduled (prompt and generated tokens alike; the blocks a job fills as it decodes hold
its own tokens, which only it can hit, once it has been freed, so ours caches them when it is
freed) and the gate counts hits that are free as blocks to take. Left out, as they are
inactive in the replays' configuration: the watermark, ``long_prefill_token_threshold``,
``max_model_len`` caps, speculative decoding, connectors and partial-block hits (the hash block
is the block). vLLM reports a step's preempted requests as
a set; ours lists them in preemption order.

Where ours goes beyond vLLM v1: swap preemption (the job's KV kept in host memory and brought
back over PCIe when it is admitted again).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from operator import attrgetter

from nelssa.emu.policy.capacity import blocks_for
from nelssa.emu.policy.prefix import BlockKeys, BlockPool
from nelssa.emu.policy.schedule import JobSpec, Planned, StepPlan

log = logging.getLogger(__name__)


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"


_WAITING, _RUNNING, _PREEMPTED = Status.WAITING, Status.RUNNING, Status.PREEMPTED


class _Job:
    """A job in our scheduler (``outputs`` is derived: ``num_tokens`` is what the hot loop
    reads)."""

    __slots__ = ("blocks", "computed", "jid", "keys", "last", "max_tokens", "nblocks",
                 "num_tokens", "prompt", "spec", "status", "swapped")

    def __init__(self, spec: JobSpec, keys: BlockKeys | None) -> None:
        self.spec = spec
        self.jid = spec.jid
        self.max_tokens = spec.max_tokens
        self.keys = keys
        self.computed = 0
        self.prompt = spec.prompt_tokens
        self.last = spec.prompt_tokens + spec.max_tokens - 2
        """Computed tokens from which a decode step finishes it."""
        self.num_tokens = spec.prompt_tokens
        """Prompt and generated tokens."""
        self.blocks: list[int] = []
        """Its blocks in the pool (with prefix caching)."""
        self.nblocks = 0
        self.status = _WAITING
        self.swapped = 0
        """Computed tokens held in host memory after a swap preemption."""

    @property
    def outputs(self) -> int:
        """Tokens generated."""
        return self.num_tokens - self.prompt

    @outputs.setter
    def outputs(self, n: int) -> None:
        self.num_tokens = self.prompt + n


_JID = attrgetter("jid")


class V1Scheduler:
    """vLLM v1's scheduling algorithm over a block count (or, with prefix caching, a block
    pool of vLLM's kind). Like vLLM's, the pool's block 0 is a null block that is never free.

    With ``aggregate`` (the default) the running jobs' decodes that lead a step (all of them
    but a prefill at the end, in the usual step) are taken in one tight pass and listed in
    ``StepPlan.decodes``, their blocks allocated in one go; without it every job goes through
    the general pass (the reference the tests hold the aggregate to)."""

    def __init__(self, blocks: int, block_tokens: int, max_running: int, max_batched_tokens: int,
                 prefix_caching: bool = False, swap: bool = False, aggregate: bool = True) -> None:
        self.total = blocks
        self.bt = block_tokens
        self.max_running = max_running
        self.budget = max_batched_tokens
        self.swap = swap
        self.aggregate = aggregate
        self.pool = BlockPool(blocks) if prefix_caching else None
        self.free = blocks - 1  # without a pool (vLLM's null block is never free)
        self.jobs: dict[str, _Job] = {}
        self.running: list[_Job] = []
        self.waiting: deque[_Job] = deque()
        self._plan: StepPlan | None = None
        self._planned: list[_Job] = []
        """The jobs of the last plan's ``scheduled``, in its order."""
        self._decoding: list[_Job] = []
        """The jobs of the last plan's ``decodes``."""
        self.epoch = 0
        """Bumped by every change of its state but a run of pure decode steps'
        (``fastpath.advance``, which only takes free blocks): a memo of what the state
        decides holds while it stands."""
        self.head_memo: tuple[int, _Job] | None = None
        """(epoch, head): the waiting queue's head found blocked then (``fastpath``); taking
        free blocks never unblocks it."""

    def _blocks(self, tokens: int) -> int:
        return blocks_for(tokens, self.bt)

    def _free(self) -> int:
        pool = self.pool
        return self.free if pool is None else len(pool.uncached) + pool.evictable

    def add(self, spec: JobSpec, front: bool = False) -> None:
        self.epoch += 1
        keys = (spec.content.block_keys(spec.prompt_tokens, self.bt) if self.pool is not None
                else None)
        job = _Job(spec, keys)
        self.jobs[spec.jid] = job
        if front:
            self.waiting.appendleft(job)
        else:
            self.waiting.append(job)

    def set_budget(self, tokens: int) -> None:
        self.epoch += 1
        self.budget = tokens

    def set_blocks(self, blocks: int) -> None:
        """The GPU holds ``blocks`` KV blocks from now on (what is held stays); without prefix
        caching."""
        self.epoch += 1
        used = self.used_blocks()
        if self.pool is not None:
            raise ValueError("the block pool of prefix caching is fixed when it starts")
        if blocks < used:
            raise ValueError(f"{blocks} KV blocks cannot hold the {used} in use")
        self.free += blocks - self.total
        self.total = blocks

    def counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    def used_blocks(self) -> int:
        return self.total - self._free()

    def _release(self, job: _Job) -> None:
        pool = self.pool
        if pool is None:
            self.free += job.nblocks
        else:
            keys = job.keys
            assert keys is not None
            full = job.computed // self.bt
            if full > keys.ncached:  # the blocks it filled decoding
                pool.cache(job.blocks, keys, keys.ncached, full)
            pool.release(job.blocks, keys)
            job.blocks = []
        job.nblocks = 0

    def _preempt(self, job: _Job, plan: StepPlan) -> None:
        plan.preempted.append((job.jid, job.num_tokens))
        self._release(job)
        if self.swap:
            job.swapped = job.computed
        job.computed = 0
        job.status = _PREEMPTED
        self.waiting.appendleft(job)

    def _decodes(self, plan: StepPlan) -> int:
        """The leading running jobs that decode (one token each, after one they sampled), in one
        pass: those that go on into ``plan.decodes``, those that finish with it into
        ``plan.scheduled``; the blocks they start taken in one allocation (fresh blocks are
        alike; those they fill are cached when they are freed). Stops at the first job that
        does not decode, or whose block does not fit (the general pass preempts for it); the
        jobs taken."""
        running = self.running
        bt = self.bt
        pool = self.pool
        avail = self._free()
        top = min(len(running), self.budget)
        starting: list[_Job] = []
        going: list[_Job] = []
        scheduled, planned = plan.scheduled, self._planned
        go = going.append
        i = 0
        for job in running[:top]:
            c = job.computed
            if c != job.num_tokens - 1 or c < job.prompt:  # a prefill, or its last token
                break
            if not c % bt:
                if not avail:
                    break
                avail -= 1
                starting.append(job)
            job.computed = c + 1
            if c >= job.last:  # it finishes with this token
                scheduled.append(Planned(job.jid, c, 1))
                planned.append(job)
            else:
                go(job)
            i += 1
        if starting:
            if pool is None:
                self.free -= len(starting)
                for job in starting:
                    job.nblocks += 1
            else:
                for job, b in zip(starting, pool.allocate(len(starting)), strict=True):
                    job.blocks.append(b)
                    job.nblocks += 1
        self._decoding = going
        plan.decodes = list(map(_JID, going))
        return i

    def schedule(self) -> StepPlan:
        self.epoch += 1
        plan = StepPlan()
        scheduled = plan.scheduled
        planned: list[_Job] = []
        self._plan, self._planned = plan, planned
        budget = self.budget
        bt = self.bt
        pool = self.pool
        running = self.running
        i = self._decodes(plan) if self.aggregate else 0
        budget -= i
        while i < len(running) and budget > 0:
            job = running[i]
            start = job.computed
            n = job.num_tokens - start
            if n > budget:
                n = budget
            end = start + n
            need = (end + bt - 1) // bt - job.nblocks
            if need > 0:
                while need > self._free():
                    victim = running.pop()
                    self._preempt(victim, plan)
                    if victim is job:
                        break
                if job.status is not _RUNNING:
                    break
                if pool is None:
                    self.free -= need
                else:
                    job.blocks += pool.allocate(need)
                job.nblocks += need
            if pool is not None:
                keys = job.keys
                assert keys is not None
                if end // bt > keys.ncached:
                    pool.cache(job.blocks, keys, keys.ncached, end // bt)
            scheduled.append(Planned(job.jid, start, n))
            planned.append(job)
            job.computed = end
            budget -= n
            i += 1
        if not plan.preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < self.max_running:
                job = waiting[0]
                hits: list[int] = []
                computed = 0
                evictable = 0
                if job.swapped:
                    computed = job.swapped
                elif pool is not None:
                    assert job.keys is not None
                    hits, evictable = pool.lookup(job.keys, (job.num_tokens - 1) // bt)
                    computed = len(hits) * bt
                n = job.num_tokens - computed
                if n > budget:
                    n = budget
                if (job.num_tokens + bt - 1) // bt - len(hits) + evictable > self._free():
                    break  # the whole sequence must fit
                waiting.popleft()
                end = computed + n
                need = (end + bt - 1) // bt - len(hits)
                if pool is None:
                    self.free -= need
                else:
                    pool.touch(hits)
                    hits += pool.allocate(need)
                    job.blocks = hits
                    keys = job.keys
                    assert keys is not None
                    keys.ncached = 0 if job.swapped else computed // bt
                    pool.cache(hits, keys, keys.ncached, end // bt)
                job.nblocks = (end + bt - 1) // bt
                if job.swapped:
                    plan.swap_in_tokens += job.swapped
                    job.swapped = 0
                else:
                    plan.prefix_hit_tokens += computed
                job.status = _RUNNING
                running.append(job)
                scheduled.append(Planned(job.jid, computed, n))
                planned.append(job)
                job.computed = end
                budget -= n
        return plan

    def update(self, plan: StepPlan) -> list[tuple[str, bool]]:
        self.epoch += 1
        if plan is self._plan:
            jobs = self._planned
            for job in self._decoding:
                job.num_tokens += 1
        else:
            jobs = [self.jobs[p.jid] for p in plan.scheduled]
            for jid in plan.decodes:
                self.jobs[jid].num_tokens += 1
        out = []
        done = False
        for job in jobs:
            if job.computed < job.num_tokens:
                continue  # a prefill chunk short of the end
            job.num_tokens += 1
            finished = job.num_tokens - job.prompt >= job.max_tokens
            out.append((job.jid, finished))
            if finished:
                self._release(job)
                del self.jobs[job.jid]
                job.status = Status.WAITING  # gone: marks it for removal from running
                done = True
        if done:
            self.running = [j for j in self.running if j.status is _RUNNING]
        self._plan = None
        return out

    def abort(self, jid: str) -> None:
        self.epoch += 1
        job = self.jobs.pop(jid)
        self._release(job)
        if job.status is _RUNNING:
            self.running.remove(job)
        else:
            self.waiting.remove(job)
