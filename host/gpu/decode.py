"""Length-aware split-batch decode (paper 4.1, 4.2, 5.2): the executor of the co-simulation's
engine. ``scheduler.py`` plans each step (which requests, on which tier, which are admitted,
prefilled, preempted, which migrates), this module runs the plan: the GPU's compute in PyTorch,
the node's requests, the LSE merge (``emu/policy/merge.py``); ``transfers.py`` moves KV to the
node, and ``report.DecodeTracer`` writes the trace beside them.

Requests whose prompt reaches T_input tokens go to the PNM tier (the router, ``emu/policy``) and
do not come back (the one-way principle; recovery, below, is the exception): at prefill their
keys are clustered per (layer, KV head), the clusters are written to the node, and the GPU
keeps the sink tokens, the tokens not yet clustered (the recent window among them) and the
Centroid Meta-Info. Shorter requests stay on the GPU with dense attention. One decode step runs
QKV and the MLP batched for all requests; per layer, each long request's top-K clusters are sent
to the node asynchronously, the GPU computes the short requests' attention and the long
requests' window attention meanwhile, and the two parts of a long request are merged by their
log-sum-exp when the node answers. Every ``chunk`` generated tokens beyond the recent window are
clustered and appended to the node.

With a GPU KV capacity (``DecodeConfig.gpu_kv_tokens``), admission, preemption and migration
follow the scheduler. A preempted request is recomputed when it is admitted again: its KV is
kept on the host meanwhile (the recomputation gives the same KV) and the recompute's time is
charged.

Recovery: when the node loses a request's KV with a device (an ATTEND or a chunk update
answered DEVICE_DOWN), the GPU recomputes the tokens the node held (a prefill of the context up
to them, as vLLM recomputes a preempted request), finishes the step with dense attention over
the whole context, and puts the KV back on the node in the background (the node places it on
the devices that survive); until that transfer is confirmed the request decodes on the GPU.
Full attention is the same on either tier, so at full selection the tokens are those of a run
without the fault. Requests whose KV did not touch the dead device see no change.

Emulated time: GPU operations from the roofline model (timing.py), node requests from the
node's own accounting (link, host, queueing, CXL, device cycles); a layer ends when both the GPU
work and the slowest node reply are done; a recovery's prefill and attention follow the replies.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import torch

from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.emu.policy.adaptive import AdaptiveThreshold, TierLoad
from nelssa.emu.policy.capacity import KvBlocks
from nelssa.emu.policy.merge import merge_torch
from nelssa.emu.policy.migration import MigrationPolicy
from nelssa.emu.policy.router import Router, Source
from nelssa.emu.policy.states import SeqState, Tier
from nelssa.host.gpu.clustering import select_clusters
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.emulated_prefill import EmulatedPrefill
from nelssa.host.gpu.model import Llama, attention_with_lse, dense_attention
from nelssa.host.gpu.prefill import emulates
from nelssa.host.gpu.report import DecodeTracer, StepReport, TraceRecorder
from nelssa.host.gpu.request import DecodeConfig, Request, to_bf16_bits
from nelssa.host.gpu.scheduler import Admit, DecodeScheduler, StepPlan
from nelssa.host.gpu.timing import GpuTiming, gpu_preset
from nelssa.host.gpu.transfers import NodeKv
from nelssa.host.pnm_node.client import AttendResult, NodeClient, NodeFuture, NodeStatus
from nelssa.host.pnm_node.errors import DeviceDownError
from nelssa.hw.model.device import SIM_CLOCK_HZ

__all__ = ["DecodeConfig", "HybridDecoder", "Request"]
log = logging.getLogger(__name__)
Tensor = torch.Tensor
BF16 = 2  # bytes


def fit_to_devices(c: LlamaConfig, config: DecodeConfig,
                   status: NodeStatus) -> tuple[DecodeConfig, float]:
    """The config with clusters no longer than every device of the node takes, and the
    devices' clock; a model the devices cannot run (head_dim, query heads per KV head) is
    refused here, naming the limit, before any KV is written."""
    caps = [d.caps for d in status.devices if d.alive]
    if not caps:
        raise ValueError("the PNM node has no device up")
    dims = set.intersection(*(set(cp["head_dims"]) for cp in caps))
    if c.head_dim not in dims:
        raise ValueError(f"head_dim {c.head_dim}: the node's devices take {sorted(dims)}")
    most = min(int(cp["max_qheads"]) for cp in caps)
    if c.group > most:
        raise ValueError(f"{c.group} query heads per KV head: the node's devices take at most "
                         f"{most} (CAPS)")
    longest = min(int(cp["max_cluster_tokens"]) for cp in caps)
    if config.cluster.max_cluster_tokens > longest:
        log.info("clusters of at most %d tokens: the node's devices' limit (CAPS)", longest)
        config = replace(config, cluster=replace(config.cluster, max_cluster_tokens=longest))
    return config, status.clock_hz


class HybridDecoder(NodeKv):
    """Decode a batch of requests on the GPU and the PNM node behind ``client``."""

    def __init__(self, model: Llama, config: DecodeConfig, client: NodeClient | None,
                 trace: TraceRecorder | None = None, router: Router | None = None,
                 adaptive: AdaptiveThreshold | None = None) -> None:
        """``router``: how requests are placed (default: by ``config.t_input``); ``adaptive``:
        the threshold moves with the tiers' load from there (``emu/policy/adaptive.py``, the
        serving emulator's policy), and new requests are routed by where it is."""
        clock_hz = SIM_CLOCK_HZ
        if client is not None:  # the devices' facts, from their registers (CAPS) via the node
            try:  # over a connection of its own: emulated times do not depend on it
                status = client.probe_status()
            except (LinkTimeoutError, RemoteError) as e:  # requests state their fallback later
                log.warning("PNM node status unavailable (%s): device limits not checked", e)
            else:
                config, clock_hz = fit_to_devices(model.c, config, status)
        self.model, self.cfg, self.client = model, config, client
        self.gpu: GpuTiming = gpu_preset(config.gpu)
        self.trace = trace or TraceRecorder()
        self.tracer = DecodeTracer(self.trace, lambda cycles: round(cycles * 1e12 / clock_hz))
        if router is not None and router.t_input != config.t_input:
            raise ValueError(f"the router's T_input ({router.t_input}) is not the config's "
                             f"({config.t_input})")
        self.sched = DecodeScheduler(
            router or Router(config.t_input), MigrationPolicy(config.migrate_at),
            KvBlocks(config.gpu_kv_blocks, config.block_tokens),
            kept=config.sink + config.recent, compression=config.cluster.tokens_per_cluster,
            pnm=client is not None)
        if adaptive is not None and adaptive.t_input != config.t_input:
            raise ValueError(f"the adaptive threshold starts at {adaptive.t_input}, not at the "
                             f"config's T_input ({config.t_input})")
        if adaptive is not None and adaptive.lo <= config.sink + config.recent:
            raise ValueError(f"the adaptive threshold's lowest ({adaptive.lo}) must exceed sink "
                             f"+ recent ({config.sink + config.recent})")
        self.adaptive = adaptive
        self._preempted = 0
        """Preemptions since the tiers were last observed."""
        self.now_ps = 0
        self.steps = 0
        self.events: list[str] = []
        """Migration events, in order, for the caller to print."""
        # bulk KV transfers (the prefill node's offloads, migrations) go over a queue pair of
        # their own, so they do not queue ahead of attention requests on the link (sharing of
        # the link's bandwidth between queue pairs is not modelled)
        # (a queue pair of the same client: it reaches the sessions the offloads open)
        self._bulk = client.queue_pair() if client is not None else None
        c = model.c
        self._group = c.group
        w = c.hidden_size * c.head_dim * (c.num_attention_heads + 2 * c.num_key_value_heads)
        self._qkv_bytes = w * BF16
        self._out_bytes = (c.hidden_size * c.head_dim * c.num_attention_heads
                           + 3 * c.hidden_size * c.intermediate_size) * BF16
        self._kv_token_bytes = 2 * c.num_key_value_heads * c.head_dim * BF16
        self._head_bytes = c.vocab_size * c.hidden_size * BF16
        """The output head, read whole every step (the embedding only gathers rows): with the
        layers' QKV and O-proj + MLP, what ``ModelHw.weight_bytes`` counts."""

    @property
    def requests(self) -> list[Request]:
        """Every request added, in order."""
        return self.sched.requests  # type: ignore[return-value]

    def unfinished(self) -> bool:
        """Some request still runs or waits."""
        return self.sched.unfinished()

    # -- admission ---------------------------------------------------------------------------------
    def add(self, prompt: list[int], max_new: int) -> Request:
        """Queue a request, routed; it is prefilled (and makes its first token) now if the GPU
        can admit it, else in a later step."""
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
        for r in self.sched.add(req):
            self._prefill(r)
            if self.sched.prefilled(r):
                self._release(r)
        return req

    def _prefill(self, req: Request) -> None:
        """Prefill (on the prefill node: no GPU time is charged) and make the first token; a
        PNM-tier request's KV goes to the node."""
        n = len(req.prompt)
        if emulates(self.model.c, n, self.model.prefill_cfg):  # the emulated prefill node
            # a prompt for the node in bf16 (its values are: half the host memory until it
            # is offloaded; the GPU keeps its window in float32, transfers._switch)
            held = (torch.bfloat16 if req.tier is Tier.PNM and self.model.attn_bf16
                    else torch.float32)
            req.emulated_prefill = True
            if req.tier is Tier.PNM and not self.cfg.check_accuracy and self.cfg.stream_offload:
                # each layer to the node as it is made: one layer of the prompt's KV held
                req.generated.append(self._offload_streamed(req, held))
                req.prefill_ps = self.gpu.op_ps(*self._prefill_cost(n))
                return
            first, kv = EmulatedPrefill(self.model).prefill(req.prompt, req.rid, held)
        else:
            logits, kv = self.model.prefill(torch.tensor(req.prompt), last_only=True)
            first = int(logits[-1].argmax())
        # the prefill node's time (the latency model's GPU), not charged to this one
        req.prefill_ps = self.gpu.op_ps(*self._prefill_cost(n))
        req.generated.append(first)
        req.kv = kv
        if req.tier is Tier.PNM:
            self._offload(req)

    # -- one step ----------------------------------------------------------------------------------
    def step(self) -> StepReport:
        """Run the scheduler's next step: admissions, then one token for every request the
        step decodes."""
        if not self.sched.unfinished():
            raise RuntimeError("no running request to decode")
        if self.sched.end_outside_step():  # what follows the step of the prefills at add
            self._transfers()
        plan = self.sched.schedule()
        if not (plan.decodes or plan.admitted or plan.preempted):
            raise RuntimeError(f"request {self.sched.waiting[0].rid} can never be admitted: "
                               "its KV does not fit the GPU's")
        for r in plan.preempted:
            self._cancel_transfer(r)  # type: ignore[arg-type]
        start = self.now_ps
        rep = StepReport(0, 0)
        rep.migrating = [r.rid for r in self.requests if r.migration is not None]
        self._admit(plan, rep)
        # in request order (the batch's order does not change a row's result)
        makers = {id(r) for r in plan.token_makers}
        live = [r for r in self.requests if id(r) in makers]
        rep.short = sum(r.tier is Tier.GPU for r in live)
        rep.long = len(live) - rep.short
        if live:
            self._decode(live, rep)
        for r in self.sched.finish(plan):
            self._release(r)  # type: ignore[arg-type]
        for rid in rep.recovered:
            for v in self.sched.recovered(self.requests[rid]):
                self._cancel_transfer(v)  # type: ignore[arg-type]
        rep.step_ps = self.now_ps - start
        rep.tokens = len([r for r in live if r.status is not SeqState.FAILED])
        checked = [r for r in live if r.tier is Tier.PNM and r.full is not None
                   and r.status is not SeqState.FAILED]
        rep.errors = {r.rid: r.max_error for r in checked}
        rep.engine_errors = {r.rid: r.max_engine_error for r in checked}
        self.steps += 1
        self._transfers()
        if self.adaptive is not None:
            self._adapt(rep, len(plan.preempted))
        return rep

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
        kv = self.sched.kv
        kv_used = kv.used() / kv.total if kv.total else 0.0
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
            self.sched.router = Router(self.adaptive.t_input, Source.ADAPTIVE)
            self.events.append(f"T_input -> {self.adaptive.t_input} tokens (adaptive, "
                               f"{load.t_s * 1e3:.3f} ms)")

    def _admit(self, plan: StepPlan, rep: StepReport) -> None:
        """The plan's admissions: new requests prefilled (on the prefill node), preempted ones
        recomputed (on this GPU: charged), resident windows taken in (nothing to compute)."""
        for r, how in plan.admitted:
            assert isinstance(r, Request)
            if how is Admit.PREFILL:
                self._prefill(r)
            elif how is Admit.RECOMPUTE:
                n = r.kv[0][0].shape[0]
                rep.recovery_ps += self._gpu_op(f"req {r.rid} recompute ({n} tokens)",
                                                *self._prefill_cost(n))

    def _decode(self, live: list[Request], rep: StepReport) -> None:
        x = self.model.embed(torch.tensor([r.generated[-1] for r in live]))
        pos = torch.tensor([r.length - 1 for r in live])
        for r in live:
            r.max_error = r.max_engine_error = 0.0
        for layer in range(self.model.c.num_hidden_layers):
            x = self._layer(layer, live, x, pos, rep)
        nxt = self.model.logits(x).argmax(dim=-1).tolist()
        rep.others_ps += self._gpu_op("output head", self._head_bytes,
                                      2 * self._head_bytes / BF16 * len(live))
        rep.others_ps += self._gpu_slice("launches, sampling", self.gpu.step_overhead_ps)
        for r, t in zip(live, nxt, strict=True):
            if r.status is not SeqState.RUNNING:
                continue
            r.generated.append(int(t))
            if r.tier is Tier.PNM:
                self._chunk_update(r, rep)

    def _gpu_op(self, name: str, nbytes: float, flops: float = 0.0) -> int:
        return self._gpu_slice(name, self.gpu.op_ps(nbytes, flops))

    def _gpu_slice(self, name: str, dur: int) -> int:
        self.tracer.gpu(name, self.now_ps, dur)
        self.now_ps += dur
        return dur

    def _layer(self, layer: int, live: list[Request], x: Tensor, pos: Tensor,
               rep: StepReport) -> Tensor:
        cfg, g = self.cfg, self._group
        b = len(live)
        rep.others_ps += self._gpu_op(f"L{layer} QKV", self._qkv_bytes,
                                      2 * self._qkv_bytes / BF16 * b)
        q, k, v = self.model.qkv(layer, x, pos)
        longs = [i for i, r in enumerate(live)
                 if r.tier is Tier.PNM and r.status is SeqState.RUNNING]
        for i, r in enumerate(live):
            kk, vv = r.kv[layer]
            r.kv[layer] = (torch.cat([kk, k[i:i + 1]]), torch.cat([vv, v[i:i + 1]]))
            if r.full is not None:
                fk, fv = r.full[layer]
                r.full[layer] = (torch.cat([fk, k[i:i + 1]]), torch.cat([fv, v[i:i + 1]]))
        # top-K cluster selection of the long requests, then their node requests
        futures: dict[int, NodeFuture[AttendResult]] = {}
        chosen: dict[int, dict[int, list[int]]] = {}
        if longs:
            cent_bytes = sum(sum(c.numel() for c in live[i].centroids[layer]) * BF16
                             for i in longs)
            rep.topk_ps += self._gpu_op(f"L{layer} top-K", cent_bytes, 2 * cent_bytes / BF16 * g)
            send = self.now_ps
            for i in longs:
                r = live[i]
                queries, ids = {}, {}
                for h, cents in enumerate(r.centroids[layer]):
                    qg = q[i, h * g:(h + 1) * g]
                    count = max(1, math.ceil(cfg.selection * cents.shape[0]))
                    sel = select_clusters(qg, cents, count)
                    ids[h] = sel.tolist()
                    queries[h] = to_bf16_bits(qg)
                    rep.kv_bytes += int(r.sizes[layer][h][sel].sum()) * self._kv_token_bytes // (
                        self.model.c.num_key_value_heads)
                assert self.client is not None and r.session is not None
                futures[i] = self.client.attend_async(r.session, layer, queries, ids,
                                                      send_ps=send)
                chosen[i] = ids
        # the GPU's own attention meanwhile
        attn = torch.empty_like(q)
        local: dict[int, tuple[Tensor, Tensor]] = {}
        gpu_bytes = 0
        for i, r in enumerate(live):
            kk, vv = r.kv[layer]
            gpu_bytes += kk.shape[0] * self._kv_token_bytes
            if i in futures:
                local[i] = attention_with_lse(q[i], kk, vv)
            else:
                attn[i] = dense_attention(q[i:i + 1], kk, vv)[0]
        attn_ps = self._gpu_op(f"L{layer} attention", gpu_bytes, 4 * gpu_bytes / BF16 * g)
        rep.others_ps += attn_ps
        rep.gpu_attn_ps += attn_ps
        gpu_done = self.now_ps
        latest = gpu_done
        node_end: int | None = None
        lost: dict[int, str] = {}
        for i, f in futures.items():
            r = live[i]
            try:
                res = f.result()
            except DeviceDownError as e:
                lost[i] = f"layer {layer}: {e}"
                continue
            except (RemoteError, LinkTimeoutError) as e:
                r.status, r.note = SeqState.FAILED, f"node request failed at layer {layer}: {e}"
                log.error("request %d: %s", r.rid, r.note)
                attn[i] = local[i][0]
                continue
            self._record_node(r, layer, res, rep)
            latest = max(latest, res.timing.arrive_ps)
            node_end = max(node_end or 0, res.timing.arrive_ps)
            attn[i] = self._merge(local[i], res)
            if r.full is not None:
                self._check(r, layer, q[i], attn[i], chosen[i])
        if node_end is not None:
            rep.node_ps += node_end - send
        if latest > gpu_done:
            rep.wait_ps += latest - gpu_done
            self.tracer.gpu(f"L{layer} wait for PNM", gpu_done, latest - gpu_done)
            self.now_ps = latest
        for i, why in lost.items():  # rebuild what the node lost; this layer on the GPU
            r = live[i]
            self._recover(r, rep, why)
            kk, vv = r.kv[layer]
            nbytes = kk.shape[0] * self._kv_token_bytes
            rep.others_ps += self._gpu_op(f"L{layer} attention (req {r.rid} recovered)", nbytes,
                                          4 * nbytes / BF16 * g)
            attn[i] = dense_attention(q[i:i + 1], kk, vv)[0]
        rep.others_ps += self._gpu_op(f"L{layer} O-proj + MLP", self._out_bytes,
                                      2 * self._out_bytes / BF16 * b)
        return self.model.finish_layer(layer, x, attn)

    def _merge(self, local: tuple[Tensor, Tensor], res: AttendResult) -> Tensor:
        """The GPU's window attention and the node's reply, per KV head, by their LSE: (query
        heads, head_dim)."""
        o_l, lse_l = local
        g = self._group
        merged = torch.empty_like(o_l)
        for h in range(len(res.o)):
            rows = slice(h * g, (h + 1) * g)
            o, _ = merge_torch(torch.stack([o_l[rows], torch.from_numpy(res.o[h])]),
                               torch.stack([lse_l[rows], torch.from_numpy(res.lse[h])]))
            merged[rows] = o
        return merged

    def _check(self, r: Request, layer: int, q: Tensor, merged: Tensor,
               chosen: dict[int, list[int]]) -> None:
        """Accuracy of one long request's attention at one layer."""
        assert r.full is not None
        fk, fv = r.full[layer]
        ref = dense_attention(q[None], fk, fv)[0]
        r.max_error = max(r.max_error, float((merged - ref).abs().max() / ref.abs().max()))
        g, cfg = self._group, self.cfg
        window = torch.cat([torch.arange(cfg.sink),
                            torch.arange(cfg.sink + r.offloaded, fk.shape[0])])
        for h, ids in chosen.items():
            pos = torch.cat([window, *(r.members[layer][h][c] for c in ids)])
            rows = slice(h * g, (h + 1) * g)
            exact, _ = attention_with_lse(q[rows], fk[pos, h:h + 1], fv[pos, h:h + 1])
            err = float((merged[rows] - exact).abs().max() / exact.abs().max())
            r.max_engine_error = max(r.max_engine_error, err)

    def _record_node(self, r: Request, layer: int, res: AttendResult, rep: StepReport) -> None:
        t = res.timing
        rep.transfer_ps += t.link_up_ps + t.link_down_ps
        rep.pnm_overhead_ps += t.host_ps + t.queue_ps + t.cxl_ps
        rep.pnm_attn_ps += t.device_ps
        rep.node_requests += 1
        self.tracer.node_reply(r.rid, layer, res)
        for d, cycles in res.device_cycles.items():
            rep.device_cycles[d] = rep.device_cycles.get(d, 0) + cycles

    def kv_blocks_in_use(self) -> int:
        """The GPU's KV blocks in use (the null block among them)."""
        return self.sched.kv.used()

    def close(self) -> None:
        for r in self.requests:
            self._release(r)
        if self._bulk is not None:
            self._bulk.close()
