"""Runs of pure decode steps for our scheduler, taken many at a time.

Between events (an arrival, a finish, a preemption, an admission, a sample, a migration) every
running job of our scheduler decodes one token per step and nothing else changes but contexts
and blocks. ``steady_steps`` says how many such steps lie ahead as far as the scheduler can see
(every job has sampled a token, so none samples its first; no job finishes; every block it
will need is free; the waiting queue's head stays blocked: free blocks only fall in such a
run, so a head that does not fit now does not fit later), and ``advance`` applies them in one
go, with the blocks stepping would have allocated (the blocks filled are cached when a job is
freed). The replay
prices the steps one by one from sums (a few operations each) and stops at its own events, so a
run gives bit for bit what stepping gives.
"""

from __future__ import annotations

from nelssa.emu.policy.v1_scheduler import Status, V1Scheduler, _Job

_RUNNING = Status.RUNNING


def _first_alloc(job: _Job, bt: int) -> int:
    """The step of the run (1-based) at which ``job`` next takes a block: step ``i`` computes
    token ``computed + i`` of it."""
    return (-job.computed) % bt + 1


def allocations(sched: V1Scheduler, k: int) -> int:
    """Blocks the running jobs take in the first ``k`` steps of a run."""
    bt = sched.bt
    total = 0
    for job in sched.running:
        i0 = (-job.computed) % bt + 1  # (_first_alloc, inlined)
        if k >= i0:
            total += (k - i0) // bt + 1
    return total


def _head_blocked(sched: V1Scheduler) -> bool:
    if not sched.waiting:
        return True
    if len(sched.running) >= sched.max_running or sched.budget - len(sched.running) <= 0:
        return True
    job = sched.waiting[0]
    memo = sched.head_memo
    if memo is not None and memo[1] is job and memo[0] == sched.epoch:
        # blocked when the runs since began, and a run only takes free blocks: the blocks it
        # needs less its hits (fewer, once their keys are evicted) plus its free hits grow
        # at least as fast as the free blocks fall
        return True
    hits: list[int] = []
    evictable = 0
    if not job.swapped and sched.pool is not None:
        assert job.keys is not None
        hits, evictable = sched.pool.lookup(job.keys, (job.num_tokens - 1) // sched.bt)
    blocked = sched._blocks(job.num_tokens) - len(hits) + evictable > sched._free()
    if blocked:
        sched.head_memo = (sched.epoch, job)
    return blocked


def steady_steps(sched: V1Scheduler, limit: int) -> int:
    """Most steps (at most ``limit``) of pure decode ahead; 0 when the next step is not one."""
    running = sched.running
    if not running or len(running) > sched.budget:
        return 0
    newest = running[-1]  # the one most likely still in prefill
    if newest.computed != newest.num_tokens - 1:
        return 0
    k = limit
    running_ = _RUNNING
    for job in running:
        c = job.computed
        # a decode follows a token sampled (a prefill cut one token short samples its first)
        if c != job.num_tokens - 1 or c < job.prompt or job.status is not running_:
            return 0
        left = job.last - c  # steps before the one that finishes it
        if left < k:
            k = left
    if k < 1 or not _head_blocked(sched):
        return 0
    free = sched._free()
    if allocations(sched, k) > free:  # the most steps whose blocks all fit
        lo, hi = 0, k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if allocations(sched, mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        k = lo
    return k


def alloc_per_step(sched: V1Scheduler, k: int) -> list[int]:
    """Blocks taken at each step 1..k of a run (for the KV use the replay watches)."""
    per = [0] * (k + 1)
    bt = sched.bt
    for job in sched.running:
        for i in range(_first_alloc(job, bt), k + 1, bt):
            per[i] += 1
    return per


def advance(sched: V1Scheduler, k: int) -> None:
    """Apply ``k`` steps of pure decode (``steady_steps`` said they are)."""
    bt = sched.bt
    pool = sched.pool
    running = sched.running
    if pool is None:
        for job in running:
            i0 = (-job.computed) % bt + 1  # _first_alloc
            if k >= i0:
                n = (k - i0) // bt + 1
                job.nblocks += n
                sched.free -= n
            job.computed += k
            job.num_tokens += k
        return
    # freshly allocated blocks are alike (no key, one reference), and nothing is freed or
    # touched inside a run: one allocation of them all takes the blocks, and evicts the cached
    # ones, that stepping would have, in the same order
    counts = [(k - i0) // bt + 1 if k >= i0 else 0
              for i0 in [(-job.computed) % bt + 1 for job in running]]
    total = sum(counts)
    got = pool.allocate(total) if total else []
    at = 0
    for job, n in zip(running, counts, strict=True):
        if n:
            job.blocks += got[at:at + n]
            job.nblocks += n
            at += n
        job.computed += k
        job.num_tokens += k  # the blocks filled are cached when the job is freed
