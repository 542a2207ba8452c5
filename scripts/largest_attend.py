"""The largest legal ATTEND on a node of real processes (issue 20, defect 5): two KV heads on one
device, each with 4,096 selected clusters of 64 tokens (MAX_IDS ids of the engine's largest
cluster), 8 query heads, head_dim 128. It must complete with the node's default device timeout
(30 s) however long the device computes: the device answers while it works (driver/remote.py,
HEARTBEAT_S), so liveness is never judged by how long legitimate work takes.

Prints, and writes as a row of docs/results/largest_attend.md (one row per backend, the others
kept): wall time to load the KV, wall time of the ATTEND, the device's cycles and emulated
time, and the largest error against a float64 reference.

    .venv/bin/python scripts/largest_attend.py --backend model
    .venv/bin/python scripts/largest_attend.py --backend rtl
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nelssa.driver.formats import MAX_IDS
from nelssa.emu.launcher import NodeLauncher
from nelssa.host.pnm_node.client import NodeClient
from nelssa.hw.model.fp import as_f32, bf16_to_f32_bits, f32_to_bf16_bits
from nelssa.hw.model.reference import attend_f64
from nelssa.options import SECONDS, SEED, Parser, int_range

HEADS, QHEADS, HEAD_DIM, CLUSTER = 2, 8, 128, 64
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results" / "largest_attend.md"
HEADER = """# The largest legal ATTEND

Two KV heads on one device, each with {ids:,} selected clusters of {cluster} tokens ({tokens:,}
tokens per head), 8 query heads, head_dim 128; the node's default device timeout of 30 s.
Before issue 20's defect 5 was fixed, the request ran inside one device call and the device was
marked down after 30 s. Written by `scripts/largest_attend.py --backend BACKEND` (one row per
backend; wall times on the machine named, which other work may have shared).

"""
COLUMNS = ["backend", "load KV (wall)", "ATTEND (wall)", "device cycles", "emulated device time",
           "max error vs float64 (O / LSE)", "device up after", "machine", "commit"]
ALIGN = ["---", "---:", "---:", "---:", "---:", "---", "---", "---", "---"]


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def _commit() -> str:
    """The commit measured, ``-dirty`` when the tree had changes beside it."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], capture_output=True, text=True, check=True,
                              cwd=RESULTS.parent.parent).stdout.strip()
    try:
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain",
                                                                      "-uno") else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _write_row(backend: str, row: str, ids: int) -> None:
    rows = {}
    if RESULTS.exists():
        for line in RESULTS.read_text().splitlines():
            m = re.match(r"\| (\w+) \|", line)
            if m and m.group(1) != "backend":
                rows[m.group(1)] = line
    rows[backend] = row
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    table = [f"| {' | '.join(COLUMNS)} |", f"| {' | '.join(ALIGN)} |"]
    table += [rows[b] for b in sorted(rows)]
    RESULTS.write_text(HEADER.format(ids=ids, cluster=CLUSTER, tokens=ids * CLUSTER)
                       + "\n".join(table) + "\n")


def main() -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["model", "rtl"], default="model")
    ap.add_argument("--clusters", type=int_range(1, MAX_IDS), default=MAX_IDS,
                    help=f"selected clusters per KV head (1..{MAX_IDS}; the table is written "
                         "only for the largest)")
    ap.add_argument("--device-timeout", type=SECONDS, default=30.0,
                    help="the node's device timeout, s (its default)")
    ap.add_argument("--seed", type=SEED, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n = args.clusters
    with tempfile.TemporaryDirectory(prefix="nelssa-largest-") as tmp:
        node = NodeLauncher(f"ipc://{tmp}/node", 1, args.backend, "roce-400g", 1800.0,
                            extra=["--device-timeout", str(args.device_timeout)])
        try:
            with NodeClient(node.endpoint, timeout_s=24 * 3600.0) as c:
                s = c.open_session(HEAD_DIM, QHEADS, "head")
                c.alloc_kv(s, 0, list(range(HEADS)), n, n * CLUSTER)
                data = {}
                t0 = time.monotonic()
                for h in range(HEADS):
                    keys = [_bf16(rng, (CLUSTER, HEAD_DIM)) for _ in range(n)]
                    values = [_bf16(rng, (CLUSTER, HEAD_DIM)) for _ in range(n)]
                    for i in range(0, n, 256):
                        c.write_kv(s, 0, h, keys[i:i + 256], values[i:i + 256])
                    data[h] = (keys, values, _bf16(rng, (QHEADS, HEAD_DIM)))
                    print(f"KV head {h}: {n} clusters written ({time.monotonic() - t0:.0f} s)",
                          flush=True)
                load_s = time.monotonic() - t0
                t0 = time.monotonic()
                r = c.attend(s, 0, {h: d[2] for h, d in data.items()},
                             {h: list(range(n)) for h in data})
                attend_s = time.monotonic() - t0
                st = c.status()
                up = st.devices[0].alive
        finally:
            node.stop()
    scale = np.float32(1 / np.sqrt(HEAD_DIM))
    err_o = err_lse = 0.0
    for h, (keys, values, q) in data.items():
        o64, lse64 = attend_f64(q, keys, values, scale)
        vmax = max(float(np.abs(as_f32(bf16_to_f32_bits(v))).max()) for v in values)
        err_o = max(err_o, float(np.abs(r.o[h].astype(np.float64) - o64).max()) / vmax)
        err_lse = max(err_lse, float(np.abs(r.lse[h].astype(np.float64) - lse64).max()))
    cycles = r.timing.device_cycles
    print(f"{args.backend}: load {load_s:.1f} s, ATTEND {attend_s:.1f} s wall, {cycles:,} device "
          f"cycles ({r.timing.device_ps / 1e6:,.1f} us emulated), max error {err_o:.2e} of "
          f"the largest value / LSE {err_lse:.2e}, device {'up' if up else 'DOWN'}")
    ok = up and err_o <= 1e-3 and err_lse <= 1e-3
    if n == MAX_IDS:
        machine = f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores"
        _write_row(args.backend, f"| {args.backend} | {load_s:.0f} s | {attend_s:.1f} s | "
                   f"{cycles:,} | {r.timing.device_ps / 1e6:,.0f} us | {err_o:.1e} / "
                   f"{err_lse:.1e} | {'yes' if up else 'NO'} | {machine} | {_commit()} |", n)
        print(f"wrote {RESULTS}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
