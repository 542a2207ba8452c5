"""The synthesis check (`make synth-check`, part of `make test`) maps every module and interface
outside rtl/sim/: each is a block's top, an arithmetic unit, or flattened into a block (reached
from its top through instances that are not black boxes, its file among the block's), or is
listed with its reason in NOT_MAPPED; and every black box is mapped in a block of its own. Yosys
runs here only on two tiny modules, to show that the check's flow (CHECK_OPTIONS) maps to the
family's cells and rejects what does not synthesize: the check itself proves that each block's
parameters pass its elaboration checks and map."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nelssa.hw.sim.synth_blocks import (
    CHECK_OPTIONS,
    CHECK_PARAMS,
    NOT_MAPPED,
    UNIT_NAMES,
    blocks,
    check_blocks,
)
from nelssa.hw.sim.verilator import RTL_ROOT

ROOT = Path(__file__).resolve().parents[1]
DECLARED = re.compile(r"^\s*(?:module|interface)\s+(\w+)", re.MULTILINE)
INSTANCE = re.compile(r"^\s*(\w+)\s*(?:#|\w+\s*\()", re.MULTILINE)


def synthesizable() -> dict[str, Path]:
    """Every module and interface under rtl/ outside rtl/sim/, with its file."""
    found = {}
    for path in sorted(RTL_ROOT.rglob("*.sv")):
        if "sim" in path.relative_to(RTL_ROOT).parts[:1]:
            continue
        for name in DECLARED.findall(path.read_text()):
            found[name] = path
    return found


def test_the_check_maps_every_module_outside_rtl_sim():
    declared = synthesizable()
    assert {"nelssa_fpga_top", "nelssa_ddr5_ctrl", "nelssa_fp32_add"} <= set(declared)
    covered = set(UNIT_NAMES)
    for b in check_blocks():
        todo = [b.module]
        while todo:
            module = todo.pop()
            assert declared[module] in b.files, f"{b.name}: {declared[module]} not among its files"
            covered.add(module)
            body = declared[module].read_text()
            todo += [m for m in INSTANCE.findall(body)
                     if m in declared and m != module and m not in b.boxes
                     and m not in NOT_MAPPED]  # (a generate branch the block's parameters skip)
    assert sorted(set(declared) - covered) == sorted(NOT_MAPPED)


def test_every_box_is_mapped_on_its_own():
    for group in (blocks(), check_blocks()):
        tops = {b.module for b in group} | set(UNIT_NAMES)
        for b in group:
            assert set(b.boxes) <= tops, b.name


def test_every_block_of_the_top_is_checked():
    assert {b.module for b in blocks()} == set(CHECK_PARAMS) | set(UNIT_NAMES)
    checked = {b.module for b in check_blocks()}
    assert set(CHECK_PARAMS) <= checked


COUNTER = """module counter (input logic clk_i, input logic rst_ni, input logic [7:0] a_i,
                output logic [7:0] q_o);
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) q_o <= '0;
    else q_o <= q_o + a_i;
  end
endmodule
"""


def _check_flow(tmp_path: Path, top: str, body: str) -> subprocess.CompletedProcess:
    """scripts/synth.py on one module with the check's options, as scripts/synth_fpga.py --check
    runs it on each block."""
    src = tmp_path / f"{top}.sv"
    src.write_text(body)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "synth.py"), str(src), "--top",
                           top, *CHECK_OPTIONS], capture_output=True, text=True, timeout=600)


def test_the_check_maps_to_the_family_and_rejects_what_does_not_synthesize(tmp_path):
    ok = _check_flow(tmp_path, "counter", COUNTER)
    assert ok.returncode == 0, ok.stderr
    # the adder on a carry chain, the register on the family's flip-flops with clear
    assert re.search(r"^FF\s+8\s+FDCE=8$", ok.stdout, re.MULTILINE), ok.stdout
    assert re.search(r"^CARRY\s+[1-9]", ok.stdout, re.MULTILINE), ok.stdout
    # the same module with a delay, which no flip-flop has: refused, the construct named
    broken = COUNTER.replace("counter", "delayed").replace("q_o <= q_o +", "#1 q_o <= q_o +")
    bad = _check_flow(tmp_path, "delayed", broken)
    assert bad.returncode == 1
    assert "timing control" in bad.stderr and "delayed.sv:5" in bad.stderr, bad.stderr


def test_the_check_rejects_a_combinational_loop(tmp_path):
    """A loop of gates after the mapping (`scc -expect 0`): refused, the loop's count named;
    the same logic without the loop maps."""
    looped = ("module looped(input logic a, b, c, output logic y);\n  logic x;\n"
              "  assign x = b ? y : a;\n  assign y = x & c;\nendmodule\n")
    bad = _check_flow(tmp_path, "looped", looped)
    assert bad.returncode == 1
    assert "Found 1 SCCs but expected 0" in bad.stderr, bad.stderr
    ok = _check_flow(tmp_path, "open", looped.replace("looped", "open").replace("? y", "? c"))
    assert ok.returncode == 0, ok.stderr
