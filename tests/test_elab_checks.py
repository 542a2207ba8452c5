"""Every elaboration check of the RTL (a `$error` in a generate `if` on a module's parameters)
shown firing: each row of CHECKS elaborates a module with parameters that break one check
(Verilator --lint-only, as scripts/lint_rtl.py runs it) and expects that check's message; the
sources under rtl/ are scanned, so a check with no row fails the test. With legal parameters
the same modules elaborate clean: scripts/lint_rtl.py.

USERERROR (the `$error`) is made an error here, so Verilator stops after elaborating the
parameters: about 0.1 s of CPU a run instead of a whole lint's 1 to 2 s (the engine's)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nelssa.gen import timing_param
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON
from nelssa.hw.sim.rtl_sources import (
    CXL_MEM_SLAVE,
    DDR5_CHECKER,
    DDR5_CTRL,
    DDR5_SYSTEM,
    DEVICE,
    ENGINE,
    FIFO,
    FP_STAGES_TOP,
    FPGA_TOP,
    PACKAGES,
    REGS,
    lint_command,
)
from nelssa.hw.sim.verilator import RTL_ROOT, setup_environment

SOURCE_LISTS = [FIFO, CXL_MEM_SLAVE, REGS, ENGINE, DDR5_CHECKER, DDR5_CTRL, DDR5_SYSTEM, DEVICE,
                FPGA_TOP, [*PACKAGES, FP_STAGES_TOP]]
"""What a module elaborates from: the shortest of these lists that holds its file."""
SMALL = {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 1}
"""The smallest engine, beside a broken parameter of a block that holds engines."""
LATENCIES = ("Bf16MulLatency", "AddLatency", "MulLatency", "Exp2Latency", "Log2Latency",
             "RecipLatency")


def _timing(**fields) -> str:
    """DDR5-6400 with ``fields`` changed, as a T parameter."""
    return timing_param(dataclasses.replace(DDR5_6400_MICRON, **fields))


@dataclasses.dataclass(frozen=True)
class Break:
    """One elaboration of ``module`` that must fail with ``message`` (a check's message up to
    its first format specifier)."""

    module: str
    params: dict
    message: str
    patch: tuple[str, str, str] | None = None
    """(file under rtl/, text, replacement): a package constant the check guards, changed in
    a copy of the file (no parameter reaches it)."""
    what: str = ""
    """What is broken, where the parameters do not say it briefly (a T preset, a patch)."""

    @property
    def label(self) -> str:
        """The row's pytest id: module and what is broken."""
        broken = ",".join(f"{k}={v}" for k, v in self.params.items() if SMALL.get(k) != v)
        return f"{self.module}:{self.what or broken}"


CHECKS = [
    # rtl/core
    Break("nelssa_attn_engine", {"HeadDim": 96}, "nelssa_attn_engine: HeadDim must be 64 or 128"),
    Break("nelssa_attn_engine", {"NumQHeads": 9}, "nelssa_attn_engine: NumQHeads must be in 1..8"),
    Break("nelssa_attn_engine", {"MaxClusterTokens": 256},
          "nelssa_attn_engine: MaxClusterTokens must be in 1..255"),
    Break("nelssa_attn_engine", {"ComputeLanes": 3},
          "nelssa_attn_engine: ComputeLanes must be a power of two in 1..32"),
    *(Break("nelssa_attn_engine", {lat: 16}, "nelssa_attn_engine: every unit latency must be in "
            "0..15") for lat in LATENCIES),
    Break("nelssa_attn_out", {"HeadDim": 32}, "nelssa_attn_out: HeadDim must be 64 or 128"),
    Break("nelssa_attn_out", {"NumQHeads": 9}, "nelssa_attn_out: NumQHeads must be in 1..8"),
    Break("nelssa_attn_out", {"RecipLatency": 16},
          "nelssa_attn_out: every unit latency must be in 0..15"),
    Break("nelssa_attn_out", {"ComputeLanes": 64},
          "nelssa_attn_out: ComputeLanes must be a power of two in 1..32"),
    Break("nelssa_attn_pos", {"HeadDim": 256}, "nelssa_attn_pos: HeadDim must be 64 or 128"),
    Break("nelssa_attn_pos", {"MaxClusterTokens": 0},
          "nelssa_attn_pos: MaxClusterTokens must be in 1..255"),
    Break("nelssa_attn_pos", {"MulLatency": 16},
          "nelssa_attn_pos: every unit latency must be in 0..15"),
    Break("nelssa_attn_pos", {"ComputeLanes": 6},
          "nelssa_attn_pos: ComputeLanes must be a power of two in 1..32"),
    Break("nelssa_attn_pos", {"AddLatency": 1, "DotLatency": 4},
          "nelssa_attn_pos: DotLatency must be Bf16MulLatency (0..15) + 5 * AddLatency"),
    Break("nelssa_attn_pos", {"AddLatency": 2, "WeightLatency": 1},
          "nelssa_attn_pos: WeightLatency must be AddLatency + Exp2Latency"),
    Break("nelssa_attn_vacc", {"HeadDim": 100}, "nelssa_attn_vacc: HeadDim must be 64 or 128"),
    Break("nelssa_attn_vacc", {"AddLatency": 16},
          "nelssa_attn_vacc: every unit latency must be in 0..15"),
    Break("nelssa_attn_vacc", {"ComputeLanes": 0},
          "nelssa_attn_vacc: ComputeLanes must be a power of two in 1..32"),
    Break("nelssa_attn_kscore", {"HeadDim": 127}, "nelssa_attn_kscore: HeadDim must be 64 or 128"),
    Break("nelssa_attn_kscore", {"Bf16MulLatency": 16},
          "nelssa_attn_kscore: every unit latency must be in 0..15"),
    Break("nelssa_attn_kscore", {"ComputeLanes": 12},
          "nelssa_attn_kscore: ComputeLanes must be a power of two in 1..32"),
    Break("nelssa_attn_softmax", {"MaxClusterTokens": 300},
          "nelssa_attn_softmax: MaxClusterTokens must be in 1..255"),
    Break("nelssa_attn_softmax", {"Exp2Latency": 16},
          "nelssa_attn_softmax: every unit latency must be in 0..15"),
    Break("nelssa_beat_dot", {"Lanes": 48},
          "nelssa_beat_dot: Lanes must be a power of two in 1..LANES"),
    Break("nelssa_beat_dot", {}, "nelssa_beat_dot: LANES must be a power of two of at least 2",
          patch=("core/nelssa_engine_pkg.sv", "LANES = 32;", "LANES = 24;"), what="LANES=24"),
    # rtl/top
    Break("nelssa_attn_unit", {**SMALL, "AddrW": 6},
          "nelssa_attn_unit: AddrW must be 7..64 (a K/V line address is AddrW - 6 bits)"),
    Break("nelssa_attn_unit", {**SMALL, "AddrW": 65},
          "nelssa_attn_unit: AddrW must be 7..64 (a K/V line address is AddrW - 6 bits)"),
    Break("nelssa_attn_unit", {**SMALL, "MaxIds": 1},
          "nelssa_attn_unit: MaxIds must be 2..65534 (a 16-bit num_ids above it is refused)"),
    Break("nelssa_attn_unit", {**SMALL, "MaxIds": 65535},
          "nelssa_attn_unit: MaxIds must be 2..65534 (a 16-bit num_ids above it is refused)"),
    Break("nelssa_attn_unit", {**SMALL, "MaxClusterTokens": 256},
          "nelssa_attn_unit: MaxClusterTokens must be in 1..255 (the engine's 8-bit count)"),
    Break("nelssa_attn_unit", {**SMALL, "NumQHeads": 16},
          "nelssa_attn_unit: NumQHeads must be in 1..15 (the engine's 4-bit count)"),
    Break("nelssa_axil_regs", {"AddrW": 11},
          "nelssa_axil_regs: AddrW must be 12..32 (the register window is 4 KB)"),
    Break("nelssa_cmdq", {"NumUnits": 4, "OrderDepth": 4},
          "nelssa_cmdq: OrderDepth must be a power of two above NumUnits"),
    Break("nelssa_cmdq", {"OrderDepth": 12},
          "nelssa_cmdq: OrderDepth must be a power of two above NumUnits"),
    Break("nelssa_fpga_top", {**SMALL, "NumUnits": 1, "NumChannels": 1, "ChanAddrW": 35},
          "nelssa_fpga_top: MemBytes beyond NumChannels << ChanAddrW or the device's 2^40"),
    Break("nelssa_line_reader", {"Depth": 48},
          "nelssa_line_reader: Depth must be a power of two in 2..32768"),
    Break("nelssa_line_reader", {"Depth": 65536},
          "nelssa_line_reader: Depth must be a power of two in 2..32768"),
    Break("nelssa_line_reader", {"Lanes": 9}, "nelssa_line_reader: Lanes must be 1..MEM_LANES"),
    Break("nelssa_regs", {"NumEngines": 16},
          "nelssa_regs: CAPS holds 1..15 engines, 1..16 query heads, up to 255 cluster tokens;"),
    Break("nelssa_regs", {"BytesW": 17},
          "nelssa_regs: CAPS holds 1..15 engines, 1..16 query heads, up to 255 cluster tokens;"),
    Break("nelssa_device", {**SMALL, "NumUnits": 7},
          "nelssa_device: NumUnits must be 1..6 (the memory front end has 8 ports)"),
    Break("nelssa_device", {**SMALL, "NumUnits": 1, "MemLanes": 9},
          "nelssa_device: MemLanes must be 1..MEM_LANES"),
    Break("nelssa_device", {**SMALL, "NumUnits": 1, "HostShare": 0},
          "nelssa_device: HostShare must be 1..256"),
    Break("nelssa_device", {"HeadDim": 64, "MaxClusterTokens": 1, "NumUnits": 1, "NumQHeads": 17},
          "nelssa_device: CAPS holds 1..16 query heads and up to 255 cluster tokens"),
    Break("nelssa_axi_mem", {"NumChannels": 3},
          "nelssa_axi_mem: NumChannels must be 1, 2, 4 or 8, at most the device's MEM_LANES"),
    Break("nelssa_axi_mem", {"NumPorts": 9}, "nelssa_axi_mem: NumPorts must be 1..8"),
    Break("nelssa_axi_mem", {"Outstanding": 24},
          "nelssa_axi_mem: Outstanding must be a power of two in 2..256"),
    Break("nelssa_axi_mem", {"ChanAddrW": 11}, "nelssa_axi_mem: ChanAddrW must be 12..64"),
    Break("nelssa_pipe3", {"Latency": 1}, "nelssa_pipe3: Latency must be 2 or more"),
    Break("nelssa_fifo", {"Depth": 6}, "nelssa_fifo: Depth must be a power of two >= 2"),
    Break("nelssa_fifo", {"Depth": 1}, "nelssa_fifo: Depth must be a power of two >= 2"),
    Break("nelssa_mem_req_split", {"NumPorts": 0}, "nelssa_mem_req_split: NumPorts >= 1 and "
          "AddrW 1..64"),
    Break("nelssa_mem_req_split", {"AddrW": 65}, "nelssa_mem_req_split: NumPorts >= 1 and "
          "AddrW 1..64"),
    Break("nelssa_axi_host", {"IdW": 17}, "nelssa_axi_host: IdW must be 1..16"),
    Break("nelssa_axi_host", {"AddrW": 8}, "nelssa_axi_host: AddrW must be 12..64"),
    Break("nelssa_axi_host", {"ReadWindow": 128},
          "nelssa_axi_host: ReadWindow must be a power of two in 2..64"),
    # rtl/cxl
    Break("nelssa_cxl_mem_slave", {"RspDepth": 40},
          "nelssa_cxl_mem_slave: RspDepth must be a power of two, at least 2"),
    Break("nelssa_cxl_mem_slave", {"AddrW": 35},
          "nelssa_cxl_mem_slave: MemBytes must fit AddrW bits"),
    # rtl/mem
    Break("nelssa_ddr5_frontend", {"NumPorts": 9}, "nelssa_ddr5_frontend: NumPorts must be 1 to 8"),
    Break("nelssa_ddr5_frontend", {"IdW": 6}, "nelssa_ddr5_frontend: IdW below 7 would stall a "
          "sub-channel before its queues fill"),
    Break("nelssa_ddr5_ctrl", {"T": _timing(bank_groups=4, banks_per_group=8)},
          "nelssa_ddr5_ctrl: built for 8 bank groups of 4 banks", what="T.bank_groups=4"),
    Break("nelssa_ddr5_ctrl", {"ReadQueue": 33},
          "nelssa_ddr5_ctrl: ReadQueue and WriteQueue must be 1 to 32"),
    Break("nelssa_ddr5_ctrl", {"WriteLow": 24},
          "nelssa_ddr5_ctrl: need WriteLow < WriteHigh <= WriteQueue"),
    Break("nelssa_ddr5_ctrl", {"T": _timing(nRTP=3)},
          "nelssa_ddr5_ctrl: needs nRP, nRAS, nRTP, nRRD_S, nRFC and nRCD of 4 tCK or more",
          what="T.nRTP=3"),
    Break("nelssa_ddr5_ctrl", {"TckW": 19},
          "nelssa_ddr5_ctrl: TckW must be 20 to 32, nREFI and nRFC short enough for it,"),
    Break("nelssa_ddr5_ctrl", {"T": _timing(nREFI=1 << 18)},
          "nelssa_ddr5_ctrl: TckW must be 20 to 32, nREFI and nRFC short enough for it,",
          what="T.nREFI=2^18"),
    Break("nelssa_ddr5_addr_map", {"AddrW": 36},
          "nelssa_ddr5_addr_map: AddrW must exceed 36 so that out-of-range addresses exist"),
    Break("nelssa_ddr5_addr_map", {"AddressMap": 3},
          "nelssa_ddr5_addr_map: AddressMap must be 0 (cacheline), 1 (row) or 2 (mop4)"),
    # rtl/sim
    Break("nelssa_ddr5_checker", {"T": _timing(bank_groups=2, banks_per_group=16)},
          "nelssa_ddr5_checker: built for 8 bank groups of 4 banks", what="T.bank_groups=2"),
    Break("nelssa_fp_stages_top", {"MaxLatency": 0},
          "nelssa_fp_stages_top: MaxLatency must be 1 or more"),
]

ERROR_CALL = re.compile(r'\$error\(\s*"([^"%]*)')
"""A `$error` and its message up to its first format specifier"""
DECLARED = re.compile(r"^\s*module\s+(\w+)", re.MULTILINE)


def checks_in_sources() -> set[tuple[str, str]]:
    """(module, message) of every `$error` in rtl/ (the assertion macros' in rtl/include/
    aside: tests/rtl show them firing), a file being one module."""
    found = set()
    for path in sorted(RTL_ROOT.rglob("*.sv")):
        text = path.read_text()
        messages = ERROR_CALL.findall(text)
        if messages:
            (module,) = DECLARED.findall(text)
            found |= {(module, m.rstrip()) for m in messages}
    return found


def module_file(module: str) -> Path:
    (path,) = RTL_ROOT.rglob(f"{module}.sv")
    return path


def sources(module: str) -> list[Path]:
    """The shortest list of SOURCE_LISTS that holds the module's file."""
    file = module_file(module)
    return min((s for s in SOURCE_LISTS if file in s), key=len)


def elaborate(row: Break, scratch: Path) -> subprocess.CompletedProcess:
    """Verilator's lint of the row's module at its parameters, stopping after elaboration where
    a check fires."""
    srcs = sources(row.module)
    if row.patch:
        name, text, replacement = row.patch
        original = RTL_ROOT / name
        patched = scratch / original.name
        body = original.read_text()
        assert text in body, f"{name} no longer holds {text!r}"
        patched.write_text(body.replace(text, replacement))
        srcs = [patched if s == original else s for s in srcs]
    cmd = lint_command(row.module, srcs, row.params, extra=["-Werror-USERERROR"])
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every row's elaboration, a Verilator per core (the cores this process may use)."""
    setup_environment()
    scratch = tmp_path_factory.mktemp("elab")
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        procs = pool.map(lambda row: elaborate(row, scratch), CHECKS)
        return {row.label: proc for row, proc in zip(CHECKS, procs, strict=True)}


def test_every_check_has_a_row():
    scanned = checks_in_sources()
    assert {"nelssa_fifo", "nelssa_attn_unit", "nelssa_ddr5_ctrl"} <= {m for m, _ in scanned}
    rows = {(row.module, row.message) for row in CHECKS}
    assert sorted(scanned - rows) == [], "elaboration checks with no row in CHECKS"
    assert sorted(rows - scanned) == [], "rows of CHECKS whose check is not in rtl/"
    assert len({row.label for row in CHECKS}) == len(CHECKS)


@pytest.mark.parametrize("row", CHECKS, ids=[row.label for row in CHECKS])
def test_check_fires(row: Break, runs):
    proc = runs[row.label]
    assert proc.returncode != 0, f"{row.label} elaborated"
    fired = re.findall(r"%Error-USERERROR: \S+ (.*)", proc.stderr)
    assert any(m.startswith(row.message) for m in fired), (
        f"{row.label}: expected {row.message!r}, Verilator said:\n{proc.stderr[-3000:]}")
