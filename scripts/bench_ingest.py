"""Bulk KV ingestion (issue 24 item 1): wall-time bandwidth of writing clustered KV into device
memory through the Memory API, by backdoor and through the front door (every line a CXL.mem
message), on each path a run takes, and the emulated time both charge.

    .venv/bin/python scripts/bench_ingest.py [--tokens N] [--rtl] [--node] [--write]

Paths: the model device in this process; the Verilated device in this process (``--rtl``); a
model device served by `nelssa device serve` over ZeroMQ; a 4-device node (`nelssa node up`,
model backend) written by a client as the GPU side writes it (``--node``). The data are one
KV head of one layer: ``--tokens`` tokens of head_dim 128 in clusters of 16 (K and V, bf16).
The front door is measured on a 1/32 slice (it is slow) and the ratio taken in the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.driver.remote import RemotePort
from nelssa.host.pnm_node.devices import MeteredPort
from nelssa.hw.model.device import ModelDevice
from nelssa.provenance import commit_label

HEAD_DIM, CLUSTER_TOKENS = 128, 16
FRONT_SLICE = 32
REPEATS = 3
PAGE = Path(__file__).resolve().parents[1] / "docs" / "results" / "ingest.md"


def _clusters(tokens: int, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    n = max(1, tokens // CLUSTER_TOKENS)
    kv = rng.integers(0, 1 << 16, (2, n, CLUSTER_TOKENS, HEAD_DIM), dtype=np.uint16)
    return list(kv[0]), list(kv[1])


def _write(port, bulk: bool, keys, values) -> tuple[float, tuple[int, int]]:
    """Seconds to write the clusters into a fresh region, and the bytes metered."""
    metered = MeteredPort(port)
    dev = Device(metered, bulk=bulk)
    mem = MemoryApi(dev, 1 << 20, dev.mem_bytes)
    tokens = sum(k.shape[0] for k in keys)
    region = mem.alloc_kv(int(time.monotonic_ns() & 0xFFFF), 0, 0, HEAD_DIM, len(keys), tokens)
    metered.take()
    t0 = time.perf_counter()
    mem.write_clusters(region, keys, values)
    return time.perf_counter() - t0, metered.take()


def _row(path: str, port, keys, values) -> dict:
    """The backdoor's first write of the data into a fresh region (the process's memory grows
    for it) and its steady rate (the median of REPEATS more, each into a fresh region), the
    front door's on a slice."""
    nbytes = sum(k.nbytes + v.nbytes for k, v in zip(keys, values, strict=True))
    _write(port, True, keys[:8], values[:8])  # code paths warm
    t_first, metered_back = _write(port, True, keys, values)
    t_back = float(np.median([_write(port, True, keys, values)[0] for _ in range(REPEATS)]))
    n = max(1, len(keys) // FRONT_SLICE)
    t_front, metered_front = _write(port, False, keys[:n], values[:n])
    front_bytes = nbytes * n / len(keys)
    row = {"path": path, "bytes": nbytes, "back_s": t_back, "back_gbs": nbytes / t_back / 1e9,
           "first_gbs": nbytes / t_first / 1e9, "front_gbs": front_bytes / t_front / 1e9,
           "metered": metered_back, "metered_front": metered_front}
    row["ratio"] = row["back_gbs"] / row["front_gbs"]
    print(f"{path:28} {nbytes / 2**20:8.1f} MiB  backdoor {row['back_gbs']:7.3f} GB/s (first "
          f"{row['first_gbs']:.3f})  front door {row['front_gbs'] * 1e3:7.2f} MB/s  "
          f"x{row['ratio']:,.0f}", flush=True)
    return row


def _served(folder: str, keys, values) -> dict:
    endpoint = f"ipc://{folder}/dev"
    proc = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "device", "serve",
                             "--backend", "model", "--endpoint", endpoint],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = RemotePort(endpoint, timeout_ms=120_000)
        row = _row("model, served over ZeroMQ", port, keys, values)
        port.shutdown()
        port.close()
        return row
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _node(folder: str, keys, values, devices: int = 4) -> dict:
    from nelssa.emu.launcher import NodeLauncher
    from nelssa.host.pnm_node.client import NodeClient

    nbytes = sum(k.nbytes + v.nbytes for k, v in zip(keys, values, strict=True))
    node = NodeLauncher(f"ipc://{folder}/node", devices, "model", "roce-400g")
    try:
        with NodeClient(node.endpoint) as client:
            s = client.open_session(HEAD_DIM, 4)
            tokens = sum(k.shape[0] for k in keys)
            client.alloc_kv(s, 0, range(8), len(keys), tokens)
            t0 = time.perf_counter()
            # every KV head of a layer, all sent before any answer is waited for (as the
            # decode offloads a prompt): all devices at work
            for f in [client.write_kv_async(s, 0, h, keys, values) for h in range(8)]:
                f.result()
            wall = time.perf_counter() - t0
    finally:
        node.stop()
    row = {"path": f"node of {devices} (client to devices)", "bytes": 8 * nbytes,
           "back_s": wall, "back_gbs": 8 * nbytes / wall / 1e9, "first_gbs": None,
           "front_gbs": None, "ratio": None}
    print(f"{row['path']:28} {8 * nbytes / 2**20:8.1f} MiB  backdoor {row['back_gbs']:7.3f} "
          "GB/s", flush=True)
    return row


def page(rows: list[dict], argv: list[str], commit: str) -> str:
    out = ("# Bulk KV ingestion\n\n"
           f"Written by `python scripts/bench_ingest.py {' '.join(argv)}` at commit {commit} "
           f"on this machine ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at "
           "the end). Wall-time bandwidth of `MemoryApi.write_clusters` (one KV head of one "
           f"layer, head_dim {HEAD_DIM}, clusters of {CLUSTER_TOKENS} tokens) by backdoor "
           "(`DevicePort.dma_write`: the model's memory, the Verilated DRAM store through its C "
           "interface, a served device's DMA_WRITE call) and through the front door (every "
           f"64-byte line a CXL.mem message; measured on a 1/{FRONT_SLICE} slice). Both meter "
           "the same CXL.mem bytes, so the emulated transfer time is the same "
           "(`tests/test_backdoor.py`).\n\n"
           f"Backdoor: the median of {REPEATS} writes into fresh regions, and (first) the "
           "first one, while the process's memory grows for it (page faults are slow on this "
           "virtual machine). The node: every KV head of a layer written by a client, through "
           "the node's link, its dispatcher and the device links.\n\n"
           "| path | MiB | backdoor GB/s | first write GB/s | front door MB/s | ratio |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: |\n")
    for r in rows:
        front = "-" if r["front_gbs"] is None else f"{r['front_gbs'] * 1e3:.2f}"
        first = "-" if r["first_gbs"] is None else f"{r['first_gbs']:.3f}"
        ratio = "-" if r["ratio"] is None else f"x{r['ratio']:,.0f}"
        out += (f"| {r['path']} | {r['bytes'] / 2**20:.1f} | {r['back_gbs']:.3f} | {first} | "
                f"{front} | {ratio} |\n")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=131072,
                    help="tokens of the KV head written (default 128K: 64 MiB)")
    ap.add_argument("--rtl", action="store_true", help="also the Verilated device")
    ap.add_argument("--node", action="store_true", help="also a 4-device node")
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.name}")
    args = ap.parse_args(argv)
    if not 1 <= args.tokens <= 1 << 24:
        ap.error(f"--tokens {args.tokens}: 1..16M")
    commit = commit_label()  # the code as it starts (the page is written at the end)
    keys, values = _clusters(args.tokens)
    rows = [_row("model, in process", ModelDevice(), keys, values)]
    if args.rtl:
        from nelssa.hw.sim.device import RtlDevice

        rows.append(_row("rtl, in process", RtlDevice(), keys, values))
    with tempfile.TemporaryDirectory(prefix="nelssa-ingest-") as folder:
        rows.append(_served(folder, keys, values))
        if args.node:
            rows.append(_node(folder, keys, values))
    if args.write:
        PAGE.write_text(page(rows, sys.argv[1:] if argv is None else argv, commit))
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
