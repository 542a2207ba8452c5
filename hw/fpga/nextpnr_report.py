"""nextpnr's timing report (its --report JSON) in words, for docs/results/fpga_pnr.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def _register(cell: str, prefix: str) -> str:
    """A flip-flop's hierarchical name without ``prefix`` and its synthesis suffix (yosys names
    a flip-flop after the net it drives: ``<net>_TRELLIS_FF_Q_<bit>``)."""
    return cell.removeprefix(prefix).split("_TRELLIS_FF", 1)[0]


def critical_path(work: Path, prefix: str = "") -> str:
    """The routed design's longest clock-to-clock path from ``work``'s report.json, with the
    cell types it passes (from its netlist.json), names without ``prefix`` (a wrapper's
    instance): '' where either is missing or no such path was reported."""
    try:
        report = json.loads((work / "report.json").read_text())
        cells = json.loads((work / "netlist.json").read_text())["modules"]
    except (OSError, ValueError):
        return ""
    paths = [p for p in report.get("critical_paths", [])
             if p.get("path") and p["from"] == p["to"] and "async" not in p["from"]]
    if not paths:
        return ""
    steps = paths[0]["path"]
    types = {n: c["type"] for m in cells.values() for n, c in m.get("cells", {}).items()}
    total = sum(s["delay"] for s in steps)
    routing = sum(s["delay"] for s in steps if s["type"] == "routing")

    def kind(cell: str) -> str:
        # nextpnr splits a carry cell into halves (<cell>$CCU2_COMB0 and ...1) and adds
        # carry cells of its own ($nextpnr_CCU2C_<n>)
        base = cell.rsplit("$", 1)[0]
        return types.get(cell) or types.get(base) or ("CCU2C" if "CCU2" in cell else "?")

    passed = Counter(kind(s["to"]["cell"]) for s in steps if s["type"] == "logic")
    start = kind(steps[0]["from"]["cell"])
    end = _register(steps[-1]["to"]["cell"], prefix)
    through = ", ".join(f"{n} {k}" for k, n in passed.most_common())
    return (f"{total:.1f} ns ({total - routing:.1f} in cells, {routing:.1f} in routing) from "
            f"a {start} through cells ({through}; a carry chain's every half-slice counted) "
            f"to the flip-flops of `{end}` (a flip-flop is named after the net it drives)")
