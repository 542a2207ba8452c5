"""The executor's KV traffic with the node (paper 4.2, 4.3, 5.1): a long prompt's clusters
offloaded at prefill, a migration's or a recovery's KV written in the background and switched
to once every write is confirmed, chunk updates of generated tokens, and the recovery of KV the
node lost with a device. The scheduler (``scheduler.py``) decides which request moves; this
moves it and tells the scheduler how it went."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import torch

from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.emu.policy.states import Fallback, SeqState, Tier, Transfer
from nelssa.host.gpu.clustering import Clusters, cluster_keys
from nelssa.host.gpu.emulated_prefill import EmulatedPrefill
from nelssa.host.gpu.report import StepReport
from nelssa.host.gpu.request import Migration, Request, to_bf16_bits
from nelssa.host.pnm_node.client import NodeClient, NodeFuture
from nelssa.host.pnm_node.errors import DeviceDownError

if TYPE_CHECKING:
    from nelssa.host.gpu.decode import HybridDecoder

log = logging.getLogger(__name__)
BF16 = 2  # bytes
Tensor = torch.Tensor
_WHAT = {Transfer.MIGRATION: "migration", Transfer.RECOVERY: "recovery"}


def _cluster_bits(k: Tensor, v: Tensor, cl: Clusters) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each cluster's keys and values as bf16 bits: one gather and conversion per head, the
    clusters views of it."""
    order = torch.cat(cl.members)
    ends = np.cumsum([len(m) for m in cl.members])[:-1]
    return (np.split(to_bf16_bits(k[order]), ends), np.split(to_bf16_bits(v[order]), ends))


def _bound(futures: list[NodeFuture], sizes: list[int], room: int) -> None:
    """Wait for the oldest writes' replies until those not yet answered take at most
    ``room`` bytes (at least the last write waited for, when nothing fits)."""
    pending = [i for i, f in enumerate(futures) if not f.done()]
    while pending and sum(sizes[i] for i in pending) > room:
        futures[pending.pop(0)].result()


class NodeKv:
    """The KV-moving half of ``HybridDecoder`` (a mixin: it works on the decoder's state)."""

    # -- writing KV to the node ----------------------------------------------------------------
    def _send_kv(self: HybridDecoder, req: Request, client: NodeClient, n: int,
                 send_ps: int | None) -> list[NodeFuture]:
        """Open a session, cluster cache tokens [sink, n - recent) per layer and KV head, and
        send them; records centroids (the GPU's Centroid Meta-Info)."""
        left = self._open_kv(req, client, n)
        futures: list[NodeFuture] = []
        sizes_b: list[int] = []  # bytes of each write in ``futures``
        for layer, (k, v) in enumerate(req.kv):
            self._send_layer(req, client, layer, k, v, n, left, futures, sizes_b, send_ps)
        return futures

    def _open_kv(self: HybridDecoder, req: Request, client: NodeClient, n: int) -> int:
        """Open the request's session; the tokens it still generates."""
        c = self.model.c
        req.session = client.open_session(c.head_dim, c.group, "head")
        return req.max_new - len(req.generated) + 1

    def _send_layer(self: HybridDecoder, req: Request, client: NodeClient, layer: int,
                    k: Tensor, v: Tensor, n: int, left: int, futures: list[NodeFuture],
                    sizes_b: list[int], send_ps: int | None) -> None:
        """Allocate one layer's KV on the node, cluster it per KV head and write it (at most
        ``inflight_bytes`` unanswered), recording the layer's centroids."""
        c, cfg, s = self.model.c, self.cfg, req.session
        mid = n - cfg.sink - cfg.recent
        per_chunk = -(-cfg.chunk // cfg.cluster.tokens_per_cluster)
        est = -(-mid // cfg.cluster.tokens_per_cluster) * 2 + (
            -(-left // cfg.chunk) + 1) * per_chunk * 2 + 16
        client.alloc_kv(s, layer, list(range(c.num_key_value_heads)), est, n + left)
        mean = k[:n].mean(0, dtype=torch.float32)
        req.key_mean.append(mean)
        cents, sizes, members = [], [], []
        for h in range(c.num_key_value_heads):
            kh, vh = k[cfg.sink:n - cfg.recent, h], v[cfg.sink:n - cfg.recent, h]
            cl = cluster_keys(kh, cfg.cluster, mean[h])
            cents.append(cl.centroids)
            sizes.append(torch.tensor([len(m) for m in cl.members]))
            members.append([m + cfg.sink for m in cl.members])
            head_b = 2 * kh.shape[0] * kh.shape[1] * BF16
            _bound(futures, sizes_b, cfg.inflight_bytes - head_b)
            futures.append(client.write_kv_async(
                s, layer, h, *_cluster_bits(kh, vh, cl), send_ps=send_ps))
            sizes_b.append(head_b)
        req.centroids.append(cents)
        req.sizes.append(sizes)
        if cfg.check_accuracy:
            req.members.append(members)

    def _offload(self: HybridDecoder, req: Request) -> None:
        """Cluster and write a long prompt's KV to the node (from the prefill node); on failure
        keep the request on the GPU and say why."""
        assert self._bulk is not None
        try:
            futures = self._send_kv(req, self._bulk, len(req.prompt), None)
            for f in futures:
                f.result()
        except (RemoteError, LinkTimeoutError) as e:
            note = f"PNM offload failed ({e}); kept on the GPU"
            self._abandon(req, note)
            req.kv = [(k.float(), v.float()) for k, v in req.kv]  # the GPU's in float32
            self.sched.stay_on_gpu(req, Fallback.OFFLOAD_FAILED, note)
            return
        self._switch(req, len(req.prompt))

    def _offload_streamed(self: HybridDecoder, req: Request, held: torch.dtype) -> int:
        """The emulated prefill of a PNM-tier prompt with each layer's KV clustered and
        written to the node as the layer is made, the GPU keeping its window: one layer of
        the prompt's KV in host memory at a time (no accuracy check needs the rest). The
        first token; on failure the request stays on the GPU with its whole KV made again."""
        assert self._bulk is not None
        client, n, cfg = self._bulk, len(req.prompt), self.cfg
        futures: list[NodeFuture] = []
        sizes_b: list[int] = []
        window = torch.cat([torch.arange(cfg.sink), torch.arange(n - cfg.recent, n)])

        def keep(layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            self._send_layer(req, client, layer, k, v, n, left, futures, sizes_b, None)
            return k[window].float(), v[window].float()

        emu = EmulatedPrefill(self.model)
        try:
            # the first token is made by this prefill: not yet among the generated
            left = self._open_kv(req, client, n) - 1
            first, req.kv = emu.prefill(req.prompt, req.rid, held, keep)
            for f in futures:
                f.result()
        except (RemoteError, LinkTimeoutError) as e:
            note = f"PNM offload failed ({e}); kept on the GPU"
            self._abandon(req, note)
            first, req.kv = emu.prefill(req.prompt, req.rid, torch.float32)
            self.sched.stay_on_gpu(req, Fallback.OFFLOAD_FAILED, note)
            return first
        self._switch(req, n, windowed=True)
        return first

    def _abandon(self: HybridDecoder, req: Request, note: str) -> None:
        """A transfer that failed: free whatever the node holds, keep the GPU's KV."""
        self._release(req)
        req.note = note
        log.warning("request %d: %s", req.rid, note)
        req.centroids, req.sizes, req.key_mean, req.members = [], [], [], []

    def _switch(self: HybridDecoder, req: Request, n: int, windowed: bool = False) -> None:
        """The node holds tokens [sink, n - recent): attend there from now on and keep only
        the window on the GPU (``windowed``: ``req.kv`` is the window already)."""
        cfg = self.cfg
        req.tier = Tier.PNM
        req.offloaded = n - cfg.sink - cfg.recent
        if windowed:
            return
        if cfg.check_accuracy:
            req.full = [(k.float().clone(), v.float().clone()) for k, v in req.kv]
        length = req.kv[0][0].shape[0]
        keep = list(range(cfg.sink)) + list(range(n - cfg.recent, length))
        # the window in float32 (an emulated prefill's KV comes in bf16: the same values)
        req.kv = [(k[keep].float(), v[keep].float()) for k, v in req.kv]

    def _release(self: HybridDecoder, req: Request) -> None:
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

    # -- background transfers ------------------------------------------------------------------
    def _transfers(self: HybridDecoder) -> None:
        """What follows a step: switch to the node a transfer whose writes are all confirmed
        (in wall and emulated time); put back the KV of requests that recovered; start the
        migration the scheduler chooses."""
        for r in self.requests:
            m = r.migration
            if m is None or r.status is not SeqState.RUNNING:
                continue
            what = _WHAT[m.kind]
            if m.done_ps is None:
                # wait for the replies in wall time (quick), so the switch is decided in
                # emulated time alone and the run repeats exactly
                try:
                    m.done_ps = max(f.result().timing.arrive_ps for f in m.futures)
                except (RemoteError, LinkTimeoutError) as e:
                    self.events.append(f"step {self.steps}: {what} of request {r.rid} "
                                       f"FAILED ({e}); it stays on the GPU with its KV")
                    self._transfer_failed(r, m.kind, f"{what} failed: {e}")
                    continue
            if self.now_ps < m.done_ps:
                continue
            freed = r.kv[0][0].shape[0]
            self._switch(r, m.tokens)
            r.migration, r.recovering = None, False
            self.sched.transfer_done(r)
            freed -= r.kv[0][0].shape[0]
            self.tracer.transfer(what, r.rid, m.start_ps, m.done_ps - m.start_ps)
            self.events.append(
                f"step {self.steps}: {what} of request {r.rid} complete after "
                f"{self.steps - m.start_step} steps ({(m.done_ps - m.start_ps) / 1e6:.1f} us "
                f"emulated): {r.offloaded} tokens on the node, {freed} tokens of GPU KV freed")
        for r in self.requests:
            if r.recovering and r.migration is None and r.status is SeqState.RUNNING:
                self._start_transfer(r, Transfer.RECOVERY)
        if self._bulk is None:
            return
        r = self.sched.choose_migration()
        if r is not None and self._start_transfer(r, Transfer.MIGRATION):
            kv = self.sched.kv
            self.events.append(
                f"step {self.steps}: GPU KV at {kv.used():,} of {kv.total:,} blocks: migrating "
                f"request {r.rid} ({r.length} tokens) to the PNM tier in the background")

    def _start_transfer(self: HybridDecoder, r: Request, kind: Transfer) -> bool:
        """Start writing the KV of GPU-tier request ``r`` to the node in the background; on
        failure it stays on the GPU, and the reason is noted."""
        assert self._bulk is not None
        what = _WHAT[kind]
        n = r.kv[0][0].shape[0]
        try:
            futures = self._send_kv(r, self._bulk, n, self.now_ps)
        except (RemoteError, LinkTimeoutError) as e:
            self.events.append(f"step {self.steps}: {what} of request {r.rid} FAILED to "
                               f"start ({e}); it stays on the GPU")
            self._transfer_failed(r, kind, f"{what} failed: {e}")
            return False
        r.migration = Migration(futures, n, self.now_ps, self.steps, kind)
        self.sched.transfer_started(r, kind)
        return True

    def _transfer_failed(self: HybridDecoder, r: Request, kind: Transfer, note: str) -> None:
        r.recovering = False
        self._abandon(r, note)
        self.sched.transfer_failed(r, kind, note)

    def _cancel_transfer(self: HybridDecoder, r: Request) -> None:
        """``r`` was preempted while its KV was on its way to the node: the transfer is
        abandoned (a recovery is tried again once it runs)."""
        if r.migration is None:
            return
        self._release(r)
        r.centroids, r.sizes, r.key_mean, r.members = [], [], [], []

    # -- chunk updates and recovery ------------------------------------------------------------
    def _chunk_update(self: HybridDecoder, r: Request, rep: StepReport) -> None:
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
                    r.session, layer, h, *_cluster_bits(kh, vh, cl)))
        try:
            for f in futures:
                f.result()
        except DeviceDownError as e:
            self._recover(r, rep, f"chunk update: {e}")
            return
        except (RemoteError, LinkTimeoutError) as e:
            r.status, r.note = SeqState.FAILED, f"chunk update failed: {e}"
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

    def _recover(self: HybridDecoder, r: Request, rep: StepReport, why: str) -> None:
        """The node lost KV of ``r`` with a device: recompute the tokens it held (a prefill of
        the context up to them) and hold the whole context on the GPU; ``_transfers`` puts it
        back on the node, on the devices that survive."""
        cfg = self.cfg
        held = cfg.sink + r.offloaded  # tokens [sink, held) were on the node
        if r.emulated_prefill:  # made again by the emulated prefill node: the prompt's KV as
            # first handed over (its blocks are seeded), the generated tokens' synthetic too
            emu = EmulatedPrefill(self.model)
            kv = [emu.layer_kv(layer, held, r.rid)
                  for layer in range(self.model.c.num_hidden_layers)]
        else:
            kv = self.model.context_kv(torch.tensor((r.prompt + r.generated)[:held]))
        rep.recovery_ps += self._gpu_op(f"req {r.rid} re-prefill ({held} tokens)",
                                        *self._prefill_cost(held))
        rep.recovered.append(r.rid)
        r.kv = [(torch.cat([k[:cfg.sink], rk[cfg.sink:], k[cfg.sink:]]),
                 torch.cat([v[:cfg.sink], rv[cfg.sink:], v[cfg.sink:]]))
                for (k, v), (rk, rv) in zip(r.kv, kv, strict=True)]
        self._release(r)  # what the old session still holds on the survivors
        r.tier, r.offloaded = Tier.GPU, 0  # the scheduler's accounting follows after the step
        r.centroids, r.sizes, r.key_mean, r.members = [], [], [], []
        r.recoveries += 1
        r.recovering = True
        self.events.append(f"step {self.steps}: request {r.rid} lost its KV on the node ({why}); "
                           f"{held - cfg.sink} tokens recomputed on the GPU, to go back to the "
                           "devices that survive")
        log.warning("request %d: KV lost on the node (%s); recomputed", r.rid, why)

    def _prefill_cost(self: HybridDecoder, n: int) -> tuple[float, float]:
        """(bytes, FLOPs) of a prefill of ``n`` tokens that keeps only the KV: every layer's
        weights read once and its KV written; linear layers and causal attention."""
        c = self.model.c
        weights = (self._qkv_bytes + self._out_bytes) * c.num_hidden_layers
        kv = n * self._kv_token_bytes * c.num_hidden_layers
        attn = 2 * n * n * c.head_dim * c.num_attention_heads * c.num_hidden_layers
        return weights + kv, 2 * n * weights / BF16 + attn
