"""The Pareto plot of a sweep: each point's metric against its cost in PNM devices, the
frontier (the best metric at no more cost) drawn through them."""

from __future__ import annotations

from pathlib import Path


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The Pareto frontier of (cost, value) pairs: cheapest first, each better than every
    cheaper one."""
    out: list[tuple[float, float]] = []
    for cost, value in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or value > out[-1][1]:
            if out and out[-1][0] == cost:
                continue
            out.append((cost, value))
    return out


def pareto_plot(rows: list[dict[str, str]], metric: str, path: Path) -> int:
    """Write the plot of the ``ok`` rows; the number of points on the frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(float(r["cost_devices"]), float(r[metric])) for r in rows
           if r["status"] == "ok" and r[metric] not in ("", "nan")]
    front = frontier(pts)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if pts:
        ax.scatter(*zip(*pts, strict=True), s=14, alpha=0.5, label="points")
    if front:
        ax.step(*zip(*front, strict=True), where="post", color="C3", label="Pareto frontier")
    ax.set_xlabel("cost: PNM devices")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return len(front)
