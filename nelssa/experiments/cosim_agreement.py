"""The serving emulator's step cost against the co-simulation's emulated step time (issue 24
item 7) on a grid of batches (long and short requests, 8K-128K tokens), device counts and links:
each point's two figures, per-component differences and the verdict. --write puts the table in
docs/results/cosim_agreement.md and the co-simulation's measurements in
docs/results/cosim_agreement.json; --reuse prices the serving side again over the measurements
of that file (after a change to the cost model) without running the co-simulation.

    .venv/bin/python scripts/cosim_agreement.py [--write] [--reuse] [--layers 2] [--steps 2]
        [--devices 1,2,4,8] [--links roce-100g,roce-400g] [--no-128k]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

from nelssa.cosim_agreement import (
    STEP_BOUND,
    WAIT_BOUND_US,
    Comparison,
    Point,
    Side,
    compare,
    serving_side,
    verdict,
)
from nelssa.emu.link.model import GPU_PNM_LINKS
from nelssa.experiments.pages import render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/results/cosim_agreement.md"
DATA = ROOT / "docs/results/cosim_agreement.json"
log = logging.getLogger("cosim_agreement")
_PAGE = "cosim_agreement.md"
"""The page's template (templates/)."""
BIG = 131072 - 16
"""The long point: llama-3-8b's 131072 positions less room for the steps generated."""


def grid(layers: int, steps: int, devices: list[int], links: list[str],
         big: bool) -> list[Point]:
    """8K and 32K batches on every device count and link, a batch of two long requests, and
    one 128K point."""
    pts = []
    for link in links:
        for n in devices:
            pts.append(Point(1, 8192, 4, 1024, n, link, layers=layers, steps=steps))
    for link in links:
        for n in (devices[0], devices[-1]):
            pts.append(Point(1, 32768, 4, 1024, n, link, layers=layers, steps=steps))
    pts.append(Point(2, 32768, 8, 2048, devices[len(devices) // 2], links[-1], layers=layers,
                     steps=steps))
    if big:
        pts.append(Point(1, BIG, 4, 4096, devices[-1], links[-1], layers=layers,
                         steps=steps))
    return list(dict.fromkeys(pts))


def _int_list(text: str, lo: int, hi: int, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be integers separated by commas, got "
                                         f"{text!r}") from None
    bad = [v for v in vals if not lo <= v <= hi]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"{what} must be in {lo}..{hi}, got {text!r}")
    return sorted(set(vals))


def _links(text: str) -> list[str]:
    vals = text.split(",")
    bad = [v for v in vals if v not in GPU_PNM_LINKS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown link {bad[0]!r}; choose from "
                                         f"{', '.join(GPU_PNM_LINKS)}")
    return list(dict.fromkeys(vals))


def _bounded(lo: int, hi: int, what: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        if not text.isdigit() or not lo <= int(text) <= hi:
            raise argparse.ArgumentTypeError(f"{what} must be an integer in {lo}..{hi}, got "
                                             f"{text!r}")
        return int(text)
    return parse


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f} %"


def table(rows: list[Comparison]) -> list[str]:
    out = ["| point | co-sim step us | serving step us | step | GPU (co-sim / serving) | "
           "top-K | wait | PNM-attn | comm | verdict | wall s |",
           "| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- | --- | ---: |"]
    for r in rows:
        c, s = r.cosim, r.serving

        def pair(k: str, c: Side = c, s: Side = s) -> str:
            return f"{getattr(c, k):.1f} / {getattr(s, k):.1f}"

        out.append(f"| {r.point.label} | {c.step:.1f} | {s.step:.1f} | {_pct(r.diff('step'))} "
                   f"| {pair('gpu')} ({_pct(r.diff('gpu'))}) | {pair('topk')} "
                   f"({_pct(r.diff('topk'))}) | {pair('wait')} | {pair('pnm_attn')} | "
                   f"{pair('comm')} | {verdict(r)} | {r.wall_s:.0f} |")
    return out


def node_table(rows: list[Comparison]) -> list[str]:
    """The node's figures per step (co-simulation / serving): the link both ways, host software
    and CXL, the devices' compute and the bandwidth per device it amounts to."""
    out = ["| point | transfer | host + CXL | PNM-attn | KV read MB | GB/s per device |",
           "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if not r.point.long:
            continue
        c, s = r.cosim, r.serving
        st = s.detail["transfer"]
        ct = c.detail.get("transfer")
        skv = s.detail["kv_bytes"]
        bw = skv / (s.pnm_attn * 1e-6) / r.point.devices / 1e9 if s.pnm_attn else 0.0
        kv = c.detail.get("kv_bytes")
        gbs = (f"{kv / (c.pnm_attn * 1e-6) / r.point.devices / 1e9:.0f}"
               if kv and c.pnm_attn else "—")
        link = f"{ct:.1f}" if ct is not None else "—"
        host = f"{c.comm - ct:.1f}" if ct is not None else f"({c.comm - st:.1f})"
        kvs = f"{kv / 1e6:.2f}" if kv else "—"
        out.append(f"| {r.point.label} | {link} / {st:.1f} | {host} / {s.comm - st:.1f} | "
                   f"{c.pnm_attn:.1f} / {s.pnm_attn:.1f} | {kvs} / {skv / 1e6:.2f} | "
                   f"{gbs} / {bw:.0f} |")
    return out


def _per_layer(rows: list[Comparison]) -> dict[int, tuple[float, float, float, float]]:
    """Per device count, over the points of one long request, the means of host + CXL per node
    request (co-simulation) and per
    layer (serving: one T_comm), of the devices' bandwidth (co-simulation; the serving side's
    is ``bw_eff_gbs``) and of the wait's difference per layer."""
    out = {}
    measured = [r for r in rows if r.point.long == 1]  # (several queue behind each other)
    for n in sorted({r.point.devices for r in measured}):
        rs = [r for r in measured if r.point.devices == n]
        per = [((r.cosim.comm - r.cosim.detail.get("transfer", r.serving.detail["transfer"]))
                / r.point.layers / r.point.long,
                (r.serving.comm - r.serving.detail["transfer"]) / r.point.layers,
                (r.cosim.detail.get("kv_bytes") or r.serving.detail["kv_bytes"])
                / (r.cosim.pnm_attn * 1e-6) / n / 1e9,
                (r.cosim.wait - r.serving.wait) / r.point.layers) for r in rs]
        out[n] = tuple(sum(x[i] for x in per) / len(per) for i in range(4))
    return out


def explain(rows: list[Comparison]) -> str:
    """What was corrected and what remains (templates/cosim_agreement.md), with the figures
    per device count."""
    from nelssa.emu.latency.hardware import DEFAULT_PNM, HardwareCatalog

    pnm = HardwareCatalog.load().get("pnm", DEFAULT_PNM)
    per = _per_layer(rows)
    worst = max((abs(r.serving.wait - r.cosim.wait) / r.point.layers for r in rows),
                default=0.0)
    off = [r.point.label for r in rows if any(
        r.diff(k) is not None and abs(r.diff(k)) > STEP_BOUND  # type: ignore[arg-type]
        for k in ("step", "gpu", "topk"))]
    parts_agree = (render(_PAGE, "agree_everywhere") if not off
                   else render(_PAGE, "agree_except", points=", ".join(off)))
    rows_text = "".join(f"\n| {n} | {c:.2f} | {s:.2f} | {g:.0f} | {pnm.bw_eff_gbs:g} | {w:+.2f} |"
                        for n, (c, s, g, w) in per.items())
    return (render(_PAGE, "corrected", parts_agree=parts_agree, worst_us=f"{worst:.1f}",
                   wait_bound_us=f"{WAIT_BOUND_US:g}") + rows_text + "\n"
            + render(_PAGE, "remains", t_dev_us=f"{pnm.t_dev_us:g}",
                     t_host_us=f"{pnm.t_host_us:g}"))


def save(command: str, rows: list[Comparison]) -> None:
    DATA.write_text(json.dumps({"command": command, "points": [
        {"point": asdict(r.point), "cosim": asdict(r.cosim), "wall_s": r.wall_s}
        for r in rows]}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=_bounded(1, 8, "--layers"), default=2)
    ap.add_argument("--steps", type=_bounded(1, 8, "--steps"), default=2)
    ap.add_argument("--devices", type=lambda t: _int_list(t, 1, 32, "--devices"),
                    default=[1, 2, 4, 8])
    ap.add_argument("--links", type=_links, default=["roce-100g", "roce-400g"])
    ap.add_argument("--no-128k", action="store_true", help="skip the 128K point (~4 min)")
    ap.add_argument("--reuse", action="store_true",
                    help=f"the co-simulation's measurements from {DATA.relative_to(ROOT)}")
    ap.add_argument("--write", action="store_true",
                    help=f"write {PAGE.relative_to(ROOT)} and {DATA.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    rows: list[Comparison] = []
    note = ""
    if args.reuse:
        if not DATA.is_file():
            ap.error(f"--reuse: no {DATA.relative_to(ROOT)}; run without --reuse first")
        saved = json.loads(DATA.read_text())
        for d in saved["points"]:
            p = Point(**d["point"])
            rows.append(Comparison(p, Side(**d["cosim"]), serving_side(p), d["wall_s"]))
        command = saved["command"]
        note = saved.get("note", "")
    else:
        command = " ".join(["scripts/cosim_agreement.py", *(argv if argv is not None
                                                             else sys.argv[1:])])
        for p in grid(args.layers, args.steps, args.devices, args.links, not args.no_128k):
            r = compare(p)
            rows.append(r)
            log.info("%s", table([r])[-1])
            if args.write:  # as points finish: an interrupted grid keeps what it measured
                save(command, rows)
    wall = time.perf_counter() - t0
    lines = table(rows)
    print("\n".join(lines))
    bad = [r for r in rows if verdict(r) != "agree"]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} points agree ({wall:.0f} s wall)")
    if args.write:
        if not args.reuse:  # (with --reuse the measurements stay as they were)
            save(command, rows)
        PAGE.write_text(page(rows, command, wall if not args.reuse else None, note))
        print(f"wrote {PAGE.relative_to(ROOT)} and {DATA.relative_to(ROOT)}")
    return 1 if bad else 0


def page(rows: list[Comparison], command: str, wall: float | None, note: str = "") -> str:
    """docs/results/cosim_agreement.md: templates/cosim_agreement.md filled with the points."""
    head = render(
        _PAGE, "head", command=command.replace(".venv/bin/python ", ""),
        reused="" if wall is not None else " (then `--reuse --write`: the serving side priced "
        "again over the same measurements)",
        total_s=f"{sum(r.wall_s for r in rows):.0f}", step_bound=f"{STEP_BOUND:.0%}",
        wait_bound_us=f"{WAIT_BOUND_US:g}", agree=sum(verdict(r) == "agree" for r in rows),
        points=len(rows))
    return (head + (f"\n{note}\n" if note else "") + "\n" + "\n".join(table(rows)) + "\n"
            + render(_PAGE, "node") + "\n" + "\n".join(node_table(rows)) + "\n\n"
            + explain(rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
