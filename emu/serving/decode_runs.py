"""A replay's runs of pure decode steps (``Replay``, ``replay.py``): between events every
running job decodes a token a step and nothing else changes (``fastpath.py`` says how many such
steps lie ahead), so a run is priced step by step from sums, a few operations a step, and taken
in one go: its blocks, its activity, its jobs' tokens. A fleet's instance plans a run and the
fleet settles it, whole or cut where an arrival dispatched to the instance finds it."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nelssa.emu.policy.jobs import JobKind
from nelssa.emu.serving import fastpath
from nelssa.emu.serving.pnm_nodes import PnmNode, place, pnm_terms, terms_max

if TYPE_CHECKING:
    from nelssa.emu.policy.v1_scheduler import V1Scheduler
    from nelssa.emu.serving.cost import CostModel
    from nelssa.emu.serving.fabric import SwitchPort
    from nelssa.emu.serving.results import RunResult


class DecodeRuns:
    """The runs of pure decode steps of ``Replay``, which holds the state they read."""

    fast: V1Scheduler | None
    jobs: dict[str, Any]
    cost: CostModel
    out: RunResult
    port: SwitchPort | None
    now: float
    horizon: float
    lazy: bool
    contended: bool
    work_left: int
    run_jobs: list[Any]
    run_times: list[float]
    arrivals: list[Any]
    live: list[Any]
    _node_priced: bool
    _loaded: set[PnmNode]
    _pending: tuple[list[float], int] | None
    _run_work: tuple[Any, ...]

    if TYPE_CHECKING:
        cfg: Any
        sim: Any
        router: Any
        nodes: list[PnmNode]

        def _decoding_gpu_requests(self) -> Iterator[tuple[int, Any]]: ...

        def _after_step(self, made: int) -> None: ...

    def _book(self, sums: list[tuple[PnmNode, int, int]], ahead: int, step_s: float) -> None:
        """Its offered load on each node, from a step of ``step_s`` (the others' slowdown)."""
        key = id(self)
        now = {n for n, _, _ in sums}
        gone = self._loaded - now
        if gone:
            for n in gone:
                n.set_load(key, 0.0)
        positive = step_s > 0
        for n, c, k in sums:
            # (CostModel.pnm_attn_s from the node's copy of its slope; PnmNode.set_load
            # inlined: every planned run of a fleet's instance books each of its nodes)
            rho = (c + ahead * k) * n.s_per_token / step_s if positive else 0.0
            load = n.load
            old = load.get(key, 0.0)
            if rho != old:
                load[key] = rho
                n.load_sum += rho - old
        self._loaded = now

    def _decode_run(self, next_sample: float) -> int:
        """Take the pure decode steps ahead, up to the first event this replay watches (an
        arrival, a sample, a migration that starts or ends); the number taken, 0 if none."""
        sched = self.fast
        assert sched is not None
        k_max = fastpath.steady_steps(sched, 4096)
        if k_max < 2:
            return 0
        gpu_n = gpu_ctx0 = pnm_ctx0 = 0
        pnm: list[int] = []
        sums: dict[PnmNode, list[int]] | None = {} if self._node_priced else None
        jobs, resident = self.jobs, JobKind.PNM_RESIDENT
        self.run_jobs = run_jobs = []
        keep = run_jobs.append
        for j in sched.running:
            job = jobs[j.jid]
            keep(job)
            if job.kind is resident:
                rq = job.rq
                ctx = rq.req.input_len + rq.generated
                pnm.append(ctx)
                if sums is not None:  # each node's [sum, how many] (pnm_terms' sums)
                    s = sums.get(rq.node)
                    if s is None:
                        sums[rq.node] = [ctx, 1]
                    else:
                        s[0] += ctx
                        s[1] += 1
            else:
                gpu_n += 1
                gpu_ctx0 += j.computed
        pnm_n = len(pnm)
        pnm_ctx0 = sum(pnm)
        placed = (None if sums is None
                  else [(n, c, k) for n, (c, k) in sums.items()])
        w = self.cost.window_tokens
        window = growing = 0  # the windows' sum, those that still grow, and when they stop
        stops: dict[int, int] = {}
        short = []  # the contexts shorter than the window
        for x in pnm:
            if x < w:
                window += x
                growing += 1
                stops[w - x + 1] = stops.get(w - x + 1, 0) + 1
                short.append(x)
            else:
                window += w
        tokens = gpu_n + pnm_n
        watch = self.cfg.migration
        if watch:
            busy_until = min((rq.migrating_until for rq in self.live
                              if rq.migrating_until is not None), default=None)
            per_step = fastpath.alloc_per_step(sched, k_max)
            used = sched.used_blocks()
            policy, router, capacity = self.sim.migration, self.router, self.sim.gpu_blocks
            # the longest stays the longest in a run
            best = policy.longest(self._decoding_gpu_requests())
            can_start = (best is not None and busy_until is None and place(
                best[1].req.input_len + best[1].req.output_len, self.nodes) is not None)
        arrival = self.arrivals[0][0] if self.arrivals else math.inf
        if not self.lazy:  # a lazy run may pass the horizon: the fleet cuts it (settle)
            arrival = min(arrival, self.horizon)
        self.run_times = times = []
        """Each step's end (a lazy run is settled from them)."""
        now = self.now
        self._run_work = (self.now, tokens, gpu_n, gpu_ctx0, pnm_n, pnm_ctx0, short)
        k = 0
        key = id(self) if self.contended else None
        terms = None if placed is None else pnm_terms(placed, key, k_max)
        if self.port is not None and terms:  # the shared switch's wait, the same each step
            wait = self.port.wait_s(pnm_n, now)
            if wait:
                terms = [(c, n, p, f, t + wait) for c, n, p, f, t in terms]
        # step_agg_s inlined (CostModel.decode_run_terms): a call a step was a tenth of a
        # fleet's run
        base, s_kv, s_centroid, s_pnm, comm = self.cost.decode_run_terms(tokens, pnm_n)
        # the PNM tier's time of step i is one line, c1 + (i - 1) * k1 tokens of context at
        # p1 a token times f1 plus t1, in the common cases: one node's term, no PNM-tier
        # request (terms_max's 0.0), or priced on this model's devices (pnm_ctx * s_pnm +
        # comm: times 1.0 is exact); several nodes' terms are terms_max's
        many = terms if terms is not None and len(terms) > 1 else []
        p1 = f1 = t1 = 0.0
        c1 = k1 = 0
        if terms is None:
            c1, k1, p1, f1, t1 = pnm_ctx0, pnm_n, s_pnm, 1.0, comm
        elif len(terms) == 1:
            c1, k1, p1, f1, t1 = terms[0]
        order = sorted(stops) if stops else []
        si, nxt = 0, order[0] if order else 0
        step = 0.0
        # step i's sums, stepped on from step 1 (integers: the same as from i): GPU attention
        # context gpu_ctx0 + i * gpu_n + window, PNM context pnm_ctx0 + (i - 1) * pnm_n, and
        # the one line's c1 + (i - 1) * k1
        gpu_att = gpu_ctx0 + gpu_n + window
        pnm_ctx = pnm_ctx0
        c_one = c1
        until = arrival if arrival < next_sample else next_sample
        add = times.append
        for i in range(1, k_max + 1):
            t_pnm = terms_max(many, i - 1) if many else c_one * p1 * f1 + t1
            t_attn = gpu_att * s_kv
            step = base + pnm_ctx * s_centroid + (t_attn if t_attn >= t_pnm else t_pnm)
            now += step
            add(now)
            if now >= until:
                break
            if watch:
                used += per_step[i]
                if busy_until is not None and now >= busy_until:
                    break
                if (can_start and best is not None and policy.pressure(used, capacity)
                        and router.past(best[0] + i)):
                    break
            # on to step i + 1: the windows that still grow grow by a token
            gpu_att += gpu_n + growing
            pnm_ctx += pnm_n
            c_one += k1
            if i + 1 == nxt:
                growing -= stops[nxt]
                si += 1
                nxt = order[si] if si < len(order) else 0
        k = len(times)
        if self.port is not None:
            self.port.book(pnm_n, step)
        if self.lazy:
            if key is not None and placed is not None:  # its load while the run lasts
                self._book(placed, k - 1, step)
            self._pending = (times, len(sched.running))
            self.now = now  # tentative: settle may cut it
            return k
        self._take_run(k, now, placed, key, step)
        return k

    def _take_run(self, k: int, now: float, placed: Any, key: int | None,
                  step: float) -> None:
        """Take ``k`` planned pure decode steps, the last ending at ``now``."""
        sched = self.fast
        assert sched is not None
        fastpath.advance(sched, k)
        if key is not None and placed is not None:
            self._book(placed, k - 1, step)
        self._count_run(k, now)
        self.now = now
        self.out.steps += k
        self.out.peak_gpu_blocks = max(self.out.peak_gpu_blocks, sched.used_blocks())
        self.work_left -= k * len(sched.running)
        self._jobs_took(k, now)

    def _jobs_took(self, k: int, now: float) -> None:
        """The run's jobs each made ``k`` tokens, the last at ``now``."""
        for job in self.run_jobs:
            job.outputs += k
            job.rq.generated += k

    def _count_run(self, k: int, end: float) -> None:
        """The activity of the first ``k`` steps of the run planned last (``_decode_run``):
        step ``i`` (from 1) has ``gpu_ctx0 + i * gpu_n`` GPU context, ``pnm_ctx0 + (i - 1) *
        pnm_n`` PNM context, and each PNM window ``min(x + i - 1, w)``, summed in closed form."""
        start, tokens, gpu_n, gpu_ctx0, pnm_n, pnm_ctx0, short = self._run_work
        a, w = self.out.activity, self.cost.window_tokens
        a.busy_s += end - start
        a.steps += k
        a.tokens += k * tokens
        a.gpu_ctx += k * gpu_ctx0 + gpu_n * k * (k + 1) // 2
        a.pnm_ctx += k * pnm_ctx0 + pnm_n * k * (k - 1) // 2
        a.pnm_decodes += k * pnm_n
        a.window += (pnm_n - len(short)) * k * w  # the windows full from the start
        for x in short:  # j steps below the cap, then w
            j = min(k, w - x)
            a.window += j * x + j * (j - 1) // 2 + (k - j) * w

    def settle(self, t: float = math.inf) -> None:
        """Take the planned run: whole, or up to the step it is in at ``t`` (a request handed
        to it at ``t`` would have stopped it there)."""
        if self._pending is None:
            return
        times, batch = self._pending
        k = min(bisect.bisect_left(times, t) + 1, len(times))
        self._pending = None
        self._take_run(k, times[k - 1], None, None, 0.0)  # its load was booked when planned
        self._after_step(k * batch)
