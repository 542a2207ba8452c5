"""The Pareto plot of a sweep: each point's metric against its cost in PNM devices, the
frontier (the best metric at no more cost, "best" in the metric's own direction:
``metrics.TABLE``) drawn through them, each point labelled by the parameters that vary."""

from __future__ import annotations

from pathlib import Path

from nelssa.sweep.metrics import HIGHER, TABLE, axis_label

MIN_SPAN = 0.05
"""The y-axis spans at least this share of the values' magnitude: a spread of 0.3 % is not
drawn as if it filled the plot."""
MAX_LABELS = 40
"""Past this many points only the frontier's are labelled."""


def frontier(points: list[tuple[float, float]], better: str = HIGHER
             ) -> list[tuple[float, float]]:
    """The Pareto frontier of (cost, value) pairs: cheapest first, each better than every
    cheaper one (``better``: ``higher`` or ``lower`` values)."""
    sign = 1.0 if better == HIGHER else -1.0
    out: list[tuple[float, float]] = []
    for cost, value in sorted(points, key=lambda p: (p[0], -sign * p[1])):
        if not out or sign * value > sign * out[-1][1]:
            if out and out[-1][0] == cost:
                continue
            out.append((cost, value))
    return out


def y_limits(values: list[float], share: float = MIN_SPAN) -> tuple[float, float] | None:
    """Limits around ``values`` at least ``share`` of their magnitude wide (None: no values)."""
    if not values:
        return None
    lo, hi = min(values), max(values)
    span = max(hi - lo, share * max(abs(lo), abs(hi)), 1e-12)
    mid = (lo + hi) / 2
    pad = 0.55 * span
    return mid - pad, mid + pad


def point_label(row: dict[str, str], varying: list[str]) -> str:
    return " ".join(f"{p}={row[p]}" for p in varying)


def pareto_plot(rows: list[dict[str, str]], metric: str, path: Path, title: str = "") -> int:
    """Write the plot of the ``ok`` rows; the number of points on the frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nelssa.sweep.spec import PARAMS

    better = TABLE[metric].better or HIGHER
    ok = [r for r in rows if r["status"] == "ok" and r[metric] not in ("", "nan")]
    pts = [(float(r["cost_devices"]), float(r[metric])) for r in ok]
    front = frontier(pts, better)
    varying = [p for p in PARAMS if len({r.get(p) for r in ok}) > 1]
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    if pts:
        ax.scatter(*zip(*pts, strict=True), s=14, alpha=0.5, label="points")
    if front:
        ax.step(*zip(*front, strict=True), where="post", color="C3",
                label=f"Pareto frontier ({better} is better)")
    on_front = set(front)
    for r, xy in zip(ok, pts, strict=True):
        if varying and (len(pts) <= MAX_LABELS or xy in on_front):
            ax.annotate(point_label(r, varying), xy, xytext=(3, 3),
                        textcoords="offset points", fontsize=6)
    if (lim := y_limits([v for _, v in pts])) is not None:
        ax.set_ylim(*lim)
    ax.set_xlabel(axis_label("cost_devices"))
    ax.set_ylabel(axis_label(metric))
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return len(front)
