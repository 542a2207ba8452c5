"""nelssa_attn_unit: a descriptor run within the rules (its assertions hold), and its
assertions (and its line reader's, inside it), each shown firing by a test that breaks its rule;
the smallest engine keeps the build short (the unit's results against the model: tests/
test_rtl_device.py and test_fpga_top). Its buffers' read-ahead invariants hold for any input, so
their test forces a read register (attn_unit_faults.vlt), as test_ddr5_ctrl does."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import cocotb
import pytest
from buses import MemReq, clock_and_reset, pulse, wait_cycles
from cocotb.handle import Force
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.driver.formats import CLUSTER_ENTRY, DESCRIPTOR, DescOpcode, DescStatus, out_bytes
from nelssa.hw.sim.rtl_sources import ENGINE, FP_GATED_ARGS, RTL_ROOT

TOP = "nelssa_attn_unit"
SOURCES = [*ENGINE, RTL_ROOT / "top" / "nelssa_dev_pkg.sv",
           RTL_ROOT / "top" / "nelssa_line_reader.sv", RTL_ROOT / "top" / "nelssa_attn_unit.sv"]
PARAMS = {"HeadDim": 64, "NumQHeads": 1, "MaxClusterTokens": 2, "Lanes": 1}
FAULTS_VLT = Path(__file__).resolve().parent / "attn_unit_faults.vlt"
"""the read register a fault forces, marked forceable"""
INPUTS = ("start_i", "desc_i", "region_lo_i", "region_hi_i", "ring_lo_i", "ring_hi_i",
          "mem_ready_i", "mem_cpl_i", "rd_valid_i", "rd_tag_i", "rd_data_i")
HEAD_DIM = 64
TOKENS = (1, 2, 2, 1, 1, 2, 1, 2, 2, 2, 1, 1, 2, 1, 2, 1, 1, 2, 2, 1)
"""Each cluster's tokens (MaxClusterTokens 2): the engine's counts differ from one to the next"""
IDS = (19, 3, 0, 7, 12, 5, 18, 1, 9, 14, 2, 11, 16, 6, 10, 4, 17, 13)
"""The selected clusters, out of order: more than the 16 ids of a line (the ids' buffer read
ahead across its lines)"""
Q_ADDR, IDS_ADDR, DIR_ADDR, KV_ADDR, OUT_ADDR = 0x1000, 0x2000, 0x3000, 0x4000, 0xA000


def _image(rng: random.Random) -> dict[int, int]:
    """The descriptor's memory, line address -> 512-bit line: Q, the ids, the directory and
    the clusters' K and V rows (bf16 of small values)."""
    data = bytearray(OUT_ADDR)

    def rows(addr: int, n: int) -> None:
        for k in range(n):
            bits = struct.unpack("<I", struct.pack("<f", rng.uniform(-2, 2)))[0] >> 16
            data[addr + 2 * k: addr + 2 * k + 2] = bits.to_bytes(2, "little")

    rows(Q_ADDR, HEAD_DIM)
    data[IDS_ADDR: IDS_ADDR + 4 * len(IDS)] = struct.pack(f"<{len(IDS)}I", *IDS)
    for c, tokens in enumerate(TOKENS):
        kv = KV_ADDR + 0x400 * c
        entry = CLUSTER_ENTRY.build({"kv_addr": kv, "tokens": tokens})
        data[DIR_ADDR + 16 * c: DIR_ADDR + 16 * c + 16] = entry
        rows(kv, 2 * tokens * HEAD_DIM)
    return {a: int.from_bytes(data[a:a + 64], "little") for a in range(0, len(data), 64)}


def _descriptor() -> int:
    return int.from_bytes(DESCRIPTOR.build({
        "opcode": DescOpcode.ATTN, "flags": 0, "head_dim": HEAD_DIM, "q_heads": 1,
        "reserved0": 0, "num_ids": len(IDS), "desc_id": 7, "num_clusters": len(TOKENS),
        "q_addr": Q_ADDR, "dir_addr": DIR_ADDR, "ids_addr": IDS_ADDR, "out_addr": OUT_ADDR,
        "scale": struct.unpack("<I", struct.pack("<f", 0.125))[0], "reserved1": bytes(12)}),
        "little")


class UnitMemory:
    """The unit's memory port: ready every cycle, each read answered on lane 0 after 1 to 6
    cycles (answers leave request order), each write completed and kept in ``written``."""

    def __init__(self, dut, lines: dict[int, int], rng: random.Random) -> None:
        self.dut, self.lines, self.rng = dut, lines, rng
        self.reads: dict[int, tuple[int, int]] = {}  # cycle -> (tag, data)
        self.cpls: set[int] = set()
        self.written: dict[int, int] = {}
        dut.mem_ready_i.value = 1
        cocotb.start_soon(self._run())

    async def _run(self) -> None:
        cycle = 0
        while True:
            await RisingEdge(self.dut.clk_i)
            cycle += 1
            tag, data = self.reads.pop(cycle, (None, 0))
            self.dut.rd_valid_i.value = int(tag is not None)
            self.dut.rd_tag_i.value = tag or 0
            self.dut.rd_data_i.value = data
            self.dut.mem_cpl_i.value = int(cycle in self.cpls)
            self.cpls.discard(cycle)
            await ReadOnly()
            if int(self.dut.mem_valid_o.value):
                req = MemReq.unpack(int(self.dut.mem_o.value))
                at = cycle + self.rng.randint(1, 6)
                if req.write:
                    self.written[req.addr] = req.wdata
                    while at in self.cpls:
                        at += 1
                    self.cpls.add(at)
                else:
                    while at in self.reads:
                        at += 1
                    self.reads[at] = (req.tag, self.lines.get(req.addr, 0))


async def start_descriptor(dut) -> UnitMemory:
    """The unit after reset, its memory holding the descriptor's, the descriptor started (the
    region all of memory, no ring)."""
    await clock_and_reset(dut, INPUTS)
    rng = random.Random(5)
    mem = UnitMemory(dut, _image(rng), rng)
    dut.region_hi_i.value = 1 << 20
    dut.desc_i.value = _descriptor()
    dut.start_i.value = 1
    await RisingEdge(dut.clk_i)
    dut.start_i.value = 0
    return mem


async def wait_for(dut, name: str, cycles: int) -> None:
    """Until signal ``name`` is set (at most ``cycles`` cycles), in that cycle's read-only
    phase."""
    for _ in range(cycles):
        await RisingEdge(dut.clk_i)
        await ReadOnly()
        if int(getattr(dut, name).value):
            return
    raise AssertionError(f"{name} not set in {cycles} cycles")


@cocotb.test()
async def runs_a_descriptor(dut):
    """Within the rules: the descriptor ends OK with its output lines written."""
    mem = await start_descriptor(dut)
    await wait_for(dut, "done_o", 5000)
    assert int(dut.status_o.value) == DescStatus.OK
    assert sorted(mem.written) == list(range(OUT_ADDR, OUT_ADDR + out_bytes(1, HEAD_DIM), 64))


@cocotb.test()
async def breaks_tokens_read_ahead(dut):
    """The engine's token count read for the wrong cluster: its register forced once the
    engine is offered the first one."""
    await start_descriptor(dut)
    await wait_for(dut, "clu_valid", 2000)
    await RisingEdge(dut.clk_i)
    dut.tok_rd_q.value = Force(0)  # (no cluster has 0 tokens)
    await wait_cycles(dut, 2)


@cocotb.test()
async def breaks_start_while_busy(dut):
    """A descriptor with an undefined opcode keeps the unit busy until its completion is
    taken; the command queue starts it again meanwhile."""
    await clock_and_reset(dut, INPUTS)
    dut.desc_i.value = 0xEE  # opcode byte: not ATTN
    dut.start_i.value = 1
    await wait_cycles(dut, 1)
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_completion_unasked(dut):
    """The memory completes a write the unit never made."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "mem_cpl_i")


@cocotb.test()
async def breaks_read_data_unasked(dut):
    """A line arrives for the unit's reader with no read in flight."""
    await clock_and_reset(dut, INPUTS)
    await pulse(dut, "rd_valid_i")


@cocotb.test()
async def breaks_region_beyond_addr(dut):
    """A descriptor started with its region's end beyond the address space (2^AddrW), where
    the checks' AddrW + 1 bits would not hold it."""
    await clock_and_reset(dut, INPUTS)
    dut.region_hi_i.value = (1 << int(dut.AddrW.value)) + 64
    dut.desc_i.value = _descriptor()
    await pulse(dut, "start_i")


@cocotb.test()
async def breaks_id_lines_beyond(dut):
    """The ids' line counter forced past the 4,096 lines of 65,534 ids while the unit reads
    them (its count of a line's ids takes 12 bits of it)."""
    await start_descriptor(dut)
    await wait_for(dut, "rd_valid_i", 2000)
    await RisingEdge(dut.clk_i)
    dut.use_i_q.value = Force(4096)
    await wait_cycles(dut, 2)


FIRES = [("breaks_start_while_busy", {"StartWhileBusy"}),
         ("breaks_completion_unasked", {"CplUnasked"}),
         ("breaks_read_data_unasked", {"ReadNotInFlight"}),
         ("breaks_tokens_read_ahead", {"TokensReadAhead"}),
         ("breaks_region_beyond_addr", {"RegionBeyondAddr"}),
         ("breaks_id_lines_beyond", {"IdLinesBeyond"})]


def _run(test_filter: str, fired: set[str] | None = None) -> None:
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_attn_unit", PARAMS, sources=SOURCES, test_filter=test_filter,
               build_extra=[*FP_GATED_ARGS, str(FAULTS_VLT)], expect_assertion=fired,
               unoptimized=True, single_compile=True)


@pytest.mark.rtl
def test_attn_unit_runs_a_descriptor():
    _run("runs_a_descriptor")


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_attn_unit_assertion_fires(case: str, fired: set[str]):
    _run(case, fired)
