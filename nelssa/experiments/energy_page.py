"""docs/results/energy.md: joules per output token and average power per tier, GPU-only against
NELSSA, on the Mooncake conversation trace (issue 43, point 3). Each fleet runs twice, without
and with its PNM tier (``FleetSim``, our scheduler, in process), and is priced by
``FleetSim.energy`` (``emu/serving/power.py``, ``emu/energy.py``).

    python scripts/energy_results.py [--trace FILE] [--limit N] [--write]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
from pathlib import Path
from typing import Any

from nelssa.emu.energy import TierEnergy, energy_entry
from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.fleet import FleetSim
from nelssa.emu.serving.metrics import summarize
from nelssa.emu.serving.workload import load_trace
from nelssa.experiments.pages import render
from nelssa.options import POSITIVE_INT, input_file
from nelssa.provenance import code_version

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1].parent
TRACE = ROOT.parent / "shared/traces/mooncake_conversation_trace.jsonl"
PAGE = ROOT / "docs" / "results" / "energy.md"
FLEETS = {"8 decode GPUs, colocated prefill": {"count": 8, "pool": 0},
          "4 decode GPUs + 4 prefill GPUs": {"count": 4, "pool": 4}}
"""The fleets compared: decode instances and prefill pool GPUs (0: colocated prefill)."""
NODES, DEVICES = 1, 4


def run(cat: HardwareCatalog, lm: LatencyModel, reqs: list, count: int, pool: int,
        mode: str) -> tuple[TierEnergy, dict[str, Any]]:
    """One fleet in one mode: its energy by tier and its summary."""
    spec = FleetSpec(instances=[{"count": count, "prefill": "pool" if pool else "colocated"}],
                     prefill_pool={"gpus": pool} if pool else None,
                     pnm_nodes=[{"name": "pnm", "count": NODES, "devices": DEVICES}])
    fleet = FleetSim(spec, cat, lm, ServingConfig(mode=mode))
    ok, rejected = fleet.admit(reqs)
    if rejected:
        log.warning("%s: %d requests rejected", mode, len(rejected))
    res = fleet.run(ok)
    return fleet.energy(res, energy_entry(cat)), summarize(res.merged())


def page(results: dict[tuple[str, str], tuple[TierEnergy, dict[str, Any]]], lm: LatencyModel,
         cat: HardwareCatalog, reqs: list, command: str, commit: str) -> str:
    rows, split = [], []
    for (fleet, mode), (e, s) in results.items():
        name = "GPU-only" if mode == "gpu" else "NELSSA"
        rows.append(f"| {fleet} | {name} | {e.j_per_output_token:.3f} | {e.decode_gpu_w:,.0f} | "
                    f"{e.prefill_gpu_w:,.0f} | {e.pnm_node_w:,.0f} | {e.total_w:,.0f} | "
                    f"{s['tpot_s']['p99'] * 1e3:.1f} | {s['ttft_s']['p99']:.2f} | "
                    f"{s['pnm_requests']:,} |")
        parts = e.split.figure11()
        split.append(f"| {fleet} | {name} | " + " | ".join(
            f"{100 * v / e.total_j:.2f} %" for v in parts.values()) + " |")
    finding = []
    for fleet in FLEETS:
        g, n = results[(fleet, "gpu")][0], results[(fleet, "nelssa")][0]
        finding.append(
            f"{fleet}: NELSSA {n.j_per_output_token / g.j_per_output_token:.2f} x GPU-only's "
            f"joules per output token; its decode GPUs draw "
            f"{n.decode_gpu_w - g.decode_gpu_w:+,.0f} W, its PNM node {n.pnm_node_w:,.0f} W.")
    e, g = energy_entry(cat), lm.gpu
    return render("energy.md", "page", command=command, commit=commit,
                  machine=f"{platform.machine()}, Python {platform.python_version()}",
                  requests=f"{len(reqs):,}", span=f"{reqs[-1].arrival_s:,.0f}",
                  model=lm.model.name, gpu=g.name, nodes=NODES, devices=DEVICES,
                  pnm=lm.pnm.name, link=lm.link.name if lm.link else "none",
                  rows="\n".join(rows), split="\n".join(split),
                  finding="Emulated here: " + " ".join(finding) + " " + render(
                      "energy.md", "equal_gpus"), tdp=f"{g.tdp_w:g}",
                  idle=f"{g.idle_w:g}", pj_flop=f"{g.pj_per_flop:g}",
                  pj_byte=f"{g.pj_per_hbm_byte:g}", host=f"{e.pnm_host_w:g}",
                  device_w=f"{e.pnm_device_static_w:g}", ddr5_bg=f"{e.ddr5_background_w:g}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=input_file, default=str(TRACE))
    p.add_argument("--limit", type=POSITIVE_INT, help="only the first N requests")
    p.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    code = code_version()  # the code as it started (the page is written at the end)
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                      cat.get("models", "llama-3-8b"), link=cat.get("links", "roce-400g"))
    reqs = load_trace(args.trace, args.limit, hash_ids=True)
    results = {}
    for fleet, f in FLEETS.items():
        for mode in ("gpu", "nelssa"):
            log.info("%s, %s ...", fleet, mode)
            results[(fleet, mode)] = run(cat, lm, reqs, f["count"], f["pool"], mode)
    commit = str(code["commit"])[:7] + (" (modified)" if code["modified"] is True else "")
    argv_shown = sys.argv[1:] if argv is None else argv
    text = page(results, lm, cat, reqs,
                " ".join(["python scripts/energy_results.py", *argv_shown]), commit) + "\n"
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
    return 0
