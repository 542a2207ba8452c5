"""Combinational loops in a synth_ecp5 netlist (hw/fpga/pnr.py refuses to place one)."""

from __future__ import annotations

from typing import Any

COMB_CELLS = ("LUT4", "PFUMX", "L6MUX21", "CCU2C")
"""synth_ecp5's combinational cells: a path through them and no flip-flop, RAM or multiplier
is one nextpnr's timing analysis follows."""


def logic_loops(netlist: dict[str, Any], top: str) -> list[list[str]]:
    """The combinational loops of a synth_ecp5 netlist (its JSON): the strongly connected
    groups of its COMB_CELLS (more than one cell, or one that feeds itself), each a list of
    cell names. nextpnr stops at
    any ("Timing analysis failed due to combinational loops"); one no input can close (a false
    loop, from how the frontend lowered a process) counts too, as its RTL wants a fix."""
    cells = netlist["modules"][top]["cells"]
    comb = {n: c for n, c in cells.items() if c["type"] in COMB_CELLS}
    driver = {b: n for n, c in comb.items() for p, d in c["port_directions"].items()
              if d == "output" for b in c["connections"][p]}
    succ: dict[str, set[str]] = {n: set() for n in comb}
    for n, c in comb.items():
        for p, d in c["port_directions"].items():
            if d == "input":
                for b in c["connections"][p]:
                    if b in driver:
                        succ[driver[b]].add(n)
    # Tarjan's strongly connected components, iterative (a netlist's paths are long)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in comb:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1 or v in succ[v]:  # (or a cell feeding itself)
                        groups.append(group)
    return groups
