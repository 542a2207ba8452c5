"""Size the FPGA top for a board (``nelssa fpga plan --board NAME``): the device configuration
(attention units, memory channels, engine limits, clock) whose compute matches the board's
memory bandwidth and whose resources stay within ``BUDGET`` of the part's LUTs, FFs and DSPs.

Compute: an attention unit takes one 64-byte beat of K or V per cycle (the engine's throughput,
rtl/core/nelssa_attn_engine.sv), so ``units`` units at ``clock`` consume at most
``units x 64 B x clock``, less what the board's arithmetic latencies (``fp_latency``) add to
each cluster (:func:`stream_rate`, from the engine's schedule, hw/model/engine_cycles.py); the
plan wants that to reach the board's memory bandwidth.

Resources: the model of hw/fpga/resource_model.json, block-by-block results of the synthesis
``make synth`` runs (``scripts/synth_fpga.py --fit`` maps one unit at each engine size at 1 and
8 query heads; ``--fit-from-run`` takes the default top's point from ``make synth``): one
unit's blocks (control, line reader, engine registers and arithmetic units) times ``units``,
plus the rest of the top as measured. At a measured engine size it uses that point; between 1
and 8 query heads of one head_dim it interpolates linearly (the engine's datapath is one copy
per head). ``scripts/synth_fpga.py --board NAME`` maps the planned top whole, to check the
model against a full run. ECP5 parts: the smallest engine's top, by the lanes its engine
computes a cycle (ComputeLanes), synth_ecp5's figures (hw/fpga/resource_model_ecp5.json,
``scripts/fpga_pnr.py --lanes-model``, hw/fpga/lanes_model.py); the plan takes the lanes and
units that fit with the most compute (a narrow engine takes a beat in 32 / lanes cycles).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nelssa.emu.latency.description import fp_latency
from nelssa.emu.latency.hardware import BoardHw, HardwareCatalog
from nelssa.hw.fpga.errors import FpgaError
from nelssa.hw.model.engine import COMPUTE_LANES, EngineParams, FpLatency
from nelssa.hw.model.engine_cycles import command_cycles
from nelssa.hw.sim.synth_blocks import TopSize

MODEL_FILE = Path(__file__).with_name("resource_model.json")
ECP5_FILE = Path(__file__).with_name("resource_model_ecp5.json")
"""The ECP5 synthesis of the smallest engine (``make fpga-pnr`` writes it): a lower bound of
any device configuration on an ECP5 part."""
BUDGET = 0.8
"""Share of the part's LUTs, FFs and DSPs a plan may use (room for the PCIe DMA, the memory
controllers and the interconnect of the board design, and for routing)."""
BEAT_BYTES = 64
"""Bytes an attention unit takes per cycle (one beat of K or V)."""
HEAD_DIMS = (128, 64)
QHEADS = (8, 4, 2, 1)
MAX_UNITS = 6
"""nelssa_fpga_top's NumUnits range is 1..6."""
PREFERRED_GROUP = 4
"""Query heads per KV head the plan keeps if it can (Llama-3-8B's GQA group, the default
model's): fewer, and that model's heads would not fit one descriptor."""
CHECKED = ("LUT", "FF", "DSP")
COLUMNS = ("LUT", "FF", "CARRY", "DSP", "BRAM", "LUTRAM")


class PlanError(FpgaError):
    """A board name or resource model that cannot be used."""


@dataclass(frozen=True)
class Plan:
    board: BoardHw
    size: TopSize
    """The planned top (units, channels, engine limits)."""
    resources: dict[str, int]
    """Estimated resources of the planned top, by column (the part's units: LUT4 on ECP5)."""
    fits: bool
    """Within BUDGET of every CHECKED resource."""
    needed_units: int
    """Units whose compute would match the memory bandwidth at the board's clock."""

    @property
    def latency(self) -> FpLatency:
        """The board's arithmetic units' latencies (its profile's ``fp_latency``)."""
        return fp_latency(self.board.fp_latency)

    @property
    def rate(self) -> float:
        """Beats a unit takes per cycle, of the one it takes with combinational units and all
        32 lanes."""
        return stream_rate(self.size, self.latency)

    @property
    def compute_gbs(self) -> float:
        return self.size.units * BEAT_BYTES * self.board.clock_mhz * 1e6 * self.rate / 1e9

    @property
    def bandwidth_matched(self) -> bool:
        return self.size.units >= self.needed_units

    def available(self) -> dict[str, int]:
        b = self.board
        return {"LUT": b.luts, "FF": b.ffs, "DSP": b.dsps}

    def to_dict(self) -> dict[str, Any]:
        """What the manifest records of the plan."""
        z = self.size
        return {"board": self.board.name, "units": z.units, "channels": z.channels,
                "head_dim": z.head_dim, "num_qheads": z.num_qheads,
                "max_cluster_tokens": z.max_cluster_tokens, "compute_lanes": z.compute_lanes,
                "clock_mhz": self.board.clock_mhz,
                "fp_latency": dict(self.board.fp_latency), "stream_rate": round(self.rate, 4),
                "estimated": {c: self.resources[c] for c in CHECKED}, "fits": self.fits}


def stream_rate(size: TopSize, latency: FpLatency) -> float:
    """What ``latency`` and ``size``'s lanes leave of a unit's beat per cycle in a long stream
    of full clusters (``size``'s largest, head_dim and query heads): one such cluster's cycles
    in the engine's schedule with combinational units and all 32 lanes over its cycles with
    these (1 for that engine)."""
    if latency == FpLatency() and size.compute_lanes == 32:
        return 1.0

    def cluster(lat: FpLatency, lanes: int) -> int:  # one more cluster's cycles
        p = EngineParams(head_dim=size.head_dim, num_qheads=size.num_qheads,
                         max_cluster_tokens=size.max_cluster_tokens, latency=lat,
                         compute_lanes=lanes)
        n = size.max_cluster_tokens
        return (command_cycles(p, size.head_dim, size.num_qheads, [n, n])
                - command_cycles(p, size.head_dim, size.num_qheads, [n]))

    return cluster(FpLatency(), 32) / cluster(latency, size.compute_lanes)


def ecp5_size(b: BoardHw, lanes: int = 32, units: int = 1) -> TopSize:
    """The top an ECP5 board's plan sizes: the smallest engine (the part holds no larger
    one) at ``lanes``, the board's memory channels and address bits."""
    return TopSize(units=units, channels=b.mem_channels, chan_addr_w=_chan_addr_w(b),
                   head_dim=64, num_qheads=1, max_cluster_tokens=1, compute_lanes=lanes)


def _chan_addr_w(b: BoardHw) -> int:
    return max(12, math.ceil(math.log2(b.mem_gb * 1e9 / b.mem_channels)))


def boards(catalog: HardwareCatalog | None = None) -> dict[str, BoardHw]:
    return (catalog or HardwareCatalog.load()).boards


def board(name: str, catalog: HardwareCatalog | None = None) -> BoardHw:
    """The named board; PlanError lists the known ones."""
    known = boards(catalog)
    if name not in known:
        raise PlanError(f"unknown board {name!r}; known boards: {', '.join(sorted(known))}")
    return known[name]


def open_flow_board(name: str) -> BoardHw:
    """The named board if the open flow (hw/fpga/pnr.py: ECP5 only) builds for it; PlanError
    otherwise."""
    b = board(name)
    if b.family != "ecp5":
        raise PlanError(f"board {name} is {b.family}: the open flow here is ECP5 only (the AMD "
                        "boards' flow is hw/fpga/vivado/build.tcl)")
    return b


def load_model(path: Path = MODEL_FILE) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
        points = {(p["head_dim"], p["num_qheads"]): p for p in doc["points"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PlanError(f"resource model {path}: {e} (scripts/synth_fpga.py --fit writes "
                        "it)") from None
    # the engine sizes a plan may take: each measured one, and between 1 and 8 query heads of
    # a head_dim measured at both
    sizes = sorted({(hd, h) for hd in HEAD_DIMS for h in QHEADS
                    if (hd, h) in points or ((hd, 1) in points and (hd, 8) in points)},
                   reverse=True)
    if not sizes:
        raise PlanError(f"resource model {path}: no points")
    ecp5 = json.loads(ECP5_FILE.read_text()) if ECP5_FILE.exists() else None
    return {**doc, "by_size": points, "ecp5": ecp5, "engine_sizes": sizes,
            "head_dims": tuple(sorted({hd for hd, _ in sizes}, reverse=True))}


def estimate(size: TopSize, family: str, model: dict[str, Any] | None = None
             ) -> dict[str, int]:
    """Resources of the top at ``size``: units x one unit's (interpolated in query heads) plus
    the rest, in the family's units."""
    m = model or load_model()
    if family == "ecp5":  # the UltraScale+ model does not convert: synth_ecp5's figures
        e = m["ecp5"]
        if "per_unit" not in e:  # the smallest engine's arithmetic alone: a lower bound
            return dict.fromkeys(COLUMNS, 0) | {c: e[c] for c in CHECKED}
        unit = e["per_unit"][str(size.compute_lanes)]
        return dict.fromkeys(COLUMNS, 0) | {c: e["rest"][c] + size.units * unit[c]
                                            for c in CHECKED}
    key = (size.head_dim, size.num_qheads)
    if key in m["by_size"]:
        lo = hi = m["by_size"][key]
        t = 0.0
    elif (size.head_dim, 1) in m["by_size"] and (size.head_dim, 8) in m["by_size"]:
        lo, hi = m["by_size"][(size.head_dim, 1)], m["by_size"][(size.head_dim, 8)]
        t = (size.num_qheads - 1) / 7
    else:
        raise PlanError(f"resource model: no point for head_dim {size.head_dim} with "
                        f"{size.num_qheads} query heads, nor 1 and 8 to interpolate between")
    out = {}
    for c in COLUMNS:
        unit = lo["per_unit"][c] + t * (hi["per_unit"][c] - lo["per_unit"][c])
        out[c] = math.ceil(size.units * unit + lo["rest"][c])
    return out


def _fits(res: dict[str, int], b: BoardHw) -> bool:
    have = {"LUT": b.luts, "FF": b.ffs, "DSP": b.dsps}
    return all(res[c] <= BUDGET * have[c] for c in CHECKED)


def plan(b: BoardHw, model: dict[str, Any] | None = None) -> Plan:
    """The configuration for ``b``: among sizes within BUDGET, those keeping head_dim 128 and
    PREFERRED_GROUP query heads first, then the most units up to the bandwidth match, then the
    largest engines; if nothing fits, the smallest top (marked not fitting)."""
    m = model or load_model()
    if b.family == "ecp5" and m["ecp5"] is None:
        raise PlanError(f"board {b.name}: no ECP5 synthesis yet ({ECP5_FILE.name}: `make "
                        "fpga-pnr` writes it)")
    lat = fp_latency(b.fp_latency)

    def need(z: TopSize) -> int:  # units whose beats at this clock reach the bandwidth
        return max(1, math.ceil(b.mem_gbs * 1e9 / (BEAT_BYTES * b.clock_mhz * 1e6
                                                   * stream_rate(z, lat))))

    chan_w = _chan_addr_w(b)
    if b.family == "ecp5" and "per_unit" in m["ecp5"]:
        return _plan_lanes(b, m, need)
    sizes = [TopSize(units=u, channels=b.mem_channels, chan_addr_w=chan_w, head_dim=hd,
                     num_qheads=h) for hd, h in m["engine_sizes"]
             for u in range(1, MAX_UNITS + 1)]
    fitting = [(z, estimate(z, b.family, m)) for z in sizes]
    fitting = [(z, r) for z, r in fitting if _fits(r, b)]
    if not fitting:  # ECP5: the smallest legal engine, the one its figures are of
        hd, h, tokens = (64, 1, 1) if b.family == "ecp5" else (*min(m["engine_sizes"]), 64)
        z = TopSize(units=1, channels=b.mem_channels, chan_addr_w=chan_w, head_dim=hd,
                    num_qheads=h, max_cluster_tokens=tokens)
        return Plan(b, z, estimate(z, b.family, m), False, need(z))
    if b.family == "ecp5":
        raise PlanError(f"board {b.name}: the smallest engine fits ({ECP5_FILE.name}); the ECP5 "
                        "plan has no model of larger tops")

    def key(item):
        z = item[0]
        return (z.head_dim == 128 and z.num_qheads >= PREFERRED_GROUP, min(z.units, need(z)),
                z.head_dim, z.num_qheads, -z.units)

    z, r = max(fitting, key=key)
    return Plan(b, z, r, True, need(z))


def _plan_lanes(b: BoardHw, m: dict[str, Any], need) -> Plan:
    """ECP5: the smallest engine's top at each lane count and unit count; of those within
    BUDGET, the most compute up to the memory bandwidth, then the widest lanes, then the fewest
    units; if none fits, the narrowest one-unit top (marked not fitting)."""
    sizes = [ecp5_size(b, lanes, u) for lanes in COMPUTE_LANES for u in range(1, MAX_UNITS + 1)]
    fitting = [(z, r) for z in sizes if _fits(r := estimate(z, b.family, m), b)]
    if not fitting:
        z = ecp5_size(b, min(COMPUTE_LANES))
        return Plan(b, z, estimate(z, b.family, m), False, need(z))
    lat = fp_latency(b.fp_latency)

    def key(item):
        z = item[0]
        return (min(z.units * stream_rate(z, lat), b.mem_gbs * 1e9 / (BEAT_BYTES * b.clock_mhz
                                                                       * 1e6)),
                z.compute_lanes, -z.units)

    z, r = max(fitting, key=key)
    return Plan(b, z, r, True, need(z))


def report(p: Plan, model: dict[str, Any] | None = None) -> list[str]:
    """The plan as lines for people: the configuration, the bandwidth match, the resources."""
    m = model or load_model()
    b, z = p.board, p.size
    lut = "LUT4" if b.family == "ecp5" else "LUT6"
    lines = [f"board {b.name}: {b.part}, {b.memory} {b.mem_gb:g} GB in {b.mem_channels} "
             f"channel(s), {b.mem_gbs:g} GB/s, PCIe {b.pcie}",
             f"  NumUnits={z.units} NumChannels={z.channels} ChanAddrW={z.chan_addr_w} "
             f"HeadDim={z.head_dim} NumQHeads={z.num_qheads} "
             f"MaxClusterTokens={z.max_cluster_tokens} ComputeLanes={z.compute_lanes}, "
             f"clock {b.clock_mhz:g} MHz ({b.clock_source})"]
    if not p.fits:
        lines.append(f"  does NOT fit: even this smallest top exceeds {BUDGET:.0%} of the part "
                     "(docs/results/fpga_pnr.md: what does)")
    lat = {k: v for k, v in asdict(p.latency).items() if v}
    lines.append("  arithmetic latencies (cycles): "
                 + (", ".join(f"{k} {v}" for k, v in lat.items()) if lat else
                    "none, combinational units")
                 + f" ({b.fp_latency_source})")
    if lat or z.compute_lanes != 32:
        lines.append(f"  a unit takes {p.rate:.3f} beat per cycle in a stream of "
                     f"{z.max_cluster_tokens}-token clusters (hw/model/engine_cycles.py: the "
                     "latencies' cost at each K->V turn and V row, a K or V beat in "
                     f"{32 // z.compute_lanes} cycle(s))"
                     + ("" if b.family == "ecp5" and "per_unit" in m["ecp5"] else
                        "; the resource estimate is of combinational units, without their "
                        "stage registers"))
    match = ("matches" if p.bandwidth_matched else "falls short of")
    rate = f" x {p.rate:.3f}" if p.rate != 1 else ""
    lines.append(f"  compute {z.units} x {BEAT_BYTES} B x {b.clock_mhz:g} MHz{rate} = "
                 f"{p.compute_gbs:.1f} GB/s {match} the memory's {b.mem_gbs:g} GB/s "
                 f"({p.needed_units} unit(s) would match at this clock)")
    lines.append(f"  {'resource':<10}{'estimate':>12}{'part':>12}{'share':>8}"
                 f"{'budget':>8}")
    for c, have in p.available().items():
        name = lut if c == "LUT" else c
        lines.append(f"  {name:<10}{p.resources[c]:>12,}{have:>12,}"
                     f"{p.resources[c] / have:>8.0%}{BUDGET:>8.0%}")
    if b.family == "ecp5" and "per_unit" in m["ecp5"]:
        e = m["ecp5"]
        lines.append(f"  estimate: the {e['what']}, by {e['command']} at {e['commit']} "
                     f"({ECP5_FILE.name}): the top at one unit, {z.units - 1} more unit(s)")
    elif b.family == "ecp5":
        e = m["ecp5"]
        lines.append(f"  estimate: at least the {e['what']} alone, synth_ecp5 by {e['command']} "
                     f"at {e['commit']} ({ECP5_FILE.name})")
    else:
        lines.append(f"  model: hw/fpga/resource_model.json ({m['command']} at {m['commit']}, "
                     f"{m['family']})")
    return lines
