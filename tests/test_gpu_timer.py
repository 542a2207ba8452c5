"""The GPU side on a real GPU (issue 45): the timer registry and the device choice, the
measured path through the decode with a stand-in timer that returns known times (the engine's
step report, the trace, the JSON and `nelssa decode`'s step table), and on a machine with CUDA
the decode on the GPU measured by CUDA events."""

from __future__ import annotations

import json

import pytest
import torch

from nelssa.cli import main
from nelssa.host.gpu import gpu_timer
from nelssa.host.gpu.gpu_timer import (
    TIMERS,
    CudaEventTimer,
    Family,
    GpuTime,
    KernelTimer,
    NoCudaError,
    TorchConfig,
    TorchDevice,
    WeightsDtype,
    make_timer,
    resolve_device,
)
from nelssa.host.gpu.report import run_json
from tests.gpu_helpers import KnownTimer, engine

CUDA = torch.cuda.is_available()


@pytest.fixture
def known(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(TIMERS, KnownTimer.name, KnownTimer)
    return KnownTimer.name


def test_the_registry_and_the_device_choose_the_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(TIMERS) >= {"roofline", "cuda-events"}
    cpu = torch.device("cpu")
    assert type(make_timer(cpu)) is KernelTimer and not make_timer(cpu).measures
    assert gpu_timer.DEVICE_TIMERS["cuda"] == CudaEventTimer.name
    with pytest.raises(ValueError, match="unknown GPU timer 'nope'; choose one of"):
        make_timer(cpu, "nope")
    with pytest.raises(NoCudaError, match="cuda-events timer needs a CUDA device, got cpu"):
        make_timer(cpu, "cuda-events")
    with pytest.raises(ValueError, match="unknown GPU timer 'nope'"):
        TorchConfig(gpu_timer="nope")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(TorchDevice.AUTO) == cpu
    assert resolve_device(TorchDevice.CPU) == cpu
    with pytest.raises(NoCudaError, match=r"no CUDA device here \(torch.cuda.is_available"):
        resolve_device(TorchDevice.CUDA)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(TorchDevice.AUTO) == torch.device("cuda")
    assert resolve_device(TorchDevice.CPU) == cpu


def test_the_measured_path_takes_the_timers_times_and_keeps_the_roofline_beside(
        known: str) -> None:
    """The same two short requests decoded with the roofline and with the stand-in timer: the
    same tokens; the measured steps take exactly the known times per family, and their
    roofline figures are the modelled run's."""
    modelled, measured = engine(None), engine(known)
    a, b = modelled.step(), measured.step()
    assert [r.generated for r in modelled.requests] == [r.generated for r in measured.requests]
    assert a.gpu_time is GpuTime.MODELLED and a.gpu_timer == "roofline" and not a.measured_ps
    assert b.gpu_time is GpuTime.MEASURED and b.gpu_timer == known
    layers = 2
    want = {Family.QKV.value: layers * 1_000_000, Family.ATTENTION.value: layers * 2_000_000,
            Family.MLP.value: layers * 4_000_000, Family.HEAD.value: 5_000_000}
    assert b.measured_ps == want  # no long request: no top-K search
    assert b.roofline_ps == a.roofline_ps and set(a.roofline_ps) == set(want)
    overhead = modelled.executor.gpu.step_overhead_ps  # launches, sampling: modelled in both
    assert b.others_ps == sum(want.values()) + overhead
    assert b.step_ps == b.others_ps and a.step_ps == a.others_ps
    assert b.roofline_gpu_ps == a.others_ps == a.roofline_gpu_ps
    # the trace: measured slices carry their roofline figure, modelled ones say so
    slices = [e for e in measured.trace.events if e["ph"] == "X"]
    qkv = next(e for e in slices if e["name"] == "L0 QKV")
    assert qkv["dur"] == 1.0 and qkv["args"]["gpu_time"] == "measured"
    assert qkv["args"]["roofline_us"] == pytest.approx(a.roofline_ps["qkv"] / layers / 1e6)
    launches = next(e for e in slices if e["name"] == "launches, sampling")
    assert launches["args"] == {"gpu_time": "modelled"}
    assert all(e["args"]["gpu_time"] == "modelled" for e in modelled.trace.events
               if e["ph"] == "X")
    # the JSON report
    doc = json.loads(json.dumps(run_json([b], measured.requests, [0.0]), allow_nan=False))
    step = doc["steps"][0]
    assert step["gpu_time"] == "measured" and step["gpu_timer"] == known
    assert step["measured_ps"] == want and step["roofline_gpu_ps"] == a.others_ps


def test_decode_step_table_shows_the_measured_times(known: str, tmp_path,
                                                    capsys: pytest.CaptureFixture) -> None:
    """`nelssa decode --gpu-timer` with the stand-in on model devices, a long request among
    them: each step says "measured", its GPU column is the known times (top-K included), the
    roofline beside; the JSON and the trace say the same."""
    out = tmp_path / "run.json"
    rc = main(["decode", "--backend", "model", "--devices", "1", "--short", "1", "--long", "1",
               "--long-len", "1100", "--t-input", "1024", "--steps", "2", "--no-accuracy",
               "--layers", "2", "--torch-device", "cpu", "--gpu-timer", known,
               "--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png"),
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert f"GPU side on cpu, weights in float32; its times: {known} timer, the roofline" in text
    run = json.loads(out.read_text())
    rows = [line.split() for line in text.splitlines() if "1S+ 1L" in line]
    assert len(rows) == 2 == len(run["steps"])
    overhead_us = 10.0  # GpuHw.kernel_us of the default GPU, modelled
    gpu_us = 2 * (1 + 2 + 4) + 5 + overhead_us
    for row, step in zip(rows, run["steps"], strict=True):
        assert step["gpu_time"] == "measured"
        assert step["measured_ps"]["top-k"] == 2 * 3_000_000
        assert float(row[4]) == gpu_us and float(row[5]) == 6.0  # GPU, top-K columns
        assert row[14] == "counted"  # the DDR5 energy: model devices count their commands
        assert row[15] == "measured"  # after the energy columns (mJ, DDR5)
        assert float(row[16]) == pytest.approx(step["roofline_gpu_ps"] * 1e-6, abs=0.06)
        assert step["roofline_gpu_ps"] != (gpu_us + 6) * 1e6  # the model's own figure
    assert "GPU time measured (known-test) in 2 of 2 steps" in text
    trace = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("args", {}).get("gpu_time") == "measured" and e["name"] == "L1 top-K"
               for e in trace)


def test_decode_on_cuda_without_one_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = main(["decode", "--backend", "model", "--torch-device", "cuda", "--short", "1",
               "--long", "0", "--layers", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: --torch-device cuda: no CUDA device here"), err
    assert "Traceback" not in err


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_decode_on_cuda_is_measured_by_cuda_events() -> None:
    """On a GPU: the decoder's weights and KV on CUDA, each step measured by CUDA events
    (every priced family above zero), the roofline's figures and the tokens the CPU run's."""
    cpu, gpu = engine(None), engine(None, TorchDevice.CUDA, WeightsDtype.FLOAT32)
    assert gpu.executor.dev_model.device.type == "cuda"
    assert isinstance(gpu.executor.timer, CudaEventTimer)
    for _ in range(2):
        a, b = cpu.step(), gpu.step()
        assert b.gpu_time is GpuTime.MEASURED and b.gpu_timer == "cuda-events"
        assert set(b.measured_ps) == {"qkv", "attention", "o-proj+mlp", "output-head"}
        assert all(v > 0 for v in b.measured_ps.values()), b.measured_ps
        assert b.roofline_ps == a.roofline_ps
    assert [r.generated for r in cpu.requests] == [r.generated for r in gpu.requests]
    assert all(k.device.type == "cuda" for r in gpu.executor.kv.values() for k, _ in r.kv)
    bf16 = engine(None, TorchDevice.CUDA)  # auto: bf16 weights on CUDA, as the roofline's
    assert bf16.executor.dev_model.w["lm_head.weight"].dtype == torch.bfloat16
    assert bf16.step().gpu_time is GpuTime.MEASURED


def test_bf16_weights_run_the_decode_in_bf16_products() -> None:
    """--torch-weights bfloat16 (what auto gives on CUDA), here on the CPU: the decoder's
    matrices in bf16, the norms and the prefill node's model in float32; the step's logits
    within bf16's rounding of the float32 run's."""
    f32, bf16 = engine(None), engine(None, weights=WeightsDtype.BFLOAT16)
    w = bf16.executor.dev_model.w
    assert w["model.layers.0.mlp.up_proj.weight"].dtype == torch.bfloat16
    assert w["model.norm.weight"].dtype == torch.float32
    assert bf16.model.w["lm_head.weight"].dtype == torch.float32
    assert f32.executor.dev_model is f32.model  # float32 on the CPU: the same decoder
    x = torch.tensor([5, 6])
    a, b = f32.executor.dev_model, bf16.executor.dev_model
    la, lb = a.logits(a.embed(x)), b.logits(b.embed(x))
    assert lb.dtype == torch.float32 and not torch.equal(la, lb)
    assert torch.allclose(la, lb, rtol=0.05, atol=0.05 * float(la.abs().max()))
    assert bf16.step().tokens == 2


def test_the_decoder_moves_to_a_device_keeping_shared_weights_shared() -> None:
    """``Llama.on``: itself on its own device; elsewhere (the meta device here, CUDA on a GPU)
    every weight there once, layers that share weights (--weight-sets) still sharing them."""
    from nelssa.host.gpu.config import LlamaConfig
    from nelssa.host.gpu.model import Llama

    m = Llama.load(None, config=LlamaConfig.small(layers=4, vocab=64), weight_sets=1)
    assert m.on(torch.device("cpu")) is m
    moved = m.on(torch.device("meta"))
    assert moved.device.type == "meta" and moved.c is m.c
    assert all(t.device.type == "meta" for t in moved.w.values())
    name = "model.layers.{}.self_attn.q_proj.weight"
    assert moved.w[name.format(0)] is moved.w[name.format(3)]
    assert len({id(t) for t in moved.w.values()}) == len({id(t) for t in m.w.values()})
