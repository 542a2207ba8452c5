"""The co-simulation's executor (paper 4.1, 4.2, 5.2): it runs one step's work, planned by the
scheduler and handed over by the engine (``engine.py``) as plain data, and returns what came of
it. The GPU's compute in PyTorch, the node's requests, the LSE merge (``emu/policy/merge.py``);
KV goes to the node through ``transfers.KvTransfers``, and ``report.DecodeTracer`` writes the
trace beside them. It never calls the scheduler, and it keeps each request's tensors by request
id (``RequestKv``).

One step runs QKV and the MLP batched for all requests; per layer, each long request's top-K
clusters are sent to the node asynchronously, the GPU computes the short requests' attention
and the long requests' window attention meanwhile, and the two parts of a long request are
merged by their log-sum-exp when the node answers. Every ``chunk`` generated tokens beyond the
recent window are clustered and appended to the node. A new request is prefilled on the prefill
node (no time of this GPU is charged) and makes its first token there; a PNM-tier one's keys
are clustered per (layer, KV head) and written to the node, the GPU keeping the sink tokens, the
tokens not yet clustered (the recent window among them) and the Centroid Meta-Info. A preempted
request is recomputed when it is admitted again: its KV is kept on the host meanwhile (the
recomputation gives the same KV) and the recompute's time is charged.

Recovery: when the node loses a request's KV with a device (an ATTEND or a chunk update
answered DEVICE_DOWN), the GPU recomputes the tokens the node held (a prefill of the context up
to them, as vLLM recomputes a preempted request), finishes the step with dense attention over
the whole context, and the engine puts the KV back on the node in the background (the node
places it on the devices that survive); until that transfer is confirmed the request decodes on
the GPU. Full attention is the same on either tier, so at full selection the tokens are those
of a run without the fault. Requests whose KV did not touch the dead device see no change.

Emulated time: GPU operations from the roofline model (timing.py), or on a CUDA device what
the GPU took for them (``gpu_timer``: CUDA events around QKV, attention, the top-K search,
O-proj + MLP and the output head; the roofline's figure kept beside each), node requests from
the node's own accounting (link, host, queueing, CXL, device cycles); a layer ends when both the GPU
work and the slowest node reply are done; a recovery's prefill and attention follow the replies.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.emu.policy.merge import merge_torch
from nelssa.emu.policy.states import Tier
from nelssa.host.gpu.clustering import select_clusters
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.emulated_prefill import EmulatedPrefill
from nelssa.host.gpu.gpu_timer import (
    Family,
    GpuTime,
    Span,
    make_timer,
    resolve_device,
    weights_dtype,
)
from nelssa.host.gpu.model import Llama, attention_with_lse, dense_attention
from nelssa.host.gpu.prefill import emulates
from nelssa.host.gpu.report import DecodeTracer, StepReport
from nelssa.host.gpu.request import DecodeConfig, Request, RequestKv, to_bf16_bits
from nelssa.host.gpu.timing import GpuTiming, gpu_preset
from nelssa.host.gpu.transfers import KvTransfers
from nelssa.host.pnm_node.client import AttendResult, NodeClient, NodeFuture, NodeStatus
from nelssa.host.pnm_node.errors import DeviceDownError

log = logging.getLogger(__name__)
Tensor = torch.Tensor
BF16 = 2  # bytes


@dataclass
class StepWork:
    """One step's work, in request ids (plain data, from the scheduler's plan)."""

    prefills: list[int] = field(default_factory=list)
    """New requests, prefilled on the prefill node: each makes its first token."""
    recomputes: list[int] = field(default_factory=list)
    """Preempted requests admitted again: the KV they held is computed again (charged)."""
    decodes: list[int] = field(default_factory=list)
    """Requests that make one token in this step's batch, in request order."""


@dataclass
class StepOutput:
    """What came of a step's work."""

    tokens: dict[int, int] = field(default_factory=dict)
    """The token each request made (prefills' first tokens among them)."""
    offload_failed: dict[int, str] = field(default_factory=dict)
    """PNM-tier prefills whose KV the node did not take: they stay on the GPU, and why."""
    failed: dict[int, str] = field(default_factory=dict)
    """Requests the node failed beyond recovery, and why (they end)."""
    recovered: list[int] = field(default_factory=list)
    """Requests whose KV the node lost: recomputed, on the GPU until it is back there."""
    events: list[str] = field(default_factory=list)
    """What happened, for people."""


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


class HybridExecutor:
    """Runs steps of requests on the GPU (PyTorch, timed by the roofline model or measured on
    a CUDA device) and the PNM node behind ``client``. ``model`` is the prefill node's (on the
    host); the decode runs on its copy on ``cfg.torch_device``, each request's KV moved there
    once it is prefilled (and offloaded), back to the host only where it crosses to the
    node."""

    def __init__(self, model: Llama, cfg: DecodeConfig, client: NodeClient | None,
                 tracer: DecodeTracer) -> None:
        self.model, self.cfg, self.client, self.tracer = model, cfg, client, tracer
        self.gpu: GpuTiming = gpu_preset(cfg.gpu)
        self.device = resolve_device(cfg.torch.torch_device)
        self.timer = make_timer(self.device, cfg.torch.gpu_timer)
        self.dev_model = model.on(self.device, weights_dtype(cfg.torch.torch_weights,
                                                             self.device))
        """The decoder the decode steps run, on ``device``."""
        self._rep = StepReport(0, 0)
        self.transfers = KvTransfers(model, cfg, client)
        self.kv: dict[int, RequestKv] = {}
        """What it keeps for each request, by request id."""
        self.now_ps = 0
        self.step = 0
        """The step being run (for the events' words)."""
        self._failed: dict[int, str] = {}
        self._out = StepOutput()
        self._requests: dict[int, Request] = {}
        self.on_prefill: Callable[[], None] | None = None
        """Called after each prefill (a progress bar's)."""
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
        if self.timer.measures:
            self._warm_up()

    def _warm_up(self) -> None:
        """One token through a layer, attention, a top-K search and the head, untimed: the
        first call of each kernel (library handles, module loads) is no step's time."""
        m, dev = self.dev_model, self.device
        x = m.embed(torch.zeros(1, dtype=torch.long, device=dev))
        q, k, v = m.qkv(0, x, torch.zeros(1, dtype=torch.long, device=dev))
        attention_with_lse(q[0], k, v)
        select_clusters(q[0, :self._group], k[:, 0], 1)
        m.logits(m.finish_layer(0, x, dense_attention(q, k, v)))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def run(self, work: StepWork, requests: dict[int, Request], rep: StepReport) -> StepOutput:
        """Run ``work`` on ``requests`` (read, never changed: the engine follows the output),
        adding its times and figures to ``rep``."""
        self._out, self._failed, self._requests = StepOutput(), {}, requests
        self._rep = rep
        rep.gpu_timer = self.timer.name
        out = self._out
        for rid in work.prefills:
            out.tokens[rid] = self._prefill(requests[rid])
            if self.on_prefill is not None:
                self.on_prefill()
        for rid in work.recomputes:
            n = self.kv[rid].kv[0][0].shape[0]
            rep.recovery_ps += self._gpu_op(f"req {rid} recompute ({n} tokens)",
                                            *self.prefill_cost(n))
        live = [requests[rid] for rid in work.decodes]
        rep.short = sum(not self.kv[r.rid].remote for r in live)
        rep.long = len(live) - rep.short
        if live:
            self._decode(live, rep)
        out.failed = dict(self._failed)
        rep.tokens = len([r for r in live if r.rid not in self._failed])
        checked = [self.kv[r.rid] for r in live if r.rid not in self._failed]
        checked = [k for k in checked if k.remote and k.full is not None]
        rep.errors = {k.rid: k.max_error for k in checked}
        rep.engine_errors = {k.rid: k.max_engine_error for k in checked}
        return out

    def _prefill(self, req: Request) -> int:
        """Prefill (on the prefill node: no GPU time is charged); the first token. A PNM-tier
        request's KV goes to the node."""
        n = len(req.prompt)
        kv = self.kv.setdefault(req.rid, RequestKv(req.rid))
        pnm = req.tier is Tier.PNM
        if emulates(self.model.c, n, self.model.prefill_cfg):  # the emulated prefill node
            # a prompt for the node in bf16 (its values are: half the host memory until it
            # is offloaded; the GPU keeps its window in float32, transfers._switch)
            held = (torch.bfloat16 if pnm and self.model.attn_bf16
                    else torch.float32)
            kv.emulated_prefill = True
            if pnm and not self.cfg.check_accuracy and self.cfg.stream_offload:
                # each layer to the node as it is made: one layer of the prompt's KV held
                first, note = self.transfers.offload_streamed(req, kv, held)
                kv.prefill_ps = self.gpu.op_ps(*self.prefill_cost(n))
                if note is not None:
                    self._out.offload_failed[req.rid] = note
                self._to_device(kv)
                return first
            first, made = EmulatedPrefill(self.model).prefill(req.prompt, req.rid, held)
        else:
            logits, made = self.model.prefill(torch.tensor(req.prompt), last_only=True)
            first = int(logits[-1].argmax())
        # the prefill node's time (the latency model's GPU), not charged to this one
        kv.prefill_ps = self.gpu.op_ps(*self.prefill_cost(n))
        kv.kv = made
        if pnm:
            note = self.transfers.offload(req, kv)
            if note is not None:
                self._out.offload_failed[req.rid] = note
        self._to_device(kv)
        return first

    def _to_device(self, kv: RequestKv) -> None:
        """What the GPU keeps of a request (its KV or window, the accuracy check's full KV,
        the centroids and key means), from the prefill node's host onto ``device``."""
        dev = self.device  # on the host already, each .to is the tensor itself
        kv.kv = [(k.to(dev), v.to(dev)) for k, v in kv.kv]
        if kv.full is not None:
            kv.full = [(k.to(dev), v.to(dev)) for k, v in kv.full]
        kv.centroids = [[c.to(dev) for c in heads] for heads in kv.centroids]
        kv.key_mean = [m.to(dev) for m in kv.key_mean]

    def _decode(self, live: list[Request], rep: StepReport) -> None:
        m, dev = self.dev_model, self.device
        x = m.embed(torch.tensor([r.generated[-1] for r in live], device=dev))
        pos = torch.tensor([r.length - 1 for r in live], device=dev)
        kvs = [self.kv[r.rid] for r in live]
        for r in kvs:
            r.max_error = r.max_engine_error = 0.0
        for layer in range(m.c.num_hidden_layers):
            x = self._layer(layer, kvs, x, pos, rep)
        with self.timer.span(Family.HEAD) as span:
            best = m.logits(x).argmax(dim=-1)
        nxt = best.tolist()
        rep.others_ps += self._gpu_op("output head", self._head_bytes,
                                      2 * self._head_bytes / BF16 * len(live), span)
        rep.others_ps += self._gpu_slice("launches, sampling", self.gpu.step_overhead_ps)
        for r, t in zip(kvs, nxt, strict=True):
            if r.rid in self._failed:
                continue
            self._out.tokens[r.rid] = int(t)
            if r.remote:
                self._chunk_update(r, rep)

    def _chunk_update(self, r: RequestKv, rep: StepReport) -> None:
        try:
            self.transfers.chunk_update(r.rid, r)
        except DeviceDownError as e:
            self._recover(r, rep, f"chunk update: {e}")
        except (RemoteError, LinkTimeoutError) as e:
            self._fail(r.rid, f"chunk update failed: {e}")

    def _fail(self, rid: int, note: str) -> None:
        self._failed[rid] = note
        log.error("request %d: %s", rid, note)

    def _gpu_op(self, name: str, nbytes: float, flops: float = 0.0,
                span: Span | None = None) -> int:
        """One GPU operation on the emulated timeline: what ``span`` measured of it, else the
        roofline's price (kept beside a measured one, by kernel family, in the step's
        report)."""
        self._rep.hbm_bytes += nbytes  # what the step's energy is counted from
        self._rep.gpu_flops += flops
        model = self.gpu.op_ps(nbytes, flops)
        if span is None:
            return self._gpu_slice(name, model)
        rep, family = self._rep, span.family.value
        rep.roofline_ps[family] = rep.roofline_ps.get(family, 0) + model
        if span.ps is None:
            return self._gpu_slice(name, model)
        rep.gpu_time = GpuTime.MEASURED
        rep.measured_ps[family] = rep.measured_ps.get(family, 0) + span.ps
        return self._gpu_slice(name, span.ps, model)

    def _gpu_slice(self, name: str, dur: int, roofline: int | None = None) -> int:
        """``roofline``: the model's figure of a measured ``dur`` (None: ``dur`` is it)."""
        self.tracer.gpu(name, self.now_ps, dur, roofline)
        self.now_ps += dur
        return dur

    def _layer(self, layer: int, live: list[RequestKv], x: Tensor, pos: Tensor,
               rep: StepReport) -> Tensor:
        cfg, g, m = self.cfg, self._group, self.dev_model
        b = len(live)
        with self.timer.span(Family.QKV) as span:
            q, k, v = m.qkv(layer, x, pos)
        rep.others_ps += self._gpu_op(f"L{layer} QKV", self._qkv_bytes,
                                      2 * self._qkv_bytes / BF16 * b, span)
        longs = [i for i, r in enumerate(live)
                 if r.remote and r.rid not in self._failed]
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
            with self.timer.span(Family.TOPK) as span:
                picked = {i: [select_clusters(
                    q[i, h * g:(h + 1) * g], cents,
                    max(1, math.ceil(cfg.selection * cents.shape[0])))
                    for h, cents in enumerate(live[i].centroids[layer])] for i in longs}
            rep.topk_ps += self._gpu_op(f"L{layer} top-K", cent_bytes, 2 * cent_bytes / BF16 * g,
                                        span)
            send = self.now_ps
            for i in longs:
                r = live[i]
                queries, ids = {}, {}
                for h, sel in enumerate(picked[i]):
                    qg = q[i, h * g:(h + 1) * g]
                    sel = sel.cpu()  # the ids cross to the node
                    ids[h] = sel.tolist()
                    queries[h] = to_bf16_bits(qg)
                    rep.kv_bytes += int(r.sizes[layer][h][sel].sum()) * self._kv_token_bytes // (
                        self.model.c.num_key_value_heads)
                    rep.clusters += len(sel)
                # up the link: the query (bf16) and the chosen clusters' ids (32 bits each)
                rep.link_bytes += sum(x.nbytes for x in queries.values()) + 4 * sum(
                    len(x) for x in ids.values())
                assert self.client is not None and r.session is not None
                futures[i] = self.client.attend_async(r.session, layer, queries, ids,
                                                      send_ps=send)
                chosen[i] = ids
        # the GPU's own attention meanwhile
        attn = torch.empty_like(q)
        local: dict[int, tuple[Tensor, Tensor]] = {}
        gpu_bytes = sum(r.kv[layer][0].shape[0] for r in live) * self._kv_token_bytes
        with self.timer.span(Family.ATTENTION) as span:
            for i, r in enumerate(live):
                kk, vv = r.kv[layer]
                if i in futures:
                    local[i] = attention_with_lse(q[i], kk, vv)
                else:
                    attn[i] = dense_attention(q[i:i + 1], kk, vv)[0]
        attn_ps = self._gpu_op(f"L{layer} attention", gpu_bytes, 4 * gpu_bytes / BF16 * g,
                               span)
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
                self._fail(r.rid, f"node request failed at layer {layer}: {e}")
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
            self.tracer.gpu(f"L{layer} wait for PNM", gpu_done, latest - gpu_done,
                            operation=False)
            self.now_ps = latest
        for i, why in lost.items():  # rebuild what the node lost; this layer on the GPU
            r = live[i]
            self._recover(r, rep, why)
            kk, vv = r.kv[layer]
            nbytes = kk.shape[0] * self._kv_token_bytes
            rep.others_ps += self._gpu_op(f"L{layer} attention (req {r.rid} recovered)", nbytes,
                                          4 * nbytes / BF16 * g)
            attn[i] = dense_attention(q[i:i + 1], kk, vv)[0]
        with self.timer.span(Family.MLP) as span:
            x = m.finish_layer(layer, x, attn)
        rep.others_ps += self._gpu_op(f"L{layer} O-proj + MLP", self._out_bytes,
                                      2 * self._out_bytes / BF16 * b, span)
        return x

    def _merge(self, local: tuple[Tensor, Tensor], res: AttendResult) -> Tensor:
        """The GPU's window attention and the node's reply, per KV head, by their LSE: (query
        heads, head_dim)."""
        o_l, lse_l = local
        g = self._group
        merged = torch.empty_like(o_l)
        for h in range(len(res.o)):
            rows = slice(h * g, (h + 1) * g)
            o, _ = merge_torch(
                torch.stack([o_l[rows], torch.from_numpy(res.o[h]).to(o_l.device)]),
                torch.stack([lse_l[rows], torch.from_numpy(res.lse[h]).to(o_l.device)]))
            merged[rows] = o
        return merged

    def _check(self, r: RequestKv, layer: int, q: Tensor, merged: Tensor,
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
            pos = torch.cat([window, *(r.members[layer][h][c].cpu() for c in ids)])
            rows = slice(h * g, (h + 1) * g)
            exact, _ = attention_with_lse(q[rows], fk[pos, h:h + 1], fv[pos, h:h + 1])
            err = float((merged[rows] - exact).abs().max() / exact.abs().max())
            r.max_engine_error = max(r.max_engine_error, err)

    def _record_node(self, r: RequestKv, layer: int, res: AttendResult, rep: StepReport) -> None:
        t = res.timing
        rep.transfer_ps += t.link_up_ps + t.link_down_ps
        rep.pnm_overhead_ps += t.host_ps + t.queue_ps + t.cxl_ps
        rep.pnm_attn_ps += t.device_ps
        rep.node_requests += 1
        rep.node_commands += len(res.o)
        rep.link_bytes += sum(x.nbytes for x in res.o.values()) + sum(
            x.nbytes for x in res.lse.values())  # the reply down: O and LSE in fp32
        self.tracer.node_reply(r.rid, layer, res)
        for d, cycles in res.device_cycles.items():
            rep.device_cycles[d] = rep.device_cycles.get(d, 0) + cycles
        rep.ddr5_uncounted += len(set(res.device_cycles) - set(res.ddr5))
        for d, row in res.ddr5.items():
            have = rep.ddr5_counts.setdefault(d, [0] * len(row))
            have[:] = [a + b for a, b in zip(have, row, strict=True)]

    def _recover(self, r: RequestKv, rep: StepReport, why: str) -> None:
        """The node lost KV of ``r`` with a device: recompute the tokens it held (a prefill of
        the context up to them) and hold the whole context on the GPU; the engine has it put
        back on the node, on the devices that survive."""
        cfg = self.cfg
        held = cfg.sink + r.offloaded  # tokens [sink, held) were on the node
        if r.emulated_prefill:  # made again by the emulated prefill node: the prompt's KV as
            # first handed over (its blocks are seeded), the generated tokens' synthetic too
            emu = EmulatedPrefill(self.model)
            kv = [emu.layer_kv(layer, held, r.rid)
                  for layer in range(self.model.c.num_hidden_layers)]
        else:
            req = self._requests[r.rid]
            kv = self.model.context_kv(torch.tensor((req.prompt + req.generated)[:held]))
        kv = [(k.to(self.device), v.to(self.device)) for k, v in kv]
        rep.recovery_ps += self._gpu_op(f"req {r.rid} re-prefill ({held} tokens)",
                                        *self.prefill_cost(held))
        rep.recovered.append(r.rid)
        self._out.recovered.append(r.rid)
        r.kv = [(torch.cat([k[:cfg.sink], rk[cfg.sink:], k[cfg.sink:]]),
                 torch.cat([v[:cfg.sink], rv[cfg.sink:], v[cfg.sink:]]))
                for (k, v), (rk, rv) in zip(r.kv, kv, strict=True)]
        self.transfers.release(r.rid, r)  # what the old session still holds on the survivors
        r.remote, r.offloaded = False, 0
        r.centroids, r.sizes, r.key_mean, r.members = [], [], [], []
        r.recovering = True
        self._out.events.append(
            f"step {self.step}: request {r.rid} lost its KV on the node ({why}); "
            f"{held - cfg.sink} tokens recomputed on the GPU, to go back to the devices that "
            "survive")
        log.warning("request %d: KV lost on the node (%s); recomputed", r.rid, why)

    def prefill_cost(self, n: int) -> tuple[float, float]:
        """(bytes, FLOPs) of a prefill of ``n`` tokens that keeps only the KV: every layer's
        weights read once and its KV written; linear layers and causal attention."""
        c = self.model.c
        weights = (self._qkv_bytes + self._out_bytes) * c.num_hidden_layers
        kv = n * self._kv_token_bytes * c.num_hidden_layers
        attn = 2 * n * n * c.head_dim * c.num_attention_heads * c.num_hidden_layers
        return weights + kv, 2 * n * weights / BF16 + attn

    def release(self, rid: int) -> None:
        """Free what the node holds for a request that ended (what is kept here stays, for
        its report)."""
        kv = self.kv.get(rid)
        if kv is not None:
            self.transfers.release(rid, kv)

    def close(self) -> None:
        for rid in list(self.kv):
            self.release(rid)
        self.transfers.close()
