"""Benchmark of the node path: the ZeroMQ link on this machine (messages/s, bytes/s), and the
emulated communication share of decode attention at 128K context for RoCE 100G-800G.

Part 1 runs a LinkServer in a second process and measures, in wall time: synchronous round
trips of small requests, pipelined small requests, and one-way 1 MiB payloads.
Part 2 boots `nelssa node up` (4 devices) per link preset and sends one layer of Llama-3-8B
decode attention (8 KV heads x 4 query heads, head_dim 128) selecting 4 % of a 128K-token
context clustered 16 tokens per cluster (328 of 8192 clusters per KV head). Only the selected
clusters are written: the device reads only those, so its time is that of the full context.
Emulated time is reported as the node returns it; a decode step repeats it for 32 layers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time

import numpy as np

from nelssa.emu.link.model import link_preset
from nelssa.emu.link.transport import LinkClient, LinkServer, Reply, ServiceRequest

LAYERS, KV_HEADS, GROUP, HEAD_DIM = 32, 8, 4, 128
CONTEXT, CLUSTER_TOKENS, RATIO = 128 * 1024, 16, 0.04


def _echo_server(endpoint: str) -> None:
    def handle(r: ServiceRequest) -> Reply:
        return Reply(r.op, b"" if r.op == 2 else r.payload, r.arrive_ps)

    LinkServer(endpoint, handle, link_preset("roce-400g")).serve()


def _raw_echo(endpoint: str) -> None:
    import zmq

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(endpoint)
    while True:
        sock.send_multipart(sock.recv_multipart())


def _raw_round_trips(endpoint: str, n: int) -> float:
    import zmq

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send(b"x")
    sock.recv()
    t0 = time.perf_counter()
    for _ in range(n):
        sock.send(bytes(64))
        sock.recv()
    rate = n / (time.perf_counter() - t0)
    sock.close(0)
    return rate


def _pipelined(client: LinkClient, op: int, payload: bytes, n: int, window: int) -> float:
    """Requests per second with ``window`` in flight."""
    t0 = time.perf_counter()
    inflight = [client.request(op, payload) for _ in range(window)]
    for _ in range(n - window):
        inflight.pop(0).result()
        inflight.append(client.request(op, payload))
    for p in inflight:
        p.result()
    return n / (time.perf_counter() - t0)


def bench_link(folder: str) -> None:
    raw_ep = f"ipc://{folder}/raw"
    raw = mp.get_context("spawn").Process(target=_raw_echo, args=(raw_ep,), daemon=True)
    raw.start()
    raw_sync = _raw_round_trips(raw_ep, 5000)
    raw.terminate()
    endpoint = f"ipc://{folder}/echo"
    server = mp.get_context("spawn").Process(target=_echo_server, args=(endpoint,), daemon=True)
    server.start()
    client = LinkClient(endpoint, link_preset("roce-400g"), timeout_s=30)
    client.call(1, b"warm up")
    small = bytes(64)
    n = 5000
    t0 = time.perf_counter()
    for _ in range(n):
        client.call(1, small)
    sync = n / (time.perf_counter() - t0)
    piped = _pipelined(client, 1, small, 20000, 64)
    big = np.random.default_rng(0).bytes(1 << 20)
    rate = _pipelined(client, 2, big, 300, 4) * len(big)
    client.close()
    server.terminate()
    print("ZeroMQ link on this machine (ipc://, framed, CRC-32 checked, wall time):")
    print(f"  64 B request/reply, one at a time: {sync:,.0f} round trips/s "
          f"({1e6 / sync:.0f} us each; bare pyzmq DEALER/ROUTER echo in the same run: "
          f"{raw_sync:,.0f}/s, {1e6 / raw_sync:.0f} us, so framing, checks and timing cost "
          f"{sync / raw_sync:.2f}x its rate)")
    print(f"  64 B requests, 64 in flight:       {piped:,.0f} messages/s")
    print(f"  1 MiB payloads, 4 in flight:       {rate / 1e9:.2f} GB/s ({rate * 8 / 1e9:.1f} "
          "Gb/s)")


def bench_node(folder: str, presets: list[str], devices: int) -> None:
    from nelssa.emu.launcher import NodeLauncher
    from nelssa.host.pnm_node.client import NodeClient
    from nelssa.hw.model.fp import f32_to_bf16_bits

    rng = np.random.default_rng(0)
    clusters = CONTEXT // CLUSTER_TOKENS
    selected = round(clusters * RATIO)

    def bf16(shape: tuple[int, ...]) -> np.ndarray:
        return f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))

    kv = {h: ([bf16((CLUSTER_TOKENS, HEAD_DIM)) for _ in range(selected)],
              [bf16((CLUSTER_TOKENS, HEAD_DIM)) for _ in range(selected)])
          for h in range(KV_HEADS)}
    q = {h: bf16((GROUP, HEAD_DIM)) for h in range(KV_HEADS)}
    ids = {h: list(range(selected)) for h in range(KV_HEADS)}
    print(f"\nOne layer of Llama-3-8B decode attention at {CONTEXT // 1024}K context on "
          f"{devices} model devices (head-wise): {selected} of {clusters} clusters per KV head "
          f"({RATIO:.0%}), emulated time per layer in us:")
    print(f"  {'link':<10} {'RoCE up':>8} {'host':>6} {'CXL':>6} {'device':>7} {'RoCE dn':>8} "
          f"{'total':>7} {'RoCE %':>7} {'comm %':>7} {'step ms':>8} {'RoCE % @150tok/s':>17}")
    for preset in presets:
        endpoint = f"ipc://{folder}/node-{preset}"
        node = NodeLauncher(endpoint, devices, "model", preset, ready_timeout_s=120)
        try:
            with NodeClient(endpoint, preset, timeout_s=600) as c:
                s = c.open_session(HEAD_DIM, GROUP, "head")
                c.alloc_kv(s, 0, list(range(KV_HEADS)), selected, selected * CLUSTER_TOKENS)
                t0 = time.perf_counter()
                for h, (k, v) in kv.items():
                    c.write_kv(s, 0, h, k, v)
                ingest = time.perf_counter() - t0
                reps = 2
                t0 = time.perf_counter()
                results = [c.attend(s, 0, q, ids) for _ in range(reps)]
                wall = (time.perf_counter() - t0) / reps
                t = results[-1].timing
        finally:
            node.stop()
        us = 1e-6
        roce = t.link_up_ps + t.link_down_ps
        step_ms = LAYERS * t.total_ps * 1e-9
        print(f"  {preset:<10} {t.link_up_ps * us:>8.2f} {t.host_ps * us:>6.2f} "
              f"{t.cxl_ps * us:>6.2f} {t.device_ps * us:>7.2f} {t.link_down_ps * us:>8.2f} "
              f"{t.total_ps * us:>7.2f} {100 * roce / t.total_ps:>6.2f}% "
              f"{100 * t.comm_ps / t.total_ps:>6.2f}% {step_ms:>8.3f} "
              f"{100 * LAYERS * roce * 1e-12 * 150:>16.2f}%")
    kv_bytes = KV_HEADS * selected * CLUSTER_TOKENS * HEAD_DIM * 4
    print(f"  (wall, last preset: KV ingestion {kv_bytes / ingest / 1e6:.2f} MB/s through the "
          f"node; {1 / wall:.1f} layer requests/s)")
    print("  RoCE %: both link directions over the layer's attention time; comm %: with the "
          "CXL transfers;\n  @150tok/s: 32 layers of RoCE time over a 6.67 ms decode step "
          "(the paper's Figure 12: at most 2.1 %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+",
                        default=["roce-100g", "roce-200g", "roce-400g", "roce-800g"])
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--skip-link", action="store_true", help="only the node part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nelssa-bench-") as folder:
        if not args.skip_link:
            bench_link(folder)
        bench_node(folder, args.presets, args.devices)


if __name__ == "__main__":
    main()
