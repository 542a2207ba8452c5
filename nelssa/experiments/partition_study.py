"""Partitioning study (paper 5.3, Figure 7) measured on the RTL: head-wise against cluster-wise
KV partitioning over 1-8 devices, 128K-1M tokens and 1-8 requests, per device busy cycles, bytes
read, effective bandwidth, load imbalance and the DDR5 activations and row hits behind them.

    .venv/bin/python scripts/partition_study.py [--backend rtl|model] [--points 128K:1 1M:8@8 ...]
        [--devices 1 2 3 4 8] [--ddr5-lines N] [--json FILE] [--write]
    .venv/bin/python scripts/partition_study.py --replot FILE   (the page from saved rows)

The measurement is scripts/partition_jobs.py; this script runs the grid and writes the page.

A request is one layer of one Llama-3-8B sequence (8 KV heads x 4 query heads, head_dim 128;
clusters of 8-24 tokens, 4 % of them selected at random per KV head, as scripts/bench_device.py
draws them). The node's partitioner places it (host/pnm_node/partition.py): head-wise, KV head h
whole on device h mod N; cluster-wise, every KV head sharded over all N devices, each cluster to
the shard with the fewest tokens. The devices of a node work independently (each its own DDR5),
so each device of a configuration runs alone on one simulated device: its KV regions allocated
as the node allocates them, the directory lines its descriptors read written into the device's
DRAM store directly (a backdoor: set-up is not what is measured), its descriptors cut over its
attention units as the node cuts them (``CommandQueue.split``), busy cycles from PERF_BUSY and
bytes from PERF_BYTES_READ. K and V are not written: the device's timing does not depend on
their values (the run checks this once on the rtl backend, with random bf16 K and V).

The RTL does not count DDR5 commands in registers, so activations and row hits come from the
DDR5 cycle model (hw/model/ddr5_subchannel.py, command-identical to the RTL controller) replaying
the first ``--ddr5-lines`` lines of each device's read stream: every descriptor's lines in the
device's order (ids, directory entries, Q, then each cluster's K and V rows), the descriptors on
the units they would take, the units' streams interleaved a line a cycle each.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from nelssa.emu.files import read_text
from nelssa.emu.latency.model import Sparsity
from nelssa.experiments.pages import render
from nelssa.experiments.partition_jobs import (
    CLUSTER_TOKENS,
    GROUP,
    HEAD_DIM,
    KV_HEADS,
    PEAK,
    RTL_ADDRESS_MAP,
    Config,
    Store,
    data_check,
    head_work,
    plan,
    run_config,
)
from nelssa.host.pnm_node.protocol import Partition
from nelssa.hw.model.device import SIM_CLOCK_HZ, DeviceConfig

progress_log = logging.getLogger("partition_study.progress")
"""A line per configuration measured (main prints them)."""
DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
PAGE, PLOT = DOCS / "partitioning.md", DOCS / "partitioning.png"


# -- the page -------------------------------------------------------------------------------------
def _tokens(n: int) -> str:
    return f"{n // 1048576}M" if n % 1048576 == 0 else f"{n // 1024}K"


def _cell(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: list[dict]) -> str:
    head = ("| partition | context | requests | devices | descriptors per device | unit fill "
            "| busy cycles "
            "per device (min / mean / max) | GB/s per device (mean, % of peak) | imbalance | "
            "layer time (us) | node GB/s | ACT per cluster | row hits per cluster | ACT per "
            "cluster, device 0 interleaved / one stream | model vs rtl |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: | ---: |\n")
    body = ""
    for r in rows:
        c = r["cycles"]
        mvr = r.get("model_vs_rtl")
        body += (f"| {r['partition']} | {_tokens(r['context'])} | {r['requests']} | "
                 f"{r['devices']} | {max(r['descriptors'])} | "
                 f"{float(np.mean(r['unit_fill'])):.3f} | {min(c):,} / "
                 f"{round(float(np.mean(c))):,} / {max(c):,} | {r['mean_gbs'] / 1e9:.1f} "
                 f"({r['mean_gbs'] / PEAK * 100:.1f} %) | {r['imbalance']:.3f} | "
                 f"{r['layer_us']:.1f} | {r['node_gbs'] / 1e9:.0f} | "
                 f"{_cell(r['acts_per_cluster'], '.1f')} | {_cell(r['hits_per_cluster'], '.1f')}"
                 f" | {_cell(r['device0_acts_per_cluster'], '.1f')} / "
                 f"{_cell(r['serial_acts_per_cluster'], '.1f')} | "
                 f"{'-' if mvr is None else f'{mvr * 100:+.1f} %'} |\n")
    return head + body


def device_table(rows: list[dict]) -> str:
    head = ("| partition | context | requests | devices | busy cycles by device | MB read by "
            "device (KV share) |\n| --- | ---: | ---: | ---: | --- | --- |\n")
    body = ""
    for r in rows:
        kv = sum(r["kv_bytes"]) / max(sum(r["bytes"]), 1)
        body += (f"| {r['partition']} | {_tokens(r['context'])} | {r['requests']} | "
                 f"{r['devices']} | {', '.join(f'{x:,}' for x in r['cycles'])} | "
                 f"{', '.join(f'{b / 1e6:.2f}' for b in r['bytes'])} ({kv * 100:.1f} % KV) |\n")
    return head + body


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    points = sorted({(r["context"], r["requests"]) for r in rows})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (ctx, req) in enumerate(points):
        for part, style in (("head", "-o"), ("cluster", "--s")):
            sel = sorted((r for r in rows if (r["context"], r["requests"]) == (ctx, req)
                          and r["partition"] == part), key=lambda r: r["devices"])
            if not sel:
                continue
            n = [r["devices"] for r in sel]
            label = f"{part}-wise, {_tokens(ctx)} x {req}"
            colour = colours[k % len(colours)]
            axes[0].plot(n, [r["imbalance"] for r in sel], style, color=colour, label=label)
            axes[1].plot(n, [r["mean_gbs"] / PEAK * 100 for r in sel], style, color=colour,
                         label=label)
        here = [r for r in rows if (r["context"], r["requests"]) == (ctx, req)]
        head = {r["devices"]: r["layer_cycles"] for r in here if r["partition"] == "head"}
        ratio = sorted((r["devices"], r["layer_cycles"] / head[r["devices"]]) for r in here
                       if r["partition"] == "cluster" and r["devices"] in head)
        if ratio:
            axes[2].plot(*zip(*ratio, strict=True), "-^", color=colours[k % len(colours)],
                         label=f"{_tokens(ctx)} x {req}")
    axes[0].set_ylabel("load imbalance (busiest device / mean)")
    axes[1].set_ylabel("effective bandwidth per device (% of 204.8 GB/s)")
    every = sorted({r["devices"] for r in rows})
    axes[2].axhline(1.0, color="grey", linestyle=":")
    axes[2].set_ylabel("layer time, cluster-wise / head-wise")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(every)
        ax.set_xticklabels([str(x) for x in every])
        ax.set_xlabel("devices")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Head-wise vs cluster-wise KV partitioning, Llama-3-8B layer, 4 % selection "
                 f"({rows[0]['backend']} backend)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _comparison(rows: list[dict]) -> str:
    """Cluster-wise against head-wise at each point and device count, from the rows."""
    by = {(r["partition"], r["context"], r["requests"], r["devices"]): r for r in rows}
    out = []
    for (part, ctx, req, n), c in sorted(by.items()):
        h = by.get(("head", ctx, req, n))
        if part != "cluster" or h is None:
            continue
        out.append(f"| {_tokens(ctx)} | {req} | {n} | {h['imbalance']:.3f} | "
                   f"{c['imbalance']:.3f} | {h['layer_us']:.1f} | {c['layer_us']:.1f} | "
                   f"{(c['layer_cycles'] - h['layer_cycles']) / h['layer_cycles'] * 100:+.1f} %"
                   f" | {max(h['descriptors'])} | {max(c['descriptors'])} |")
    if not out:
        return ""
    return ("| context | requests | devices | imbalance head-wise | imbalance cluster-wise | "
            "layer us head-wise | layer us cluster-wise | cluster-wise vs head-wise | "
            "descriptors per device head-wise | cluster-wise |\n"
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
            + "\n".join(out) + "\n")


def _where(r: dict) -> str:
    return f"{_tokens(r['context'])} x {r['requests']} on {r['devices']}"


def findings(rows: list[dict]) -> str:
    """What the rows say, in numbers taken from them."""
    head = [r for r in rows if r["partition"] == "head" and r["devices"] > 1]
    clus = [r for r in rows if r["partition"] == "cluster" and r["devices"] > 1]
    out = []
    if head:
        even = [r for r in head if KV_HEADS % r["devices"] == 0]
        odd = [r for r in head if KV_HEADS % r["devices"]]
        if even:
            worst = max(even, key=lambda r: r["imbalance"])
            out.append(f"Head-wise, where the devices divide the {KV_HEADS} KV heads, every "
                       f"device gets as many KV heads and the same number of unit "
                       f"parts: imbalance at most {worst['imbalance']:.3f} ({_where(worst)}), "
                       "from the KV heads' different token counts and the DDR5.")
        for r in odd:
            heads = [KV_HEADS // r["devices"] + (d < KV_HEADS % r["devices"])
                     for d in range(r["devices"])]
            busiest = int(np.argmax(r["cycles"]))
            fill = r["unit_fill"][busiest]
            units = DeviceConfig.engines
            text = (f"Head-wise, {_where(r)}: {'/'.join(map(str, heads))} KV heads per "
                    f"device, {'/'.join(map(str, r['descriptors']))} descriptors, imbalance "
                    f"{r['imbalance']:.3f} (by whole KV heads {max(heads)}/({KV_HEADS}/"
                    f"{r['devices']}) = {max(heads) * r['devices'] / KV_HEADS:.3f}); the "
                    f"busiest device's units are filled to {fill:.3f}.")
            if fill < 0.95 and units <= 2 * heads[busiest] * r["requests"] < 2 * units:
                k = heads[busiest] * r["requests"]
                text += (f" The unit split (driver/split.py) makes the next multiple of the "
                         f"units at or above the KV heads: {k} KV heads become {units} parts, "
                         f"{2 * k - units} whole and {2 * (units - k)} halves, so the device "
                         f"takes one KV head's time on its {units} units where about {k}/{units} "
                         f"would do ({k * units} parts of 1/{units}, {k} rounds).")
            out.append(text)
    if clus:
        worst = max(clus, key=lambda r: r["imbalance"])
        c = worst["clusters"]
        busiest = int(np.argmax(worst["cycles"]))
        match = sum(int(np.argmax(r["cycles"])) == int(np.argmax(r["clusters"])) for r in clus)
        out.append(f"Cluster-wise: the shards hold equal tokens, but the selection does not "
                   f"look at shards, so each device's share of a KV head's selected clusters "
                   f"is a random draw. Worst imbalance {worst['imbalance']:.3f} "
                   f"({_where(worst)}): its devices read {min(c)} to {max(c)} clusters, the "
                   f"busiest (device {busiest}) {c[busiest]}; the busiest device is the one "
                   f"with the most clusters in {match} of the {len(clus)} cluster-wise "
                   "configurations on 2 or more devices. By point, the largest node:")
        for ctx, req in sorted({(r["context"], r["requests"]) for r in clus}):
            big = max((r for r in clus if (r["context"], r["requests"]) == (ctx, req)),
                      key=lambda r: r["devices"])
            out.append(f"  - {_where(big)}: imbalance {big['imbalance']:.3f}, "
                       f"{min(big['clusters'])}-{max(big['clusters'])} clusters per device")
    pairs = [(h, c) for h in head for c in clus
             if (h["context"], h["requests"], h["devices"])
             == (c["context"], c["requests"], c["devices"])]
    if pairs:
        d = [(c["layer_cycles"] - h["layer_cycles"]) / h["layer_cycles"] for h, c in pairs]
        lo, hi = int(np.argmin(d)), int(np.argmax(d))
        slower = sum(x > 0 for x in d)
        out.append(f"Layer time (the busiest device), cluster-wise against head-wise: "
                   f"{d[lo] * 100:+.1f} % ({_where(pairs[lo][0])}) to {d[hi] * 100:+.1f} % "
                   f"({_where(pairs[hi][0])}); cluster-wise slower in {slower} of "
                   f"{len(pairs)} configurations on 2 or more devices"
                   + (", faster at " + ", ".join(_where(h) for (h, _), x in zip(pairs, d,
                                                                                strict=True)
                                                  if x <= 0) if slower < len(pairs) else "")
                   + ".")
        hb = [h["mean_gbs"] / PEAK * 100 for h, _ in pairs]
        cb = [c["mean_gbs"] / PEAK * 100 for _, c in pairs]
        hf = [float(np.mean(h["unit_fill"])) for h, _ in pairs]
        cf = [float(np.mean(c["unit_fill"])) for _, c in pairs]
        h_low = min(pairs, key=lambda p: p[0]["mean_gbs"])[0]
        c_low = min(pairs, key=lambda p: p[1]["mean_gbs"])
        out.append(f"Bandwidth per device (mean over devices, % of peak): head-wise "
                   f"{min(hb):.1f}-{max(hb):.1f}, cluster-wise {min(cb):.1f}-{max(cb):.1f}. "
                   f"The units' fill (a device's lines over {DeviceConfig.engines} units x its "
                   f"busiest unit's lines, as its parts land on the units) is head-wise "
                   f"{min(hf):.3f}-{max(hf):.3f}, cluster-wise {min(cf):.3f}-{max(cf):.3f}. "
                   f"Head-wise's lowest bandwidth ({_where(h_low)}, "
                   f"{h_low['mean_gbs'] / PEAK * 100:.1f} %) is its units' fill "
                   f"({float(np.mean(h_low['unit_fill'])):.3f}). Cluster-wise loses more than "
                   f"its fill: at {_where(c_low[1])} its devices read at "
                   f"{c_low[1]['mean_gbs'] / PEAK * 100:.1f} % with their units filled to "
                   f"{float(np.mean(c_low[1]['unit_fill'])):.3f}, head-wise at "
                   f"{c_low[0]['mean_gbs'] / PEAK * 100:.1f} % filled to "
                   f"{float(np.mean(c_low[0]['unit_fill'])):.3f}, over the same clusters per "
                   f"device. Cluster-wise gives a device one descriptor per KV head and request "
                   f"({max(c_low[1]['descriptors'])} there, against "
                   f"{max(c_low[0]['descriptors'])}), each over 1/{c_low[1]['devices']} of a "
                   "KV head's clusters, so a unit runs more, smaller descriptors, each with its "
                   "fetch, id, directory and Q reads before its stream and its completion "
                   "after; here the loss grows with devices and shrinks with context and "
                   "requests (the table), as a per-descriptor cost would.")
        acts = [(r["acts_per_cluster"], r) for r in rows if r["acts_per_cluster"] is not None]
        if acts:
            a_lo, a_hi = min(acts, key=lambda x: x[0]), max(acts, key=lambda x: x[0])
            ser = [(r["device0_acts_per_cluster"], r["serial_acts_per_cluster"]) for r in rows
                   if r["serial_acts_per_cluster"] is not None]
            full = [(a, r["mean_gbs"]) for a, r in acts if np.mean(r["unit_fill"]) >= 0.95]
            both = [(h, c) for h, c in pairs if h["acts_per_cluster"] is not None
                    and c["acts_per_cluster"] is not None]
            more = sum(c["acts_per_cluster"] > h["acts_per_cluster"] for h, c in both)
            corr = (float(np.corrcoef(*zip(*full, strict=True))[0, 1]) if len(full) > 2
                    else float("nan"))
            out.append(f"DDR5 (cycle-model replay): {a_lo[0]:.0f} ({a_lo[1]['partition']}-wise"
                       f", {_where(a_lo[1])}) to {a_hi[0]:.0f} ({a_hi[1]['partition']}-wise, "
                       f"{_where(a_hi[1])}) ACTs per cluster read. A 16-token cluster is 128 "
                       "lines, two to a row on each of the 64 (sub-channel, bank group) pairs "
                       "of the cacheline map: 64 ACTs when it shares no row, fewer where the "
                       "selected clusters after it in the same stream fall in rows still open."
                       + (f" Device 0's lines with its descriptors one after another (one "
                          f"stream) take {min(x[1] for x in ser):.0f}-"
                          f"{max(x[1] for x in ser):.0f} ACTs per cluster, interleaved over "
                          f"the units {min(x[0] for x in ser):.0f}-"
                          f"{max(x[0] for x in ser):.0f}: the units' concurrent streams fall "
                          "in the same banks on other rows and close each other's rows."
                          if ser else "")
                       + f" Cluster-wise activates more than head-wise in {more} of "
                       f"{len(both)} configurations on 2 or more devices. Over the "
                       "configurations whose units are filled (>= 0.95), ACTs per cluster and "
                       f"bandwidth per device correlate at {corr:.2f}; DDR5-6400 takes up to "
                       "an ACT per burst on each sub-channel (tRRD_S 8 tCK, tFAW 32 tCK per "
                       f"four, a burst 8 tCK), so {a_lo[0]:.0f}-{a_hi[0]:.0f} ACTs per cluster "
                       "of about 130 reads are within what it can issue at full bandwidth.")
    mvr = [r for r in rows if r.get("model_vs_rtl") is not None]
    if mvr:
        parts = []
        for part in ("head", "cluster"):
            d = [r for r in mvr if r["partition"] == part]
            if d:
                lo = min(d, key=lambda r: r["model_vs_rtl"])
                hi = max(d, key=lambda r: r["model_vs_rtl"])
                parts.append(f"{part}-wise {lo['model_vs_rtl'] * 100:+.1f} % ({_where(lo)}) "
                             f"to {hi['model_vs_rtl'] * 100:+.1f} % ({_where(hi)})")
        out.append("The model backend's layer time against the RTL's: " + "; ".join(parts)
                   + " (issue 23 item 3 asks for within 5 %).")
    return "".join(f"- {x}\n" if not x.startswith("  ") else f"{x}\n" for x in out)


def grid_text(rows: list[dict]) -> str:
    """Which points ran on which node sizes, and what they cost in device cycles."""
    points = {}
    for r in rows:
        points.setdefault((r["context"], r["requests"]), set()).add(r["devices"])
    total = sum(sum(r["cycles"]) for r in rows)
    biggest = max(points, key=lambda p: p[0] * p[1])
    cost = sum(sum(r["cycles"]) for r in rows if (r["context"], r["requests"]) == biggest)
    return render("partitioning.md", "grid", points="; ".join(
        f"{_tokens(c)} x {q} on {', '.join(map(str, sorted(n)))}"
        for (c, q), n in sorted(points.items())), cycles_m=f"{total / 1e6:.1f}",
        biggest=f"{_tokens(biggest[0])} x {biggest[1]}", biggest_m=f"{cost / 1e6:.1f}",
        default_points=" ".join(DEFAULT_POINTS),
        default_devices=", ".join(map(str, DEFAULT_DEVICES)))


def page(meta: dict, rows: list[dict], check: dict | None) -> str:
    """The results page (templates/partitioning.md filled); ``meta``: the run's command line,
    options and wall time."""
    backend = rows[0]["backend"]
    cmd = "python scripts/partition_study.py " + " ".join(meta["argv"])
    return render(
        "partitioning.md", "page", command=cmd.strip(), backend=backend,
        wall_min=f"{meta['wall'] / 60:.1f}",
        partial="" if meta["complete"] else render("partitioning.md", "partial",
                                                   rows=len(rows)),
        kv_heads=KV_HEADS, group=GROUP, head_dim=HEAD_DIM, cluster_min=CLUSTER_TOKENS[0],
        cluster_max=CLUSTER_TOKENS[1], selection=f"{meta['selection']:.0%}",
        device="the Verilated device" if backend == "rtl" else "the model device",
        units=DeviceConfig.engines, peak_gbs=f"{PEAK / 1e9:g}",
        clock_mhz=f"{SIM_CLOCK_HZ / 1e6:g}", ddr5_lines=f"{meta['ddr5_lines']:,}",
        address_map=RTL_ADDRESS_MAP, grid=grid_text(rows),
        check="" if check is None else render(
            "partitioning.md", "check", clusters=check["clusters"],
            first=f"{check['first']:,}", unwritten=f"{check['unwritten']:,}",
            random=f"{check['random']:,}"),
        findings=findings(rows), table=table(rows), comparison=_comparison(rows),
        devices=device_table(rows), plot=PLOT.name)


def _point(text: str) -> tuple[int, int, tuple[int, ...] | None]:
    """CONTEXT:REQUESTS[@N,N...]: a grid point, optionally on only these node sizes."""
    try:
        spec, _, only = text.upper().partition("@")
        ctx, req = spec.split(":")
        scale = {"K": 1024, "M": 1048576}.get(ctx[-1:], 1)
        context = int(ctx[:-1] if scale > 1 else ctx) * scale
        requests = int(req)
        devices = tuple(int(x) for x in only.split(",")) if only else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"point {text!r}: want CONTEXT:REQUESTS[@N,N...], "
                                         "e.g. 128K:8 or 1M:8@8") from None
    if not 16 <= context <= 1 << 24 or not 1 <= requests <= 64:
        raise argparse.ArgumentTypeError(f"point {text!r}: context 16..16M tokens, requests "
                                         "1..64")
    if devices is not None and not all(1 <= n <= 64 for n in devices):
        raise argparse.ArgumentTypeError(f"point {text!r}: devices 1..64")
    return context, requests, devices


def _devices(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"devices {text!r}: not an integer") from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"devices {n}: 1..64")
    return n


def _fraction(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"selection {text!r}: not a number") from None
    if not 0 < x <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"selection {text!r}: want a fraction in (0, 1]")
    return x


DEFAULT_POINTS = ["128K:1", "128K:8", "512K:1", "1M:1"]
DEFAULT_DEVICES = [1, 2, 3, 4, 8]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("rtl", "model"), default="rtl",
                    help="rtl: the Verilated device (and the model beside it for comparison); "
                         "model: the model device only (fast)")
    ap.add_argument("--points", type=_point, nargs="+", default=[_point(p) for p in
                                                                 DEFAULT_POINTS],
                    metavar="CONTEXT:REQUESTS", help="grid points, e.g. 128K:1 1M:8 "
                    f"(default {' '.join(DEFAULT_POINTS)})")
    ap.add_argument("--devices", type=_devices, nargs="+", default=DEFAULT_DEVICES,
                    help="node sizes (a point's @N,N... overrides them)")
    ap.add_argument("--selection", type=_fraction, default=Sparsity().selection,
                    help="fraction of each KV head's clusters selected")
    ap.add_argument("--ddr5-lines", type=int, default=8192,
                    help="lines of each device's stream replayed through the DDR5 cycle model "
                         "(0: none)")
    ap.add_argument("--no-model", action="store_true",
                    help="rtl backend: skip the model comparison")
    ap.add_argument("--no-data-check", action="store_true",
                    help="rtl backend: skip the run with random K and V")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.name} and {PLOT.name}")
    ap.add_argument("--json", type=Path,
                    help="save the rows here as JSON (after every configuration)")
    ap.add_argument("--replot", type=Path, metavar="JSON",
                    help="write the page and plot from a saved run (--json) and run nothing")
    ap.add_argument("--out", type=Path, default=DOCS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ddr5_lines < 0:
        ap.error(f"--ddr5-lines {args.ddr5_lines}: must be >= 0")
    return args


def study(args: argparse.Namespace, progress=None) -> tuple[list[dict], dict | None]:
    """Run the grid; the rows and the data check (``progress(rows, check)`` after each
    configuration)."""
    rtl_port = store = None
    if args.backend == "rtl":
        from nelssa.hw.sim.device import RtlDevice

        rtl_port = RtlDevice()  # one per process: its DRAM store is the process's
        store = Store(rtl_port)
    max_ct = DeviceConfig().engine.max_cluster_tokens
    rows, check = [], None
    for context, requests, only in args.points:
        works = {(r, h): head_work(args.seed, context, r, h, args.selection)
                 for r in range(requests) for h in range(KV_HEADS)}
        for partition in (Partition.HEAD, Partition.CLUSTER):
            for n in only or args.devices:
                t0 = time.perf_counter()
                cfg = Config(partition, context, requests, n)
                cfg.jobs = plan(partition, n, works, max_ct)
                run_config(cfg, rtl_port, store, args.backend == "model" or not args.no_model,
                           args.seed, args.ddr5_lines)
                row = cfg.summary()
                rows.append(row)
                progress_log.info(
                    f"{row['partition']:7} {_tokens(context):>4} x {requests} on {n}: layer "
                    f"{row['layer_cycles']:,} cycles, imbalance {row['imbalance']:.3f}, "
                    f"{row['mean_gbs'] / 1e9:.1f} GB/s per device, ACT/cluster "
                    f"{_cell(row['acts_per_cluster'], '.1f')} "
                    f"({time.perf_counter() - t0:.1f} s)")
                if check is None and rtl_port is not None and not args.no_data_check:
                    check = data_check(rtl_port, store, cfg.jobs[0], args.seed)
                    check["first"] = cfg.rtl[0].cycles
                    progress_log.info("  data check: %s", check)
                if progress is not None:
                    progress(rows, check)
    return rows, check


def write(out: Path, saved: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    plot(saved["rows"], out / PLOT.name)
    (out / PAGE.name).write_text(page(saved["meta"], saved["rows"], saved["check"]))
    print(f"wrote {out / PAGE.name} and {out / PLOT.name}")  # noqa: T201


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    progress = logging.StreamHandler(sys.stdout)
    progress.setFormatter(logging.Formatter("%(message)s"))
    progress_log.addHandler(progress)
    progress_log.setLevel(logging.INFO)
    progress_log.propagate = False
    args = parse_args(argv)
    if args.replot is not None:
        try:
            saved = json.loads(read_text(args.replot, "saved run"))
            if not saved.get("rows"):
                raise ValueError("no rows")
        except (OSError, ValueError, AttributeError) as e:
            print(f"--replot {args.replot}: not a saved run ({e})", file=sys.stderr)  # noqa: T201
            raise SystemExit(2) from None
        write(args.out, saved)
        return
    t0 = time.perf_counter()
    meta = {"argv": sys.argv[1:] if argv is None else argv, "selection": args.selection,
            "ddr5_lines": args.ddr5_lines, "complete": False}

    def save(rows: list[dict], check: dict | None) -> None:
        if args.json:
            meta["wall"] = time.perf_counter() - t0
            args.json.write_text(json.dumps({"meta": meta, "rows": rows, "check": check},
                                            indent=1))

    rows, check = study(args, save)
    meta["complete"] = True
    save(rows, check)
    meta["wall"] = time.perf_counter() - t0
    if args.write:
        write(args.out, {"meta": meta, "rows": rows, "check": check})


if __name__ == "__main__":
    main()
