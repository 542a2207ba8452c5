"""The engine model (hw/model/engine.py): accuracy against float64, argument validation, and the
stream-protocol verdicts the RTL must reproduce."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver.status import AttnStatus
from nelssa.hw.model import fp
from nelssa.hw.model.engine import EngineCommand, EngineParams, attend, check_stream
from nelssa.hw.model.reference import attend_f64

PARAMS = EngineParams()


def _bf(rng, shape, gain=1.0):
    return fp.f32_to_bf16_bits((rng.standard_normal(shape) * gain).astype(np.float32))


@pytest.mark.parametrize(("heads", "dim", "tokens", "cluster"), [
    (4, 128, 4096, 16), (8, 64, 4096, 64), (1, 128, 512, 1), (4, 128, 1000, 7)])
def test_error_bound_against_float64(heads, dim, tokens, cluster):
    """max|O - O64| <= 1e-3 max|V| and |LSE - LSE64| <= 1e-3 on N(0,1) data (observed margins
    are about four orders of magnitude tighter; the measured values are printed)."""
    rng = np.random.default_rng(heads * dim + tokens)
    lens = [cluster] * (tokens // cluster) + ([tokens % cluster] if tokens % cluster else [])
    q = _bf(rng, (heads, dim))
    ks = [_bf(rng, (n, dim)) for n in lens]
    vs = [_bf(rng, (n, dim)) for n in lens]
    scale = 1 / np.sqrt(dim)
    res = attend(PARAMS, q, ks, vs, scale)
    o64, lse64 = attend_f64(q, ks, vs, np.float32(scale))
    vmax = max(np.abs(fp.as_f32(fp.bf16_to_f32_bits(v))).max() for v in vs)
    o_err = np.abs(fp.as_f32(res.o) - o64).max() / vmax
    lse_err = np.abs(fp.as_f32(res.lse) - lse64).max()
    print(f"H={heads} D={dim} T={tokens}: |O-O64|/max|V| = {o_err:.2e}, "
          f"|LSE-LSE64| = {lse_err:.2e}")
    assert o_err <= 1e-3
    assert lse_err <= 1e-3


def test_peaked_softmax_is_accurate():
    """Large logits (one key aligned with q, gain 8): the online rescaling stays exact enough."""
    rng = np.random.default_rng(3)
    q = _bf(rng, (4, 128), gain=8.0)
    ks = [_bf(rng, (16, 128)) for _ in range(32)]
    ks[17][5] = q[0]
    vs = [_bf(rng, (16, 128)) for _ in range(32)]
    res = attend(PARAMS, q, ks, vs, 1 / np.sqrt(128))
    o64, lse64 = attend_f64(q, ks, vs, np.float32(1 / np.sqrt(128)))
    assert np.abs(fp.as_f32(res.o) - o64).max() <= 1e-3 * 4
    assert np.abs(fp.as_f32(res.lse) - lse64).max() <= 1e-3


def _minus_inf_cluster(rng, q, n, dim):
    """A cluster whose every score is -Inf: element 0 of each key is -Inf, q[:, 0] is > 0."""
    k = _bf(rng, (n, dim))
    k[:, 0] = 0xFF80
    return k


def test_leading_minus_inf_cluster_adds_nothing():
    """Tokens scored -Inf weigh 0 wherever they stand, even before any finite score."""
    rng = np.random.default_rng(9)
    q = _bf(rng, (4, 128))
    q[:, 0] = 0x3F80  # +1.0
    ks = [_bf(rng, (16, 128)) for _ in range(3)]
    vs = [_bf(rng, (16, 128)) for _ in range(3)]
    bad_k, bad_v = _minus_inf_cluster(rng, q, 5, 128), _bf(rng, (5, 128))
    plain = attend(PARAMS, q, ks, vs, 0.1)
    for pos in (0, 1, 3):
        res = attend(PARAMS, q, [*ks[:pos], bad_k, *ks[pos:]], [*vs[:pos], bad_v, *vs[pos:]], 0.1)
        assert np.array_equal(res.o, plain.o) and np.array_equal(res.lse, plain.lse), pos


def test_all_minus_inf_gives_nan_output_and_minus_inf_lse():
    rng = np.random.default_rng(10)
    q = _bf(rng, (2, 64))
    q[:, 0] = 0x3F80
    res = attend(PARAMS, q, [_minus_inf_cluster(rng, q, 3, 64)], [_bf(rng, (3, 64))], 0.1)
    assert np.all(np.isnan(fp.as_f32(res.o)))
    assert np.all(res.lse == fp.NEG_INF)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"q": np.zeros((4, 128), np.float32)}, "q must be bf16"),
    ({"q": np.zeros((4, 96), np.uint16)}, "head_dim 96"),
    ({"q": np.zeros((9, 128), np.uint16)}, "9 query heads"),
    ({"q": np.zeros(128, np.uint16)}, "q must have 2 dimensions"),
    ({"keys": []}, "keys has 0 clusters"),
    ({"keys": [np.zeros((2, 64), np.uint16)]}, r"keys\[0\]"),
    ({"keys": [np.zeros((65, 128), np.uint16)], "values": [np.zeros((65, 128), np.uint16)]},
     "65 tokens"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    args = {"q": np.zeros((4, 128), np.uint16), "keys": [np.zeros((2, 128), np.uint16)],
            "values": [np.zeros((2, 128), np.uint16)]}
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        attend(PARAMS, args["q"], args["keys"], args["values"], 0.1)


def test_params_validation_names_the_field():
    with pytest.raises(ValueError, match="head_dim"):
        EngineParams(head_dim=96)
    with pytest.raises(ValueError, match="num_qheads"):
        EngineParams(num_qheads=9)
    with pytest.raises(ValueError, match="max_cluster_tokens"):
        EngineParams(max_cluster_tokens=0)


def test_stream_verdicts():
    """head_dim 128, 2 heads: 8 Q beats, a cluster of n tokens is 8n beats."""
    p = PARAMS
    assert check_stream(p, 128, 2, [1, 2], 8 + 8 + 16) == AttnStatus.OK
    assert check_stream(p, 128, 2, [1, 2], 8 + 8) == AttnStatus.ERR_SHORT_STREAM
    assert check_stream(p, 128, 2, [1, 2], 8 + 8 + 17) == AttnStatus.ERR_LONG_STREAM
    assert check_stream(p, 128, 2, [1, 0], 40) == AttnStatus.ERR_BAD_CLUSTER_LEN
    assert check_stream(p, 128, 2, [1, 0], 8) == AttnStatus.ERR_SHORT_STREAM
    assert check_stream(p, 128, 2, [], 8) == AttnStatus.ERR_NO_CLUSTERS
    assert check_stream(p, 96, 2, [1], 16) == AttnStatus.ERR_BAD_HEAD_DIM
    assert check_stream(p, 128, 0, [1], 16) == AttnStatus.ERR_BAD_QHEADS
    assert check_stream(EngineParams(head_dim=64), 128, 1, [1], 12) == AttnStatus.ERR_BAD_HEAD_DIM


def test_command_needs_an_entry_per_cluster():
    with pytest.raises(ValueError, match="num_clusters is 3"):
        EngineCommand(64, 1, 0.1, [1, 1], np.zeros((6, 32), np.uint16), num_clusters=3)
    cmd = EngineCommand(128, 2, 0.1, [1, 2], np.zeros((8 + 8, 32), np.uint16), num_clusters=1)
    assert cmd.expected_status(PARAMS) == AttnStatus.OK  # only the first entry is read


def test_command_defaults():
    q = np.zeros((2, 64), np.uint16)
    k = [np.zeros((3, 64), np.uint16)]
    cmd = EngineCommand.from_workload(q, k, k, 0.125)
    assert cmd.last_index == len(cmd.beats) - 1 == 4 + 12 - 1
    assert cmd.num_clusters == 1
    assert cmd.expected_status(PARAMS) == AttnStatus.OK
