"""`nelssa serve-sim --fleet FILE --requests N`: a fleet run too long to keep in memory. N
requests are resampled from the trace (Poisson arrivals, each request's lengths and prefix
blocks drawn from the trace) and streamed through the fleet as it takes them; each finished
request is written to OUT/requests.csv and dropped, the time series to OUT/samples.csv; the
summary's latencies come from bounded-size sketches (emu/serving/stream.py)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from nelssa.emu.serving.config import MetricsConfig, ServingConfig
from nelssa.emu.serving.records import parquet_available
from nelssa.options import UsageError
from nelssa.provenance import CONFIG_FILE, file_record, run_config, write_config

log = logging.getLogger(__name__)


def summary(sink: Any, res: Any) -> dict[str, Any]:
    """The streamed run's figures: counts, throughput, SLO attainment, latency percentiles
    (within the sketches' 0.5 %)."""
    merged = res.merged()
    end = merged.end_s
    n = sink.requests + sink.rejected
    return {
        "requests": sink.requests, "rejected": sink.rejected, "pnm_requests": sink.pnm_requests,
        "duration_s": end, "steps": merged.steps, "decode_tokens": merged.decode_tokens,
        "request_throughput_rps": sink.requests / end if end else 0.0,
        "output_throughput_tps": sink.output_tokens / end if end else 0.0,
        "ttft_s": sink.ttft.stats(), "tpot_s": sink.tpot.stats(), "itl_s": sink.itl_stats(),
        "e2el_s": sink.e2e.stats(),
        "goodput": {"met": sink.met, "attainment": sink.met / n if n else float("nan"),
                    "goodput_rps": sink.met / end if end else 0.0},
        "preemptions": merged.preemptions, "migrations": merged.migrations,
        "wall_s": res.wall_s, "cpu_s": res.cpu_s}


def run_streamed(args: argparse.Namespace, cat: Any, lm: Any, configs: dict[str, ServingConfig],
                 metrics: MetricsConfig, out: Path) -> int:
    """Each mode of ``serve-sim`` streamed through the fleet (``--requests``)."""
    from nelssa.cli_serving import energy_of
    from nelssa.emu.energy import energy_entry
    from nelssa.emu.serving.fleet import FleetSim
    from nelssa.emu.serving.report import energy_line
    from nelssa.emu.serving.stream import RecordSink
    from nelssa.emu.serving.workload import TraceError, load_trace, resample

    try:
        source = load_trace(args.trace, args.limit, hash_ids=args.prefix_caching == "on")
    except TraceError as e:
        raise UsageError(str(e)) from None
    rate = args.rate or len(source) / max(source[-1].arrival_s - source[0].arrival_s, 1e-9)
    if any(c.scheduler.value != "ours" for c in configs.values()):
        raise UsageError("--requests: a streamed fleet runs our scheduler (vLLM's runs in its "
                         "own environment, on a trace it is handed whole); drop --scheduler "
                         "vllm or --requests")
    print(f"serve-sim: {args.requests:,} requests drawn from {args.trace} ({len(source):,} "
          f"requests), Poisson at {rate:g}/s, streamed through the fleet of {args.fleet}")
    results: dict[str, Any] = {}
    outputs = ["results.json", CONFIG_FILE]
    for mode, cfg in configs.items():
        folder = out / mode if len(configs) > 1 else out
        fleet = FleetSim(cat.fleet, cat, lm, cfg)
        with RecordSink(folder, metrics, mode=mode) as sink:
            try:
                res = fleet.run(resample(source, args.requests, rate, args.seed), sink=sink,
                                total=args.requests)
            except ValueError as e:
                raise UsageError(str(e)) from None
            s = summary(sink, res)
        energy = energy_of(lambda f=fleet, r=res: f.energy(r, energy_entry(cat)))
        results[mode] = {"summary": s, "energy": energy}
        rel = folder.relative_to(out)
        outputs += [str(rel / "requests.csv"), str(rel / "samples.csv")]
        print(f"  {mode:>6} fleet ({len(res.instances)} instances, {len(res.nodes)} PNM nodes):"
              f" {s['requests']:,} requests ({s['rejected']:,} rejected) in "
              f"{s['duration_s']:,.0f} s emulated; TTFT p50 {s['ttft_s']['p50']:.2f} s, p99 "
              f"{s['ttft_s']['p99']:.2f} s; TPOT p50 {s['tpot_s']['p50'] * 1e3:.1f} ms, p99 "
              f"{s['tpot_s']['p99'] * 1e3:.1f} ms; SLO met by "
              f"{s['goodput']['attainment']:.1%}; {res.cpu_s:.1f} s of CPU\n         "
              f"{energy_line(energy)}")
    if parquet_available():
        log.info("--requests writes requests.csv only (rows are written as requests finish)")
    doc = run_config("serve-sim", getattr(args, "argv", None), {
        "trace": {**file_record(args.trace), "limit": args.limit, "requests": args.requests,
                  "arrivals": "poisson (resampled)", "rate": rate, "seed": args.seed},
        "hardware": {"files": [file_record(f) for f in args.hardware], "gpu": lm.gpu,
                     "pnm": lm.pnm, "model": lm.model, "link": lm.link},
        "fleet": cat.fleet, "serving": configs, "metrics": metrics})
    results["config_hash"] = doc["config_hash"]
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    write_config(out / CONFIG_FILE, doc, outputs)
    print(f"wrote {out}/: " + ", ".join(sorted(outputs)))
    return 0
