"""The GPU efficiency parameters of the hardware files (presets, validation of bad values) and
the GPU calibration (nelssa/experiments/calibrate_gpu.py), run at a tiny scale on the CPU,
writing a file the catalog loads."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog
from nelssa.experiments import calibrate_gpu

EFFICIENCIES = ("mem_efficiency", "linear_efficiency", "attn_efficiency")
BASE = '"hbm_gbs": 3000, "memory_gb": 80, "bf16_tflops": 900'


def test_presets_carry_efficiencies_and_their_source() -> None:
    cat = HardwareCatalog.load()
    defaults = {f.name: f.default for f in fields(GpuHw)}
    for name in ("h100-nvl", "2x-h100-nvl", "h200"):
        g = cat.gpus[name]
        for field in EFFICIENCIES:
            assert getattr(g, field) == defaults[field], (name, field)
            assert 0 < getattr(g, field) <= 1
        assert g.source and "FlashAttention-3" in g.source and "OpenXLA" in g.source
    assert (defaults["linear_efficiency"], defaults["attn_efficiency"]) == (0.79, 0.585)
    g = GpuHw("g", hbm_gbs=1.0, memory_gb=1.0, bf16_tflops=1.0)  # defaults, no source
    assert g.source is None and g.mem_efficiency == 0.8


def _load(tmp_path: Path, section: str, entry: str) -> HardwareCatalog:
    f = tmp_path / "hw.json"
    f.write_text(f'{{"{section}": {{"x": {{{entry}}}}}}}')
    return HardwareCatalog.load(f)


@pytest.mark.parametrize("field", EFFICIENCIES)
@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "NaN", "Infinity", "true", '"0.5"',
                                   "null"])
def test_bad_efficiency_is_refused_naming_file_preset_and_field(
        tmp_path: Path, field: str, value: str) -> None:
    with pytest.raises(ValueError) as err:
        _load(tmp_path, "gpus", f'{BASE}, "{field}": {value}')
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'hw.json'} [gpus]: x: "), msg
    assert re.search(rf"{field} must be (in \(0, 1\]|a positive number), got ", msg), msg


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "true", "false", '"3000"'])
def test_numbers_refuse_nan_infinity_and_bools(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match=r"\[gpus\]: x: GpuHw 'x': hbm_gbs must be a positive "
                                         r"number, got "):
        _load(tmp_path, "gpus", f'"hbm_gbs": {value}, "memory_gb": 80, "bf16_tflops": 900')
    with pytest.raises(ValueError, match=r"\[pnm\]: x: PnmHw 'x': t_base_us must be a "
                                         r"non-negative number, got "):
        _load(tmp_path, "pnm", f'"bw_eff_gbs": 90, "capacity_gb": 64, "t_base_us": {value}, '
                               '"t_dev_us": 0.1, "t_host_us": 0.4')


@pytest.mark.parametrize("value, shown", [("32.0", "32.0"), ("32.5", "32.5"), ("true", "True"),
                                          ("1e400", "inf")])
def test_int_fields_refuse_floats(tmp_path: Path, value: str, shown: str) -> None:
    entry = (f'"layers": {value}, "kv_heads": 8, "q_heads": 32, "head_dim": 128, '
             '"params_b": 8.0, "max_context": 131072')
    with pytest.raises(ValueError, match=rf"\[models\]: x: ModelHw 'x': layers must be a "
                                         rf"positive integer, got {shown}$"):
        _load(tmp_path, "models", entry)
    ok = _load(tmp_path, "models", entry.replace(f'"layers": {value}', '"layers": 32'))
    assert ok.models["x"].layers == 32


@pytest.mark.parametrize("value", ['""', '"   "', "3", "true", "[]"])
def test_bad_source_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match=r"\[gpus\]: x: GpuHw 'x': source must be a non-empty "
                                         r"string, got "):
        _load(tmp_path, "gpus", f'{BASE}, "source": {value}')


def test_good_efficiencies_load(tmp_path: Path) -> None:
    g = _load(tmp_path, "gpus", f'{BASE}, "mem_efficiency": 1, "linear_efficiency": 0.66, '
                                '"attn_efficiency": 0.5, "source": "measured here"').gpus["x"]
    assert (g.mem_efficiency, g.linear_efficiency, g.attn_efficiency) == (1, 0.66, 0.5)
    assert g.source == "measured here"


def _check_file(out: Path, name: str) -> GpuHw:
    raw = json.loads(out.read_text())["gpus"][name]
    # every field written, but the power model's (``--power``, with NVML on a GPU)
    assert set(raw) == {f.name for f in fields(GpuHw)} - {"name", "power_source", *GpuHw.POWER}
    gpu = HardwareCatalog.load(out).gpus[name]
    assert gpu.hbm_gbs > 0.1 and gpu.bf16_tflops > 0 and gpu.memory_gb > 0
    for field in EFFICIENCIES:
        assert 0 < getattr(gpu, field) <= 1, field
    assert gpu.source is not None
    assert "scripts/calibrate_gpu.py" in gpu.source and "CPU" in gpu.source
    assert datetime.date.today().isoformat() in gpu.source
    # the preset says what it was fitted on and when, and the file makes it the GPU
    assert gpu.calibrated_on == datetime.date.today().isoformat()
    assert gpu.device_name is not None and gpu.device_name.startswith("CPU")
    assert HardwareCatalog.load(out).use["gpus"] == name
    return gpu


def test_calibration_writes_a_file_the_catalog_loads(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "gpu.json"
    calibrate_gpu.main(["--out", str(out), "--scale", "0.001", "--reps", "1", "--name", "here",
                        "--device", "cpu"])
    stdout = capsys.readouterr().out
    assert "linear_efficiency" in stdout and f"wrote {out}" in stdout
    gpu = _check_file(out, "here")
    assert "measured" in gpu.source  # the peaks are the measured ones


def test_calibration_uses_the_datasheet_peaks_when_given(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    calibrate_gpu.main(["--out", str(out), "--scale", "0.001", "--reps", "1", "--device", "cpu",
                        "--peak-tflops", "0.5", "--peak-hbm-gbs", "40", "--memory-gb", "94"])
    gpu = _check_file(out, "measured-cpu")
    assert (gpu.bf16_tflops, gpu.hbm_gbs, gpu.memory_gb) == (0.5, 40.0, 94.0)
    assert "datasheet (--peak-tflops)" in gpu.source
    assert "datasheet (--peak-hbm-gbs)" in gpu.source


def test_the_calibrated_preset_feeds_the_latency_model_and_serve_sim(tmp_path: Path) -> None:
    """The file a calibration writes is a --hardware file: its preset is the latency model's
    GPU (its measured bandwidth prices a decode's GPU attention) and serve-sim's, by the
    file's use section."""
    from cli_helpers import run_cli

    from nelssa.emu.latency.model import LatencyModel

    out = tmp_path / "gpu.json"
    calibrate_gpu.main(["--out", str(out), "--scale", "0.001", "--reps", "1", "--name", "cal",
                        "--device", "cpu"])
    cat = HardwareCatalog.load(out)
    cal = cat.gpus["cal"]
    lm = LatencyModel(cal, cat.pnm["prototype"], cat.models["llama-3-8b"])
    base = LatencyModel(cat.gpus["h100-nvl"], cat.pnm["prototype"], cat.models["llama-3-8b"])
    assert lm.gpu is cal
    # a decode's GPU attention time at 32K tokens (the paper's T_GPU): the measured bandwidth's
    want = 32768 * lm.model.kv_bytes_per_token / (cal.hbm_gbs * 1e9)
    assert lm.t_gpu(32768) == pytest.approx(want) and lm.t_gpu(32768) != base.t_gpu(32768)
    trace = Path(__file__).parent / "data" / "mooncake_conversation_head.jsonl"
    proc = run_cli("serve-sim", "--hardware", str(out), "--trace", str(trace), "--limit", "5",
                   "--mode", "nelssa", "--out", str(tmp_path / "sim"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert " on cal" in proc.stdout, proc.stdout[-2000:]
    assert base.gpu.name == "h100-nvl"


def test_bad_calibration_fields_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"GpuHw 'x': calibrated_on must be a date YYYY-MM-DD, "
                                         r"got '12/06/2026'"):
        _load(tmp_path, "gpus", f'{BASE}, "calibrated_on": "12/06/2026"')
    with pytest.raises(ValueError, match=r"GpuHw 'x': device_name must be a non-empty string"):
        _load(tmp_path, "gpus", f'{BASE}, "device_name": ""')


def test_calibration_refuses_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        calibrate_gpu.main(["--out", str(tmp_path / "g.json"), "--peak-tflops", "nan"])
    assert e.value.code == 2
    assert "--peak-tflops must be a positive number" in capsys.readouterr().err
    assert not (tmp_path / "g.json").exists()
