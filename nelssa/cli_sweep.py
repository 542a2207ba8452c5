"""`nelssa sweep SPEC`: a grid or random search over hardware and policy parameters, each point a
serving-emulator replay; in --out results.csv (every spec's rows, by key; resumable),
configs.jsonl (each key's resolved configuration) and pareto_SPEC.png."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from nelssa.hardware_options import OPTIONS, add_hardware_file_arg, names
from nelssa.options import POSITIVE_INT, UsageError, input_file, output_dir
from nelssa.sweep.metrics import RANKED

log = logging.getLogger(__name__)


def cmd_sweep(args: argparse.Namespace) -> int:
    from nelssa.emu.latency.hardware import SECTIONS, HardwareCatalog, HardwareError
    from nelssa.progress import Progress
    from nelssa.sweep.plot import pareto_plot
    from nelssa.sweep.run import run_sweep
    from nelssa.sweep.spec import SpecError, check_catalog, load_spec

    try:
        catalog = HardwareCatalog.load(*args.hardware)
        spec = load_spec(args.spec, {SECTIONS[s]: name for s, name in catalog.use.items()})
        check_catalog(spec, catalog)
    except (SpecError, HardwareError) as e:
        raise UsageError(str(e)) from None
    if args.metric not in RANKED:
        raise UsageError(f"--metric {args.metric}: one of {', '.join(RANKED)}")
    out = Path(args.out)
    where = f"Ray at {args.ray}" if args.ray else f"{args.workers} local processes"
    print(f"sweep: {len(spec.points)} points of {spec.path} on {where}; results in "
          f"{out / 'results.csv'}")
    bar = Progress(max(1, len(spec.points)), "points")
    try:
        done = run_sweep(spec, out, args.workers, args.ray, tuple(args.hardware),
                         progress=lambda i, n: bar.advance(1))
    except RuntimeError as e:  # Ray missing or unreachable
        bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    bar.close()
    plot = out / f"pareto_{spec.path.stem}.png"  # each spec's own: another spec's stays
    on_front = pareto_plot(done.rows, args.metric, plot, plot_title(spec))
    print(f"  {done.ran} points run ({len(spec.points) - done.ran} already done), "
          f"{done.failed} failed{pace(done.ran, done.wall_s)}; "
          f"{on_front} on the Pareto frontier of {args.metric}; wrote {plot}")
    for row in done.rows:
        if row["status"] != "ok":
            print(f"  failed: {row['key']}: {row['error']}")
    return 1 if done.failed else 0


def pace(ran: int, wall_s: float) -> str:
    """How fast the points ran (nothing to say when none ran)."""
    if not ran or wall_s <= 0:
        return " (nothing left to run)" if not ran else ""
    return f", in {wall_s:.1f} s: {ran / wall_s * 60:.1f} points/min"


def plot_title(spec: Any) -> str:
    """The plot's title: the spec and the settings its points share."""
    st = spec.settings()
    slo = st["slo"]
    return (f"sweep {spec.path.name}: trace {Path(st['trace']).name}"
            + (f" (first {st['limit']})" if st["limit"] else "")
            + f", seed {st['seed']}, scheduler {st['scheduler']}, SLO TTFT "
            f"{slo['ttft_s'] * 1e3:g} ms / TPOT {slo['tpot_s'] * 1e3:g} ms")


def add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="a design-space sweep of the serving emulator (grid or "
                       "random search; process pool or Ray)",
                       epilog="presets a spec may name (and entries of --hardware): "
                       + "; ".join(f"{section}: {names(section)}" for section in OPTIONS))
    p.add_argument("spec", type=input_file, help="the sweep's TOML file (docs/serving.md)")
    p.add_argument("--out", type=output_dir, default="sweep-out",
                   help="folder of results.csv (every spec run into it, a row per point by "
                   "its configuration's hash; resumed if there), configs.jsonl (each point's "
                   "resolved configuration) and pareto_SPEC.png")
    p.add_argument("--workers", type=POSITIVE_INT, default=2,
                   help="points run at once (local processes, or Ray CPUs with --ray local)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run the points on a Ray cluster (`local` starts one on this machine)")
    p.add_argument("--metric", default="goodput_rps", metavar="NAME",
                   help="what the Pareto plot weighs against cost, in its own better "
                   "direction (lower for latencies): one of " + ", ".join(RANKED))
    add_hardware_file_arg(p)
    p.set_defaults(func=cmd_sweep)
