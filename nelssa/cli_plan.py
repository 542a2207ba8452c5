"""`nelssa plan`: the fleet mixes of a space (decode GPUs, prefill pool, PNM nodes and devices,
T_input policy; GPU-only fleets the baseline), each searched for the highest request rate it
sustains under an SLO, priced (capital plus energy) per million output tokens; in --out
points.jsonl (each point with its resolved configuration and its hash; resumed), plan.csv and
plan.png (the Pareto front of cost against rate)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

from nelssa.cli_serving import SLO_MS
from nelssa.config_args import field_docs, option_name, user_help
from nelssa.emu.latency.fields import FieldError, Num
from nelssa.hardware_options import add_hardware_args
from nelssa.options import (
    POSITIVE_INT,
    PROBABILITY,
    SEED,
    UsageError,
    input_file,
    key_values,
    number,
    output_dir,
)
from nelssa.plan.prices import PRICE_FIELDS, Prices
from nelssa.plan.run import PlanSpace
from nelssa.plan.search import ADAPTIVE, CROSSOVER, PlanSettings, PlanSlo

log = logging.getLogger(__name__)

SLO_PCT = Num("a percentage in (0, 100]", lo=0, lo_open=True, hi=100)


class SloAction(argparse.Action):
    """``--slo ttft:MS tpot:MS goodput:PCT`` (that share of requests meeting both) or
    ``--slo ttft:MS tpot:MS pct:P`` (the P-th percentiles of TTFT and TPOT within them)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        got = key_values(self, values, {"ttft": SLO_MS, "tpot": SLO_MS, "goodput": SLO_PCT,
                                        "pct": SLO_PCT})
        try:
            slo = PlanSlo(ttft_s=got["ttft"] / 1e3 if "ttft" in got else None,
                          tpot_s=got["tpot"] / 1e3 if "tpot" in got else None,
                          goodput=got["goodput"] / 100 if "goodput" in got else None,
                          percentile=got.get("pct"))
        except ValueError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        setattr(namespace, self.dest, slo)


def int_list(text: str, lo: int, hi: int) -> tuple[int, ...]:
    spec = Num(f"integers in {lo}..{hi} separated by commas", integer=True, lo=lo, hi=hi)
    try:
        return tuple(dict.fromkeys(spec.parse(w.strip()) for w in text.split(",")))
    except FieldError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def policies(text: str) -> tuple[str, ...]:
    out = []
    for w in (w.strip() for w in text.split(",")):
        if w not in (CROSSOVER, ADAPTIVE) and not (w.isdigit() and 0 < int(w) < 1 << 31):
            raise argparse.ArgumentTypeError(f"{w!r}: a policy is {CROSSOVER}, {ADAPTIVE} or "
                                             "a T_input in tokens")
        out.append(w)
    return tuple(dict.fromkeys(out))


def prices_of(args: argparse.Namespace) -> Prices:
    """--prices FILE, then each price option given over it."""
    from nelssa.plan.prices import PricesError, load_prices

    try:
        base = load_prices(args.prices) if args.prices else Prices()
    except PricesError as e:
        raise UsageError(f"--prices {e}") from None
    given = {name: getattr(args, f"price_{name}") for name in PRICE_FIELDS
             if getattr(args, f"price_{name}") is not None}
    return dataclasses.replace(base, **given)


def settings_of(args: argparse.Namespace) -> PlanSettings:
    from nelssa.emu.latency.hardware import HardwareError
    from nelssa.emu.serving.workload import TraceError, load_trace
    from nelssa.hardware_options import OPTIONS, load_catalog
    from nelssa.provenance import file_sha256

    cat = load_catalog(args.hardware)
    names = {}
    for section, (option, default) in OPTIONS.items():
        try:
            names[section] = cat.chosen(section, getattr(args, option[2:]), default).name
        except (ValueError, HardwareError) as e:
            raise UsageError(f"{option}: {e}") from None
    try:
        load_trace(args.trace, hash_ids=True)  # every line checked here, not in a worker
    except TraceError as e:
        raise UsageError(f"--trace {e}") from None
    return PlanSettings(trace=str(Path(args.trace).resolve()),
                        trace_sha256=file_sha256(str(Path(args.trace).resolve())),
                        slo=args.slo, requests=args.requests, seed=args.seed,
                        long_share=args.long_share, long_threshold=args.long_threshold,
                        model=names["models"], gpu=names["gpus"], pnm=names["pnm"],
                        link=names["links"], dispatch=args.dispatch,
                        hardware=tuple(args.hardware), granularity=args.granularity)


def cmd_plan(args: argparse.Namespace) -> int:
    from nelssa.plan import report
    from nelssa.plan.run import executor, run_plan
    from nelssa.progress import Progress

    prices = prices_of(args)
    settings = settings_of(args)
    space = PlanSpace(decode=args.decode, prefill_gpus=args.prefill_gpus, nodes=args.nodes,
                      devices=args.devices, policies=args.policies)
    mixes = space.mixes()
    out = Path(args.out)
    where = f"Ray at {args.ray}" if args.ray else f"{args.workers} local processes"
    print(f"plan: {len(mixes)} fleet mixes of {Path(settings.trace).name}, SLO "
          f"{settings.slo.label()}, {settings.requests} requests a probe, on {where}; points "
          f"in {out / 'points.jsonl'}")
    bar = Progress(max(1, len(mixes)), "mixes")
    try:
        done = run_plan(settings, mixes, out, executor(args.workers, args.ray),
                        progress=lambda i, n: bar.advance(1))
    except RuntimeError as e:  # Ray missing or unreachable
        raise UsageError(str(e)) from None
    finally:
        bar.close()
    rs = report.rows(done.points, prices)
    report.write_csv(rs, out / "plan.csv")
    report.plot(rs, out / "plan.png", f"plan: {Path(settings.trace).name}, SLO "
                f"{settings.slo.label()}")
    print(f"  {done.ran} mixes searched now ({len(mixes) - done.ran} from the store), "
          f"{done.probes} fleet runs, {done.cpu_s:.0f} CPU s, {done.wall_s:.0f} s wall")
    print(f"  cheapest GPU-only: {report.summary_line(report.cheapest(rs, True))}")
    print(f"  cheapest NELSSA:   {report.summary_line(report.cheapest(rs, False))}")
    be = report.break_even_device_price(rs, prices)
    if be is not None:
        print(f"  NELSSA pays while a PNM device costs less than ${be:.3f}/hour "
              f"(priced at ${prices.hourly('pnm_device'):.3f})")
    counted = {c for r in rs for c in r.cost.power_counted}
    if "pnm_nodes" not in counted and any(not r.point.mix.gpu_only for r in rs):
        print("  energy: the PNM tier's not counted (no power figure for it: "
              "--pnm-device-watts, --pnm-node-watts)")
    print("  Pareto front ($/hour against rate): "
          + (", ".join(r.label for r in report.pareto(rs)) or "none"))
    if rs and all(r.point.rate == 0 for r in rs):
        low = min((x for r in rs for x in r.point.probes), key=lambda x: x.rate)
        print(f"  no mix sustains any rate: at {low.rate:.3g}/s (the least probed) "
              f"{low.attainment:.1%} of the requests met TTFT and TPOT, P{pct_of(settings)} "
              f"TTFT {low.ttft_s:.1f} s, TPOT {low.tpot_s * 1e3:.0f} ms (an SLO the trace's "
              "own longest prompts miss on an idle fleet cannot be met at any rate)")
    for mix, err in done.failed:
        print(f"  failed: {mix.label()}: {err}")
    print(f"wrote {out}/: points.jsonl, plan.csv, plan.png")
    return 1 if done.failed else 0


def pct_of(settings: PlanSettings) -> str:
    return f"{settings.slo.percentile:g}" if settings.slo.percentile is not None else "99"


def add_price_options(p: argparse.ArgumentParser) -> None:
    """An option per Prices field (over --prices), its help the field's docstring."""
    docs = field_docs(Prices)
    for f in dataclasses.fields(Prices):
        shown = "none" if f.default is None else f"{f.default:g}"
        p.add_argument(option_name(f.name), dest=f"price_{f.name}",
                       type=number(f.metadata["num"]), default=None, metavar="N",
                       help=f"{user_help(docs[f.name])} [default: the --prices file's, else "
                       f"{shown}]".replace("%", "%%"))


def add_plan_parser(sub: argparse._SubParsersAction) -> None:
    from nelssa.emu.policy.dispatch import DISPATCHERS

    s, space = PlanSettings("", ""), PlanSpace()
    p = sub.add_parser("plan", help="the cheapest fleet mix that meets an SLO: a capacity "
                       "search per mix, $ per million output tokens, the Pareto front")
    p.add_argument("--trace", required=True, type=input_file,
                   help="Mooncake-format JSONL trace the probes draw their requests from")
    p.add_argument("--slo", nargs="+", action=SloAction, default=PlanSlo(), metavar="KEY:V",
                   help="what a sustained rate meets: ttft:MS and tpot:MS, with goodput:PCT "
                   "(that share of requests meets both) or pct:P (the P-th percentile of "
                   "each within them); a run whose queue grows without bound fails "
                   f"[default: {PlanSlo().label()}, MLPerf's long-context SLO]"
                   .replace("%", "%%"))
    p.add_argument("--requests", type=POSITIVE_INT, default=s.requests,
                   help="requests per probe (a fleet run at one rate)")
    p.add_argument("--seed", type=SEED, default=s.seed)
    p.add_argument("--granularity", type=number(Num("in (0, 1)", lo=0, lo_open=True, hi=0.99)),
                   default=s.granularity, help="the search stops when the failing rate is "
                   "within this share above the passing one")
    p.add_argument("--long-share", type=PROBABILITY, default=None,
                   help="redraw the trace with this share of long requests (inputs of at "
                   "least --long-threshold tokens; the Figure 16 sweep) [default: as it is]")
    p.add_argument("--long-threshold", type=POSITIVE_INT, default=s.long_threshold)
    p.add_argument("--decode", type=lambda t: int_list(t, 1, 256), default=space.decode,
                   metavar="N,N,...", help="decode instances (one GPU each)")
    p.add_argument("--prefill-gpus", type=lambda t: int_list(t, 0, 256),
                   default=space.prefill_gpus, metavar="N,N,...",
                   help="prefill pool GPUs (0: each instance prefills on its own GPU)")
    p.add_argument("--nodes", type=lambda t: int_list(t, 0, 64), default=space.nodes,
                   metavar="N,N,...", help="PNM nodes (0: the GPU-only baseline)")
    p.add_argument("--devices", type=lambda t: int_list(t, 1, 64), default=space.devices,
                   metavar="N,N,...", help="PNM devices per node")
    p.add_argument("--policies", type=policies, default=space.policies, metavar="P,P,...",
                   help=f"T_input policies: {CROSSOVER} (static), {ADAPTIVE} (the fleet "
                   "orchestrator) or a T_input in tokens")
    p.add_argument("--dispatch", choices=list(DISPATCHERS), default=s.dispatch)
    add_hardware_args(p)
    p.add_argument("--prices", type=input_file, metavar="FILE",
                   help="prices (JSON, YAML or TOML: an object of the price fields below)")
    add_price_options(p)
    p.add_argument("--workers", type=POSITIVE_INT, default=2,
                   help="mixes searched at once (local processes, or Ray CPUs with --ray "
                   "local)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="search on a Ray cluster (`local` starts one on this machine)")
    p.add_argument("--out", type=output_dir, default="plan-out",
                   help="folder of points.jsonl (resumed if there), plan.csv and plan.png")
    p.set_defaults(func=cmd_plan)
