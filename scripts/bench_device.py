"""Device benchmark: one layer of one device at 4 % selection over a 128K-token context
(2 KV heads x 4 query heads, head_dim 128, clusters of about 16 tokens) on the rtl and model
backends: attention cycles, effective DDR5 bandwidth, the model's estimate against the RTL,
bit-identical outputs, and simulation wall time per descriptor.

    .venv/bin/python scripts/bench_device.py [--context 131072] [--selection 0.04]

Only the selected clusters' K and V are written (the others are never read; their directory
entries still point at where they would be), so set-up costs what the descriptors read.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import CLUSTER_ENTRY, cluster_bytes
from nelssa.driver.memory import MemoryApi
from nelssa.emu.latency.model import Sparsity
from nelssa.hw.model import fp
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import SIM_CLOCK_HZ

CLOCK_HZ = SIM_CLOCK_HZ
_GEOMETRY = DeviceGeometry(PRESETS["ddr5-6400"])
PEAK_BYTES_PER_S = _GEOMETRY.subchannels * _GEOMETRY.timing.peak_bytes_per_s
"""The device's DDR5 peak: 8 sub-channels of 25.6 GB/s."""


def bf16(rng: np.random.Generator, shape) -> np.ndarray:
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def run(port, args) -> dict[str, object]:
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 34)
    cq = CommandQueue(mem, entries=16)
    rng = np.random.default_rng(args.seed)
    hd, heads = 128, 4
    n_clusters = args.context // 16
    requests = []
    t0 = time.perf_counter()
    for kv_head in range(args.kv_heads):
        tokens = rng.integers(8, 25, n_clusters)  # about 16 per cluster
        region = mem.alloc_kv(0, 0, kv_head, hd, n_clusters, int(tokens.sum()))
        sizes = [cluster_bytes(int(t), hd) for t in tokens]
        addrs = region.data_addr + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        directory = b"".join(CLUSTER_ENTRY.build({"kv_addr": int(a), "tokens": int(t)})
                             for a, t in zip(addrs, tokens, strict=True))
        dev.mem_write(region.dir_addr, directory)
        sel = np.sort(rng.choice(n_clusters, max(1, round(args.selection * n_clusters)),
                                 replace=False))
        for c in sel:
            dev.mem_write(int(addrs[c]), bf16(rng, (2 * int(tokens[c]), hd)).tobytes())
        region.clusters = list(zip(addrs.tolist(), tokens.tolist(), strict=True))
        region.data_used = int(sum(sizes))
        requests.append(AttnRequest(region, bf16(rng, (heads, hd)), sel.tolist()))
    setup = time.perf_counter() - t0
    busy0, bytes0 = dev.reg_read64("PERF_BUSY"), dev.reg_read64("PERF_BYTES_READ")
    t0 = time.perf_counter()
    ids = cq.submit(requests)
    out = cq.wait(ids, timeout_cycles=100_000_000)
    wall = time.perf_counter() - t0
    cycles = dev.reg_read64("PERF_BUSY") - busy0
    nbytes = dev.reg_read64("PERF_BYTES_READ") - bytes0
    # the same descriptors again while the host writes 4 MB of new KV through CXL.mem
    busy0 = dev.reg_read64("PERF_BUSY")
    again = cq.submit(requests)
    dev.mem_write(mem.alloc.alloc(4 << 20), rng.integers(0, 256, 4 << 20, np.uint8).tobytes())
    cq.wait(again, timeout_cycles=100_000_000)
    shared = dev.reg_read64("PERF_BUSY") - busy0
    return {"cycles": cycles, "bytes": nbytes, "wall": wall, "setup": setup, "shared": shared,
            "selected": sum(len(r.cluster_ids) for r in requests),
            "outputs": [(out[i].status, out[i].o.tobytes(), out[i].lse.tobytes()) for i in ids],
            "descriptors": len(ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=131072, help="tokens per KV head")
    parser.add_argument("--selection", type=float, default=Sparsity().selection)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from nelssa.hw.model.device import ModelDevice
    from nelssa.hw.sim.device import RtlDevice

    results = {"rtl": run(RtlDevice(), args), "model": run(ModelDevice(), args)}
    print(f"one layer, {args.kv_heads} KV heads x 4 query heads, head_dim 128, context "
          f"{args.context} tokens, {args.selection:.0%} selection "
          f"({results['rtl']['selected']} clusters of about 16 tokens)")
    for name, r in results.items():
        seconds = r["cycles"] / CLOCK_HZ
        print(f"  {name:5}: {r['cycles']:>8,} cycles ({seconds * 1e6:.1f} us at "
              f"{CLOCK_HZ / 1e6:g} MHz), "
              f"{r['bytes'] / 1e6:.2f} MB read = {r['bytes'] / seconds / 1e9:.1f} GB/s "
              f"({r['bytes'] / seconds / PEAK_BYTES_PER_S * 100:.1f} % of "
              f"{PEAK_BYTES_PER_S / 1e9:g} GB/s); wall "
              f"{r['wall'] / r['descriptors']:.2f} s per descriptor (set-up {r['setup']:.1f} s)")
    rtl, model = results["rtl"], results["model"]
    print(f"  KV ingestion (4 MB through CXL.mem) during the same descriptors: RTL "
          f"{rtl['shared']:,} cycles, {(rtl['shared'] - rtl['cycles']) / rtl['cycles'] * 100:+.2f}"
          f" % (goal: under 5 %)")
    print(f"  model estimate vs RTL: {(model['cycles'] - rtl['cycles']) / rtl['cycles'] * 100:+.2f}"
          f" % (goal: within 5 %)")
    same = rtl["outputs"] == model["outputs"]
    print(f"  outputs (status, O, LSE) {'bit-identical' if same else 'DIFFERENT'} on rtl and model")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
