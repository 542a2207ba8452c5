"""Each hardware number lives once and every reader takes it from there (issue 22, Build 3)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nelssa.driver import regs
from nelssa.hw.model.device import DeviceConfig
from nelssa.hw.sim.device import RTL_MAX_UNITS, build_library

ROOT = Path(__file__).resolve().parents[1]


def _help(*words: str) -> str:
    return subprocess.run([sys.executable, "-m", "nelssa.cli", *words, "--help"],
                          capture_output=True, text=True, check=True).stdout


def test_engine_limits_come_from_the_register_map_and_the_rtl():
    """CAPS [3:0] bounds the model and a board; the RTL's own check bounds the rtl backend."""
    assert regs.unpack_caps(regs.pack_caps(regs.CAPS_MAX_ENGINES, 8, (128,), 64))["engines"] \
        == regs.CAPS_MAX_ENGINES
    DeviceConfig(engines=regs.CAPS_MAX_ENGINES)
    with pytest.raises(ValueError, match=f"engines must be 1..{regs.CAPS_MAX_ENGINES}"):
        DeviceConfig(engines=regs.CAPS_MAX_ENGINES + 1)
    with pytest.raises(ValueError, match=f"units must be 1..{RTL_MAX_UNITS}"):
        build_library(units=RTL_MAX_UNITS + 1)
    sv = (ROOT / "rtl" / "top" / "nelssa_device.sv").read_text()
    assert re.search(r"NumUnits < 1 \|\| NumUnits > (\d+)", sv).group(1) == str(RTL_MAX_UNITS)
    limits = f"1..{regs.CAPS_MAX_ENGINES}; rtl: 1..{RTL_MAX_UNITS}"
    for words in (("node", "up"), ("device", "serve")):
        assert limits in " ".join(_help(*words).split()), words
