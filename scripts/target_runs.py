"""The target runs of issue 24 item 6: `nelssa decode` at the paper's shape (Llama-3-8B) with two
requests at 128K tokens and four short ones, on Verilated devices and on model devices; the
32-layer and 1M-token points, which this machine's memory decides. Each point runs as its own
process under /usr/bin/time -v; a sampler adds up the resident memory of the whole process tree
(the node and its device processes included) every half second. --write puts the table, the
commands and what each point printed in docs/results/target_runs.md.

    .venv/bin/python scripts/target_runs.py [--write] [--only NAME ...] [--steps 3]
        [--kmeans-iterations 3] [--reuse]

It takes many minutes (the rtl point alone about half an hour on this machine); it is not a
test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/results/target_runs.md"
DATA = ROOT / "docs/results/target_runs.json"
"""Each point's outcome, saved as it finishes; the page is written from all saved points."""
NELSSA = [sys.executable, "-m", "nelssa.cli"]
log = logging.getLogger("target_runs")
BIG = 131072 - 16
"""The long prompts: llama-3-8b's 131072 positions less room for the steps generated."""
MILLION = 1 << 20


NOTES = (
    "k-means runs 3 rounds per segment here (`--kmeans-iterations 3`; the reference, and "
    "`nelssa decode`'s default, is 10; the rtl-4-k10 point is the same run at 10). k-means "
    "stops early once a round moves no token. Each round is one (8192 x 128) by (128 x 512) "
    "product per segment, so the k-means share of the set-up scales with the rounds; no "
    "emulated time depends on them.",
    "",
    "The 32-layer point runs with `--weight-sets 4` (random layers 4..31 take the weights "
    "of layer i mod 4, so layers 0-3 are the 4-layer points' own; every layer's KV is its "
    "own) and `--device-memory file` (the model devices' memory in sparse files on disk: "
    "the device files column is the disk they took at the peak, not in the memory columns); "
    "without the accuracy check each long prompt's KV is streamed to the node a layer at a "
    "time. The run estimate has it at 14.1 GiB (weights 4.2, KV 8.0: the twins' 4 layers, "
    "one layer being offloaded, the short requests, the centroids) and 32.0 GiB of disk; "
    "without the two options the same run is refused before it starts: about 68.9 GiB "
    "(weights 27.0, KV 40.0) against this machine's 24 GiB. Its set-up is the synthetic KV "
    "and k-means of 64 (request, layer) pairs of 128K tokens on one PyTorch thread "
    "(`OMP_NUM_THREADS=1`), with other jobs on the machine; its steps run 28 layers on the "
    "model devices and 4 on model devices and twins both.",
    "",
    "The rtl-4 point was run on an idle machine on the code of 2026-12-03: k-means a "
    "segment at a time from bf16 keys, RoPE in 8K-token chunks, THP for torch's CPU "
    "allocator in the CLI, each WRITE_KV message built in place (its set-up was 131.7 s on "
    "the code before, on the same machine). model-4 and model-1m were rerun on the code of "
    "2026-12-05 (the model device timed by the cycle model of its memory side, "
    "hw/model/device_cycle.py: model-4's step 974.8 -> 972.8 us against rtl-4's 972.2, "
    "model-1m's 526.3 -> 523.8 us; the steps' wall time as before, 5.2-6.3 s), with the "
    "machine otherwise idle. rtl-4-k10 and sampled-32 "
    "are from older code (before the model device took its DDR5 time from the compiled "
    "cycle model, hw/model/ddr5_replay.py, and before the set-up work): their set-up would "
    "be shorter now; sampled-32's set-up and steps ran with other jobs on the machine.",
)
"""The page's notes on what the table does not show."""


@dataclass(frozen=True)
class Target:
    name: str
    what: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables the point runs with (shown in its command)."""


def targets(steps: int, iterations: int) -> list[Target]:
    base = ("decode", "--model", "llama-3-8b", "--prefill", "emulated", "--short", "4",
            "--short-len", "1024", "--t-input", "8192", "--steps", str(steps), "--no-accuracy",
            "--overwrite",  # each point replaces the last one's decode-trace.json and plot
            "--devices", "4", "--kmeans-iterations", str(iterations))
    two = ("--long", "2", "--long-len", str(BIG))
    return [
        Target("rtl-4", "2 x 128K + 4 x 1K, 4 layers, 4 Verilated devices",
               (*base, *two, "--layers", "4", "--backend", "rtl")),
        Target("rtl-4-k10", "the same, k-means at the reference 10 rounds",
               (*base[:-1], "10", *two, "--layers", "4", "--backend", "rtl")),
        Target("model-4", "2 x 128K + 4 x 1K, 4 layers, 4 model devices",
               (*base, *two, "--layers", "4", "--backend", "model")),
        Target("sampled-32", "2 x 128K + 4 x 1K, 32 layers, layers 0-3 on Verilated twins",
               (*base, *two, "--layers", "32", "--backend", "model", "--rtl-layers", "4",
                "--weight-sets", "4", "--device-memory", "file"),
               # one intra-op thread: on this shared 2-core machine PyTorch's two threads wait
               # for each other behind other jobs (the set-up's elementwise work 4x slower)
               (("OMP_NUM_THREADS", "1"),)),
        Target("model-1m", "1 x 1M + 4 x 1K, 1 layer, 4 model devices",
               (*base, "--long", "1", "--long-len", str(MILLION), "--positions",
                str(MILLION + 64), "--layers", "1", "--backend", "model")),
    ]


@dataclass
class Outcome:
    target: Target
    command: str = ""
    """What ran (the saved point's own command, whatever the options of a later run)."""
    rc: int = 0
    out: str = ""
    wall_s: float = 0.0
    peak_rss_kib: int = 0
    """/usr/bin/time -v: the largest single process."""
    tree_peak_kib: int = 0
    """The sampler: the whole process tree's resident memory at its peak."""
    files_peak_kib: int = 0
    """The sampler: disk the tree's file-backed device memory takes at its peak
    (`--device-memory file`)."""
    figures: dict[str, str] = field(default_factory=dict)


def _tree_files_kib(pids: set[int]) -> int:
    """Disk taken by the device memory files (`--device-memory file`) of nodes among
    ``pids``: their private folders are named by the node's pid."""
    total = 0
    for f in Path(tempfile.gettempdir()).glob("nelssa-node-*-*/device-*.mem"):
        pid = f.parent.name[len("nelssa-node-"):].split("-", 1)[0]
        if pid.isdigit() and int(pid) in pids:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += f.stat().st_blocks * 512 // 1024
    return total


def _tree(root: int) -> tuple[int, set[int]]:
    """Resident memory (KiB) of ``root`` and every process below it, and their pids."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        pid = int(d.name)
        m = re.search(r"^PPid:\s+(\d+)", status, re.M)
        r = re.search(r"^VmRSS:\s+(\d+)", status, re.M)
        children.setdefault(int(m.group(1)) if m else 0, []).append(pid)
        rss[pid] = int(r.group(1)) if r else 0
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        seen.add(pid)
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total, seen


def run(t: Target) -> Outcome:
    cmd = ["/usr/bin/time", "-v", *NELSSA, *t.args]
    log.info("%s: %s", t.name, " ".join(cmd[2:]))
    o = Outcome(t, command=" ".join([*(f"{k}={v}" for k, v in t.env), "nelssa", *t.args]))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **dict(t.env)})
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            rss, pids = _tree(proc.pid)
            peak[0] = max(peak[0], rss)
            peak[1] = max(peak[1], _tree_files_kib(pids))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        log.info("%s | %s", t.name, line.rstrip())
    o.rc = proc.wait()
    done.set()
    sampler.join()
    o.wall_s = time.perf_counter() - start
    o.out = "".join(lines)
    o.tree_peak_kib, o.files_peak_kib = peak
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", o.out)
    o.peak_rss_kib = int(m.group(1)) if m else 0
    o.figures = figures(o.out)
    return o


def figures(out: str) -> dict[str, str]:
    """What the page reports, read from what `nelssa decode` printed."""
    pats = {
        "setup_s": r"prefill and KV offload took ([\d.]+) s wall",
        "node_up_s": r"node up at \S+ in ([\d.]+) s",
        "step_walls": r"wall time per step: ([\d., ]+) s",
        "gpu_pct": r"GPU ([\d.]+) %, top-K",
        "topk_pct": r"top-K search ([\d.]+) %",
        "wait_pct": r"waiting for the node ([\d.]+) %",
        "pnm_attn_pct": r"PNM-attn ([\d.]+) %",
        "emulated_us": r"total: \d+ tokens in ([\d.]+) us emulated",
        "sampling": r"(sampled layers .*)",
        "refused": r"(error: .*)",
    }
    f = {k: m.group(1).strip() for k, p in pats.items() if (m := re.search(p, out))}
    steps = [line for line in out.splitlines() if re.match(r"\s+\d+\s+\d+S\+", line)]
    if steps:
        last = steps[-1].split()
        # step, batch ("4S+", " 2L"), step us, GPU, top-K, wait, tok/s, xfer, PNM-ovh,
        # PNM-attn, device cycles, GB/s
        f["step_us"], f["pnm_attn_us"], f["cycles"] = last[3], last[10], last[11]
    return f


def page(outcomes: list[Outcome], steps: int) -> str:
    rows = []
    for o in outcomes:
        f = o.figures = figures(o.out)  # read again: the page's reading of a saved point
        shown = "refused (exit 2)" if o.rc == 2 else (
            f"exit {o.rc}" if o.rc else f.get("step_walls", ""))
        files = f"{o.files_peak_kib / 2**20:.1f}" if o.files_peak_kib else ""
        rows.append(
            f"| {o.target.name} | {o.target.what} | {f.get('setup_s', '')} | {shown} | "
            f"{o.peak_rss_kib / 2**20:.1f} | {o.tree_peak_kib / 2**20:.1f} | {files} | "
            f"{f.get('step_us', '')} | {f.get('gpu_pct', '')} | {f.get('topk_pct', '')} | "
            f"{f.get('wait_pct', '')} | {f.get('pnm_attn_us', '')} | {o.wall_s:.0f} |")
    parts = [
        "# Target runs (issue 24 item 6)", "",
        "Written by `python scripts/target_runs.py --write`: each point is one `nelssa decode` "
        f"process ({steps} decode steps) under `/usr/bin/time -v`. Llama-3-8B shape, random "
        "weights, the long prompts' KV from the emulated prefill node (clustered and offloaded "
        "as a real prefill's), link roce-400g, GPU model h100-nvl, T_input 8192, selection 4 %. "
        "The machine is shared (2 cores, 24 GiB): wall times carry the load of whatever else "
        "ran.", "",
        "Columns: set-up is the prefill and KV offload (emulated prefill, k-means, offload to "
        "the node), wall per step each decode step's wall time; peak memory is the largest "
        "process (`/usr/bin/time -v`) and the whole process tree (node and device processes, "
        "sampled every 0.5 s), device files the disk the model devices' memory files took "
        "(`--device-memory file`, sampled alike); the emulated step time and the PNM "
        "attention's latency are the last step's, the Figure 11 shares (GPU, top-K search, "
        "waiting for the node) those of all the steps together.", "",
        "| point | batch | set-up s | wall per step s | peak GiB (process) | peak GiB (tree) | "
        "device files GiB | emulated step us | GPU % | top-K % | wait % | PNM-attn us | run s |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows, "", *NOTES, ""]
    for o in outcomes:
        parts += [f"## {o.target.name}", "", "```", o.command, "```", ""]
        if o.figures.get("sampling"):
            parts += [o.figures["sampling"], ""]
        keep = [line for line in o.out.splitlines()
                if not line.startswith(("\t", "Command being timed"))]
        parts += ["```", *keep[-40:], "```", ""]
    return "\n".join(parts)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these points")
    ap.add_argument("--steps", type=int, default=3, help="decode steps per point")
    ap.add_argument("--kmeans-iterations", type=int, default=3,
                    help="k-means rounds per segment (the reference is 10; the set-up's wall "
                         "time scales with it, no emulated time does)")
    ap.add_argument("--reuse", action="store_true",
                    help=f"run nothing: the page from the points saved in "
                         f"{DATA.relative_to(ROOT)}")
    args = ap.parse_args()
    todo = [] if args.reuse else targets(args.steps, args.kmeans_iterations)
    if args.only:
        names = {t.name for t in todo}
        bad = sorted(set(args.only) - names)
        if bad:
            ap.error(f"--only: no point {', '.join(bad)}; the points are "
                     f"{', '.join(sorted(names))}")
        todo = [t for t in todo if t.name in args.only]
    saved = json.loads(DATA.read_text()) if DATA.exists() else {}
    for t in todo:
        o = run(t)
        saved[t.name] = {k: v for k, v in asdict(o).items() if k != "target"}
        DATA.write_text(json.dumps(saved, indent=1))
    names = [t.name for t in targets(args.steps, args.kmeans_iterations)]
    outcomes = [Outcome(t, **saved[t.name])
                for t in targets(args.steps, args.kmeans_iterations) if t.name in saved]
    outcomes.sort(key=lambda o: names.index(o.target.name))
    text = page(outcomes, args.steps)
    if args.write:
        PAGE.write_text(text)
        log.info("wrote %s", PAGE)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
