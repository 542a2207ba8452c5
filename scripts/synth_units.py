"""`make synth`: synthesize the engine's arithmetic units for Xilinx UltraScale+ (yosys
synth_xilinx through scripts/synth.py) and print LUT/FF/CARRY/DSP/BRAM per unit.

The engine is these units and its registers: `make synth-engine` (scripts/synth_fpga.py --only
nelssa_attn_engine) maps it at the FPGA top's size with the units counted from its netlist.
Results are cached in build/synth/cache (scripts/synth.py --cache), where synth_fpga.py finds
them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from nelssa.hw.sim.rtl_sources import FP_UNITS, PACKAGES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "synth"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="xcup")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "scripts" / "synth.py"), "--family", args.family,
           *map(str, PACKAGES), *map(str, FP_UNITS), "--json", str(OUT / "units.json"),
           "--cache", str(OUT / "cache")]
    for unit in FP_UNITS:
        cmd += ["--top", unit.stem]
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
