"""`make synth`: synthesize the engine's arithmetic units for Xilinx UltraScale+ (yosys
synth_xilinx through scripts/synth.py) and print LUT/FF/CARRY/DSP/BRAM per unit.

`--engine` synthesizes the whole attention engine instead (slow: the flattened datapath has
hundreds of floating-point units even in the smallest configuration, which maps in about 15
minutes without resource sharing and with the classic ABC; see README).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from nelssa.hw.sim.rtl_sources import CORE, FP_UNITS, PACKAGES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "synth"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", action="store_true", help="synthesize the whole engine")
    parser.add_argument("-P", dest="params", action="append",
                        default=["HeadDim=64", "NumQHeads=1", "MaxClusterTokens=16"],
                        help="engine parameter NAME=VALUE (with --engine)")
    parser.add_argument("--family", default="xcup")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    synth = [sys.executable, str(ROOT / "scripts" / "synth.py"), "--family", args.family]
    if args.engine:
        cmd = [*synth, *map(str, PACKAGES), str(CORE / "nelssa_attn_engine.sv"),
               "--top", "nelssa_attn_engine", "--no-share", "--classic-abc",
               "--json", str(OUT / "engine.json")]
        for p in args.params:
            cmd += ["-P", p]
    else:
        cmd = [*synth, *map(str, PACKAGES), *map(str, FP_UNITS), "--json", str(OUT / "units.json")]
        for unit in FP_UNITS:
            cmd += ["--top", unit.stem]
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
