"""Two clients sharing a PNM node: how long a small request on one device takes while another
client's large ATTEND runs on another device; writes docs/results/node_sharing.md."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nelssa.emu.launcher import NodeLauncher
from nelssa.experiments.pages import render
from nelssa.hw.model.fp import f32_to_bf16_bits
from nelssa.provenance import commit_label

log = logging.getLogger(__name__)

HEAD_DIM = 128
GROUP = 4


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def load_head(client, kv_head: int, clusters: int, tokens: int, seed: int
              ) -> tuple[int, np.ndarray]:
    """A head-wise session with ``clusters`` clusters of ``tokens`` tokens on ``kv_head``;
    the session and a query."""
    rng = np.random.default_rng(seed)
    s = client.open_session(HEAD_DIM, GROUP, "head")
    client.alloc_kv(s, 0, [kv_head], clusters, clusters * tokens)
    keys = [_bf16(rng, (tokens, HEAD_DIM)) for _ in range(clusters)]
    values = [_bf16(rng, (tokens, HEAD_DIM)) for _ in range(clusters)]
    client.write_kv(s, 0, kv_head, keys, values)
    return s, _bf16(rng, (GROUP, HEAD_DIM))


def run(ids: int = 2048, tokens: int = 64, clusters: int = 64, b_ids: int = 8,
        reps: int = 5) -> dict:
    """The measurement (module doc): wall seconds of B alone and during A, and of A."""
    from nelssa.host.pnm_node.client import NodeClient

    with tempfile.TemporaryDirectory() as tmp:
        node = NodeLauncher(f"ipc://{tmp}/node", 2, "model", "roce-400g")
        try:
            with NodeClient(node.endpoint, timeout_s=600) as a, \
                    NodeClient(node.endpoint, timeout_s=600) as b, \
                    NodeClient(node.endpoint) as watcher:
                sa, qa = load_head(a, 0, clusters, tokens, seed=1)
                sb, qb = load_head(b, 1, 16, tokens, seed=2)
                big = [i % clusters for i in range(ids)]
                small = list(range(b_ids))

                def b_once() -> float:
                    t0 = time.perf_counter()
                    b.attend(sb, 0, {1: qb}, {1: small})
                    return time.perf_counter() - t0

                alone = statistics.median(b_once() for _ in range(reps))
                t0 = time.perf_counter()
                fa = a.attend_async(sa, 0, {0: qa}, {0: big})
                while watcher.status().devices[0].queue_depth == 0:  # A is on device 0
                    time.sleep(0.01)
                during = statistics.median(b_once() for _ in range(reps))
                overlap = not fa.done()
                fa.result()
                a_wall = time.perf_counter() - t0
        finally:
            node.stop()
    return {"ids": ids, "tokens": tokens, "b_ids": b_ids, "reps": reps, "b_alone_s": alone,
            "b_during_s": during, "a_s": a_wall, "overlap": overlap}


def page(r: dict, command: str) -> str:
    def ms(s: float) -> str:
        return f"{s * 1000:,.0f} ms" if s < 10 else f"{s:,.1f} s"

    return render("node_sharing.md", "page", command=command, commit=commit_label(),
                  machine=f"{platform.machine()}, {os.cpu_count()} cores",
                  ids=f"{r['ids']:,}", tokens=r["tokens"], total=f"{r['ids'] * r['tokens']:,}",
                  b_ids=r["b_ids"], reps=r["reps"], b_alone=ms(r["b_alone_s"]),
                  b_during=ms(r["b_during_s"]), a_wall=ms(r["a_s"]),
                  overlap="yes" if r["overlap"] else "no") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ids", type=int, default=2048, help="cluster ids of A's ATTEND")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per cluster")
    ap.add_argument("--reps", type=int, default=5, help="B's requests, the median taken")
    ap.add_argument("--out", default="docs/results/node_sharing.md", help="the Markdown page")
    args = ap.parse_args(argv)
    r = run(args.ids, args.tokens, reps=args.reps)
    command = " ".join(["python scripts/node_sharing.py", *(sys.argv[1:] if argv is None
                                                             else argv)])
    text = page(r, command)
    Path(args.out).write_text(text)
    log.info("wrote %s", args.out)
    sys.stdout.write(text)
    return 0 if r["overlap"] else 1
