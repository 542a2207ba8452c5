"""The log-sum-exp merge (paper 4.2, 6.2; online softmax): partial attention results of one
query head over disjoint sets of keys, (O_i, L_i) with L_i = ln sum_j exp(s_j) over part i's
scores and O_i its softmax-weighted values, combine exactly into the result over the union:

    m = max_i L_i,   w_i = exp(L_i - m),   O = sum_i w_i O_i / sum_i w_i,   L = m + ln sum_i w_i

(subtracting m keeps every exp in (0, 1]). One formula, two front-ends: ``merge_np`` on numpy
arrays (the node's aggregator, in float64) and ``merge_torch`` on tensors (the GPU's merge of
its window with the node's reply, in float32). Both compute in the dtype they are given and
sum the parts in their order (part 0 first)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _merge(o: Any, lse: Any, exp: Callable[[Any], Any], log: Callable[[Any], Any],
           max0: Callable[[Any], Any], sum0: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``o`` (parts, heads, head_dim), ``lse`` (parts, heads) -> (O (heads, head_dim), LSE)."""
    top = max0(lse)
    w = exp(lse - top)
    total = sum0(w)
    return sum0(w[:, :, None] * o) / total[:, None], top + log(total)


def merge_np(o: np.ndarray, lse: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The merge on numpy arrays, in their dtype."""
    if o.ndim != 3 or lse.shape != o.shape[:2] or not o.shape[0]:
        raise ValueError(f"merge needs O (parts, heads, dim) and LSE (parts, heads), got "
                         f"{o.shape} and {lse.shape}")
    return _merge(o, lse, np.exp, np.log, lambda x: x.max(axis=0), lambda x: x.sum(axis=0))


def merge_torch(o: Any, lse: Any) -> tuple[Any, Any]:
    """The merge on torch tensors, in their dtype."""
    import torch

    if o.dim() != 3 or tuple(lse.shape) != tuple(o.shape[:2]) or not o.shape[0]:
        raise ValueError(f"merge needs O (parts, heads, dim) and LSE (parts, heads), got "
                         f"{tuple(o.shape)} and {tuple(lse.shape)}")
    return _merge(o, lse, torch.exp, torch.log, lambda x: x.amax(dim=0),
                  lambda x: x.sum(dim=0))
