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


CURVES = 6
"""At most this many PNM curves in the left panel (powers of two, and the largest N)."""


def curve_devices(max_devices: int, most: int = CURVES) -> list[int]:
    """The device counts whose attention curves are drawn: powers of two up to
    ``max_devices`` and ``max_devices`` itself, at most ``most`` of them (evenly thinned)."""
    ns = sorted({1 << k for k in range(max_devices.bit_length()) if 1 << k <= max_devices}
                | {max_devices})
    if len(ns) > most:
        step = (len(ns) - 1) / (most - 1)
        ns = sorted({ns[round(i * step)] for i in range(most)})
    return ns


def no_crossover(rows: list[dict[str, Any]]) -> list[int]:
    """The device counts with no crossover (the GPU faster at every length)."""
    return [r["devices"] for r in rows if r["t_input"] is None]


def plot_crossover(lm: LatencyModel, rows: list[dict[str, Any]], path: str | Path) -> None:
    """Both tiers' attention time against context (``curve_devices``) and L_crossover against
    N, the counts with no crossover named on the plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    max_devices = max(r["devices"] for r in rows)
    lengths = np.geomspace(64, 1 << 20, 200)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.loglog(lengths, [lm.t_gpu(x) * 1e6 for x in lengths], "k-", lw=2, label="GPU dense")
    for n in curve_devices(max_devices):
        a.loglog(lengths, [lm.t_pnm(x, n) * 1e6 for x in lengths], label=f"PNM x{n}")
    a.set_xlabel("context length (tokens)")
    a.set_ylabel("decode attention per step (us)")
    a.legend()
    ns = [r["devices"] for r in rows if r["t_input"] is not None]
    b.plot(ns, [r["t_input"] for r in rows if r["t_input"] is not None], "o-")
    b.set_xlabel("PNM devices N")
    b.set_ylabel("L_crossover (tokens)")
    if missing := no_crossover(rows):
        b.text(0.02, 0.98, f"no crossover (GPU faster at every length) for N = "
               f"{_ranges(missing)}", transform=b.transAxes, va="top", fontsize=8, wrap=True)
    a.set_title(f"{lm.model.name}, S = {lm.sparsity.selection:g}", fontsize=9)
    b.set_title(f"{lm.gpu.name} vs {lm.pnm.name}, link "
                f"{getattr(lm.link, 'name', 'default')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ranges(ns: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1-3, 7``."""
    out: list[list[int]] = []
    for n in ns:
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)
