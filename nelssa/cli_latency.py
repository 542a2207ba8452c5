"""`nelssa crossover`: the hardware-derived routing threshold T_input for 1..--max-devices PNM
devices (paper 4.1, Figure 3), printed and plotted."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nelssa.config_args import add_config_options, config_values
from nelssa.emu.latency.model import DEVICE_COUNT, Sparsity
from nelssa.hardware_options import add_hardware_args, load_hardware
from nelssa.options import number, output_file

DEVICES = number(DEVICE_COUNT)
"""PNM devices of the latency model (here, not in options.py: the model's module brings pydantic,
which the other commands' processes need not import)."""
SPARSITY_OPTIONS = ("selection", "compression")
"""Sparsity fields `crossover` takes as options (name, default and help from the field)."""


def cmd_crossover(args: argparse.Namespace) -> int:
    from nelssa.emu.latency.model import LatencyModel
    from nelssa.emu.latency.plot import crossover_rows, no_crossover, plot_crossover

    hw = load_hardware(args)
    gpu, pnm, model, link = hw["gpus"], hw["pnm"], hw["models"], hw["links"]
    lm = LatencyModel(gpu, pnm, model, Sparsity(**config_values(args, Sparsity,
                                                                 SPARSITY_OPTIONS)), link)
    print(f"crossover of dense GPU attention and sparse PNM attention: {model.name} "
          f"(M_kv {model.kv_bytes_per_token // 1024} KiB/token) on {gpu.name} "
          f"({gpu.hbm_gbs:g} GB/s) vs {lm.pnm.name} devices ({lm.pnm.bw_eff_gbs:g} GB/s "
          f"effective each), link {link.name}, S = {args.selection:g}, C = "
          f"{args.compression:g}")
    if lm.pnm.bw_source:
        print(f"  PNM bandwidth: {lm.pnm.bw_source}")
    print(f"  {'N':>2} {'T_comm us':>9} {'L_crossover':>12}  {'T_GPU = T_PNM at it (us)':>24}")
    rows = crossover_rows(lm, args.max_devices)
    for r in rows:
        x = r["t_input"]
        at = f"{lm.t_gpu(x) * 1e6:24.2f}" if x is not None else f"{'-':>24}"
        print(f"  {r['devices']:>2} {r['t_comm_us']:>9.2f} {x if x is not None else 'none':>12}"
              f"  {at}")
    if missing := no_crossover(rows):
        print(f"  no crossover for {len(missing)} of {len(rows)} device counts (N = "
              f"{', '.join(map(str, missing))}): the GPU is faster at every length; the plot "
              "names them")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    plot_crossover(lm, rows, args.plot)
    print(f"wrote {args.plot}")
    return 0


def add_latency_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("crossover", help="the routing threshold T_input for 1..--max-devices "
                       "PNM devices")
    add_hardware_args(p)
    add_config_options(p, Sparsity, SPARSITY_OPTIONS)
    p.add_argument("--max-devices", type=DEVICES, default=8, help="1..1024")
    p.add_argument("--plot", type=output_file, default="crossover.png")
    p.add_argument("--json", type=output_file, help="also write the table as JSON here")
    p.set_defaults(func=cmd_crossover)
