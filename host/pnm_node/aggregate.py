"""Output aggregator: partial attention results of one query head, computed over disjoint sets
of clusters (on different devices), merged by their log-sum-exp (``emu/policy/merge.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from nelssa.emu.policy.merge import merge_np

if TYPE_CHECKING:
    from nelssa.driver.command import AttnRequest, CommandQueue

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


def attend_split(cq: CommandQueue, requests: Sequence[AttnRequest], units: int | None = None
                 ) -> list[tuple[F32, F32]]:
    """(O, LSE) of each request as one device of a node computes it: the batch cut over the
    device's units (``CommandQueue.split``), run, and each request's parts merged. Raises
    RuntimeError naming the request if a part completes with an error."""
    parts = cq.split(requests, units)
    ids = cq.submit([p.attn for p in parts])
    done = cq.wait(ids)
    mine: list[list[tuple[F32, F32]]] = [[] for _ in requests]
    for i, p in zip(ids, parts, strict=True):
        out = done[i]
        if out.o is None or out.lse is None:
            raise RuntimeError(f"request {p.request}: descriptor {i} completed with "
                               f"{out.status.name}")
        mine[p.request].append((out.o, out.lse))
    return [merge_partials(m) for m in mine]
