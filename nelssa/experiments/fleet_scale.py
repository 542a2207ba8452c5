"""The fleet emulator's speed against the single-instance emulator (issue 42 item 7): the
conversation trace at a multiple of its rate on a fleet, against single-instance runs over each
instance's share; then a million-request resampling streamed through a large fleet, its
finished requests written out as they finish, with its CPU time and peak memory beside a run of
a tenth of the requests (bounded memory: the two peaks alike). Writes
docs/results/fleet_scale.md (``scripts/fleet_scale.py`` is the command line)."""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import math
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
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
from nelssa.emu.serving.stream import RecordSink
from nelssa.emu.serving.workload import TraceRequest, load_trace, resample
from nelssa.experiments.pages import render
from nelssa.options import NON_NEGATIVE_INT, POSITIVE_INT, input_file
from nelssa.provenance import code_version

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


def reference_work() -> float:
    """CPU seconds of a fixed piece of interpreter work (dict building, sorting, float sums
    over 20,000 values, some 60 ms): run at each window's end, it measures the machine's own
    speed then. A window whose run costs more per request while this costs the same is the
    run's own growth; both growing together is the machine (its clock, its other tenants)."""
    values = [((k * 7919) % 20011) / 20011 for k in range(20_000)]
    t = time.process_time()
    for _ in range(24):
        table = {k: v for k, v in enumerate(values)}
        ordered = sorted(values)
        total = math.fsum(table.values()) + ordered[len(ordered) // 2]
    took = time.process_time() - t
    if total < 0:  # (keeps the work from being skipped; never true)
        raise AssertionError
    return took


@dataclass
class WindowMeter:
    """CPU time of a streamed run by window of ``size`` requests taken from its stream, with
    the cyclic garbage collector's collections and time by generation (``gc.callbacks``), the
    machine's load average at each window's end, and ``reference_work``'s CPU time there (not
    counted in any window): whether a long run's cost per request grows, and whether from its
    own work or from the machine (on a shared machine ``time.process_time`` rises with the
    other processes' load)."""

    size: int
    windows: list[dict[str, Any]] = field(default_factory=list)
    """Per window: ``cpu_s``, ``gc_s`` and ``gc_n`` (by generation), ``load1``, ``ref_s``,
    and ``work``: how much each of ``counters`` grew in it."""
    reference: Callable[[], float] = reference_work
    ref0_s: float = 0.0
    """``reference``'s CPU time before the first window."""
    counters: Callable[[], dict[str, int]] | None = None
    """The run's work so far (steps, preemptions...), read at each window's end: whether a
    window that costs more per request had more to do."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a window holds at least one request, got {self.size}")
        self._gc_s, self._gc_n, self._gc_t0 = [0.0] * 3, [0] * 3, 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_t0 = time.process_time()
        else:
            g = info["generation"]
            self._gc_s[g] += time.process_time() - self._gc_t0
            self._gc_n[g] += 1

    def _work(self) -> dict[str, int]:
        return self.counters() if self.counters is not None else {}

    def meter(self, stream: Iterable[TraceRequest]) -> Iterator[TraceRequest]:
        """``stream`` unchanged, each whole window of it measured (from taking its first
        request to taking the next window's first)."""
        self.ref0_s = self.reference()
        gc.callbacks.append(self._on_gc)
        try:
            t, s0, n0 = time.process_time(), list(self._gc_s), list(self._gc_n)
            w0 = self._work()
            for k, r in enumerate(stream):
                if k and not k % self.size:
                    now = time.process_time()
                    work = self._work()
                    ref = self.reference()
                    self.windows.append({
                        "cpu_s": now - t,
                        "gc_s": [a - b for a, b in zip(self._gc_s, s0, strict=True)],
                        "gc_n": [a - b for a, b in zip(self._gc_n, n0, strict=True)],
                        "load1": os.getloadavg()[0], "ref_s": ref,
                        "work": {name: v - w0.get(name, 0) for name, v in work.items()}})
                    w0 = work
                    log.info("requests %d..%d: %.1f s CPU, gc %s, load %.2f, reference "
                             "%.1f ms", k - self.size, k, now - t, self.windows[-1]["gc_n"],
                             self.windows[-1]["load1"], ref * 1e3)
                    t, s0, n0 = time.process_time(), list(self._gc_s), list(self._gc_n)
                yield r
        finally:
            gc.callbacks.remove(self._on_gc)


def fleet_work(fleet: FleetSim) -> dict[str, int]:
    """The fleet's steps (a run of pure decode steps counts each), preemptions and decode
    tokens so far, over its instances."""
    outs = [r.out for r in fleet.replays]
    return {"steps": sum(o.steps for o in outs),
            "preemptions": sum(o.preemptions for o in outs),
            "decode_tokens": sum(o.decode_tokens for o in outs)}


def _peak_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def million(src: list[TraceRequest], args: argparse.Namespace,
            records: Path) -> dict[str, Any]:
    """The resampled trace streamed through a fleet of ``args.big_instances`` instances
    (prefill pool, shared PNM nodes): a tenth of the requests, then all of them; each run's
    CPU time, requests, steps, emulated time, SLO attainment, latency percentiles (from the
    sketches) and this process's peak memory after it."""
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                      cat.get("models", "llama-3-8b"), link=cat.get("links", "roce-400g"))
    cfg = ServingConfig(mode="nelssa", devices=args.big_devices)
    inst: dict[str, Any] = {"count": args.big_instances}
    pool = None
    if args.big_pool:
        inst["prefill"] = "pool"
        pool = {"gpus": args.big_pool}
    spec = FleetSpec(instances=[inst], prefill_pool=pool,
                     pnm_nodes=[{"name": "n", "count": args.big_nodes,
                                 "devices": args.big_devices}], dispatch="round-robin")
    rate = len(src) / src[-1].arrival_s * args.big_instances
    out: dict[str, Any] = {"rate": rate, "baseline_mib": _peak_mib(), "runs": []}
    for n in (max(1, args.million // 10), args.million):
        fleet = FleetSim(spec, cat, lm, cfg)
        meter = WindowMeter(args.window, counters=functools.partial(fleet_work, fleet))
        with RecordSink(records / f"{n}") as sink:
            c0, w0 = time.process_time(), time.perf_counter()
            res = fleet.run(meter.meter(resample(src, n, rate, seed=1)), sink=sink, total=n)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        merged = res.merged()
        out["runs"].append({
            "requests": n, "finished": sink.requests, "cpu_s": cpu, "wall_s": wall,
            "steps": merged.steps, "end_s": merged.end_s, "attainment": sink.met / n,
            "ttft": sink.ttft.stats(), "tpot": sink.tpot.stats(), "peak_mib": _peak_mib(),
            "csv_mib": (records / f"{n}" / "requests.csv").stat().st_size / 2**20,
            "windows": meter.windows, "ref0_s": meter.ref0_s})
        log.info("%d requests: %.1f s CPU, peak %.0f MiB", n, cpu, _peak_mib())
        # the tenth's fleet (its block pools, its instances) must not be held through the whole
        # run: the peak after that run is then what a run of its own holds
        del res, merged
    return out


def _million_rows(big: dict[str, Any]) -> str:
    rows = []
    for r in big["runs"]:
        rows.append(
            f"| {r['requests']:,} | {r['finished']:,} | {r['cpu_s']:,.0f} | "
            f"{r['cpu_s'] / r['requests'] * 1e3:.3f} | {r['steps']:,} | {r['end_s']:,.0f} | "
            f"{r['attainment']:.1%} | {r['ttft']['p50']:.2f} / {r['ttft']['p99']:.2f} | "
            f"{r['tpot']['p50'] * 1e3:.1f} / {r['tpot']['p99'] * 1e3:.1f} | "
            f"{r['peak_mib']:,.0f} | {r['csv_mib']:,.0f} |")
    return "\n".join(rows)


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
    commit = res["commit"]
    ratio = per["shared"] / per["single"]
    return render("fleet_scale.md", "page", command=command, commit=commit,
                  machine=f"{platform.machine()}, Python {platform.python_version()}",
                  requests=f"{res['requests']:,}", factor=f"{args.factor:g}",
                  instances=args.instances, nodes=args.nodes, devices=args.devices,
                  dispatch="round robin", repeats=args.repeats, rows="\n".join(rows),
                  ratio=f"{ratio:.2f}",
                  why=render("fleet_scale.md", "why_private")
                  + f" Fleet with a node per instance: {per['private'] / per['single']:.2f} x.",
                  node_line=node_line) + "\n" + _million_page(res.get("million"), args)


def _million_page(big: dict[str, Any] | None, args: argparse.Namespace) -> str:
    if big is None:
        return ""
    small, full = big["runs"]
    return "\n" + render(
        "fleet_scale.md", "million", requests=f"{args.million:,}",
        instances=args.big_instances, nodes=args.big_nodes, devices=args.big_devices,
        pool=args.big_pool, rate=f"{big['rate']:,.0f}", rows=_million_rows(big),
        minutes=f"{full['cpu_s'] / 60:.1f}", baseline=f"{big['baseline_mib']:,.0f}",
        window=f"{args.window:,}",
        windows=_windows_line(full["windows"], args.window, full["ref0_s"]),
        load_note=_load_note(full["windows"], args.window),
        growth=f"{full['peak_mib'] - small['peak_mib']:+,.0f}") + "\n"


def _load_note(windows: list[dict[str, Any]], size: int) -> str:
    """What the load averages and the reference work say of the windows' CPU times: on this
    two-core machine another busy process (a load above 1.5) slows this one's CPU time too
    (they share caches and cores), and the machine's own speed may move (the reference work's
    CPU time); each window's cost per request in units of the reference work takes that
    out."""
    if not windows:
        return ""
    busy = [k + 1 for k, w in enumerate(windows) if w["load1"] > 1.5]
    if busy:
        note = (f"Other processes were busy during windows {', '.join(map(str, busy))} (load "
                "average above 1.5 on two cores): they slow this process's CPU time too.")
    else:
        note = "The machine was otherwise idle in every window (load average at most 1.5)."
    refs = [w["ref_s"] for w in windows]
    lo, hi = min(refs), max(refs)
    per = [w["cpu_s"] / size / w["ref_s"] for w in windows]
    own = max(per) / min(per) - 1
    steps = [w.get("work", {}).get("steps") for w in windows]
    work = ""
    if all(steps):
        spread = max(steps) / min(steps) - 1
        work = (f" The work itself moved by {spread:.1%} between windows (their steps, "
                "above)" + (": a window that costs more per request did not have more to do."
                            if spread < 0.05 else "."))
    third = max(1, len(per) // 3)
    trend = (sum(per[-third:]) / sum(per[:third])) - 1  # first third to last, equal counts
    if own < 0.05 or abs(trend) >= own / 2:
        meaning = (f"{trend:+.0%} from the first third of the windows to the last: the run's "
                   "own growth, as far as the reference work takes the machine's speed out")
    else:  # more spread than trend: the machine's moves the yardstick missed are in it
        meaning = (f"but {trend:+.0%} from the first third of the windows to the last: more "
                   "spread than trend, so part of the spread is the machine's moves that the "
                   "reference work did not take out, and at most the trend is the run's own "
                   "growth")
    return (f"{note} The reference work took {lo * 1e3:.0f} to {hi * 1e3:.0f} ms "
            f"({hi / lo - 1:+.0%} from its fastest window to its slowest); each window's CPU "
            "per request in thousandths of its reference work: "
            f"{', '.join(f'{x * 1e3:.2f}' for x in per)}, which differ by up to {own:.0%}, "
            f"{meaning}.{work}")


def _windows_line(windows: list[dict[str, Any]], size: int, ref0_s: float) -> str:
    """The whole run's CPU ms per request window by window, the load average and the
    reference work's CPU time at each window's end, and the garbage collections by
    generation over them."""
    if not windows:
        return "(the run is shorter than one window)"
    ms = ", ".join(f"{w['cpu_s'] / size * 1e3:.3f}" for w in windows)
    load = ", ".join(f"{w['load1']:.1f}" for w in windows)
    ref = ", ".join(f"{w['ref_s'] * 1e3:.0f}" for w in windows)
    n = [sum(w["gc_n"][g] for w in windows) for g in range(3)]
    gc_s = sum(sum(w["gc_s"]) for w in windows)
    work = ""
    if all("work" in w and w["work"] for w in windows):
        steps = ", ".join(f"{w['work']['steps'] / size:.1f}" for w in windows)
        pre = ", ".join(f"{w['work']['preemptions']:,}" for w in windows)
        work = (f"; the fleet's steps per request of each window: {steps}, its preemptions: "
                f"{pre}")
    return (f"{ms} (load average at each window's end: {load}; the reference work's CPU "
            f"there, ms: {ref}, {ref0_s * 1e3:.0f} before the first); garbage collections by "
            f"generation {n[0]} / {n[1]} / {n[2]}, {gc_s:.1f} s in all{work}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trace", type=input_file, default=str(TRACE))
    p.add_argument("--limit", type=POSITIVE_INT, help="only the first N requests")
    p.add_argument("--factor", type=float, default=16.0, help="arrivals this many times as fast")
    p.add_argument("--instances", type=POSITIVE_INT, default=16)
    p.add_argument("--nodes", type=POSITIVE_INT, default=4)
    p.add_argument("--devices", type=POSITIVE_INT, default=4)
    p.add_argument("--repeats", type=POSITIVE_INT, default=3)
    p.add_argument("--million", type=NON_NEGATIVE_INT, default=1_000_000,
                   help="requests of the streamed run on the large fleet (0: none)")
    p.add_argument("--big-instances", type=POSITIVE_INT, default=64,
                   help="decode instances of the large fleet")
    p.add_argument("--big-nodes", type=POSITIVE_INT, default=16,
                   help="PNM nodes of the large fleet")
    p.add_argument("--big-devices", type=POSITIVE_INT, default=4,
                   help="devices per PNM node of the large fleet")
    p.add_argument("--big-pool", type=NON_NEGATIVE_INT, default=128,
                   help="prefill GPUs the large fleet's instances share (0: colocated prefill)")
    p.add_argument("--window", type=POSITIVE_INT, default=100_000,
                   help="requests per window of the streamed runs' CPU time by window")
    p.add_argument("--records", type=Path,
                   help="keep the streamed runs' requests.csv and samples.csv here")
    p.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    code = code_version()  # the code as it started (the page is written at the end)
    reqs = load_trace(args.trace, args.limit, hash_ids=True)
    res = study(reqs, args.factor, args.instances, args.nodes, args.devices, args.repeats)
    res["commit"] = str(code["commit"])[:7] + (" (modified)" if code["modified"] is True
                                                else "")
    if args.million:
        src = reqs if args.limit is None else load_trace(args.trace, hash_ids=True)
        if args.records is not None:
            res["million"] = million(src, args, args.records)
        else:
            with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
                res["million"] = million(src, args, Path(tmp))
    argv_shown = sys.argv[1:] if argv is None else argv
    text = page(res, args, " ".join(["python scripts/fleet_scale.py", *argv_shown]))
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
    return 0
