"""`nelssa presets`: every preset of the hardware description (and of --hardware files), by
kind, with its key figures and where they come from; one name per preset, the one every
command takes."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from nelssa.emu.latency.hardware import (
    EnergyHw,
    GpuHw,
    HardwareCatalog,
    LinkHw,
    ModelHw,
    PnmHw,
)
from nelssa.hardware_options import add_hardware_file_arg, load_catalog


def _gpu(g: GpuHw) -> tuple[str, str]:
    power = (f"; {g.tdp_w:g} W limit, {g.idle_w:g} W idle, {g.pj_per_flop:g} pJ/FLOP, "
             f"{g.pj_per_hbm_byte:g} pJ/HBM byte" if g.has_power else "")
    return (f"{g.hbm_gbs:g} GB/s HBM, {g.memory_gb:g} GB, {g.bf16_tflops:g} TFLOP/s bf16{power}",
            "; ".join(x for x in (g.source, g.power_source) if x))


def _energy(e: EnergyHw) -> tuple[str, str]:
    return (f"engine fp32 add/mul {e.engine_pj_fp32_add:g}/{e.engine_pj_fp32_mul:g} pJ, bf16 "
            f"mul {e.engine_pj_bf16_mul:g} pJ, SRAM {e.engine_pj_sram_byte:g} pJ/byte; DDR5 "
            f"{e.ddr5_pj_per_byte:g} pJ/byte; CXL {e.cxl_pj_per_bit:g}, RoCE "
            f"{e.roce_pj_per_bit:g} pJ/bit; host {e.pnm_host_w:g} W",
            "; ".join(f"{k}: {v}" for k, v in e.sources.items()))


def _pnm(p: PnmHw, measure: bool) -> tuple[str, str]:
    dev = p.device
    what = (f"{dev['units']} units, {dev['ddr5']}"
            + (f" with {dev['ddr5_overrides']}" if dev["ddr5_overrides"] else "")
            + f", {dev['subchannels']} sub-channels; " if dev else "")
    source = p.bw_source or ""
    if p.measured and measure:
        from nelssa.emu.latency.hardware import measured_pnm
        from nelssa.emu.latency.model import Sparsity

        s = Sparsity()
        p = measured_pnm(p, s.selection, s.compression, 4, 128)
        source = p.bw_source or ""
    bw = ("bandwidth measured on the device when used (--measure: now)" if p.measured
          else f"{p.bw_eff_gbs:g} GB/s")
    return (f"{what}{bw}, {p.capacity_gb:g} GB; per layer {p.t_base_us:g} us + "
            f"{p.t_dev_us:g} us/device + {p.t_host_us:g} us host", source)


def _link(k: LinkHw) -> tuple[str, str]:
    return f"{k.gbps:g} Gb/s, {k.latency_us:g} us one way", "the link layer (emu/link/model.py)"


def _model(m: ModelHw) -> tuple[str, str]:
    hf = m.hf or {}
    arch = f"{hf.get('model_type', '')} " if hf else ""
    return (f"{arch}{m.layers} layers, {m.q_heads} query / {m.kv_heads} KV heads x "
            f"{m.head_dim}, {m.params_b:.2f} B params, {m.max_context:,} tokens",
            hf.get("_name_or_path", "") or ("config.json shape" if hf else "fields"))


def rows(cat: HardwareCatalog, measure: bool = False) -> list[tuple[str, str, str, str]]:
    """(kind, name, key figures, source) of every entry, DDR5 grades included."""
    from nelssa.hw.model.ddr5_timing import GRADE_SOURCE, PRESETS

    kinds: dict[str, tuple[dict, Callable]] = {
        "gpu": (cat.gpus, _gpu), "pnm": (cat.pnm, lambda p: _pnm(p, measure)),
        "link": (cat.links, _link), "model": (cat.models, _model),
        "energy": (cat.energy, _energy)}
    out = [(kind, name, *show(entry)) for kind, (table, show) in kinds.items()
           for name, entry in table.items()]
    for name, t in PRESETS.items():
        peak = 8 * t.peak_bytes_per_s / 1e9
        rate = round(2e6 / t.tck_ps)
        source = t.name if name.startswith("ddr5-6400") else GRADE_SOURCE
        out.append(("ddr5", name, f"{rate} MT/s, CL{t.nCL}, tRCD {t.nRCD}, tRP {t.nRP}, "
                    f"{peak:g} GB/s over 8 sub-channels", source))
    return out


def cmd_presets(args: argparse.Namespace) -> int:
    cat = load_catalog(args.hardware)
    table = rows(cat, args.measure)
    if args.kind:
        table = [r for r in table if r[0] == args.kind]
    width = max(len(r[1]) for r in table)
    for kind, name, figures, source in table:
        print(f"{kind:<5} {name:<{width}}  {figures}")
        if source and args.sources:
            print(f"{'':<5} {'':<{width}}  source: {source}")
    return 0


def add_presets_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("presets", help="every preset (GPUs, PNM tiers, links, models, DDR5 "
                       "grades): name, kind, key figures, source")
    add_hardware_file_arg(p)
    p.add_argument("--kind", choices=("gpu", "pnm", "link", "model", "ddr5", "energy"),
                   help="only presets of this kind")
    p.add_argument("--no-sources", dest="sources", action="store_false",
                   help="leave out where each preset's figures come from")
    p.add_argument("--measure", action="store_true",
                   help="measure the bandwidth of PNM entries left to a measurement (at "
                        "llama-3-8b's workload point; cached)")
    p.set_defaults(func=cmd_presets)
