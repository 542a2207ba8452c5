"""A synthetic needle-in-a-haystack at the attention level (the paper's Figure 13 analogue):
keys share a common offset (as real keys do, which is why clustering centres them), a needle span
of keys aligned with the query sits at a chosen depth, and the question is whether top-K cluster
selection finds it and how far the sparse output is from dense attention."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from nelssa.emu.latency.model import Sparsity
from nelssa.host.gpu.clustering import ClusterConfig, cluster_keys, select_clusters

Tensor = torch.Tensor

_SPARSITY = Sparsity()


@dataclass(frozen=True)
class NeedleResult:
    context: int
    depth: float
    selection: float
    recall: float
    """Share of the needle's tokens inside the selected clusters (or the GPU window)."""
    rel_error: float
    """max |O_sparse - O_dense| / max |O_dense| over the query heads."""


def needle_case(context: int, depth: float, selection: float, seed: int = 0,
                **kw: float) -> NeedleResult:
    """One case (``needle_cases``' keyword arguments)."""
    return needle_cases(context, depth, (selection,), seed, **kw)[0]


def needle_cases(context: int, depth: float, selections: Sequence[float], seed: int = 0,
                 head_dim: int = 128, group: int = 4, needle_tokens: int = 16,
                 sink: int = _SPARSITY.sink_tokens, recent: int = _SPARSITY.recent_tokens,
                 offset_scale: float = 4.0,
                 needle_gain: float = 12.0, distractors: float = 0.0,
                 distractor_alignment: float = 0.7) -> list[NeedleResult]:
    """One context at each of ``selections``: the keys drawn and clustered once (what dominates
    the cost), each share selected from the same clusters, so each result is what
    ``needle_case`` gives for it alone. ``distractors``: share of the context made of keys
    partly aligned with the query (``distractor_alignment`` of the needle's direction),
    scattered at random positions, so that they compete with the needle for the selected
    clusters."""
    g = torch.Generator().manual_seed(seed)
    offset = torch.randn(head_dim, generator=g) * offset_scale / math.sqrt(head_dim)
    keys = torch.randn(context, head_dim, generator=g) / math.sqrt(head_dim) * 2 + offset
    values = torch.randn(context, head_dim, generator=g)
    direction = torch.nn.functional.normalize(torch.randn(head_dim, generator=g), dim=0)
    if distractors:
        n = int(distractors * context)
        pos = torch.randperm(context - sink - recent, generator=g)[:n] + sink
        other = torch.nn.functional.normalize(torch.randn(n, head_dim, generator=g), dim=1)
        a = distractor_alignment
        mix = torch.nn.functional.normalize(a * direction + (1 - a * a) ** 0.5 * other, dim=1)
        keys[pos] = offset + mix * needle_gain
    start = sink + int(depth * (context - sink - recent - needle_tokens))
    span = torch.arange(start, start + needle_tokens)
    keys[span] = offset + direction * needle_gain + torch.randn(
        needle_tokens, head_dim, generator=g) * 0.3 / math.sqrt(head_dim)
    noise = torch.randn(group, head_dim, generator=g) * 0.5 / math.sqrt(head_dim)
    q = direction * needle_gain + noise
    mid = torch.arange(sink, context - recent)
    cl = cluster_keys(keys[mid], ClusterConfig(), keys.mean(0))
    scale = 1 / math.sqrt(head_dim)
    dense = torch.softmax(q @ keys.T * scale, -1) @ values
    out = []
    for selection in selections:
        count = max(1, math.ceil(selection * len(cl.members)))
        chosen = select_clusters(q, cl.centroids, count)
        picked = torch.cat([cl.members[int(i)] for i in chosen]) + sink
        keep = torch.cat([torch.arange(sink), picked, torch.arange(context - recent, context)])
        found = torch.isin(span, keep).float().mean().item()
        sparse = torch.softmax(q @ keys[keep].T * scale, -1) @ values[keep]
        err = float((sparse - dense).abs().max() / dense.abs().max())
        out.append(NeedleResult(context, depth, selection, found, err))
    return out
