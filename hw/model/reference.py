"""float64 reference of the engine's attention, for error bounds (not bit-exact)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.fp import as_f32, bf16_to_f32_bits


def bf16_to_f64(bits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """bf16 bits to float64 values under the engine's input policy (subnormals read as zero)."""
    return as_f32(bf16_to_f32_bits(bits)).astype(np.float64)


def attend_f64(
    q: npt.NDArray[np.uint16],
    keys: Sequence[npt.NDArray[np.uint16]],
    values: Sequence[npt.NDArray[np.uint16]],
    scale: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Exact-ish attention of query heads ``q`` (H, D) over the concatenated clusters.

    Returns O (H, D) and the natural-log LSE (H,), both float64.
    """
    qd = bf16_to_f64(q)
    kd = bf16_to_f64(np.concatenate(list(keys), axis=0))
    vd = bf16_to_f64(np.concatenate(list(values), axis=0))
    s = (qd @ kd.T) * float(np.float32(scale))
    mx = s.max(axis=1, keepdims=True)
    w = np.exp(s - mx)
    denom = w.sum(axis=1, keepdims=True)
    o = (w @ vd) / denom
    lse = (mx + np.log(denom))[:, 0]
    return o, lse
