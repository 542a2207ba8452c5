"""The paper's head-of-line blocking setting (section 8.3, Figures 14 and 15) as the paper states
it: short requests of the Mooncake conversation trace at RPS=10 (Poisson), with bursts of long
requests injected (burst size BS=1 and BS=2, Figure 14(a)); RPS and the number of bursts varied
(1 to 7 bursts, Figure 14(b)); the running batch and GPU memory over time (Figure 15), and the
short requests' TPOT tail (the paper: P95 6x, P99 15x). The baseline recovers evicted KV by
swapping it back from CPU memory (the paper's, 8.3); vLLM's recompute is a second column.

    .venv/bin/python scripts/paper_hol.py [--write]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.serving.metrics import summarize
from nelssa.emu.serving.results import RunResult
from nelssa.emu.serving.sim import ServingConfig, ServingSim
from nelssa.emu.serving.workload import TraceRequest, inject_burst, load_trace, poisson
from nelssa.provenance import commit_label

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "paper_hol.md"
TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"

SYSTEMS = {
    "GPU-only, swap": {"mode": "gpu", "preemption": "swap"},
    "GPU-only, recompute": {"mode": "gpu", "preemption": "recompute"},
    "NELSSA": {"mode": "nelssa"},
}
"""The systems compared: the paper's baseline (swap), vLLM's (recompute), NELSSA."""
BASELINE = "GPU-only, swap"


@dataclass(frozen=True)
class Setting:
    gpu: str = "h100-nvl"
    pnm: str = "prototype"
    devices: int = 4
    model: str = "llama-3-8b"
    link: str = "roce-400g"
    prefill_gpus: int = 8
    """The paper's layout: prefill on separate GPUs, the decode GPU only decodes."""
    shorts: int = 1000
    """Short requests: the trace's first ones whose prompt and output stay below T_input."""
    long_input: int = 200_000
    """Tokens of each long request's prompt (see the page: at 100K the H100 NVL's KV holds two
    beside the short ones, and the paper's mechanism, memory at capacity, does not appear)."""
    long_output: int = 512
    seed: int = 0


def model(s: Setting) -> LatencyModel:
    cat = HardwareCatalog.load()
    return LatencyModel(cat.gpus[s.gpu], cat.pnm[s.pnm], cat.models[s.model],
                        link=cat.links[s.link])


def workload(trace: list[TraceRequest], t_input: int, s: Setting, rate: float, bs: int,
             bursts: int) -> list[TraceRequest]:
    """``s.shorts`` short requests at ``rate`` (Poisson) and ``bursts`` bursts of ``bs`` long
    requests, evenly spaced over the arrivals' span."""
    short = [r for r in trace if r.input_len + r.output_len < t_input][:s.shorts]
    reqs = poisson(short, rate, seed=s.seed)
    span = reqs[-1].arrival_s
    for k in range(bursts):
        reqs = inject_burst(reqs, span * (k + 1) / (bursts + 1), bs, s.long_input,
                            s.long_output)
    return reqs


def run(lm: LatencyModel, s: Setting, reqs: list[TraceRequest]) -> dict[str, RunResult]:
    return {name: ServingSim(lm, ServingConfig(prefill="disaggregated",
                                               prefill_gpus=s.prefill_gpus,
                                               devices=s.devices, **kw)).run(reqs)
            for name, kw in SYSTEMS.items()}


def short_tpot(run: RunResult, s: Setting) -> dict[str, float]:
    """TPOT percentiles of the short requests (the long ones aside), seconds."""
    v = [r.tpot_s for r in run.results if r.input_len < s.long_input and r.tpot_s is not None]
    return {f"p{p}": float(np.percentile(v, p)) for p in (50, 95, 99)}


def _span(run: RunResult, s: Setting) -> tuple[float, float]:
    """From the first long request's arrival to the last one's finish."""
    longs = [x for x in run.results if x.input_len >= s.long_input]
    return min(x.arrival_s for x in longs), max(x.finish_s for x in longs)


def study(s: Setting, rate: float, burst_sizes: list[int], rates: list[float],
          burst_counts: list[int]) -> dict:
    lm = model(s)
    t_input = lm.t_input(s.devices)
    trace = load_trace(TRACE, hash_ids=True)
    out: dict = {"t_input": t_input, "a": {}, "b": {}}
    for bs in burst_sizes:
        runs = run(lm, s, workload(trace, t_input, s, rate, bs, 1))
        out["a"][bs] = {name: {"summary": summarize(r), "short_tpot": short_tpot(r, s),
                               "samples": r.samples,
                               "burst_s": _span(r, s)}
                        for name, r in runs.items()}
        log.info("14(a) BS=%d: %s", bs, {n: round(v["summary"]["decode_throughput_tps"])
                                          for n, v in out["a"][bs].items()})
    for r in rates:
        for n in burst_counts:
            runs = run(lm, s, workload(trace, t_input, s, r, max(burst_sizes), n))
            out["b"][(r, n)] = {name: summarize(x)["decode_throughput_tps"]
                                for name, x in runs.items()}
    return out


def _plots(res: dict, s: Setting, rate: float, folder: Path) -> tuple[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(res["a"])
    fig, axes = plt.subplots(2, len(sizes), figsize=(5 * len(sizes), 6), sharex="col",
                             squeeze=False)
    for j, bs in enumerate(sizes):
        for name, r in res["a"][bs].items():
            t = np.array([x.t_s for x in r["samples"]])
            tput = np.array([x.decode_tokens for x in r["samples"]], dtype=float)
            k = 5
            axes[0][j].plot(t, np.convolve(tput, np.ones(k) / k, mode="same"), lw=0.9,
                            label=name)
            axes[1][j].plot(t, [x.waiting for x in r["samples"]], lw=0.9, label=name)
        axes[0][j].set_title(f"RPS={rate:g}, BS={bs} ({s.long_input // 1000}K-token requests)",
                             fontsize=9)
        axes[1][j].set_xlabel("emulated time (s)")
    axes[0][0].set_ylabel("decode tokens/s (5 s mean)")
    axes[1][0].set_ylabel("pending requests")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Figure 14(a): throughput and pending queue, burst of long requests "
                 f"({s.gpu}, {s.devices} x {s.pnm}, {s.model})", fontsize=9)
    fig.tight_layout()
    a_png = folder / "paper_hol_14a.png"
    fig.savefig(a_png, dpi=110)
    plt.close(fig)
    bs = max(sizes)
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, r in res["a"][bs].items():
        t = [x.t_s for x in r["samples"]]
        a.plot(t, [x.running for x in r["samples"]], lw=0.9, label=name)
        b.plot(t, [x.gpu_kv_used * 100 for x in r["samples"]], lw=0.9, label=name)
    a.set_ylabel("running batch")
    b.set_ylabel("GPU KV memory used (%)")
    b.set_xlabel("emulated time (s)")
    a.legend(fontsize=8)
    fig.suptitle(f"Figure 15: running batch and GPU memory, RPS={rate:g}, BS={bs}", fontsize=9)
    fig.tight_layout()
    f15_png = folder / "paper_hol_15.png"
    fig.savefig(f15_png, dpi=110)
    plt.close(fig)
    return a_png.name, f15_png.name


def page(res: dict, s: Setting, rate: float, command: str, commit: str, wall_s: float,
         pngs: tuple[str, str]) -> str:
    names = list(SYSTEMS)
    lines = [
        "# Head-of-line blocking in the paper's setting (Figures 14 and 15)", "",
        f"Written by `{command}` at commit {commit} ({wall_s:.0f} s of CPU).", "",
        f"Setting (the paper's 8.3): {s.gpu}, {s.model}, NELSSA on {s.devices} `{s.pnm}` PNM "
        f"devices over {s.link}, prefill on {s.prefill_gpus} separate GPUs, our scheduler "
        "(which follows vLLM v1's; swap needs it), prefix caching on. Short requests: the "
        f"Mooncake conversation trace's first {s.shorts} requests whose prompt and output stay "
        f"below T_input ({res['t_input']:,} tokens, the crossover; both systems keep them on "
        f"the GPU), Poisson at RPS={rate:g}, seed {s.seed}. Long requests: bursts of BS "
        f"requests of {s.long_input:,} prompt and {s.long_output} output tokens, evenly "
        "spaced over the arrivals (one burst in 14(a)). The baseline recovers preempted "
        "requests by swapping their KV back from CPU memory, as the paper's does; vLLM's "
        "recompute is the second column.", "",
        "Long requests of the paper's 'approximately 100K tokens' do not fill this model's "
        "H100 NVL (its KV holds about half a million tokens of Llama-3-8B beside the short "
        f"ones), so nothing is preempted; {s.long_input // 1000}K-token ones bring GPU memory "
        "to capacity as the paper describes. 'GPU KV full': seconds of the long requests' "
        "stay with over 99 % of the GPU's KV blocks in use; 'most pending': the longest "
        "queue of requests waiting for the GPU.",
        "", "## Figure 15 and the short requests' TPOT tail", "",
        "| BS | system | short TPOT P50 / P95 / P99 (ms) | vs NELSSA at P95 / P99 | "
        "preemptions | peak GPU KV | GPU KV full | most pending | decode tok/s |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for bs, runs in sorted(res["a"].items()):
        ref = runs["NELSSA"]["short_tpot"]
        for name in names:
            r = runs[name]
            st, sm = r["short_tpot"], r["summary"]
            t0, t1 = r["burst_s"]
            full = sum(1 for x in r["samples"] if t0 < x.t_s <= t1 and x.gpu_kv_used > 0.99)
            lines.append(
                f"| {bs} | {name} | {st['p50'] * 1e3:.1f} / {st['p95'] * 1e3:.1f} / "
                f"{st['p99'] * 1e3:.1f} | x{st['p95'] / ref['p95']:.2f} / "
                f"x{st['p99'] / ref['p99']:.2f} | {sm['preemptions']} | "
                f"{max(x.gpu_kv_used for x in r['samples']):.0%} | "
                f"{full} s | {sm['max_waiting']} | {sm['decode_throughput_tps']:,.0f} |")
    lines += ["", "The paper (Figure 15, measured on its prototype): NELSSA's short-request "
              "TPOT is 6x better at P95 and up to 15x at P99; the baseline's running batch "
              "falls as low as 1 when the long requests arrive. Here the baseline's GPU memory "
              "is full while the long requests run, as in the paper, but its running batch "
              "does not fall: the scheduler keeps what it runs (it preempts only the requests "
              "whose next block does not fit) and admits no new ones, so short requests queue "
              "and then flood in once the long ones finish (the batch's peak in the plot). "
              "The short requests' TPOT tail is of those decoding beside the long ones, whose "
              "dense attention over their contexts lengthens every step on the GPU, and of the "
              "swollen batch after them. With so few preemptions the swap and recompute "
              "baselines differ little.", "",
              f"![Figure 15]({pngs[1]})", "", f"![Figure 14(a)]({pngs[0]})", "",
              "## Figure 14(b): throughput against RPS and the number of bursts", "",
              f"Decode throughput of NELSSA over each baseline's, BS={max(res['a'])}; the long "
              "requests' share of all requests in brackets. The paper: the baseline's "
              "throughput is volatile, NELSSA's stable, and its speedup grows with the number "
              "of bursts.", "",
              "| RPS | bursts (long share) | " + " | ".join(
                  f"NELSSA / {n}" for n in names if n != "NELSSA") + " |",
              "| ---: | --- | " + " | ".join("---:" for n in names if n != "NELSSA") + " |"]
    bs = max(res["a"])
    for (rate_b, n), tput in sorted(res["b"].items()):
        share = n * bs / (s.shorts + n * bs)
        lines.append(f"| {rate_b:g} | {n} ({share:.1%}) | " + " | ".join(
            f"x{tput['NELSSA'] / tput[name]:.2f}" for name in names if name != "NELSSA") + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=10.0, help="RPS of Figure 14(a) and 15")
    ap.add_argument("--burst-sizes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rates", type=float, nargs="+", default=[6, 8, 10, 12],
                    help="RPS of Figure 14(b)")
    ap.add_argument("--bursts", type=int, nargs="+", default=[1, 3, 5, 7],
                    help="bursts of Figure 14(b)")
    ap.add_argument("--long-input", type=int, default=Setting.long_input)
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.name} and its plots")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    commit = commit_label()
    t0 = time.process_time()
    s = Setting(long_input=args.long_input)
    res = study(s, args.rate, args.burst_sizes, args.rates, args.bursts)
    folder = PAGE.parent if args.write else Path(".")
    pngs = _plots(res, s, args.rate, folder)
    shown = sys.argv[1:] if argv is None else argv
    text = page(res, s, args.rate, " ".join(["python scripts/paper_hol.py", *shown]), commit,
                time.process_time() - t0, pngs)
    sys.stdout.write(text)
    if args.write:
        PAGE.write_text(text)
    return 0
