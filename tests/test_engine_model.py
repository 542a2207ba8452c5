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


def _attend_op_by_op(q, keys, values, scale):
    """The engine's operations one at a time in the RTL's order (docs/numerics.md): what
    ``attend`` batches must give these bits."""
    from nelssa.hw.model.engine import _weight, scores

    c = fp.fmul(np.float32(scale).view(np.uint32), fp.LOG2E_BITS)
    h, d = q.shape
    m = np.full(h, fp.NEG_INF, dtype=np.uint32)
    lsum, o = np.zeros(h, dtype=np.uint32), np.zeros((h, d), dtype=np.uint32)
    for k, v in zip(keys, values, strict=True):
        t = scores(q, k, c)
        m_new = m
        for row in t:
            m_new = fp.fmax(m_new, row)
        alpha, p = _weight(m, m_new), _weight(t, m_new[None, :])
        vf = fp.bf16_to_f32_bits(v)
        o, lsum = fp.fmul(o, alpha[:, None]), fp.fmul(lsum, alpha)
        for j in range(k.shape[0]):
            o = fp.fadd(o, fp.fmul(p[j][:, None], vf[j][None, :]))
            lsum = fp.fadd(lsum, p[j])
        m = m_new
    return fp.fmul(o, fp.recip(lsum)[:, None]), fp.fmul(fp.fadd(m, fp.log2(lsum)), fp.LN2_BITS)


@pytest.mark.parametrize("case", ["plain", "cancel", "specials"])
def test_batched_attend_is_the_op_by_op_engine_bit_for_bit(case):
    """``attend`` batches scores, maxima and each cluster's running sums; the bits are those
    of the operations one by one, also where partial sums cancel to subnormals (flushed),
    and with NaN, Inf, subnormal and signed-zero inputs."""
    rng = np.random.default_rng({"plain": 1, "cancel": 2, "specials": 3}[case])
    for trial in range(6):
        heads, dim = (4, 128) if trial % 2 else (1 + trial, 64)
        q = _bf(rng, (heads, dim))
        sizes = rng.integers(1, 40, 1 + trial * 3)
        ks = [_bf(rng, (int(n), dim), 3.0) for n in sizes]
        vs = [_bf(rng, (int(n), dim)) for n in sizes]
        if case == "cancel":  # a running sum that goes subnormal, flushed to zero: token 0
            # weighs 1 and adds 1.5 * 2**-126, tokens 1 and 2 weigh about 2**-60 (so l stays
            # 1) and add about -1.2 * 2**-126 (the sum is now subnormal) and 4 * 2**-126
            q = np.zeros((1, dim), np.uint16)
            q[0, 0] = 0x3F80
            k = np.zeros((3, dim), np.uint16)
            k[1:, 0] = fp.f32_to_bf16_bits(np.float32(-41.5))
            p = 2.0 ** (-41.5 * np.log2(np.e))
            v = np.zeros((3, dim), np.uint16)
            v[:, :8] = fp.f32_to_bf16_bits(np.array(
                [[1.5 * 2.0**-126], [-1.2 * 2.0**-126 / p], [4 * 2.0**-126 / p]], np.float32))
            ks, vs = [k], [v]
        if case == "specials":
            for k, v in zip(ks, vs, strict=True):
                k.flat[rng.integers(0, k.size, 3)] = rng.choice(
                    np.array([0x7F80, 0xFF80, 0x0001, 0x8000, 0x7FC1], np.uint16), 3)
                v.flat[rng.integers(0, v.size, 3)] = rng.choice(
                    np.array([0x0001, 0x8000, 0x7F80, 0x0000], np.uint16), 3)
        scale = 1.0 if case == "cancel" else 0.09
        res = attend(PARAMS, q, ks, vs, scale)
        o, lse = _attend_op_by_op(q, ks, vs, scale)
        assert np.array_equal(res.o, o) and np.array_equal(res.lse, lse), (case, trial)


@pytest.mark.parametrize("group", [1, 40, 97])
def test_attend_in_groups_of_clusters_is_the_op_by_op_engine_bit_for_bit(group, monkeypatch):
    """The per-token products are made in groups of whole clusters (``GROUP_TOKENS``): a group
    per cluster, and groups of several, give the bits of the operations one by one."""
    from nelssa.hw.model import engine

    monkeypatch.setattr(engine, "GROUP_TOKENS", group)
    rng = np.random.default_rng(group)
    q = _bf(rng, (4, 128))
    sizes = rng.integers(1, 40, 12)
    ks = [_bf(rng, (int(n), 128), 3.0) for n in sizes]
    vs = [_bf(rng, (int(n), 128)) for n in sizes]
    assert len(engine._groups(sizes.tolist())) > 1
    res = attend(PARAMS, q, ks, vs, 0.09)
    o, lse = _attend_op_by_op(q, ks, vs, 0.09)
    assert np.array_equal(res.o, o) and np.array_equal(res.lse, lse)
