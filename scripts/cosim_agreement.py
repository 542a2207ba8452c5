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

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/results/cosim_agreement.md"
DATA = ROOT / "docs/results/cosim_agreement.json"
log = logging.getLogger("cosim_agreement")


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
        pts.append(Point(1, 131072, 4, 4096, devices[-1], links[-1], layers=layers,
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
    if args.reuse:
        if not DATA.is_file():
            ap.error(f"--reuse: no {DATA.relative_to(ROOT)}; run without --reuse first")
        saved = json.loads(DATA.read_text())
        for d in saved["points"]:
            p = Point(**d["point"])
            rows.append(Comparison(p, Side(**d["cosim"]), serving_side(p), d["wall_s"]))
        command = saved["command"]
    else:
        command = " ".join(["scripts/cosim_agreement.py", *(argv if argv is not None
                                                             else sys.argv[1:])])
        for p in grid(args.layers, args.steps, args.devices, args.links, not args.no_128k):
            r = compare(p)
            rows.append(r)
            log.info("%s", table([r])[-1])
    wall = time.perf_counter() - t0
    lines = table(rows)
    print("\n".join(lines))
    bad = [r for r in rows if verdict(r) != "agree"]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} points agree ({wall:.0f} s wall)")
    if args.write:
        DATA.write_text(json.dumps({"command": command, "points": [
            {"point": asdict(r.point), "cosim": asdict(r.cosim), "wall_s": r.wall_s}
            for r in rows]}, indent=1) + "\n")
        PAGE.write_text(page(rows, command, wall if not args.reuse else None))
        print(f"wrote {PAGE.relative_to(ROOT)} and {DATA.relative_to(ROOT)}")
    return 1 if bad else 0


def page(rows: list[Comparison], command: str, wall: float | None) -> str:
    from nelssa.cosim_agreement import EXPLANATION

    total = sum(r.wall_s for r in rows)
    agree = sum(verdict(r) == "agree" for r in rows)
    head = [
        "# The serving emulator's step cost against the co-simulation's emulated step time", "",
        f"Written by `.venv/bin/python {command.replace('.venv/bin/python ', '')}`"
        f"{' (then `--reuse --write`: the serving side priced again over the same measurements)' if wall is None else ''}; "  # noqa: E501
        f"the co-simulation took {total:.0f} s wall in all (the column `wall s` per point). "
        "Each point: one batch (long requests x context + short requests x context) decoded "
        "by `nelssa decode`'s machinery (PyTorch GPU side, llama3-8b's shape with random "
        "weights and the layers given, the emulated prefill node's KV, model devices behind a "
        "booted node, real descriptors over ZeroMQ); its last step is compared with "
        "`CostModel.step_parts` for the same contexts, hardware description (h100-nvl, "
        "`prototype`), model and link. Times are microseconds per step; differences are the "
        "serving side's against the co-simulation's.", "",
        f"Verdict: `agree` where the step is within {STEP_BOUND:.0%} and the GPU and top-K "
        f"components within {STEP_BOUND:.0%}; the node's share (`wait`) may differ by up to "
        f"{WAIT_BOUND_US:g} us per layer for the reasons below. {agree} of {len(rows)} points "
        "agree.", ""]
    return "\n".join(head + table(rows) + ["", *EXPLANATION, ""])


if __name__ == "__main__":
    raise SystemExit(main())
