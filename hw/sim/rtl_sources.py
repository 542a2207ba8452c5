"""Source lists of the RTL units, in compile order (packages first)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from nelssa.hw.sim.verilator import RTL_INCLUDE, RTL_ROOT

CORE = RTL_ROOT / "core"

PACKAGES = [
    CORE / "nelssa_pipe.sv",
    CORE / "nelssa_pipe3.sv",
    CORE / "nelssa_fp_tables_pkg.sv",
    CORE / "nelssa_fp_pkg.sv",
    CORE / "nelssa_engine_pkg.sv",
    CORE / "nelssa_attn_pkg.sv",
    CORE / "nelssa_fp32_add_staged.sv",
    CORE / "nelssa_fp32_mul_staged.sv",
]
"""Packages every core unit may import (the arithmetic, the engine's geometry and status, the
buses between the engine's stages), nelssa_pipe (the latency registers of a pipelined unit and
the engine's delay lines), nelssa_pipe3 (those of exp2, log2 and the reciprocal in their staged
forms) and the hand-staged fp32 add and multiply (the units at Latency 2 and more), which every
unit's source list needs."""

FP_UNITS = [
    CORE / "nelssa_bf16_mul.sv",
    CORE / "nelssa_fp32_add.sv",
    CORE / "nelssa_fp32_mul.sv",
    CORE / "nelssa_fp32_max.sv",
    CORE / "nelssa_fp32_exp2.sv",
    CORE / "nelssa_fp32_log2.sv",
    CORE / "nelssa_fp32_recip.sv",
]
"""Arithmetic units, each its own module."""

ENGINE_PARTS = [CORE / f"{name}.sv" for name in (
    "nelssa_beat_dot", "nelssa_softmax_weight", "nelssa_attn_pos", "nelssa_attn_kscore",
    "nelssa_attn_softmax", "nelssa_attn_vacc", "nelssa_attn_out")]
"""The engine's composite blocks: a beat's dot product and a softmax weight (made of arithmetic
units), and the engine's stages: the positions beside its pipelines, per query head its K
stage, softmax state and V accumulation, the finalisation and result beats."""

ENGINE = [*PACKAGES, *FP_UNITS, *ENGINE_PARTS, CORE / "nelssa_attn_engine.sv"]
"""Everything the attention engine elaborates from."""
FP_UNITS_TOP = RTL_ROOT / "sim" / "nelssa_fp_units_top.sv"
"""The seven arithmetic units side by side (their cocotb tests share its one build)."""
FP_STAGES_TOP = RTL_ROOT / "sim" / "nelssa_fp_stages_top.sv"
"""The staged units at Latency 0..3 beside their reference functions (tests/rtl/test_fp_stages)."""
ENGINE_BENCH_TOP = RTL_ROOT / "sim" / "nelssa_engine_bench_top.sv"
"""The engine behind registered inputs, for the C++ harness."""

DDR5_CHECKER = [
    RTL_ROOT / "mem" / "nelssa_ddr5_pkg.sv",
    RTL_ROOT / "sim" / "nelssa_ddr5_checker.sv",
]
"""The sim-only DDR5 timing checker and its package."""

DDR5_ADDR_MAPS = [RTL_ROOT / "mem" / "nelssa_ddr5_addr_map.sv",
                  RTL_ROOT / "sim" / "nelssa_ddr5_addr_maps.sv"]
"""The front end's address map, all three maps side by side (tests/rtl/test_ddr5_addr_map.py)."""

DDR5_CTRL = [RTL_ROOT / "mem" / f"{name}.sv" for name in (
    "nelssa_ddr5_pkg", "nelssa_ddr5_sched_if", "nelssa_ddr5_sched_tries",
    "nelssa_ddr5_sched_parallel", "nelssa_ddr5_ctrl")]
"""The synthesizable sub-channel memory controller, its two schedulers (its ParallelSched) and
the interface between them."""

DDR5_BENCH = [*DDR5_CTRL, RTL_ROOT / "sim" / "nelssa_ddr5_checker.sv",
              RTL_ROOT / "sim" / "nelssa_ddr5_bench_top.sv"]
"""Sub-channel controllers with their checkers, for the C++ measurement harness."""

DDR5_MEM = [*DDR5_CTRL, RTL_ROOT / "sim" / "nelssa_ddr5_checker.sv",
            RTL_ROOT / "sim" / "nelssa_ddr5_dram.sv", RTL_ROOT / "sim" / "nelssa_ddr5_mem.sv"]
"""One sub-channel with data: controller, data model over the DPI store, checker."""
DDR5_SYSTEM = [*DDR5_MEM, RTL_ROOT / "mem" / "nelssa_ddr5_addr_map.sv",
               RTL_ROOT / "mem" / "nelssa_ddr5_frontend.sv",
               RTL_ROOT / "sim" / "nelssa_ddr5_system.sv"]
"""A device's whole memory: front end and 8 sub-channels with data."""
FIFO = [RTL_ROOT / "top" / "nelssa_fifo.sv"]
"""The FIFO of the response paths."""
CXL_MEM_SLAVE = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", *FIFO,
                 RTL_ROOT / "cxl" / "nelssa_cxl_mem_slave.sv"]
"""The CXL.mem slave alone (tests/rtl/test_cxl_mem_slave.py)."""
REGS = [RTL_ROOT / "top" / "nelssa_dev_pkg.sv", RTL_ROOT / "top" / "nelssa_csr_reg_pkg.sv",
        RTL_ROOT / "top" / "nelssa_csr_reg.sv", RTL_ROOT / "top" / "nelssa_regs.sv"]
"""The register block: PeakRDL-regblock's block of the map (nelssa.gen_rdl) and the device's
side of it."""
DEVICE = [*ENGINE, *CXL_MEM_SLAVE, *REGS[1:], RTL_ROOT / "top" / "nelssa_line_reader.sv",
          RTL_ROOT / "top" / "nelssa_attn_unit.sv", RTL_ROOT / "top" / "nelssa_cmdq.sv",
          RTL_ROOT / "top" / "nelssa_device.sv", RTL_ROOT / "top" / "nelssa_mem_req_split.sv",
          RTL_ROOT / "top" / "nelssa_device_wrap.sv"]
"""The synthesizable device: registers, CXL.mem slave, command queue, attention units; with
its requests split into memory-port signals (nelssa_device_wrap, what both tops use)."""
FPGA_TOP = [*DEVICE, RTL_ROOT / "top" / "nelssa_axil_regs.sv",
            RTL_ROOT / "top" / "nelssa_axi_host.sv", RTL_ROOT / "top" / "nelssa_axi_mem.sv",
            RTL_ROOT / "top" / "nelssa_fpga_top.sv"]
"""The board-agnostic FPGA top: the device between AXI host interfaces and AXI memory."""
DEVICE_SIM = [*DDR5_SYSTEM, *DEVICE, RTL_ROOT / "sim" / "nelssa_device_sim.sv"]
"""The device over its simulated memory, for the C++ harness."""
DDR5_STORE_CPP = Path(__file__).resolve().parent / "ddr5_store.cpp"
"""The sparse backing store (DPI-C)."""

VERILATOR_CONFIG = RTL_ROOT / "verilator.vlt"
"""Verilator configuration file: lint waivers (each with its reason) and build settings."""


def lint_command(top: str, sources: Sequence[Path], params: Mapping[str, object] | None = None,
                 defines: Sequence[str] = (), extra: Sequence[str] = ()) -> list[str]:
    """Verilator's lint of ``top`` at ``params`` (``--lint-only -Wall`` with the waivers of
    VERILATOR_CONFIG; ``defines`` as +define+, ``extra`` options more): scripts/lint_rtl.py's,
    and the tests' that elaborate a module at parameters its checks refuse. Run it after
    verilator.setup_environment()."""
    return ["verilator", "--lint-only", "-Wall", *extra, f"-I{RTL_INCLUDE}", "--top-module", top,
            *(f"-G{k}={v}" for k, v in (params or {}).items()), *(f"+define+{d}" for d in defines),
            str(VERILATOR_CONFIG), *map(str, sources)]


def unit_sources(top: str) -> list[Path]:
    """Packages plus the fp units plus ``top``'s own file when it is not among them."""
    own = CORE / f"{top}.sv"
    units = FP_UNITS if own in FP_UNITS else [*FP_UNITS, *ENGINE_PARTS, own]
    return [*PACKAGES, *units]

DDR5_VERILATOR_ARGS = ["--unroll-count", "1"]
"""Verilator arguments of every DDR5 build: the controller's tries stay loops (its reset and
fixed two- and five-step loops are unrolled by `verilator unroll_full`). Unrolled, one sub-channel
became tens of thousands of lines of C++ that ran slower (instruction-cache bound) and took
minutes to compile for eight sub-channels. The count holds for the whole device build, so every
other loop of the device's RTL (engine, units, line readers, front end, CXL slave) carries
`verilator unroll_full`: kept as loops, with their non-blocking writes at loop indices, they made
the four-unit device 3.4 times slower (scripts/bench_sim_speed.py)."""

FP_GATED_ARGS = ["+define+NELSSA_FP_GATED"]
"""Verilator arguments of every build that holds the engine: each arithmetic unit computes only
when its result is used (rtl/core/nelssa_fp32_add.sv), so a cycle costs the active phase's
units, not all of them. Results are the same either way; tests/rtl/test_attn_engine.py runs
both."""
