"""Segmented spherical k-means of one KV head's keys (RetroInfer, paper 4.2; DESIGN.md Reference
parameters): keys centred by the head's mean, normalised, clustered by inner product in segments
of about 8K tokens with about 16 tokens per cluster, 10 iterations, deterministic start. Clusters
larger than the device takes are split. The Centroid Meta-Info is the mean key of each cluster
(ranking clusters by q . mean equals ranking by q . centred mean: the head mean adds the same
q . mu to every cluster)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nelssa.emu.latency.model import Sparsity
from nelssa.hw.model.engine import EngineParams

Tensor = torch.Tensor
_SPARSITY = Sparsity()


@dataclass(frozen=True)
class ClusterConfig:
    """How keys are clustered."""

    tokens_per_cluster: int = round(_SPARSITY.compression)
    """Average cluster size the segment's cluster count is chosen for (Sparsity.compression)."""
    segment_tokens: int = _SPARSITY.segment_tokens
    """Tokens clustered together; longer runs are cut into segments."""
    iterations: int = _SPARSITY.kmeans_iterations
    """k-means iterations per segment."""
    max_cluster_tokens: int = EngineParams().max_cluster_tokens
    """Largest cluster the device takes (what its CAPS reports: the model device's
    MaxClusterTokens); larger ones are split in token order."""

    def __post_init__(self) -> None:
        for name in ("tokens_per_cluster", "segment_tokens", "iterations",
                     "max_cluster_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class Clusters:
    members: list[Tensor]
    """Token indices (into the keys given) of each cluster, ascending."""
    centroids: Tensor
    """(clusters, head_dim) mean key of each cluster."""


def _cluster_sums(rows: Tensor, order: Tensor, counts: Tensor) -> Tensor:
    """Each cluster's sum of ``rows``: ``order`` lists the rows cluster by cluster (ascending
    within one, as a stable sort by cluster gives them), ``counts`` each cluster's rows. A
    segmented sum: an order of magnitude faster here than ``index_add_``, the same sums."""
    return torch.segment_reduce(rows[order], "sum", lengths=counts)


def _kmeans(seg: Tensor, k: int, iterations: int) -> tuple[Tensor, Tensor]:
    """Spherical k-means of unit rows ``seg`` after ``iterations`` rounds of assignment and
    update from evenly spaced rows: the rows cluster by cluster (ascending within one, as a
    stable sort by cluster gives them) and each cluster's row count. Stops early once an
    assignment repeats the last one: the centres it would compute are the ones it has, so
    every later round is the same (the result is the full count's). The last round's centres
    are not computed: nothing uses them."""
    centers = seg[torch.linspace(0, seg.shape[0] - 1, k).round().long()].clone()
    scores = torch.empty(seg.shape[0], k, device=seg.device)
    assign: Tensor | None = None
    for round_ in range(iterations):
        new = torch.mm(seg, centers.T, out=scores).argmax(dim=1)
        if assign is not None and torch.equal(new, assign):
            break
        assign = new
        counts = torch.bincount(assign, minlength=k)
        order = torch.argsort(assign, stable=True)
        if round_ == iterations - 1:
            break
        sums = _cluster_sums(seg, order, counts)
        keep = counts > 0  # an empty cluster keeps its centre
        centers[keep] = torch.nn.functional.normalize(sums[keep], dim=-1)
    assert assign is not None  # iterations >= 1 (ClusterConfig)
    return order, counts


def cluster_keys(keys: Tensor, cfg: ClusterConfig, mean: Tensor | None = None) -> Clusters:
    """Cluster ``keys`` (tokens, head_dim; float32, or bfloat16 taken as float32); ``mean``
    is the head's key mean (the float32 keys' own mean when None). Worked a segment at a
    time: every temporary is a segment's (a few MB, which the allocator reuses, where whole-
    head ones would each be fresh pages to fault in), with the same bits as whole-head
    arithmetic (all of it is row-wise, and each cluster lies in one segment)."""
    if keys.ndim != 2 or keys.shape[0] == 0:
        raise ValueError(f"keys must be (tokens >= 1, head_dim), got {tuple(keys.shape)}")
    mu = keys.float().mean(0) if mean is None else mean
    orders, sizes, sums = [], [], []
    for start in range(0, keys.shape[0], cfg.segment_tokens):
        seg_keys = keys[start:start + cfg.segment_tokens].float()
        seg = torch.nn.functional.normalize(seg_keys - mu, dim=-1)
        k = max(1, -(-seg.shape[0] // cfg.tokens_per_cluster))
        order, counts = _kmeans(seg, k, cfg.iterations)
        seg_sizes = []
        for n in counts.tolist():
            whole, rest = divmod(n, cfg.max_cluster_tokens)  # larger ones split in order
            seg_sizes += [cfg.max_cluster_tokens] * whole + ([rest] if rest else [])
        sums.append(_cluster_sums(seg_keys, order, torch.tensor(seg_sizes, device=keys.device)))
        orders.append(order + start)
        sizes += seg_sizes
    order = torch.cat(orders)
    counts = torch.tensor(sizes, dtype=torch.float32, device=keys.device)
    means = torch.cat(sums) / counts[:, None]
    return Clusters(list(torch.split(order, sizes)), means)


def select_clusters(q_group: Tensor, centroids: Tensor, count: int) -> Tensor:
    """Top ``count`` clusters of one KV head for its query heads (group, head_dim): scores
    summed over the group (GQA); ids ascending."""
    scores = (q_group @ centroids.T).sum(0)
    k = min(count, centroids.shape[0])
    return torch.sort(torch.topk(scores, k).indices).values
