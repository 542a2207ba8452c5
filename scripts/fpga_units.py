"""`scripts/fpga_units.py`: the fp32 adder and multiplier on the open-tools board's ECP5,
combinational, with output registers (as mapped, with synth_ecp5 -dff, retimed by abc) and
hand-staged, each placed and routed between scan chains; writes docs/results/fpga_units.md and
build/fpga_units/results.json. hw/fpga/units.py does the work."""

from __future__ import annotations

import argparse
import logging
import platform
import sys
from pathlib import Path

from nelssa.hw.fpga import plan, pnr, units

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "fpga_units"
PAGE = ROOT / "docs" / "results" / "fpga_units.md"
RESULTS = OUT / "results.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="ecp5-5g-versa")
    parser.add_argument("--page-only", action="store_true",
                        help=f"rewrite the page from {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        board = plan.open_flow_board(args.board)
    except plan.PlanError as e:
        parser.error(str(e))
    if args.page_only:
        if not RESULTS.is_file():
            parser.error(f"no {RESULTS.relative_to(ROOT)}: run without --page-only first")
        results = units.load(RESULTS)
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        results = []
        for i, v in enumerate(units.variants()):
            r = units.run(v, board.part, OUT / f"{i:02d}", board.luts, board.dsps)
            results.append((v, r))
            print(f"{v.name}: {pnr.lut4_count(r.cells):,} LUT4, {units.unit_ffs(r)} FF, "
                  + (f"Fmax {r.fmax_mhz:.1f} MHz" if r.fmax_mhz else r.note), flush=True)
        units.save(results, RESULTS)
    units.write_page(results, board, PAGE, "scripts/fpga_units.py", pnr.commit(),
                     f"{platform.machine()}, {platform.system()}")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
