"""`nelssa serve-sim`: replay a request trace through the GPU-only baseline and/or NELSSA in
emulated time; in --out its resolved configuration (config.json), JSON results, per-request
records (requests.csv) and PNG plots (throughput and queue over time, TPOT percentiles)."""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

from nelssa.config_args import add_config_options, config_values, field_docs
from nelssa.emu.latency.fields import FieldError, Num
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.serving.config import PERCENTILE, MetricsConfig, ServingConfig
from nelssa.emu.serving.records import request_rows, write_records
from nelssa.emu.serving.report import (
    PLOTS,
    comparison_line,
    energy_line,
    plot_runs,
    run_line,
    times,
    write_results,
)
from nelssa.emu.serving.workload import RATE
from nelssa.hardware_options import add_hardware_args, load_hardware
from nelssa.options import (
    POSITIVE_INT,
    SEED,
    BurstAction,
    UsageError,
    input_file,
    key_values,
    number,
    output_dir,
)
from nelssa.provenance import CONFIG_FILE, check_fresh, file_record, run_config, write_config

SERVING_OPTIONS = ("devices", "t_input", "max_running", "prefill_gpus", "migrate_at", "adaptive",
                   "tpot_budget", "shed_late", "max_model_len")
"""ServingConfig fields `serve-sim` takes as options (name, default and help from the field)."""
SPARSITY_OPTIONS = ("selection",)
log = logging.getLogger(__name__)


def cmd_serve_sim(args: argparse.Namespace) -> int:
    from nelssa.emu.latency.model import LatencyModel
    from nelssa.emu.policy.vllm_scheduler import VllmEnvError, vllm_python
    from nelssa.emu.serving.sim import SchedulerKind
    from nelssa.emu.serving.workload import TraceError, inject_burst, load_trace, poisson

    scheduler = SchedulerKind(args.scheduler)
    caching = args.prefix_caching == "on"
    if scheduler is SchedulerKind.VLLM:
        try:
            vllm_python()
        except VllmEnvError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    if args.fleet:
        if args.sweeps:
            raise UsageError("--fleet: --sweeps describe one instance; run them without --fleet")
        args.hardware = [*args.hardware, args.fleet]
    hw = load_hardware(args)
    cat = hw["catalog"]
    if args.fleet and cat.fleet is None:
        raise UsageError(f"--fleet {args.fleet}: the file has no 'fleet' section "
                         "(docs/serving.md, 'A fleet')")
    if args.fleet and args.adaptive and cat.fleet.orchestrator != "static":
        raise UsageError(f"--adaptive: the fleet's orchestrator ({cat.fleet.orchestrator}, "
                         f"{args.fleet}) moves each instance's T_input; drop --adaptive")
    lm = LatencyModel(hw["gpus"], hw["pnm"], hw["models"],
                      Sparsity(**config_values(args, Sparsity, SPARSITY_OPTIONS)), hw["links"])
    try:
        reqs = load_trace(args.trace, args.limit, hash_ids=caching)
    except TraceError as e:
        raise UsageError(str(e)) from None
    if args.rate:
        try:
            reqs = poisson(reqs, args.rate, args.seed)
        except ValueError as e:
            raise UsageError(f"--rate {args.rate:g}: {e}") from None
    if args.burst:
        reqs = inject_burst(reqs, *args.burst)
    metrics = metrics_config(args)
    modes = ["gpu", "nelssa"] if args.mode == "both" else [args.mode]
    configs = {mode: ServingConfig(mode=mode, preemption=args.preemption, prefill=args.prefill,
                                   migration=args.migration and mode == "nelssa",
                                   prefix_caching=caching, scheduler=scheduler,
                                   **config_values(args, ServingConfig, SERVING_OPTIONS))
               for mode in modes}
    out = Path(args.out)  # made when there is something to write in it
    check_fresh(out, args.overwrite)  # before the run: an earlier run is not replaced silently
    if args.requests is not None:
        if not args.fleet or args.burst:
            raise UsageError("--requests: streams a resampling through a fleet; give --fleet "
                             "FILE (and no --burst)")
        from nelssa.cli_fleet_stream import run_streamed

        return run_streamed(args, cat, lm, configs, metrics, out)
    print(f"serve-sim: {len(reqs)} requests from {args.trace}"
          f"{f' at {args.rate:g}/s (Poisson)' if args.rate else ' by timestamp'}; "
          f"{lm.model.name} on {lm.gpu.name}; PNM: {args.devices} x {lm.pnm.name}; "
          f"{scheduler.value} scheduler, prefix caching {args.prefix_caching}")
    print(f"  PNM bandwidth {lm.pnm.bw_eff_gbs:g} GB/s per device"
          + (f": {lm.pnm.bw_source}" if lm.pnm.bw_source else " (stated in the description)"))
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for mode in modes:
        if args.fleet:
            results[mode], mode_rows = run_fleet(cat, lm, configs[mode], reqs, args.trace, out,
                                                 metrics)
        else:
            try:
                results[mode], mode_rows = run_one(lm, configs[mode], reqs, args.trace, metrics,
                                                   cat)
            except VllmEnvError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
        rows += mode_rows
    if len(modes) == 2:
        g, n = results["gpu"]["summary"], results["nelssa"]["summary"]
        print(f"  NELSSA against GPU-only: {comparison_line(g, n)}")
    outputs = ["results.json", CONFIG_FILE]
    if args.sweeps:
        outputs += run_sweeps(args, cat, lm, configs[modes[0]], len(reqs), results, out)
    doc = run_config("serve-sim", getattr(args, "argv", None), {
        "trace": {**file_record(args.trace), "limit": args.limit, "requests": len(reqs),
                  "arrivals": "poisson" if args.rate else "timestamps", "rate": args.rate,
                  "seed": args.seed, "burst": args.burst},
        "hardware": {"files": [file_record(f) for f in args.hardware], "gpu": lm.gpu,
                     "pnm": lm.pnm, "model": lm.model, "link": lm.link,
                     "sparsity": lm.sparsity},
        "fleet": cat.fleet if args.fleet else None,
        "fleet_hardware": fleet_hardware(cat) if args.fleet else None,
        "serving": configs, "metrics": metrics, "sweeps": args.sweeps})
    out.mkdir(parents=True, exist_ok=True)
    outputs += write_records(rows, metrics.all_percentiles, out)
    results["config_hash"] = doc["config_hash"]
    write_results(results, out)
    if args.fleet:
        outputs += [f"fleet_{m}.png" for m in modes]
    else:
        ttft = {m: [r["ttft_s"] for r in rows if r["mode"] == m and r.get("ttft_s") is not None]
                for m in modes}
        plot_runs({k: v for k, v in results.items() if k in modes}, out,
                  run_title(args, lm, len(reqs), configs[modes[-1]]), ttft)
        outputs += list(PLOTS)
    write_config(out / CONFIG_FILE, doc, outputs)
    print(f"wrote {out}/: " + ", ".join(sorted(outputs)) + f" (configuration "
          f"{doc['config_hash'][:12]}, nelssa {doc['nelssa']['version']} at commit "
          f"{doc['nelssa']['commit'][:12]})")
    return 0


def fleet_hardware(cat: Any) -> dict[str, Any]:
    """The values of the hardware entries a fleet's instances, pool, nodes and fabric name."""
    f = cat.fleet
    named = {"gpus": [g.gpu for g in f.instances] + [f.prefill_pool.gpu if f.prefill_pool
                                                      else None],
             "pnm": [n.pnm for n in f.pnm_nodes], "links": [f.fabric.link]}
    return {section: {n: cat.get(section, n) for n in dict.fromkeys(names) if n}
            for section, names in named.items()}


def _named(trace: str, text: str) -> str:
    """A capacity refusal's "trace line N" as the trace's file:line."""
    return re.sub(r"^trace line (\d+)", lambda m: f"{trace}:{m[1]}", text)


def _rejections(mode: str, rejected: list[Any], trace: str) -> None:
    if not rejected:
        return
    print(f"  {mode:>6}: {len(rejected)} requests rejected before the run (as vLLM refuses "
          "them), the run goes on; first: " + "; ".join(
              _named(trace, x.reason) for x in rejected[:3]))
    for x in rejected:
        log.info("rejected: %s", _named(trace, x.reason))


def _admitted(admitted: list[Any], rejected: list[Any], trace: str) -> None:
    if not admitted:  # nothing left to run: the first refusal, named by its line
        raise UsageError(_named(trace, rejected[0].reason) + (
            f" (and the other {len(rejected) - 1} requests are rejected too)"
            if len(rejected) > 1 else ""))


def run_title(args: argparse.Namespace, lm: Any, requests: int, cfg: ServingConfig) -> str:
    """A plot's title: the run's configuration in a line or two."""
    arrivals = f"Poisson {args.rate:g}/s" if args.rate else "trace timestamps"
    t_input = "adaptive" if cfg.adaptive else (f"{cfg.t_input:,}" if cfg.t_input else "crossover")
    return (f"serve-sim: {requests} requests of {Path(args.trace).name} ({arrivals}, seed "
            f"{args.seed}); {lm.model.name} on {lm.gpu.name}\nPNM {cfg.devices} x "
            f"{lm.pnm.name}, link {lm.link.name}; prefill {cfg.prefill}"
            + (f" ({cfg.prefill_gpus} GPUs)" if cfg.prefill == "disaggregated" else "")
            + f", T_input {t_input}, max batch {cfg.max_running}, {cfg.scheduler.value} "
            "scheduler")


def energy_of(price: Any) -> dict[str, Any] | None:
    """``price()`` (a run's ``TierEnergy``) as JSON, or None with a warning where the hardware
    description lacks the figures (a user's GPU entry without its power model)."""
    from nelssa.emu.energy import EnergyError

    try:
        return price().as_dict()
    except EnergyError as e:
        print(f"  warning: {e}")
        return None


def run_one(lm: Any, cfg: ServingConfig, reqs: list, trace: str, metrics: MetricsConfig,
            cat: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One mode of ``serve-sim``: the requests admitted, the run, its lines printed; its JSON
    (with its energy) and per-request rows."""
    from nelssa.emu.energy import energy_entry
    from nelssa.emu.serving.metrics import series, summarize
    from nelssa.emu.serving.power import run_energy
    from nelssa.emu.serving.sim import ServingSim, admit
    from nelssa.progress import Progress

    sim = ServingSim(lm, cfg)
    admitted, rejected = admit(reqs, [sim])
    _admitted(admitted, rejected, trace)
    bar = Progress(1000, f"{cfg.mode:>6}")
    t0 = time.perf_counter()
    try:
        run = sim.run(admitted, progress=lambda f: bar.advance(int(f * 1000) - bar.done))
    except ValueError as e:  # a trace that cannot be replayed: named by the trace's file:line
        raise UsageError(_named(trace, str(e))) from None
    finally:
        bar.close()
    run.rejected = len(rejected)
    wall = time.perf_counter() - t0
    s = summarize(run, metrics)
    s["wall_s"] = wall
    _rejections(cfg.mode, rejected, trace)
    energy = energy_of(lambda: run_energy(run, sim.cost, energy_entry(cat)))
    print(f"  {cfg.mode:>6}: {run_line(s, wall)}\n          {energy_line(energy)}")
    return ({"summary": s, "series": series(run), "energy": energy},
            request_rows(cfg.mode, [("", run)], admitted, rejected, metrics.all_percentiles))


def run_sweeps(args: argparse.Namespace, cat: Any, lm: Any, cfg: ServingConfig, count: int,
               results: dict[str, Any], out: Path) -> list[str]:
    """``--sweeps``: the Figure-10 and Figure-16 sweeps, their plots; the files written."""
    from dataclasses import replace

    from nelssa.emu.serving import sweeps
    from nelssa.emu.serving.workload import load_trace

    base = ServingConfig(devices=cfg.devices, preemption=cfg.preemption,
                         max_running=cfg.max_running, prefill=cfg.prefill,
                         prefill_gpus=cfg.prefill_gpus, prefix_caching=cfg.prefix_caching,
                         scheduler=cfg.scheduler)
    gpus = {g: replace(lm, gpu=cat.get("gpus", g)) for g in dict.fromkeys(
        [lm.gpu.name, "2x-h100-nvl"])}
    cb = sweeps.context_batch(gpus, base)
    threshold = args.t_input or 32768
    try:
        lf = sweeps.long_fraction(lm, load_trace(args.trace, hash_ids=cfg.prefix_caching),
                                  base, args.rate or 4.0, min(1000, count), threshold,
                                  args.seed)
    except ValueError as e:
        raise UsageError(f"--sweeps: {e}") from None
    out.mkdir(parents=True, exist_ok=True)
    title = f"{lm.model.name}, PNM {cfg.devices} x {lm.pnm.name}, link {lm.link.name}"
    sweeps.plot_context_batch(cb, out / "fig10_context_batch.png", f"Figure 10: {title}",
                              lm.model.max_context)
    sweeps.plot_long_fraction(lf, out / "fig16_long_fraction.png", f"Figure 16: {title}, "
                              f"T_input {threshold:,}")
    results["sweeps"] = {"context_batch": {k: {str(c): {str(b): t for b, t in r.items()}
                                               for c, r in v.items()}
                                           for k, v in cb.items()},
                         "long_fraction": {str(k): v for k, v in lf.items()}}
    for frac, v in lf.items():
        print(f"  long share {frac:>4.0%}: NELSSA's throughput "
              f"{times(v['nelssa_tps'], v['gpu_tps'])} GPU-only's (higher is better), P99 TPOT "
              f"{v['gpu_tpot_p99'] * 1e3:.0f} -> {v['nelssa_tpot_p99'] * 1e3:.0f} ms")
    return ["fig10_context_batch.png", "fig16_long_fraction.png"]


def run_fleet(cat: Any, lm: Any, cfg: ServingConfig, reqs: list, trace: str,
              out: Path, metrics: MetricsConfig
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One mode of ``serve-sim --fleet``: the fleet run, its lines printed, its plot written;
    the JSON of its results and its per-request rows."""
    from nelssa.emu.energy import energy_entry
    from nelssa.emu.policy.vllm_scheduler import VllmEnvError
    from nelssa.emu.serving.fleet import FleetSim, fleet_json, plot_fleet
    from nelssa.emu.serving.fleet_vllm import run_fleet as run_with
    from nelssa.emu.serving.metrics import series, summarize
    from nelssa.progress import Progress

    fleet = FleetSim(cat.fleet, cat, lm, cfg)
    admitted, rejected = fleet.admit(reqs)
    _admitted(admitted, rejected, trace)
    bar = Progress(1000, f"{cfg.mode:>6}")
    try:
        res = run_with(fleet, admitted,
                       progress=lambda f: bar.advance(int(f * 1000) - bar.done))
    except VllmEnvError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # a trace that cannot be replayed: named by the trace's file:line
        raise UsageError(_named(trace, str(e))) from None
    finally:
        bar.close()
    own = {id(run) for _, run in res.instances}
    gaps = {k: v for _, run in res.instances for k, v in (run.token_gaps or {}).items()}

    def summary(run: Any) -> dict[str, Any]:
        if id(run) not in own:  # the fleet as one run: every instance's gaps, its rejections
            run.token_gaps, run.rejected = gaps, len(rejected)
        return summarize(run, metrics)

    doc = fleet_json(res, summary, series)
    doc["summary"] = doc["fleet"]
    doc["energy"] = energy_of(lambda: fleet.energy(res, energy_entry(cat)))
    doc["series"] = series(res.merged())
    _rejections(cfg.mode, rejected, trace)
    print(f"  {cfg.mode:>6} fleet ({len(res.instances)} instances, {len(res.nodes)} PNM nodes, "
          f"dispatch {res.dispatch}, orchestrator {res.orchestrator}): "
          f"{run_line(doc['fleet'], res.wall_s)}\n          {energy_line(doc['energy'])}")
    for name, d in doc["instances"].items():
        s = d["summary"]
        print(f"    {name}: {s['requests']} requests ({s['pnm_requests']} PNM), decode "
              f"{s['decode_throughput_tps']:,.0f} tokens/s, mean batch {s['mean_running']:.1f}, "
              f"max waiting {s['max_waiting']}, preemptions {s['preemptions']}")
    for n in res.nodes:
        print(f"    node {n.name}: {n.devices} devices, {n.placed} requests placed, peak "
              f"{n.peak_used_tokens / n.tokens:.1%} of {n.tokens:,} tokens, mean device load "
              f"{n.mean_device_load:.2f}")
    if res.switch_peak_load is not None:
        print(f"    switch {cat.fleet.fabric.switch_gbs:g} GB/s: peak offered load "
              f"{res.switch_peak_load:.2f} of its bandwidth (above 1, transfers stretched by "
              "it)")
    out.mkdir(parents=True, exist_ok=True)
    plot_fleet(res, out / f"fleet_{cfg.mode}.png")
    return doc, request_rows(cfg.mode, res.instances, admitted, rejected,
                             metrics.all_percentiles)


def percentiles(text: str) -> tuple[float, ...]:
    """``--percentiles 50,90,99``: each a percentile in (0, 100]."""
    words = [w.strip() for w in text.split(",")]
    if not all(words):
        raise argparse.ArgumentTypeError(f"must be percentiles separated by commas (50,90,99), "
                                         f"got {text!r}")
    out = []
    for w in words:
        try:
            out.append(float(PERCENTILE.parse(w)))
        except FieldError as e:
            raise argparse.ArgumentTypeError(f"{w!r}: {e}") from None
    return tuple(dict.fromkeys(out))


GOODPUT_KEYS = {"ttft": "goodput_ttft_s", "tpot": "goodput_tpot_s", "e2el": "goodput_e2el_s"}
SLO_MS = Num("a finite number of milliseconds > 0", lo=0, lo_open=True, most=1e9)


class GoodputAction(argparse.Action):
    """``--goodput ttft:MS tpot:MS [e2el:MS]``, as ``vllm bench serve --goodput``: the SLOs a
    request must all meet to count (those not given are not checked)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        ms = key_values(self, values, dict.fromkeys(GOODPUT_KEYS, SLO_MS), "MS")
        slo = {k: v / 1e3 for k, v in ms.items()}
        setattr(namespace, self.dest, slo)


def metrics_config(args: argparse.Namespace) -> MetricsConfig:
    """--percentiles and --goodput as a MetricsConfig (given --goodput: only its SLOs)."""
    slo = args.goodput
    values: dict[str, Any] = {"percentiles": args.percentiles}
    if slo is not None:
        values.update({field: slo.get(key) for key, field in GOODPUT_KEYS.items()})
    return MetricsConfig(**values)


def add_serving_parser(sub: argparse._SubParsersAction) -> None:
    from nelssa.emu.serving.config import SchedulerKind

    p = sub.add_parser("serve-sim", help="trace-driven serving emulator: GPU-only vs NELSSA")
    p.add_argument("--trace", required=True, type=input_file,
                   help="Mooncake-format JSONL trace")
    p.add_argument("--mode", choices=("gpu", "nelssa", "both"), default="both")
    add_hardware_args(p)
    p.add_argument("--scheduler", choices=[k.value for k in SchedulerKind], default="ours",
                   help="ours: this emulator's scheduler, which follows vLLM v1's (fast); vllm: "
                   "vLLM's own v1 scheduler, unmodified, in its environment (make vllm)")
    p.add_argument("--prefix-caching", choices=("on", "off"), default="on",
                   help="automatic prefix caching over the trace's hash_ids (vLLM's default: "
                   "on; a trace without hash_ids needs off)")
    add_config_options(p, ServingConfig, SERVING_OPTIONS)
    add_config_options(p, Sparsity, SPARSITY_OPTIONS)
    p.add_argument("--rate", type=number(RATE),
                   help="resample arrivals as Poisson at this rate (/s)")
    p.add_argument("--limit", type=POSITIVE_INT, help="only the first N requests")
    p.add_argument("--requests", type=POSITIVE_INT,
                   help="with --fleet: N requests drawn from the trace (Poisson at --rate, "
                   "default the trace's mean rate) and streamed through the fleet, each "
                   "written to requests.csv as it finishes (memory bounded by the requests in "
                   "flight; latency percentiles within 0.5 %%)")
    p.add_argument("--preemption", choices=("recompute", "swap"),
                   default=ServingConfig.preemption)
    p.add_argument("--prefill", choices=("colocated", "disaggregated"),
                   default=ServingConfig.prefill,
                   help="prefill on the decode GPU, or on separate prefill GPUs (the paper's)")
    p.add_argument("--burst", action=BurstAction,
                   help="inject COUNT long requests of INPUT/OUTPUT tokens at AT_S seconds")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--migration", action="store_true",
                   help="NELSSA: migrate grown requests to the PNM tier under memory pressure")
    p.add_argument("--sweeps", action="store_true",
                   help="also the Figure-10 (context x batch) and Figure-16 (long share) sweeps")
    p.add_argument("--fleet", type=input_file, metavar="FILE",
                   help="a hardware description with a 'fleet' section: decode instances, "
                   "prefill pool, PNM nodes, fabric and dispatcher (docs/serving.md); the "
                   "trace is dispatched over the fleet")
    docs = field_docs(MetricsConfig)
    p.add_argument("--percentiles", type=percentiles, default=MetricsConfig.percentiles,
                   metavar="P,P,...", help=docs["percentiles"] + " [default: " + ",".join(
                       f"{x:g}" for x in MetricsConfig.percentiles) + "]")
    p.add_argument("--goodput", nargs="+", action=GoodputAction, metavar="KEY:MS",
                   help="the SLO goodput counts, as vLLM's --goodput: ttft:MS, tpot:MS and "
                   "e2el:MS, each a request must meet (those not given are not checked) "
                   f"[default: ttft:{MetricsConfig.goodput_ttft_s * 1e3:g} "
                   f"tpot:{MetricsConfig.goodput_tpot_s * 1e3:g}, "
                   + docs["goodput_ttft_s"].split(": ", 1)[1].split(" by default")[0]
                   + ", emu/policy/slo.py]")
    p.add_argument("--out", type=output_dir, default="serve-sim",
                   help="folder for config.json (the resolved configuration), results.json, "
                   "requests.csv (per-request records; requests.parquet too with pyarrow) and "
                   "plots; refused if it holds an earlier run")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the earlier run's results in --out")
    p.set_defaults(func=cmd_serve_sim)
