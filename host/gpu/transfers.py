"""The co-simulation's KV traffic with the node (paper 4.2, 4.3, 5.1): a long prompt's clusters
offloaded at prefill, a migration's or a recovery's KV written in the background and switched
to once every write is confirmed, and chunk updates of generated tokens. The engine
(``engine.py``) decides which request moves and follows what this reports; the executor
(``executor.py``) offloads and appends through it while it runs a step. It works on the
executor's per-request state (``RequestKv``) and never on the scheduler's."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

import numpy as np
import torch

from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.emu.policy.states import Transfer
from nelssa.host.gpu.clustering import Clusters, cluster_keys
from nelssa.host.gpu.emulated_prefill import EmulatedPrefill
from nelssa.host.gpu.model import Llama
from nelssa.host.gpu.request import DecodeConfig, Migration, Request, RequestKv, to_bf16_bits
from nelssa.host.pnm_node.client import NodeClient, NodeFuture

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


class Settled(enum.Enum):
    """Where a background transfer stands after a step."""

    PENDING = "pending"
    DONE = "done"
    """Every write confirmed by now (emulated time): the node holds the KV."""
    FAILED = "failed"


@dataclass
class TransferNews:
    """A background transfer that ended: how, and for people, what happened."""

    kind: Transfer
    settled: Settled
    event: str
    note: str = ""
    start_ps: int = 0
    done_ps: int = 0

    @property
    def what(self) -> str:
        return _WHAT[self.kind]


class KvTransfers:
    """Writes requests' KV to the node, over a queue pair of its own for bulk transfers (so
    they do not queue ahead of attention requests on the link; sharing of the link's
    bandwidth between queue pairs is not modelled)."""

    def __init__(self, model: Llama, cfg: DecodeConfig, client: NodeClient | None) -> None:
        self.model, self.cfg, self.client = model, cfg, client
        # (a queue pair of the same client: it reaches the sessions the offloads open)
        self.bulk = client.queue_pair() if client is not None else None

    # -- writing KV to the node ----------------------------------------------------------------
    def _send_kv(self, req: Request, kv: RequestKv, client: NodeClient, n: int,
                 send_ps: int | None, made: int = 0) -> list[NodeFuture]:
        """Open a session, cluster cache tokens [sink, n - recent) per layer and KV head, and
        send them; records centroids (the GPU's Centroid Meta-Info). ``made``: tokens made
        and not yet among the request's generated (a prefill's first)."""
        left = self._open_kv(req, kv, client) - made
        futures: list[NodeFuture] = []
        sizes_b: list[int] = []  # bytes of each write in ``futures``
        for layer, (k, v) in enumerate(kv.kv):
            self._send_layer(kv, client, layer, k, v, n, left, futures, sizes_b, send_ps)
        return futures

    def _open_kv(self, req: Request, kv: RequestKv, client: NodeClient) -> int:
        """Open the request's session; the tokens it still generates."""
        c = self.model.c
        kv.session = client.open_session(c.head_dim, c.group, "head")
        return req.max_new - len(req.generated) + 1

    def _send_layer(self, kv: RequestKv, client: NodeClient, layer: int, k: Tensor, v: Tensor,
                    n: int, left: int, futures: list[NodeFuture], sizes_b: list[int],
                    send_ps: int | None) -> None:
        """Allocate one layer's KV on the node, cluster it per KV head and write it (at most
        ``inflight_bytes`` unanswered), recording the layer's centroids."""
        c, cfg, s = self.model.c, self.cfg, kv.session
        assert s is not None
        mid = n - cfg.sink - cfg.recent
        per_chunk = -(-cfg.chunk // cfg.cluster.tokens_per_cluster)
        est = -(-mid // cfg.cluster.tokens_per_cluster) * 2 + (
            -(-left // cfg.chunk) + 1) * per_chunk * 2 + 16
        client.alloc_kv(s, layer, list(range(c.num_key_value_heads)), est, n + left)
        mean = k[:n].mean(0, dtype=torch.float32)
        kv.key_mean.append(mean)
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
        kv.centroids.append(cents)
        kv.sizes.append(sizes)
        if cfg.check_accuracy:
            kv.members.append(members)

    def offload(self, req: Request, kv: RequestKv) -> str | None:
        """Cluster and write a long prompt's KV to the node (from the prefill node); on failure
        the GPU keeps it all, and why is returned."""
        assert self.bulk is not None
        try:
            futures = self._send_kv(req, kv, self.bulk, len(req.prompt), None, made=1)
            for f in futures:
                f.result()
        except (RemoteError, LinkTimeoutError) as e:
            note = f"PNM offload failed ({e}); kept on the GPU"
            self.abandon(req.rid, kv, note)
            kv.kv = [(k.float(), v.float()) for k, v in kv.kv]  # the GPU's in float32
            return note
        self.switch(kv, len(req.prompt))
        return None

    def offload_streamed(self, req: Request, kv: RequestKv,
                         held: torch.dtype) -> tuple[int, str | None]:
        """The emulated prefill of a PNM-tier prompt with each layer's KV clustered and
        written to the node as the layer is made, the GPU keeping its window: one layer of
        the prompt's KV in host memory at a time (no accuracy check needs the rest). The
        first token, and why the request stays on the GPU (its whole KV made again) if the
        writes failed."""
        assert self.bulk is not None
        client, n, cfg = self.bulk, len(req.prompt), self.cfg
        futures: list[NodeFuture] = []
        sizes_b: list[int] = []
        window = torch.cat([torch.arange(cfg.sink), torch.arange(n - cfg.recent, n)])

        def keep(layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            self._send_layer(kv, client, layer, k, v, n, left, futures, sizes_b, None)
            return k[window].float(), v[window].float()

        emu = EmulatedPrefill(self.model)
        try:
            # the first token is made by this prefill: not yet among the generated
            left = self._open_kv(req, kv, client) - 1
            first, kv.kv = emu.prefill(req.prompt, req.rid, held, keep)
            for f in futures:
                f.result()
        except (RemoteError, LinkTimeoutError) as e:
            note = f"PNM offload failed ({e}); kept on the GPU"
            self.abandon(req.rid, kv, note)
            first, kv.kv = emu.prefill(req.prompt, req.rid, torch.float32)
            return first, note
        self.switch(kv, n, windowed=True)
        return first, None

    def abandon(self, rid: int, kv: RequestKv, note: str) -> None:
        """A transfer that failed: free whatever the node holds, keep the GPU's KV."""
        self.release(rid, kv)
        log.warning("request %d: %s", rid, note)
        kv.centroids, kv.sizes, kv.key_mean, kv.members = [], [], [], []

    def switch(self, kv: RequestKv, n: int, windowed: bool = False) -> None:
        """The node holds tokens [sink, n - recent): attend there from now on and keep only
        the window on the GPU (``windowed``: ``kv.kv`` is the window already)."""
        cfg = self.cfg
        kv.remote = True
        kv.offloaded = n - cfg.sink - cfg.recent
        if windowed:
            return
        if cfg.check_accuracy:
            kv.full = [(k.float().clone(), v.float().clone()) for k, v in kv.kv]
        length = kv.kv[0][0].shape[0]
        keep = list(range(cfg.sink)) + list(range(n - cfg.recent, length))
        # the window in float32 (an emulated prefill's KV comes in bf16: the same values)
        kv.kv = [(k[keep].float(), v[keep].float()) for k, v in kv.kv]

    def release(self, rid: int, kv: RequestKv) -> None:
        """Free what the node holds for a request, after its in-flight writes have landed."""
        if kv.migration is not None:
            for f in kv.migration.futures:
                try:
                    f.result()
                except (RemoteError, LinkTimeoutError) as e:
                    log.warning("request %d: %s", rid, e)
            kv.migration = None
        if kv.session is not None and self.client is not None:
            try:
                self.client.close_session(kv.session)
            except (RemoteError, LinkTimeoutError) as e:
                log.warning("closing session %d: %s", kv.session, e)
            kv.session = None

    # -- background transfers ------------------------------------------------------------------
    def settle(self, rid: int, kv: RequestKv, now_ps: int, step: int) -> TransferNews | None:
        """A background transfer of ``rid``'s KV after a step: None while it is on its way;
        done once every write is confirmed by ``now_ps`` (the GPU then attends on the node and
        keeps its window), or failed (the GPU keeps its KV)."""
        m = kv.migration
        if m is None:
            return None
        what = _WHAT[m.kind]
        if m.done_ps is None:
            # wait for the replies in wall time (quick), so the switch is decided in emulated
            # time alone and the run repeats exactly
            try:
                m.done_ps = max(f.result().timing.arrive_ps for f in m.futures)
            except (RemoteError, LinkTimeoutError) as e:
                note = f"{what} failed: {e}"
                kv.recovering = False
                self.abandon(rid, kv, note)
                return TransferNews(m.kind, Settled.FAILED, f"step {step}: {what} of request "
                                    f"{rid} FAILED ({e}); it stays on the GPU with its KV", note)
        if now_ps < m.done_ps:
            return None
        freed = kv.kv[0][0].shape[0]
        self.switch(kv, m.tokens)
        kv.migration, kv.recovering = None, False
        freed -= kv.kv[0][0].shape[0]
        return TransferNews(m.kind, Settled.DONE, (
            f"step {step}: {what} of request {rid} complete after {step - m.start_step} steps "
            f"({(m.done_ps - m.start_ps) / 1e6:.1f} us emulated): {kv.offloaded} tokens on the "
            f"node, {freed} tokens of GPU KV freed"), start_ps=m.start_ps, done_ps=m.done_ps)

    def start(self, req: Request, kv: RequestKv, kind: Transfer, now_ps: int,
              step: int) -> TransferNews | None:
        """Start writing the KV of GPU-tier request ``req`` to the node in the background;
        None once under way, else the news of its failure (it stays on the GPU)."""
        assert self.bulk is not None
        what = _WHAT[kind]
        n = kv.kv[0][0].shape[0]
        try:
            futures = self._send_kv(req, kv, self.bulk, n, now_ps)
        except (RemoteError, LinkTimeoutError) as e:
            note = f"{what} failed: {e}"
            kv.recovering = False
            self.abandon(req.rid, kv, note)
            return TransferNews(kind, Settled.FAILED, f"step {step}: {what} of request "
                                f"{req.rid} FAILED to start ({e}); it stays on the GPU", note)
        kv.migration = Migration(futures, n, now_ps, step, kind)
        return None

    def cancel(self, rid: int, kv: RequestKv) -> None:
        """The request was preempted while its KV was on its way to the node: the transfer is
        abandoned (a recovery is tried again once it runs)."""
        if kv.migration is None:
            return
        self.release(rid, kv)
        kv.centroids, kv.sizes, kv.key_mean, kv.members = [], [], [], []

    # -- chunk updates -------------------------------------------------------------------------
    def chunk_update(self, rid: int, kv: RequestKv) -> None:
        """Cluster the oldest ``chunk`` tokens beyond the recent window and append them; the
        GPU drops them once the node has confirmed every write. The node's errors are raised
        (a lost device's ``DeviceDownError`` among them), the GPU's KV unchanged."""
        cfg = self.cfg
        pending = kv.kv[0][0].shape[0] - cfg.sink
        if pending - cfg.recent < cfg.chunk:
            return
        assert self.client is not None and kv.session is not None
        lo, hi = cfg.sink, cfg.sink + cfg.chunk
        futures, clusters = [], []
        for layer, (k, v) in enumerate(kv.kv):
            clusters.append([])
            for h in range(k.shape[1]):
                kh, vh = k[lo:hi, h], v[lo:hi, h]
                cl = cluster_keys(kh, cfg.cluster, kv.key_mean[layer][h])
                clusters[-1].append(cl)
                futures.append(self.client.write_kv_async(
                    kv.session, layer, h, *_cluster_bits(kh, vh, cl)))
        for f in futures:
            f.result()
        for layer, heads in enumerate(clusters):
            for h, cl in enumerate(heads):
                kv.centroids[layer][h] = torch.cat([kv.centroids[layer][h], cl.centroids])
                kv.sizes[layer][h] = torch.cat([kv.sizes[layer][h],
                                                torch.tensor([len(m) for m in cl.members])])
                if kv.members:
                    base = cfg.sink + kv.offloaded
                    kv.members[layer][h] += [m + base for m in cl.members]
            k, v = kv.kv[layer]
            keep = torch.cat([torch.arange(lo), torch.arange(hi, k.shape[0])])
            kv.kv[layer] = (k[keep], v[keep])
        kv.offloaded += cfg.chunk
        kv.chunks += 1
        log.info("request %d: appended %d tokens to the node", rid, cfg.chunk)

    def close(self) -> None:
        if self.bulk is not None:
            self.bulk.close()
