"""K GPU decode nodes sharing one PNM node, co-simulated (`nelssa decode --gpu-nodes K`: real
processes, one clock domain, the node's devices ordered in emulated time) against the fleet
emulator's contention model (emu/serving/pnm_nodes.py: a step's attention on a node shared by
other instances), K = 1, 2, 4: per-step wait for the PNM node and step time.

The fleet side takes the one-instance step from the co-simulation's K = 1 run (the step both
halves agree on is docs/results/cosim_agreement.md's business) and adds what the fleet's model
charges for sharing: ``contention_s`` with the other instances' offered loads, each its devices'
work per second of its steps, as ``PnmNode.set_load`` books them.

    .venv/bin/python scripts/fleet_cosim_check.py [--write] [--ks 1,2,4] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nelssa.emu.serving.pnm_nodes import contention_s

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/results/fleet_cosim.md"
BOUND = 0.05
"""Largest relative difference of the mean wait and step time, fleet against co-simulation."""
log = logging.getLogger("fleet_cosim_check")


@dataclass(frozen=True)
class Run:
    """One co-simulated batch shape, the same on every decode node."""

    layers: int = 2
    model: str = "llama-3-8b"
    """A model preset (a small vocabulary starts a decode node sooner)."""
    vocab: int | None = None
    """The model's vocabulary, cut (None: the preset's): the output head's random weights."""
    prefill: str = "auto"
    """``--prefill``: ``emulated`` takes the prompts' KV from the emulated prefill node
    instead of a pass through the model."""
    kmeans_iterations: int = 10
    """k-means rounds of the prefill's clustering (no emulated time depends on them)."""
    long: int = 1
    long_len: int = 16384
    devices: int = 1
    steps: int = 4


def decode_argv(run: Run, k: int, steps_json: Path, folder: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from nelssa.cli import main; sys.exit(main())",
            "decode", "--gpu-nodes", str(k), "--backend", "model", "--devices",
            str(run.devices), "--model", run.model, "--layers", str(run.layers),
            "--short", "0", "--long", str(run.long), "--long-len", str(run.long_len),
            "--t-input", str(run.long_len // 2), "--steps", str(run.steps), "--no-accuracy",
            "--kmeans-iterations", str(run.kmeans_iterations), "--prefill", run.prefill,
            *(["--vocab", str(run.vocab)] if run.vocab else []),
            "--trace", str(folder / "trace.json"), "--plot", str(folder / "plot.png"),
            "--steps-json", str(steps_json)]


def cosim(run: Run, k: int) -> list[list[dict[str, Any]]]:
    """Each decode node's steps (emulated picoseconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "steps.json"
        proc = subprocess.run(decode_argv(run, k, out, Path(tmp)), capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"decode --gpu-nodes {k} failed:\n{proc.stdout[-3000:]}"
                               f"{proc.stderr[-3000:]}")
        steps = json.loads(out.read_text())
    return steps if k > 1 else [steps]


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) * 1e-6


def steady(steps: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Steps 2.. of every node (the first carries the nodes' common start: see the page)."""
    return [r for node in steps for r in node[1:]]


def fleet(alone: list[dict[str, Any]], k: int) -> tuple[float, float]:
    """The fleet model's mean wait and step (us) for K instances like the one ``alone``: its
    attention stretched by the others' offered loads."""
    attn, step, wait = mean(alone, "pnm_attn_ps"), mean(alone, "step_ps"), mean(alone, "wait_ps")
    extra = contention_s(attn * 1e-6, step * 1e-6, (k - 1) * attn / step) * 1e6
    return wait + extra, step + extra


def processor_sharing(alone: list[dict[str, Any]], k: int) -> float:
    """The mean wait (us) of the model before: attention x (1 + the others' loads)."""
    attn, step = mean(alone, "pnm_attn_ps"), mean(alone, "step_ps")
    return mean(alone, "wait_ps") + (k - 1) * attn / step * attn


def compare(run: Run, ks: list[int]) -> list[dict[str, Any]]:
    out, alone = [], None
    for k in ks:
        t0 = time.perf_counter()
        steps = cosim(run, k)
        wall = time.perf_counter() - t0
        rows = steady(steps)
        if k == 1:
            alone = rows
        assert alone is not None, "K = 1 first: the fleet's one-instance step"
        fw, fs = fleet(alone, k)
        ps = processor_sharing(alone, k)
        cw, cs = mean(rows, "wait_ps"), mean(rows, "step_ps")
        first = [node[0] for node in steps]
        out.append({"k": k, "cosim_wait": cw, "cosim_step": cs, "fleet_wait": fw,
                    "fleet_step": fs, "wait_diff": (fw - cw) / cw, "step_diff": (fs - cs) / cs,
                    "first_wait": mean(first, "wait_ps"), "first_step": mean(first, "step_ps"),
                    "attn": mean(rows, "pnm_attn_ps"), "wall_s": wall,
                    "ps_wait": ps, "ps_diff": (ps - cw) / cw})
        log.info("K=%d: %s", k, out[-1])
    return out


def page(run: Run, rows: list[dict[str, Any]], command: str, commit: str) -> str:
    ok = all(abs(r["wait_diff"]) <= BOUND and abs(r["step_diff"]) <= BOUND for r in rows)
    lines = [
        "# K GPU decode nodes sharing one PNM node: co-simulation against the fleet emulator",
        "",
        f"Written by `{command}` at commit `{commit}`. Each K: `nelssa decode --gpu-nodes K` "
        f"(K decode processes, each {run.long} request of {run.long_len} tokens on the PNM "
        f"tier, {run.model}'s shape cut to {run.layers} layers, {run.steps} steps) against one "
        f"node of {run.devices} model device(s), all in one clock domain. Emulated "
        "microseconds per step, the mean over the nodes and steps 2..; the fleet side is the "
        "K = 1 step plus `pnm_nodes.contention_s` for K - 1 others like it.",
        "",
        f"Verdict: {'every K within' if ok else 'NOT all within'} {BOUND:.0%} on wait and step.",
        "",
        "| K | co-sim wait | fleet wait | diff | co-sim step | fleet step | diff | "
        "device us/step | step 1 wait (co-sim) | processor sharing wait (before) | wall s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['cosim_wait']:.1f} | {r['fleet_wait']:.1f} | "
                     f"{100 * r['wait_diff']:+.1f} % | {r['cosim_step']:.1f} | "
                     f"{r['fleet_step']:.1f} | {100 * r['step_diff']:+.1f} % | {r['attn']:.1f} | "
                     f"{r['first_wait']:.1f} | {r['ps_wait']:.1f} ({100 * r['ps_diff']:+.1f} %)"
                     f" | {r['wall_s']:.0f} |")
    lines += ["", (ROOT / "nelssa/experiments/templates/fleet_cosim_notes.md").read_text()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    ap.add_argument("--ks", default="1,2,4")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--long-len", type=int, default=16384)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        ks = sorted({int(x) for x in a.ks.split(",")})
    except ValueError:
        print(f"error: --ks {a.ks}: comma-separated integers", file=sys.stderr)
        return 2
    if ks[0] != 1 or not 2 <= a.steps <= 64 or not 1024 <= a.long_len <= 131000:
        print("error: --ks must include 1, --steps 2..64, --long-len 1024..131000",
              file=sys.stderr)
        return 2
    run = Run(long_len=a.long_len, steps=a.steps)
    rows = compare(run, ks)
    for r in rows:
        print(f"K={r['k']}: wait {r['cosim_wait']:.1f} / {r['fleet_wait']:.1f} us "
              f"({100 * r['wait_diff']:+.1f} %), step {r['cosim_step']:.1f} / "
              f"{r['fleet_step']:.1f} us ({100 * r['step_diff']:+.1f} %)")
    if a.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT, check=False).stdout.strip()
        command = "python scripts/fleet_cosim_check.py --write" + (
            f" --ks {a.ks}" if a.ks != "1,2,4" else "")
        PAGE.write_text(page(run, rows, command, commit))
        print(f"wrote {PAGE}")
    return 0 if all(abs(r["wait_diff"]) <= BOUND and abs(r["step_diff"]) <= BOUND
                    for r in rows) else 1
