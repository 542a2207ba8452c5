"""The fleet emulator's speed against the single-instance emulator (issue 42 item 7): the
conversation trace at a multiple of its rate on a fleet, against single-instance runs over each
instance's share; writes docs/results/fleet_scale.md (``scripts/fleet_scale.py`` is the
command line)."""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.fleet import FleetSim
from nelssa.emu.serving.metrics import goodput
from nelssa.emu.serving.results import RunResult
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.workload import TraceRequest, load_trace
from nelssa.experiments.pages import render
from nelssa.options import POSITIVE_INT, input_file

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1].parent
PAGE = ROOT / "docs/results/fleet_scale.md"
TRACE = ROOT.parent / "shared/traces/mooncake_conversation_trace.jsonl"


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def _row(name: str, cpu: list[float], run: RunResult) -> tuple[str, float]:
    n = len(run.results)
    med = statistics.median(cpu)
    tps = run.decode_tokens / run.end_s if run.end_s else 0.0
    return (f"| {name} | {med:.2f} | {n:,} | {med / n * 1e3:.3f} | {run.steps:,} | "
            f"{run.end_s:,.0f} | {tps:,.0f} | {goodput(run)['goodput_rps']:.2f} |", med / n)


def study(reqs: list[TraceRequest], factor: float, instances: int, nodes: int, devices: int,
          repeats: int) -> dict[str, Any]:
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                      cat.get("models", "llama-3-8b"), link=cat.get("links", "roce-400g"))
    cfg = ServingConfig(mode="nelssa", devices=devices)
    fast = sorted((replace(r, arrival_s=r.arrival_s / factor) for r in reqs),
                  key=lambda r: (r.arrival_s, r.rid))
    shares = [fast[k::instances] for k in range(instances)]
    shared = FleetSpec(instances=[{"count": instances}],
                       pnm_nodes=[{"name": "n", "count": nodes, "devices": devices}],
                       dispatch="round-robin")
    private = FleetSpec(instances=[{"pnm_nodes": [f"n{k}"]} for k in range(instances)],
                        pnm_nodes=[{"name": f"n{k}", "devices": devices}
                                   for k in range(instances)], dispatch="round-robin")

    def singles() -> RunResult:
        runs = [ServingSim(lm, cfg).run(s) for s in shares]
        out = RunResult(cfg, runs[0].t_input)
        for r in runs:
            out.results.extend(r.results)
            out.steps += r.steps
            out.decode_tokens += r.decode_tokens
            out.end_s = max(out.end_s, r.end_s)
        return out

    cpu: dict[str, list[float]] = {"single": [], "private": [], "shared": []}
    last: dict[str, Any] = {}
    for i in range(repeats):
        for name, fn in (("single", singles),
                         ("private", lambda: FleetSim(private, cat, lm, cfg).run(fast)),
                         ("shared", lambda: FleetSim(shared, cat, lm, cfg).run(fast))):
            s, out = _timed(fn)
            cpu[name].append(s)
            last[name] = out
            log.info("repeat %d %s: %.2f s", i + 1, name, s)
    return {"cpu": cpu, "single": last["single"], "private": last["private"],
            "shared": last["shared"], "requests": len(reqs)}


def page(res: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    rows, per = [], {}
    labels = {"single": f"single instance x {args.instances} (each its share)",
              "private": f"fleet: {args.instances} instances, a node each",
              "shared": f"fleet: {args.instances} instances, {args.nodes} shared nodes"}
    for name in ("single", "private", "shared"):
        run = res[name] if name == "single" else res[name].merged()
        row, per[name] = _row(labels[name], res["cpu"][name], run)
        rows.append(row)
    nodes = res["shared"].nodes
    node_line = "; ".join(f"{n.name}: {n.placed} requests, peak {n.peak_used_tokens / n.tokens:.0%}"
                          for n in nodes)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT, check=False).stdout.strip() or "?"
    ratio = per["shared"] / per["single"]
    return render("fleet_scale.md", "page", command=command, commit=commit,
                  machine=f"{platform.machine()}, Python {platform.python_version()}",
                  requests=f"{res['requests']:,}", factor=f"{args.factor:g}",
                  instances=args.instances, nodes=args.nodes, devices=args.devices,
                  dispatch="round robin", repeats=args.repeats, rows="\n".join(rows),
                  ratio=f"{ratio:.2f}",
                  why=render("fleet_scale.md", "why_private")
                  + f" Fleet with a node per instance: {per['private'] / per['single']:.2f} x.",
                  node_line=node_line) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trace", type=input_file, default=str(TRACE))
    p.add_argument("--limit", type=POSITIVE_INT, help="only the first N requests")
    p.add_argument("--factor", type=float, default=16.0, help="arrivals this many times as fast")
    p.add_argument("--instances", type=POSITIVE_INT, default=16)
    p.add_argument("--nodes", type=POSITIVE_INT, default=4)
    p.add_argument("--devices", type=POSITIVE_INT, default=4)
    p.add_argument("--repeats", type=POSITIVE_INT, default=3)
    p.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    reqs = load_trace(args.trace, args.limit, hash_ids=True)
    res = study(reqs, args.factor, args.instances, args.nodes, args.devices, args.repeats)
    argv_shown = sys.argv[1:] if argv is None else argv
    text = page(res, args, " ".join(["python scripts/fleet_scale.py", *argv_shown]))
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
    return 0
