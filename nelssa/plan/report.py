"""A plan's figures: each point's cost at its sustainable rate (capital plus energy, per hour and
per million output tokens), the cheapest GPU-only and NELSSA fleets, the Pareto front of cost
against rate, the PNM device price at which NELSSA breaks even, and the plot."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from nelssa.plan.prices import Cost, Prices, capital_per_hour, cost
from nelssa.plan.search import PointResult
from nelssa.sweep.metrics import HIGHER
from nelssa.sweep.plot import frontier


@dataclass(frozen=True)
class Row:
    point: PointResult
    cost: Cost

    @property
    def label(self) -> str:
        return self.point.mix.label()


def rows(points: list[PointResult], prices: Prices) -> list[Row]:
    return [Row(p, cost(p, p.output_tps, prices)) for p in points]


def cheapest(rs: list[Row], gpu_only: bool | None = None) -> Row | None:
    """The row of least cost per million output tokens (of one kind, when ``gpu_only`` is
    given) among those that sustain some rate; ties to the higher rate."""
    pick = [r for r in rs if r.point.rate > 0
            and (gpu_only is None or r.point.mix.gpu_only == gpu_only)]
    if not pick:
        return None
    return min(pick, key=lambda r: (r.cost.per_million_tokens, -r.point.rate))


def pareto(rs: list[Row]) -> list[Row]:
    """The rows on the front of $/hour against sustainable rate: each sustains more than every
    cheaper one (``sweep.plot.frontier``), cheapest first."""
    pts = {(r.cost.per_hour, r.point.rate): r for r in rs if r.point.rate > 0}
    return [pts[xy] for xy in frontier(list(pts), HIGHER)]


def break_even_device_price(rs: list[Row], prices: Prices) -> float | None:
    """The PNM device price ($/hour, rented) below which some NELSSA fleet costs less per
    million output tokens than the cheapest GPU-only fleet (None: no GPU-only fleet sustains
    a rate, or no NELSSA fleet does; 0 when none pays even with free devices)."""
    gpu = cheapest(rs, gpu_only=True)
    nel = [r for r in rs if not r.point.mix.gpu_only and r.point.rate > 0]
    if gpu is None or not nel:
        return None
    target = gpu.cost.per_million_tokens
    free = replace(prices, pnm_device_per_hour=0.0, pnm_device_capital=None)
    best = 0.0
    for r in nel:
        # $/M = (a + n p) / (tps * 3600) * 1e6 with a the rest of the hour's cost
        per_hour_budget = target * r.point.output_tps * 3600 / 1e6
        rest = capital_per_hour(r.point.parts, free) + r.cost.energy_per_hour
        n = r.point.parts.pnm_devices
        if per_hour_budget > rest:
            best = max(best, (per_hour_budget - rest) / n)
    return best


def write_csv(rs: list[Row], path: Path) -> None:
    cols = ("key", "mix", "decode", "prefill_gpus", "nodes", "devices", "policy", "rate_rps",
            "output_tps", "capital_per_hour", "energy_per_hour", "per_hour",
            "per_million_tokens", "watts", "joules_per_token", "power_counted", "probes",
            "cpu_s")
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rs:
            m, c = r.point.mix, r.cost
            w.writerow([r.point.key, m.label(), m.decode, m.prefill_gpus, m.nodes, m.devices,
                        m.policy, f"{r.point.rate:.6g}", f"{r.point.output_tps:.6g}",
                        f"{c.capital_per_hour:.6g}", f"{c.energy_per_hour:.6g}",
                        f"{c.per_hour:.6g}", f"{c.per_million_tokens:.6g}", f"{c.watts:.6g}",
                        f"{c.joules_per_token:.6g}", "+".join(c.power_counted),
                        len(r.point.probes), f"{r.point.cpu_s:.3f}"])


def plot(rs: list[Row], path: Path, title: str) -> None:
    """$/hour against sustainable rate (front drawn) and $/M output tokens against rate,
    GPU-only and NELSSA fleets apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    ok = [r for r in rs if r.point.rate > 0]
    for gpu_only, colour, name in ((True, "C0", "GPU only"), (False, "C1", "NELSSA")):
        sel = [r for r in ok if r.point.mix.gpu_only == gpu_only]
        if not sel:
            continue
        axes[0].scatter([r.point.rate for r in sel], [r.cost.per_hour for r in sel], s=16,
                        color=colour, alpha=0.7, label=name)
        axes[1].scatter([r.point.rate for r in sel],
                        [r.cost.per_million_tokens for r in sel], s=16, color=colour,
                        alpha=0.7, label=name)
    front = pareto(rs)
    if front:
        axes[0].step([r.point.rate for r in front], [r.cost.per_hour for r in front],
                     where="pre", color="C3", lw=1, label="Pareto front")
        for r in front:
            axes[0].annotate(r.label, (r.point.rate, r.cost.per_hour), xytext=(3, -8),
                             textcoords="offset points", fontsize=6)
    for kind in (True, False):
        if (c := cheapest(rs, kind)) is not None:
            axes[1].annotate(c.label, (c.point.rate, c.cost.per_million_tokens),
                             xytext=(3, 3), textcoords="offset points", fontsize=7)
    axes[0].set_xlabel("sustained request rate (requests/s), higher is better")
    axes[0].set_ylabel("fleet cost ($/hour), lower is better")
    axes[1].set_xlabel("sustained request rate (requests/s)")
    axes[1].set_ylabel("$ per million output tokens, lower is better")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_line(r: Row | None) -> str:
    if r is None:
        return "none sustains any rate"
    return (f"{r.label}: {r.point.rate:.3g} requests/s, ${r.cost.per_hour:.2f}/hour, "
            f"${r.cost.per_million_tokens:.3f} per million output tokens")


def ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan
