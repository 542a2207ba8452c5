"""The GPU check's folder and page (issue 45): a folder made on the CPU as scripts/gpu_check.sh
makes it on a GPU (facts, a tiny calibration, a decode whose GPU time the stand-in timer of
tests/test_gpu_timer.py measures), its per-family comparison and the page written from it; a
folder that lacks a file is refused naming it, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nelssa.experiments import calibrate_gpu, gpu_check
from nelssa.host.gpu.gpu_timer import TIMERS
from nelssa.host.gpu.report import run_json
from tests.gpu_helpers import KNOWN_PS, KnownTimer, engine


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(TIMERS, KnownTimer.name, KnownTimer)
    d = tmp_path / "check"
    d.mkdir()
    assert gpu_check.main(["facts", str(d)]) == 0
    calibrate_gpu.main(["--out", str(d / gpu_check.PRESET), "--scale", "0.001", "--reps", "1",
                        "--device", "cpu", "--name", "measured-here"])
    dec = engine(KnownTimer.name)
    reports = [dec.step(), dec.step()]
    doc = run_json(reports, dec.requests, [0.0, 0.0])
    doc["config"] = {"argv": ["decode", "--stand-in"], "hardware": {"gpu": {"name": "h200"}}}
    (d / gpu_check.DECODE).write_text(json.dumps(doc))
    return d


def test_the_folder_makes_the_comparison_and_the_page(folder: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    facts = json.loads((folder / gpu_check.FACTS).read_text())
    assert facts["torch"]["device"] in ("cpu", facts["torch"]["device"])
    assert "gpus" in facts["nvidia_smi"] or facts["nvidia_smi"]["error"]
    assert gpu_check.main(["kernels", str(folder)]) == 0
    k = json.loads((folder / gpu_check.KERNELS_JSON).read_text())
    assert k["timers"] == [KnownTimer.name] and k["measured_steps"] == 2 and k["gpu"] == "h200"
    rows = {r["family"]: r for r in k["families"]}
    assert list(rows) == ["qkv", "attention", "o-proj+mlp", "output-head"]  # no long request
    layers = 2
    for fam, row in rows.items():
        per_step = KNOWN_PS[next(f for f in KNOWN_PS if f.value == fam)]
        times = 1 if fam == "output-head" else layers
        assert row["measured_us"] == pytest.approx(2 * times * per_step * 1e-6)
        assert row["roofline_us"] > 0
        assert row["ratio"] == pytest.approx(row["measured_us"] / row["roofline_us"])
    md = (folder / gpu_check.KERNELS_MD).read_text()
    assert "| qkv | 2 | 4.0 |" in md and "against the roofline of h200" in md
    out = folder / "gpu.md"
    assert gpu_check.main(["page", str(folder), "--out", str(out)]) == 0
    text = out.read_text()
    assert f"`python scripts/gpu_page.py {folder}`" in text
    assert facts["commit"] in text and facts["date"] in text
    assert "Preset `measured-here`, fitted on CPU" in text
    assert "| field | fitted on this GPU | preset h200 | preset h100-nvl |" in text
    assert "`nelssa decode --stand-in`" in text
    assert md.rstrip() in text
    assert "| 1 | 2S+0L |" in text and "| measured |" in text
    assert "The GPU's part as the roofline gives it:" in text


def test_a_folder_without_its_files_is_refused(folder: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    (folder / gpu_check.DECODE).unlink()
    assert gpu_check.main(["kernels", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder / gpu_check.DECODE}:") and "Traceback" not in err
    (folder / gpu_check.DECODE).write_text('{"steps": []}')
    assert gpu_check.main(["kernels", str(folder)]) == 2
    assert "decode.json: no steps" in capsys.readouterr().err
    (folder / gpu_check.PRESET).write_text('{"gpus": {}}')
    (folder / gpu_check.KERNELS_JSON).write_text("{}")
    assert gpu_check.main(["page", str(folder), "--out", str(folder / "p.md")]) == 2
    assert "no calibrated preset" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["page", str(folder / "nope")])
    assert e.value.code == 2
