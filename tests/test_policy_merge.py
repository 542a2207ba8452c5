"""The one LSE merge (emu/policy/merge.py): exact against attention over the union of the
parts' keys, in float64; its float32 front-end on tensors bounded against float64; the node's
aggregator and the GPU use it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nelssa.emu.policy.merge import merge_np, merge_torch
from nelssa.host.pnm_node.aggregate import merge_partials


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Softmax attention of each query head over (keys, dim), in float64: (O, LSE)."""
    s = q @ k.T
    top = s.max(axis=1, keepdims=True)
    e = np.exp(s - top)
    return (e @ v) / e.sum(axis=1, keepdims=True), top[:, 0] + np.log(e.sum(axis=1))


def _parts(seed: int, parts: int, heads: int = 4, dim: int = 32, scale: float = 3.0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(heads, dim)) * scale / np.sqrt(dim)
    k = rng.normal(size=(parts * 50, dim)) * scale
    v = rng.normal(size=(parts * 50, dim))
    cuts = np.sort(rng.choice(np.arange(1, len(k)), parts - 1, replace=False))
    spans = np.split(np.arange(len(k)), cuts)
    out = [_attend(q, k[s], v[s]) for s in spans]
    return out, _attend(q, k, v)


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_merge_is_attention_over_the_union_in_float64(parts: int) -> None:
    for seed in range(5):
        got, whole = _parts(seed, parts)
        o, lse = merge_np(np.stack([g[0] for g in got]), np.stack([g[1] for g in got]))
        assert np.abs(o - whole[0]).max() <= 1e-12 * np.abs(whole[0]).max()
        assert np.abs(lse - whole[1]).max() <= 1e-12 * np.abs(whole[1]).max()


@pytest.mark.parametrize("parts", [2, 5])
def test_float32_merge_on_tensors_is_bounded_against_float64(parts: int) -> None:
    """The GPU merges in float32: within a few ulps of the largest output (measured: worst
    7.6e-7 relative over 2 parts, 1.1e-6 over 5, 20 seeds each), bounded at 4e-6; its LSE to
    1e-6 relative."""
    worst = 0.0
    for seed in range(20):
        got, _ = _parts(seed, parts, scale=6.0)
        o64 = np.stack([g[0] for g in got])
        l64 = np.stack([g[1] for g in got])
        ref_o, ref_l = merge_np(o64, l64)
        o32, l32 = merge_torch(torch.from_numpy(o64.astype(np.float32)),
                               torch.from_numpy(l64.astype(np.float32)))
        assert o32.dtype == torch.float32
        err = float(np.abs(o32.numpy() - ref_o).max() / np.abs(ref_o).max())
        worst = max(worst, err)
        assert np.abs(l32.numpy() - ref_l).max() <= 1e-6 * np.abs(ref_l).max()
    assert worst < 4e-6


def test_aggregator_is_the_merge_rounded_once() -> None:
    got, _ = _parts(3, 3)
    parts = [(o.astype(np.float32), lse.astype(np.float32)) for o, lse in got]
    o, lse = merge_partials(parts)
    ref_o, ref_l = merge_np(np.stack([p[0] for p in parts]).astype(np.float64),
                            np.stack([p[1] for p in parts]).astype(np.float64))
    assert o.dtype == np.float32 and np.array_equal(o, ref_o.astype(np.float32))
    assert np.array_equal(lse, ref_l.astype(np.float32))
    one = merge_partials(parts[:1])
    assert one[0] is parts[0][0]  # a single partial passes bit for bit
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_partials([])
    with pytest.raises(ValueError, match=r"O \(parts, heads, dim\)"):
        merge_np(np.zeros((2, 3)), np.zeros((2, 3)))


def test_merge_survives_far_apart_lse() -> None:
    """A part whose LSE is 1000 above the other's takes all the weight, without overflow."""
    o = np.stack([np.ones((1, 4)), np.full((1, 4), 2.0)])
    lse = np.array([[0.0], [1000.0]])
    mo, ml = merge_np(o, lse)
    assert np.array_equal(mo, np.full((1, 4), 2.0)) and ml[0] == 1000.0
    to, tl = merge_torch(torch.from_numpy(o).float(), torch.from_numpy(lse).float())
    assert torch.equal(to, torch.full((1, 4), 2.0)) and float(tl[0]) == 1000.0
