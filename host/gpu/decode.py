"""Length-aware split-batch decode (paper 4.1, 4.2, 5.2).

Requests whose prompt reaches ``t_input`` tokens go to the PNM tier and do not come back (the
one-way principle; recovery, below, is the exception): at prefill their keys are clustered per
(layer, KV head), the clusters are written to the node, and the GPU keeps the sink tokens, the
tokens not yet clustered (the recent window among them) and the Centroid Meta-Info. Shorter
requests stay on the GPU with dense attention. One decode step runs QKV and the MLP batched for
all requests; per layer, each long request's top-K clusters are sent to the node
asynchronously, the GPU computes the short requests' attention and the long requests' window
attention meanwhile, and the two parts of a long request are merged by their log-sum-exp when
the node answers. Every ``chunk`` generated tokens beyond the recent window are clustered and
appended to the node.

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

import torch

from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.host.gpu.clustering import cluster_keys, select_clusters
from nelssa.host.gpu.model import Llama, attention_with_lse, dense_attention
from nelssa.host.gpu.report import StepReport, TraceRecorder
from nelssa.host.gpu.request import DecodeConfig, Migration, Request, to_bf16_bits
from nelssa.host.gpu.timing import GpuTiming, gpu_preset
from nelssa.host.pnm_node.client import AttendResult, NodeClient, NodeFuture
from nelssa.host.pnm_node.errors import DeviceDownError
from nelssa.hw.model.device import SIM_CLOCK_HZ

__all__ = ["DecodeConfig", "HybridDecoder", "Request"]
log = logging.getLogger(__name__)
Tensor = torch.Tensor
BF16 = 2  # bytes


class HybridDecoder:
    """Decode a batch of requests on the GPU and the PNM node behind ``client``."""

    def __init__(self, model: Llama, config: DecodeConfig, client: NodeClient | None,
                 trace: TraceRecorder | None = None) -> None:
        self.model, self.cfg, self.client = model, config, client
        self.gpu: GpuTiming = gpu_preset(config.gpu)
        self.trace = trace or TraceRecorder()
        self.requests: list[Request] = []
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

    # -- admission ---------------------------------------------------------------------------------
    def add(self, prompt: list[int], max_new: int) -> Request:
        """Prefill a request, route it, and make its first token."""
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
        logits, kv = self.model.prefill(torch.tensor(prompt))
        req.generated.append(int(logits[-1].argmax()))
        req.kv = kv
        if len(prompt) >= self.cfg.t_input:
            if self.client is None:
                req.note = "no PNM node: long request kept on the GPU"
            else:
                self._offload(req)
        self.requests.append(req)
        if len(req.generated) >= max_new:
            req.status = "done"
        return req

    def _offload(self, req: Request) -> None:
        """Cluster and write a long prompt's KV to the node (from the prefill node); on failure
        keep the request on the GPU and say why."""
        assert self._bulk is not None
        try:
            futures = self._send_kv(req, self._bulk, len(req.prompt), None)
            for f in futures:
                f.result()
        except (RemoteError, LinkTimeoutError) as e:
            self._abandon(req, f"PNM offload failed ({e}); kept on the GPU")
            return
        self._switch(req, len(req.prompt))

    def _send_kv(self, req: Request, client: NodeClient, n: int,
                 send_ps: int | None) -> list[NodeFuture]:
        """Open a session, cluster cache tokens [sink, n - recent) per layer and KV head, and
        send them; records centroids (the GPU's Centroid Meta-Info)."""
        c, cfg = self.model.c, self.cfg
        mid = n - cfg.sink - cfg.recent
        left = req.max_new - len(req.generated) + 1
        per_chunk = -(-cfg.chunk // cfg.cluster.tokens_per_cluster)
        est = -(-mid // cfg.cluster.tokens_per_cluster) * 2 + (
            -(-left // cfg.chunk) + 1) * per_chunk * 2 + 16
        s = client.open_session(c.head_dim, c.group, "head")
        req.session = s
        futures: list[NodeFuture] = []
        for layer, (k, v) in enumerate(req.kv):
            client.alloc_kv(s, layer, list(range(c.num_key_value_heads)), est, n + left)
            mean = k[:n].mean(0)
            req.key_mean.append(mean)
            cents, sizes, members = [], [], []
            for h in range(c.num_key_value_heads):
                kh, vh = k[cfg.sink:n - cfg.recent, h], v[cfg.sink:n - cfg.recent, h]
                cl = cluster_keys(kh, cfg.cluster, mean[h])
                cents.append(cl.centroids)
                sizes.append(torch.tensor([len(m) for m in cl.members]))
                members.append([m + cfg.sink for m in cl.members])
                futures.append(client.write_kv_async(
                    s, layer, h, [to_bf16_bits(kh[m]) for m in cl.members],
                    [to_bf16_bits(vh[m]) for m in cl.members], send_ps=send_ps))
            req.centroids.append(cents)
            req.sizes.append(sizes)
            if cfg.check_accuracy:
                req.members.append(members)
        return futures

    def _abandon(self, req: Request, note: str) -> None:
        """A transfer that failed: free whatever the node holds, keep the GPU's KV."""
        self._release(req)
        req.note = note
        log.warning("request %d: %s", req.rid, note)
        req.centroids, req.sizes, req.key_mean, req.members = [], [], [], []

    def _switch(self, req: Request, n: int) -> None:
        """The node holds tokens [sink, n - recent): attend there from now on and keep only
        the window on the GPU."""
        cfg = self.cfg
        req.tier = "pnm"
        req.offloaded = n - cfg.sink - cfg.recent
        if cfg.check_accuracy:
            req.full = [(k.clone(), v.clone()) for k, v in req.kv]
        length = req.kv[0][0].shape[0]
        keep = list(range(cfg.sink)) + list(range(n - cfg.recent, length))
        req.kv = [(k[keep], v[keep]) for k, v in req.kv]

    # -- migration -------------------------------------------------------------------------------
    def gpu_kv_in_use(self) -> int:
        """KV tokens the GPU holds for running requests."""
        return sum(r.kv[0][0].shape[0] for r in self.requests if r.status == "running")

    def _migrations(self) -> None:
        """Finish a transfer whose writes are all confirmed (in wall and emulated time); put
        back the KV of requests that recovered; start a migration when GPU KV is short."""
        cfg = self.cfg
        for r in self.requests:
            m = r.migration
            if m is None or r.status != "running":
                continue
            what = "recovery" if m.recovery else "migration"
            if m.done_ps is None:
                # wait for the replies in wall time (quick), so the switch is decided in
                # emulated time alone and the run repeats exactly
                try:
                    m.done_ps = max(f.result().timing.arrive_ps for f in m.futures)
                except (RemoteError, LinkTimeoutError) as e:
                    self.events.append(f"step {self.steps}: {what} of request {r.rid} "
                                       f"FAILED ({e}); it stays on the GPU with its KV")
                    r.recovering = False
                    self._abandon(r, f"{what} failed: {e}")
                    continue
            if self.now_ps < m.done_ps:
                continue
            freed = r.kv[0][0].shape[0]
            self._switch(r, m.tokens)
            r.migration, r.recovering = None, False
            r.migrated |= not m.recovery
            freed -= r.kv[0][0].shape[0]
            self.trace.slice("link", what, f"req {r.rid} KV", m.start_ps,
                             m.done_ps - m.start_ps)
            self.events.append(
                f"step {self.steps}: {what} of request {r.rid} complete after "
                f"{self.steps - m.start_step} steps ({(m.done_ps - m.start_ps) / 1e6:.1f} us "
                f"emulated): {r.offloaded} tokens on the node, {freed} tokens of GPU KV freed")
        for r in self.requests:
            if r.recovering and r.migration is None and r.status == "running":
                self._start_transfer(r, recovery=True)
        if cfg.gpu_kv_tokens is None or self._bulk is None:
            return
        if any(r.migration is not None for r in self.requests):
            return  # one at a time over the link
        if self.gpu_kv_in_use() < cfg.migrate_at * cfg.gpu_kv_tokens:
            return
        cands = [r for r in self.requests if r.status == "running" and r.tier == "gpu"
                 and r.length >= cfg.t_input
                 and not r.note.startswith(("migration failed", "recovery failed"))]
        if not cands:
            return
        r = max(cands, key=lambda x: (x.length, -x.rid))
        if self._start_transfer(r, recovery=False):
            self.events.append(
                f"step {self.steps}: GPU KV at {self.gpu_kv_in_use():,} of "
                f"{cfg.gpu_kv_tokens:,} tokens: migrating request {r.rid} ({r.length} tokens) "
                "to the PNM tier in the background")

    def _start_transfer(self, r: Request, recovery: bool) -> bool:
        """Start writing the KV of GPU-tier request ``r`` to the node in the background; on
        failure it stays on the GPU, and the reason is noted."""
        assert self._bulk is not None
        what = "recovery" if recovery else "migration"
        n = r.kv[0][0].shape[0]
        try:
            futures = self._send_kv(r, self._bulk, n, self.now_ps)
        except (RemoteError, LinkTimeoutError) as e:
            self.events.append(f"step {self.steps}: {what} of request {r.rid} FAILED to "
                               f"start ({e}); it stays on the GPU")
            r.recovering = False
            self._abandon(r, f"{what} failed: {e}")
            return False
        r.migration = Migration(futures, n, self.now_ps, self.steps, recovery=recovery)
        return True

    def _release(self, req: Request) -> None:
        """Free what the node holds for a request, after its in-flight writes have landed."""
        if req.migration is not None:
            for f in req.migration.futures:
                try:
                    f.result()
                except (RemoteError, LinkTimeoutError) as e:
                    log.warning("request %d: %s", req.rid, e)
            req.migration = None
        if req.session is not None and self.client is not None:
            try:
                self.client.close_session(req.session)
            except (RemoteError, LinkTimeoutError) as e:
                log.warning("closing session %d: %s", req.session, e)
            req.session = None

    # -- one step ----------------------------------------------------------------------------------
    def step(self) -> StepReport:
        """One token for every running request."""
        live = [r for r in self.requests if r.status == "running"]
        if not live:
            raise RuntimeError("no running request to decode")
        rep = StepReport(len([r for r in live if r.tier == "gpu"]),
                         len([r for r in live if r.tier == "pnm"]))
        rep.migrating = [r.rid for r in self.requests if r.migration is not None]
        start = self.now_ps
        x = self.model.embed(torch.tensor([r.generated[-1] for r in live]))
        pos = torch.tensor([r.length - 1 for r in live])
        for r in live:
            r.max_error = r.max_engine_error = 0.0
        for layer in range(self.model.c.num_hidden_layers):
            x = self._layer(layer, live, x, pos, rep)
        nxt = self.model.logits(x).argmax(dim=-1).tolist()
        rep.others_ps += self._gpu_slice("launches, sampling", self.gpu.step_overhead_ps)
        for r, t in zip(live, nxt, strict=True):
            if r.status != "running":
                continue
            r.generated.append(int(t))
            if r.tier == "pnm":
                self._chunk_update(r, rep)
            if len(r.generated) >= r.max_new:
                r.status = "done"
                self._release(r)
        rep.step_ps = self.now_ps - start
        rep.tokens = len([r for r in live if r.status != "failed"])
        checked = [r for r in live if r.tier == "pnm" and r.full is not None
                   and r.status != "failed"]
        rep.errors = {r.rid: r.max_error for r in checked}
        rep.engine_errors = {r.rid: r.max_engine_error for r in checked}
        self.steps += 1
        self._migrations()
        return rep

    def _gpu_op(self, name: str, nbytes: float, flops: float = 0.0) -> int:
        return self._gpu_slice(name, self.gpu.op_ps(nbytes, flops))

    def _gpu_slice(self, name: str, dur: int) -> int:
        self.trace.slice("GPU node", "compute", name, self.now_ps, dur)
        self.now_ps += dur
        return dur

    def _layer(self, layer: int, live: list[Request], x: Tensor, pos: Tensor,
               rep: StepReport) -> Tensor:
        cfg, g = self.cfg, self._group
        b = len(live)
        rep.others_ps += self._gpu_op(f"L{layer} QKV", self._qkv_bytes,
                                      2 * self._qkv_bytes / BF16 * b)
        q, k, v = self.model.qkv(layer, x, pos)
        longs = [i for i, r in enumerate(live) if r.tier == "pnm" and r.status == "running"]
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
        rep.others_ps += self._gpu_op(f"L{layer} attention", gpu_bytes,
                                      4 * gpu_bytes / BF16 * g)
        gpu_done = self.now_ps
        latest = gpu_done
        lost: dict[int, str] = {}
        for i, f in futures.items():
            r = live[i]
            try:
                res = f.result()
            except DeviceDownError as e:
                lost[i] = f"layer {layer}: {e}"
                continue
            except (RemoteError, LinkTimeoutError) as e:
                r.status, r.note = "failed", f"node request failed at layer {layer}: {e}"
                log.error("request %d: %s", r.rid, r.note)
                attn[i] = local[i][0]
                continue
            self._record_node(r, layer, res, rep)
            t = res.timing
            latest = max(latest, t.arrive_ps)
            o_l, lse_l = local[i]
            merged = torch.empty_like(o_l)
            for h in range(len(res.o)):
                rows = slice(h * g, (h + 1) * g)
                o_n = torch.from_numpy(res.o[h])
                lse_n = torch.from_numpy(res.lse[h])
                top = torch.maximum(lse_l[rows], lse_n)
                wl, wn = torch.exp(lse_l[rows] - top), torch.exp(lse_n - top)
                merged[rows] = (o_l[rows] * wl[:, None] + o_n * wn[:, None]) / (wl + wn)[:, None]
            attn[i] = merged
            if r.full is not None:
                self._check(r, layer, q[i], merged, chosen[i])
        if latest > gpu_done:
            rep.wait_ps += latest - gpu_done
            self.trace.slice("GPU node", "compute", f"L{layer} wait for PNM", gpu_done,
                             latest - gpu_done)
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
        name = f"req {r.rid} L{layer}"
        self.trace.slice("link", "RoCE up", name, t.sent_ps, t.link_up_ps)
        self.trace.slice("link", "RoCE down", name, t.arrive_ps - t.link_down_ps, t.link_down_ps)
        for d, cycles in res.device_cycles.items():
            dur = round(cycles * 1e12 / SIM_CLOCK_HZ)
            self.trace.slice("PNM node", f"device {d}", name, res.device_start_ps[d], dur)
            rep.device_cycles[d] = rep.device_cycles.get(d, 0) + cycles

    # -- chunk update ------------------------------------------------------------------------------
    def _chunk_update(self, r: Request, rep: StepReport) -> None:
        """Cluster the oldest ``chunk`` tokens beyond the recent window and append them; the
        GPU drops them once the node has confirmed every write."""
        cfg = self.cfg
        pending = r.kv[0][0].shape[0] - cfg.sink
        if pending - cfg.recent < cfg.chunk:
            return
        assert self.client is not None and r.session is not None
        lo, hi = cfg.sink, cfg.sink + cfg.chunk
        futures, clusters = [], []
        for layer, (k, v) in enumerate(r.kv):
            clusters.append([])
            for h in range(k.shape[1]):
                kh, vh = k[lo:hi, h], v[lo:hi, h]
                cl = cluster_keys(kh, cfg.cluster, r.key_mean[layer][h])
                clusters[-1].append(cl)
                futures.append(self.client.write_kv_async(
                    r.session, layer, h, [to_bf16_bits(kh[m]) for m in cl.members],
                    [to_bf16_bits(vh[m]) for m in cl.members]))
        try:
            for f in futures:
                f.result()
        except DeviceDownError as e:
            self._recover(r, rep, f"chunk update: {e}")
            return
        except (RemoteError, LinkTimeoutError) as e:
            r.status, r.note = "failed", f"chunk update failed: {e}"
            log.error("request %d: %s", r.rid, r.note)
            return
        for layer, heads in enumerate(clusters):
            for h, cl in enumerate(heads):
                r.centroids[layer][h] = torch.cat([r.centroids[layer][h], cl.centroids])
                r.sizes[layer][h] = torch.cat([r.sizes[layer][h],
                                               torch.tensor([len(m) for m in cl.members])])
                if r.members:
                    base = cfg.sink + r.offloaded
                    r.members[layer][h] += [m + base for m in cl.members]
            k, v = r.kv[layer]
            keep = torch.cat([torch.arange(lo), torch.arange(hi, k.shape[0])])
            r.kv[layer] = (k[keep], v[keep])
        r.offloaded += cfg.chunk
        r.chunks += 1
        log.info("request %d: appended %d tokens to the node", r.rid, cfg.chunk)

    # -- recovery ----------------------------------------------------------------------------------
    def _recover(self, r: Request, rep: StepReport, why: str) -> None:
        """The node lost KV of ``r`` with a device: recompute the tokens it held (a prefill of
        the context up to them) and hold the whole context on the GPU; ``_migrations`` puts it
        back on the node, on the devices that survive."""
        cfg = self.cfg
        held = cfg.sink + r.offloaded  # tokens [sink, held) were on the node
        kv = self.model.context_kv(torch.tensor((r.prompt + r.generated)[:held]))
        rep.recovery_ps += self._gpu_op(f"req {r.rid} re-prefill ({held} tokens)",
                                        *self._prefill_cost(held))
        rep.recovered.append(r.rid)
        r.kv = [(torch.cat([k[:cfg.sink], rk[cfg.sink:], k[cfg.sink:]]),
                 torch.cat([v[:cfg.sink], rv[cfg.sink:], v[cfg.sink:]]))
                for (k, v), (rk, rv) in zip(r.kv, kv, strict=True)]
        self._release(r)  # what the old session still holds on the survivors
        r.tier, r.offloaded = "gpu", 0
        r.centroids, r.sizes, r.key_mean, r.members = [], [], [], []
        r.recoveries += 1
        r.recovering = True
        self.events.append(f"step {self.steps}: request {r.rid} lost its KV on the node ({why}); "
                           f"{held - cfg.sink} tokens recomputed on the GPU, to go back to the "
                           "devices that survive")
        log.warning("request %d: KV lost on the node (%s); recomputed", r.rid, why)

    def _prefill_cost(self, n: int) -> tuple[float, float]:
        """(bytes, FLOPs) of a prefill of ``n`` tokens that keeps only the KV: every layer's
        weights read once and its KV written; linear layers and causal attention."""
        c = self.model.c
        weights = (self._qkv_bytes + self._out_bytes) * c.num_hidden_layers
        kv = n * self._kv_token_bytes * c.num_hidden_layers
        attn = 2 * n * n * c.head_dim * c.num_attention_heads * c.num_hidden_layers
        return weights + kv, 2 * n * weights / BF16 + attn

    def close(self) -> None:
        for r in self.requests:
            self._release(r)
        if self._bulk is not None:
            self._bulk.close()
