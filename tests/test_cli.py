"""The command line: the device demo end to end in its own process, and argument checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nelssa.cli import main


@pytest.mark.rtl
def test_device_demo_passes():
    proc = subprocess.run([sys.executable, "-m", "nelssa.cli", "device", "demo", "--clusters",
                           "12", "--selected", "5", "--qheads", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "O and LSE bit-identical" in proc.stdout and "PASS" in proc.stdout


def test_device_demo_rejects_bad_counts(capsys):
    with pytest.raises(SystemExit):
        main(["device", "demo", "--clusters", "4", "--selected", "9"])
    assert "--selected must be in 1..4, got 9" in capsys.readouterr().err


def test_decode_end_to_end_on_model_devices(tmp_path):
    trace, plot = tmp_path / "t.json", tmp_path / "p.png"
    proc = subprocess.run([sys.executable, "-m", "nelssa.cli", "decode", "--backend", "model",
                           "--devices", "2", "--short", "2", "--long", "1", "--long-len", "1100",
                           "--steps", "3", "--trace", str(trace), "--plot", str(plot)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "request 2: prompt   1100 tokens -> PNM tier" in out
    assert "request 0: prompt" in out and "GPU tier" in out
    assert "Figure-11 breakdown" in out and "tokens/s" in out
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"GPU node", "link", "PNM node", "device 0", "device 1"} <= tracks
    assert sum(e["ph"] == "X" for e in events) > 20
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, words", [
    (["decode", "--short", "0", "--long", "0"], "nothing to decode"),
    (["decode", "--long-len", "9..3"], "--long-len must be N or LO..HI"),
    (["decode", "--selection", "0"], "--selection must be in (0, 1]"),
])
def test_decode_argument_checks(capsys, argv, words):
    with pytest.raises(SystemExit):
        main(argv)
    assert words in capsys.readouterr().err
