"""Device benchmark: one layer of one device at 4 % selection over a 128K-token context
(2 KV heads x 4 query heads, head_dim 128, clusters of about 16 tokens) on the rtl and model
backends: attention cycles, effective DDR5 bandwidth, the model's estimate against the RTL,
bit-identical outputs, and simulation wall time per descriptor.

    .venv/bin/python scripts/bench_device.py [--batches 1 2 4] [--compare-split] [--write]

Only the selected clusters' K and V are written (the others are never read; their directory
entries still point at where they would be), so set-up costs what the descriptors read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from nelssa.emu.latency.model import Sparsity
from nelssa.host.pnm_node.aggregate import merge_partials
from nelssa.hw.model.bandwidth import Workload, run_workload
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import SIM_CLOCK_HZ

DOC = Path(__file__).resolve().parents[1] / "docs" / "results" / "device_bench.md"
CLOCK_HZ = SIM_CLOCK_HZ
_GEOMETRY = DeviceGeometry(PRESETS["ddr5-6400"])
PEAK_BYTES_PER_S = _GEOMETRY.subchannels * _GEOMETRY.timing.peak_bytes_per_s
"""The device's DDR5 peak: 8 sub-channels of 25.6 GB/s."""


def run(port, args) -> dict[str, object]:
    w = Workload(context=args.context, selection=args.selection, kv_heads=args.kv_heads,
                 seed=args.seed)
    r = run_workload(port, w, split=getattr(args, "split", True))
    dev, mem, cq, parts, ids = r.dev, r.mem, r.cq, r.parts, r.ids
    rng = np.random.default_rng(args.seed + 1)
    # the same descriptors again while the host writes 4 MB of new KV through CXL.mem
    busy0 = dev.reg_read64("PERF_BUSY")
    again = cq.submit([p.attn for p in parts])
    dev.bulk = False  # the ingestion alongside goes line by line over CXL.mem, as it is timed
    dev.mem_write(mem.alloc.alloc(4 << 20), rng.integers(0, 256, 4 << 20, np.uint8).tobytes())
    dev.bulk = True
    cq.wait(again, timeout_cycles=100_000_000)
    shared = dev.reg_read64("PERF_BUSY") - busy0
    merged = []
    for i in range(len(r.requests)):
        mine = [r.outputs[d] for d, p in zip(ids, parts, strict=True) if p.request == i]
        o, lse = merge_partials([(x.o, x.lse) for x in mine])
        merged.append(([x.status for x in mine], o.tobytes(), lse.tobytes()))
    return {"cycles": r.cycles, "bytes": r.bytes, "wall": r.wall_s, "setup": r.setup_s,
            "shared": shared, "selected": sum(len(q.cluster_ids) for q in r.requests),
            "outputs": merged, "descriptors": len(ids), "units": dev.caps["engines"]}


def _line(name: str, r: dict) -> str:
    seconds = r["cycles"] / CLOCK_HZ
    return (f"  {name:5}: {r['cycles']:>8,} cycles ({seconds * 1e6:.1f} us at "
            f"{CLOCK_HZ / 1e6:g} MHz), {r['descriptors']} descriptors on {r['units']} units, "
            f"{r['bytes'] / 1e6:.2f} MB read = {r['bytes'] / seconds / 1e9:.1f} GB/s "
            f"({r['bytes'] / seconds / PEAK_BYTES_PER_S * 100:.1f} % of "
            f"{PEAK_BYTES_PER_S / 1e9:g} GB/s); wall {r['wall']:.2f} s "
            f"({r['cycles'] / r['wall']:,.0f} cycles/s; set-up {r['setup']:.1f} s)")


def _page(args, rows: list[dict]) -> str:
    head = ("| batch | KV heads | split | descriptors | rtl cycles | rtl GB/s | % of peak | "
            "model vs rtl | with 4 MB ingestion | outputs | rtl cycles/s |\n"
            "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n")
    body = ""
    for row in rows:
        rtl, model = row["rtl"], row["model"]
        gbs = rtl["bytes"] / (rtl["cycles"] / CLOCK_HZ) / 1e9
        body += (f"| {row['batch']} | {row['kv_heads']} | {'yes' if row['split'] else 'no'} | "
                 f"{rtl['descriptors']} | {rtl['cycles']:,} | {gbs:.1f} | "
                 f"{gbs * 1e9 / PEAK_BYTES_PER_S * 100:.1f} | "
                 f"{(model['cycles'] - rtl['cycles']) / rtl['cycles'] * 100:+.2f} % | "
                 f"{(rtl['shared'] - rtl['cycles']) / rtl['cycles'] * 100:+.2f} % | "
                 f"{'bit-identical' if rtl['outputs'] == model['outputs'] else 'DIFFERENT'} | "
                 f"{rtl['cycles'] / rtl['wall']:,.0f} |\n")
    return (f"# PNM device benchmark: one layer of one device\n\n"
            f"Written by `python scripts/bench_device.py --write` (context {args.context:,} "
            f"tokens per KV head, {args.selection:.0%} selection, clusters of 8-24 tokens, "
            f"4 query heads per KV head, head_dim 128, {args.units} attention units, DDR5-6400, "
            f"8 sub-channels = {PEAK_BYTES_PER_S / 1e9:g} GB/s peak at "
            f"{CLOCK_HZ / 1e6:g} MHz).\n\n"
            "A batch of B requests puts 2B KV heads on the device. Split: each KV head's "
            "selected clusters cut into parts that fill the units (driver/split.py), the "
            "parts merged by log-sum-exp; without it, one descriptor per KV head. GB/s: "
            "bytes read (PERF_BYTES_READ) over busy cycles (PERF_BUSY). With 4 MB ingestion: "
            "the same descriptors while the host writes 4 MB of KV through CXL.mem. Outputs: "
            "merged O and LSE of rtl and model compared bit for bit. The wall rate is the "
            "machine's (2 cores, shared).\n\n" + head + body)


def main() -> None:
    from nelssa.hw.model.device import DeviceConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=131072, help="tokens per KV head")
    parser.add_argument("--selection", type=float, default=Sparsity().selection)
    parser.add_argument("--kv-heads", type=int, default=2, help="KV heads per request")
    parser.add_argument("--batches", type=int, nargs="+", default=[1],
                        help="requests per run (each its own run)")
    parser.add_argument("--units", type=int, default=DeviceConfig.engines,
                        help="attention units of both devices")
    parser.add_argument("--no-split", dest="split", action="store_false",
                        help="one descriptor per KV head")
    parser.add_argument("--compare-split", action="store_true",
                        help="also run batch 1 without the split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true",
                        help="write docs/results/device_bench.md")
    args = parser.parse_args()
    from nelssa.hw.model.device import ModelDevice
    from nelssa.hw.sim.device import RtlDevice

    rtl_port = RtlDevice(units=args.units)  # one per process (its DRAM store is the process's)
    runs = [(b, args.split) for b in args.batches]
    if args.compare_split:
        runs.insert(0, (1, False))
    rows, same = [], True
    for batch, split in runs:
        a = argparse.Namespace(**{**vars(args), "kv_heads": args.kv_heads * batch,
                                  "split": split})
        results = {"rtl": run(rtl_port, a),
                   "model": run(ModelDevice(DeviceConfig(engines=args.units)), a)}
        print(f"batch {batch}: {a.kv_heads} KV heads x 4 query heads, head_dim 128, context "
              f"{args.context} tokens, {args.selection:.0%} selection "
              f"({results['rtl']['selected']} clusters of about 16 tokens), "
              f"{'split over units' if split else 'one descriptor per KV head'}")
        for name, r in results.items():
            print(_line(name, r))
        rtl, model = results["rtl"], results["model"]
        print(f"  KV ingestion (4 MB through CXL.mem) during the same descriptors: RTL "
              f"{rtl['shared']:,} cycles, "
              f"{(rtl['shared'] - rtl['cycles']) / rtl['cycles'] * 100:+.2f} % (goal: under 5 %)")
        print(f"  model estimate vs RTL: "
              f"{(model['cycles'] - rtl['cycles']) / rtl['cycles'] * 100:+.2f} % "
              "(goal: within 5 %)")
        ok = rtl["outputs"] == model["outputs"]
        same &= ok
        print(f"  outputs (status, O, LSE) {'bit-identical' if ok else 'DIFFERENT'} on rtl and "
              "model")
        rows.append({"batch": batch, "kv_heads": a.kv_heads, "split": split, **results})
    if args.write:
        DOC.write_text(_page(args, rows))
        print(f"wrote {DOC}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
