"""The crossover of the latency model as a table (T_comm and L_crossover per device count) and
as a figure (paper Figure 3): decode attention time of both tiers against context length, and
the crossover against the number of PNM devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nelssa.emu.latency.model import LatencyModel


def crossover_rows(lm: LatencyModel, max_devices: int) -> list[dict[str, Any]]:
    """``devices``, ``t_comm_us`` and ``t_input`` (None: no crossover) for 1..max_devices."""
    return [{"devices": n, "t_comm_us": lm.t_comm(n) * 1e6, "t_input": lm.t_input(n)}
            for n in range(1, max_devices + 1)]


def plot_crossover(lm: LatencyModel, rows: list[dict[str, Any]], path: str | Path) -> None:
    """Both tiers' attention time against context (N = 1, 2, 4, 8) and L_crossover against N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    max_devices = max(r["devices"] for r in rows)
    lengths = np.geomspace(64, 1 << 20, 200)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.loglog(lengths, [lm.t_gpu(x) * 1e6 for x in lengths], "k-", lw=2, label="GPU dense")
    for n in (1, 2, 4, 8):
        if n <= max_devices:
            a.loglog(lengths, [lm.t_pnm(x, n) * 1e6 for x in lengths], label=f"PNM x{n}")
    a.set_xlabel("context length (tokens)")
    a.set_ylabel("decode attention per step (us)")
    a.legend()
    ns = [r["devices"] for r in rows if r["t_input"] is not None]
    b.plot(ns, [r["t_input"] for r in rows if r["t_input"] is not None], "o-")
    b.set_xlabel("PNM devices N")
    b.set_ylabel("L_crossover (tokens)")
    b.set_title(f"{lm.gpu.name} vs {lm.pnm.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
