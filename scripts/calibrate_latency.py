"""Calibrate the latency model's PNM tier from a measured device: run one layer of 4 % sparse
attention over a 128K-token context on the Verilated device (scripts/bench_device.py's
workload), take the effective read bandwidth from its cycle and byte counters, and write a
hardware file whose PNM entry carries it (the communication terms are those of the node
benchmark, `scripts/bench_node.py`). Use the file with `--hardware` in `nelssa crossover` and
`nelssa serve-sim`.

    .venv/bin/python scripts/calibrate_latency.py [--backend rtl|model] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_device import CLOCK_HZ, run

from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import Sparsity
from nelssa.hw.model.device import DeviceConfig

_PROTOTYPE = HardwareCatalog.load().pnm["prototype"]
COMM = {k: getattr(_PROTOTYPE, k) for k in ("t_base_us", "t_dev_us", "t_host_us")}
"""Per layer: host software per request, CXL per device, descriptors and aggregation beyond
one device, as the ``prototype`` preset has them (the node benchmark's figures: host 1.8 us
for 4 descriptors, CXL 0.6 us for 2 heads, rounded); the link's round trip comes from the link
description."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("rtl", "model"), default="rtl")
    parser.add_argument("--name", default="calibrated")
    parser.add_argument("--out", default="pnm-calibrated.json")
    args = parser.parse_args()
    if args.backend == "rtl":
        from nelssa.hw.sim.device import RtlDevice as Port
    else:
        from nelssa.hw.model.device import ModelDevice as Port
    port = Port()
    r = run(port, SimpleNamespace(context=131072, selection=Sparsity().selection, kv_heads=2,
                                  seed=0))
    seconds = r["cycles"] / CLOCK_HZ
    bw = r["bytes"] / seconds / 1e9
    capacity_gb = DeviceConfig().mem_bytes / 1e9
    entry = {"bw_eff_gbs": round(bw, 2), "capacity_gb": round(capacity_gb, 2), **COMM}
    Path(args.out).write_text(json.dumps({"pnm": {args.name: entry}}, indent=2) + "\n")
    print(f"{args.backend} device: {r['bytes'] / 1e6:.2f} MB in {r['cycles']:,} cycles "
          f"({seconds * 1e6:.1f} us at {CLOCK_HZ / 1e6:g} MHz) = {bw:.1f} GB/s effective")
    print(f"wrote {args.out}: pnm '{args.name}' = {entry}")


if __name__ == "__main__":
    main()
