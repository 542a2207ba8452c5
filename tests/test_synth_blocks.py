"""The synthesis check (`make synth-check`, part of `make test`) maps every module and interface
outside rtl/sim/: each is a block's top, an arithmetic unit, or flattened into a block (reached
from its top through instances that are not black boxes, its file among the block's), or is
listed with its reason in NOT_MAPPED; and every black box is mapped in a block of its own. No
yosys here: the check itself proves that each block's parameters pass its elaboration checks
and map."""

from __future__ import annotations

import re
from pathlib import Path

from nelssa.hw.sim.synth_blocks import (
    CHECK_PARAMS,
    NOT_MAPPED,
    UNIT_NAMES,
    blocks,
    check_blocks,
)
from nelssa.hw.sim.verilator import RTL_ROOT

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
