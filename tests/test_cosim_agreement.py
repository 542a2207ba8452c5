"""The two halves agree (issue 24 item 7): the serving emulator's step cost against the
co-simulation's emulated step time at a small point, within the bounds the grid
(nelssa/experiments/cosim_agreement.py, docs/results/cosim_agreement.md) establishes; and the
pieces they share."""

from __future__ import annotations

import pytest

from nelssa.cosim_agreement import STEP_BOUND, WAIT_BOUND_US, Point, compare, serving_side, verdict
from nelssa.emu.serving.cost import CostModel
from nelssa.experiments import cosim_agreement as agreement_cli
from nelssa.host.gpu.config import PRESETS
from nelssa.host.gpu.request import DecodeConfig
from nelssa.host.gpu.routing import latency_model, model_hw


def test_small_point_agrees():
    """One long request of 4K tokens and two short ones of 512 on two devices, llama3-8b's shape
    with two layers: the step within 5 %, its GPU and top-K parts within 5 %, the wait for the
    node within the documented bound per layer."""
    p = Point(long=1, long_len=4096, short=2, short_len=512, devices=2, link="roce-400g",
              layers=2, steps=2)
    r = compare(p)
    assert abs(r.diff("step")) <= STEP_BOUND, (r.cosim, r.serving)
    assert abs(r.diff("gpu")) <= STEP_BOUND, (r.cosim, r.serving)
    assert abs(r.diff("topk")) <= STEP_BOUND, (r.cosim, r.serving)
    assert abs(r.serving.wait - r.cosim.wait) <= WAIT_BOUND_US * p.layers, (r.cosim, r.serving)
    assert verdict(r) == "agree"
    # the node's share is real in both (a check that could not fail would pass at zero)
    assert r.cosim.wait > 0 and r.serving.wait > 0
    assert r.cosim.pnm_attn > 0 and r.serving.pnm_attn > 0


def test_weights_read_per_step_are_one_figure():
    """The co-simulation's per-layer weight reads and output head add up to the latency
    model's ``ModelHw.weight_bytes`` of the same decoder (the norms aside)."""
    from nelssa.host.gpu.engine import DecodeEngine
    from nelssa.host.gpu.model import Llama

    c = PRESETS["llama-3-8b"](layers=2)
    dec = DecodeEngine(Llama.load(None, config=c), DecodeConfig(), None)
    ex = dec.executor
    cosim = c.num_hidden_layers * (ex._qkv_bytes + ex._out_bytes) + ex._head_bytes
    assert model_hw(c).weight_bytes == pytest.approx(cosim, rel=1e-4)


def test_step_parts_add_up_to_the_step():
    c = PRESETS["llama-3-8b"](layers=4)
    lm = latency_model(c, DecodeConfig(), "roce-400g")
    cost = CostModel(lm, 4, lm.sparsity.window_tokens, 63.0, 50.0)
    for gpu_ctx, pnm, n in ((4096, [32768, 65536], 4), (0, [8192], 0), (2048, [], 2)):
        parts = cost.step_parts(gpu_ctx, pnm, decodes=n)
        assert parts.total_s == pytest.approx(cost.step_s(gpu_ctx, pnm, [], decodes=n))
    # the top-K search precedes the node's work: PNM-bound, it adds to the node's time
    parts = cost.step_parts(0, [1 << 20], decodes=0)
    assert parts.pnm_s > parts.gpu_attn_s
    assert parts.total_s == pytest.approx(parts.kernel_s + parts.linear_s + parts.topk_s
                                          + parts.pnm_s)


@pytest.mark.parametrize("kw, what", [
    ({"devices": 0}, "devices must be 1..32"), ({"long_len": 0}, "long_len must be"),
    ({"short": 0, "long": 0}, "nothing to decode"), ({"link": "roce-1t"}, "link must be"),
    ({"layers": 0}, "layers must be"), ({"short_len": 9000}, "must be below long_len"),
])
def test_bad_points_refused(kw, what):
    base = {"long": 1, "long_len": 8192, "short": 2, "short_len": 1024, "devices": 2,
            "link": "roce-400g"}
    with pytest.raises(ValueError, match=what):
        Point(**{**base, **kw})


def test_serving_side_prices_the_state_of_the_last_step():
    p = Point(1, 8192, 4, 1024, 4, "roce-100g", layers=2, steps=2)
    s = serving_side(p)
    assert s.step == pytest.approx(s.detail["kernel_s"] + s.detail["linear_s"]
                                   + s.detail["topk_s"] + max(s.detail["gpu_attn_s"],
                                                              s.detail["pnm_attn_s"]
                                                              + s.detail["comm_s"]))


@pytest.mark.parametrize("args", [["--devices", "0"], ["--devices", "1,x"], ["--links", "roce"],
                                  ["--layers", "0"], ["--steps", "99"]])
def test_script_refuses_bad_options(args, capsys):
    with pytest.raises(SystemExit) as e:
        agreement_cli.main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err and "error: argument" in err
