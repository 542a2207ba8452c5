"""The paper's sweeps on the emulator: decode throughput against context and batch
(Figure 10) and against the share of long requests (Figure 16), as data and as PNG plots; and
the static routing threshold against the adaptive one on one workload, and what a run's steps
are made of (issue 26)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.policy.slo import MLPERF_SLO, Slo
from nelssa.emu.serving.metrics import goodput, summarize
from nelssa.emu.serving.replay import JobKind, Replay
from nelssa.emu.serving.sim import RunResult, ServingConfig, ServingSim
from nelssa.emu.serving.workload import TraceRequest, long_fraction_mix, poisson

CONTEXTS = (131072, 262144, 524288, 1048576)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FRACTIONS = (0.0, 0.04, 0.08, 0.12, 0.16, 0.20, 0.24)
FULL = 0.95
"""A tier whose memory reached this share was saturated."""


def context_batch(models: dict[str, LatencyModel], config: ServingConfig
                  ) -> dict[str, Any]:
    """Steady decode throughput of identical requests, per GPU, context and batch, GPU-only
    and NELSSA (every request on the PNM tier); batches stop where memory does, and a context
    past the model's maximum has none."""
    out: dict[str, Any] = {}
    for gpu, lm in models.items():
        for mode in ("gpu", "nelssa"):
            sim = ServingSim(lm, replace(config, mode=mode, t_input=1))
            rows = {}
            for ctx in CONTEXTS:
                top = sim.max_batch(ctx) if ctx <= lm.model.max_context else 0
                pts = [b for b in BATCHES if b <= top] + ([top] if top and top not in BATCHES
                                                          else [])
                rows[ctx] = {b: b / sim.steady_decode(ctx, b) for b in sorted(pts)}
            out[f"{mode}/{gpu}"] = rows
    return out


def long_fraction(lm: LatencyModel, trace: list[TraceRequest], config: ServingConfig, rate: float,
                  count: int, threshold: int, seed: int = 0) -> dict[float, dict[str, float]]:
    """Throughput and P99 TPOT of both modes against the share of requests >= threshold."""
    out = {}
    for frac in FRACTIONS:
        reqs = poisson(long_fraction_mix(trace, frac, threshold, count, seed), rate, seed)
        g = summarize(ServingSim(lm, replace(config, mode="gpu")).run(reqs))
        n = summarize(ServingSim(lm, replace(config, mode="nelssa", t_input=threshold)
                                 ).run(reqs))
        out[frac] = {"gpu_tps": g["decode_throughput_tps"], "nelssa_tps":
                     n["decode_throughput_tps"], "gpu_tpot_p99": g["tpot_s"]["p99"],
                     "nelssa_tpot_p99": n["tpot_s"]["p99"]}
    return out


def plot_context_batch(data: dict[str, Any], path: str | Path, title: str = "",
                       max_context: int | None = None) -> None:
    """Figure 10: a panel per context, every panel over the same batches; a context past
    ``max_context`` (the model's) or one no batch fits says so instead of a curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CONTEXTS), figsize=(14, 3.6), sharey=True)
    for ax, ctx in zip(axes, CONTEXTS, strict=True):
        for key, rows in data.items():
            mode, gpu = key.split("/")
            pts = rows.get(ctx, {})
            if pts:
                ax.plot(list(pts), list(pts.values()), "--" if gpu.startswith("2x") else "-",
                        color="#c44e52" if mode == "nelssa" else "#4c72b0", marker="o", ms=3,
                        label=f"{'NELSSA' if mode == 'nelssa' else 'GPU only'}, {gpu}")
        if not any(rows.get(ctx) for rows in data.values()):
            why = ("past the model's\nmaximum context" if max_context and ctx > max_context
                   else "no batch fits\nin memory")
            ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center")
        ax.set_xscale("log", base=2)
        ax.set_xlim(BATCHES[0] / 1.3, BATCHES[-1] * 1.3)
        ax.set_title(f"{ctx >> 10}K context")
        ax.set_xlabel("batch")
    axes[0].set_ylabel("decode tokens/s")
    if any(ax.lines for ax in axes):
        axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_long_fraction(data: dict[float, dict[str, float]], path: str | Path,
                       title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fr = [100 * f for f in data]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(fr, [v["gpu_tps"] for v in data.values()], "o-", label="GPU only")
    a.plot(fr, [v["nelssa_tps"] for v in data.values()], "o-", label="NELSSA")
    a.set_xlabel("long requests (%)")
    a.set_ylabel("decode tokens/s")
    a.legend()
    b.semilogy(fr, [v["gpu_tpot_p99"] * 1e3 for v in data.values()], "o-", label="GPU only")
    b.semilogy(fr, [v["nelssa_tpot_p99"] * 1e3 for v in data.values()], "o-", label="NELSSA")
    b.set_xlabel("long requests (%)")
    b.set_ylabel("P99 TPOT (ms)")
    b.legend()
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def saturated_tiers(run: RunResult, sim: ServingSim, slo: Slo = MLPERF_SLO) -> list[str]:
    """What ran out in a run: ``gpu-kv`` (the GPU's KV blocks full, or a preemption),
    ``pnm-mem`` (the PNM tier's memory full and a queue for it), ``ttft`` (neither, but the
    TTFT SLO broken at P99: queueing for the GPU's compute, which routing cannot relieve)."""
    out = []
    if run.peak_gpu_blocks >= FULL * sim.gpu_blocks or run.preemptions:
        out.append("gpu-kv")
    if (sim.pnm_tokens and run.peak_pnm_tokens >= FULL * sim.pnm_tokens
            and any(s.pnm_waiting for s in run.samples)):
        out.append("pnm-mem")
    if not out and summarize(run)["ttft_s"]["p99"] > slo.ttft_s:
        out.append("ttft")
    return out


MODES: dict[str, dict[str, Any]] = {"static": {}, "adaptive": {"adaptive": True}}
"""The runs of ``static_vs_adaptive``: name and what its configuration changes."""


def static_vs_adaptive(lm: LatencyModel, requests: list[TraceRequest], config: ServingConfig,
                       slo: Slo = MLPERF_SLO, modes: dict[str, dict[str, Any]] | None = None
                       ) -> dict[str, dict[str, Any]]:
    """The same requests with the static threshold and the adaptive one (``config`` otherwise;
    ``modes``: other runs, each a name and the settings it changes): per mode its goodput, SLO
    attainment, the tiers the run saturated, the threshold's moves and the run itself."""
    out = {}
    for mode, changes in (MODES if modes is None else modes).items():
        sim = ServingSim(lm, replace(config, **{"mode": "nelssa", "adaptive": False, **changes}))
        run = sim.run(requests)
        g = goodput(run, slo.ttft_s, slo.tpot_s)
        out[mode] = {"goodput_rps": g["goodput_rps"], "attainment": g["attainment"],
                     "saturated": saturated_tiers(run, sim, slo),
                     "moves": sum(1 for a, b in itertools.pairwise(run.samples)
                                  if a.t_input != b.t_input),
                     "run": run, "sim": sim}
    return out


class _Watched(Replay):
    """A replay that keeps each step's cost with its make-up (one step at a time)."""

    def __init__(self, sim: ServingSim, requests: list[TraceRequest]) -> None:
        super().__init__(sim, requests, fast=False)
        self.steps: list[tuple[float, bool, float, float]] = []
        """Per step: its time, whether it carries a prefill chunk, the PNM tier's part (its
        attention and T_comm) and the GPU's decode attention of its decoding requests."""

    def _step_cost(self, plan: Any) -> float:
        gpu_ctx, pnm, decodes = 0, [], 0
        ones = [p.jid for p in plan.scheduled if p.tokens == 1 and self.jobs[p.jid].decoding]
        for jid in (*plan.decodes, *ones):  # the decoding requests' tokens
            job = self.jobs[jid]
            if job.kind is JobKind.PNM_RESIDENT:
                pnm.append(job.rq.req.input_len + job.rq.generated)
            else:
                decodes += 1
                gpu_ctx += job.prompt + job.outputs
        t = super()._step_cost(plan)
        parts = self.cost.step_parts(gpu_ctx, pnm, decodes)
        self.steps.append((t, any(p.tokens > 1 for p in plan.scheduled), parts.pnm_s,
                           parts.gpu_attn_s))
        return t


def step_makeup(lm: LatencyModel, reqs: list[TraceRequest],
                config: ServingConfig) -> dict[str, float]:
    """What the steps of a run of ``config`` (NELSSA) are made of, costed one at a time: the
    P50 step (ms), the share of the run's step time in steps carrying a prefill chunk, and the
    P50 of the PNM tier's part (its attention and T_comm) and of the GPU's decode attention of
    the decoding requests (ms): what sets their TPOT."""
    w = _Watched(ServingSim(lm, replace(config, mode="nelssa")), reqs)
    w.run()
    steps = w.steps
    total = sum(x[0] for x in steps) or 1.0

    def p50(i: int) -> float:
        return sorted(x[i] for x in steps)[len(steps) // 2] * 1e3

    return {"step_ms": p50(0), "chunk_share": sum(x[0] for x in steps if x[1]) / total,
            "pnm_ms": p50(2), "gpu_attn_ms": p50(3)}
