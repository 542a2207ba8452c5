"""The command line: the device demo end to end in its own process, and argument checks."""

from __future__ import annotations

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
