"""Output aggregator: partial attention results of one query head, computed over disjoint sets
of clusters (on different devices), merged by their log-sum-exp (``emu/policy/merge.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from nelssa.emu.policy.merge import merge_np

F32 = npt.NDArray[np.float32]


def merge_partials(parts: Sequence[tuple[F32, F32]]) -> tuple[F32, F32]:
    """Merge (O (heads, head_dim), LSE (heads,)) partials. One partial is returned as it is
    (bit for bit); several are merged in float64 and rounded once to float32."""
    if not parts:
        raise ValueError("nothing to merge")
    if len(parts) == 1:
        return parts[0]
    o, lse = merge_np(np.stack([p[0] for p in parts]).astype(np.float64),
                      np.stack([p[1] for p in parts]).astype(np.float64))
    return o.astype(np.float32), lse.astype(np.float32)
