"""The device's CXL.mem front end, driven directly (nelssa_device_sim: slave + simulated DDR5):
random reads and partial writes with random tags and gaps, the host stalling the response
channels at random, responses out of request order, out-of-range addresses and undefined
opcodes, and a host that stops taking responses altogether (requests back-pressure; nothing is
dropped)."""

from __future__ import annotations

import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.driver.cxl import M2SReqOpcode, M2SRwDOpcode, RspStatus
from nelssa.hw.sim.rtl_sources import (
    DDR5_STORE_CPP,
    DDR5_VERILATOR_ARGS,
    DEVICE_SIM,
    FP_GATED_ARGS,
)

MEM_BYTES = 1 << 36
MASK512 = (1 << 512) - 1
MEMORY: dict[int, int] = {}
"""line address -> data, in acceptance order; the DPI store outlives a test, and so does this"""


def merge(old: int, data: int, be: int) -> int:
    mask = sum(0xFF << (8 * b) for b in range(64) if be >> b & 1)
    return (data & mask) | (old & ~mask & MASK512)


class TB:
    """Clock, reset, request drivers for M2S Req and RwD, response monitors with stalls."""

    def __init__(self, dut, stall: float = 0.0, seed: int = 0) -> None:
        self.dut = dut
        self.stall = stall
        self.rng = random.Random(seed)
        self.expect: dict[tuple[str, int], tuple[int, int]] = {}  # (kind, tag) -> (status, data)
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())

    async def reset(self) -> None:
        d = self.dut
        for s in (d.req_valid_i, d.rwd_valid_i, d.mmio_valid_i, d.ndr_ready_i, d.drs_ready_i,
                  d.mmio_rsp_ready_i):
            s.value = 0
        d.rst_ni.value = 0
        for _ in range(2):
            await RisingEdge(d.clk_i)
        d.rst_ni.value = 1

    async def run(self, ops: list[tuple], max_cycles: int = 200_000,
                  stop_taking_after: int | None = None) -> dict[str, object]:
        """ops: ("rd", tag, addr, opcode) or ("wr", tag, addr, data, be, opcode), issued in
        order per channel. Returns the response order and counts; every response is checked on
        the way."""
        d = self.dut
        reads = [op for op in ops if op[0] == "rd"]
        writes = [op for op in ops if op[0] == "wr"]
        expect = self.expect  # responses owed, also those of an earlier run
        order, issued = [], []
        ri = wi = cycles = 0
        accepted_while_stuck = 0
        while ri < len(reads) or wi < len(writes) or expect:
            assert cycles < max_cycles, f"stuck: {len(expect)} responses outstanding"
            stuck = stop_taking_after is not None and cycles >= stop_taking_after
            d.req_valid_i.value = int(ri < len(reads) and self.rng.random() < 0.8)
            if ri < len(reads):
                _, tag, addr, op = reads[ri]
                d.req_tag_i.value, d.req_addr_i.value, d.req_opcode_i.value = tag, addr, op
            d.rwd_valid_i.value = int(wi < len(writes) and self.rng.random() < 0.8)
            if wi < len(writes):
                _, tag, addr, data, be, op = writes[wi]
                d.rwd_tag_i.value, d.rwd_addr_i.value, d.rwd_opcode_i.value = tag, addr, op
                d.rwd_data_i.value, d.rwd_be_i.value = data, be
            take = not stuck and self.rng.random() >= self.stall
            d.ndr_ready_i.value = int(take)
            d.drs_ready_i.value = int(take and self.rng.random() >= self.stall)
            await ReadOnly()
            if d.ndr_valid_o.value == 1 and d.ndr_ready_i.value == 1:
                key = ("wr", int(d.ndr_tag_o.value))
                assert key in expect, f"NDR for unknown tag {key[1]}"
                assert int(d.ndr_status_o.value) == expect.pop(key)[0], f"NDR status {key}"
                order.append(key)
            if d.drs_valid_o.value == 1 and d.drs_ready_i.value == 1:
                key = ("rd", int(d.drs_tag_o.value))
                assert key in expect, f"DRS for unknown tag {key[1]}"
                status, data = expect.pop(key)
                assert int(d.drs_status_o.value) == status, f"DRS status {key}"
                assert int(d.drs_data_o.value) == data, f"read {key}: wrong data"
                order.append(key)
            # acceptances, Req before RwD: the device takes at most one of them per cycle
            if d.req_valid_i.value == 1 and d.req_ready_o.value == 1:
                _, tag, addr, op = reads[ri]
                st = expected_status(addr, op, (M2SReqOpcode.MEM_RD,))
                expect[("rd", tag)] = (st, MEMORY.get(addr, 0) if st == RspStatus.OK else 0)
                issued.append(("rd", tag))
                ri += 1
                accepted_while_stuck += stuck
            if d.rwd_valid_i.value == 1 and d.rwd_ready_o.value == 1:
                _, tag, addr, data, be, op = writes[wi]
                st = expected_status(addr, op, (M2SRwDOpcode.MEM_WR, M2SRwDOpcode.MEM_WR_PTL))
                if st == RspStatus.OK:
                    MEMORY[addr] = merge(MEMORY.get(addr, 0), data, be)
                expect[("wr", tag)] = (st, 0)
                issued.append(("wr", tag))
                wi += 1
                accepted_while_stuck += stuck
            await RisingEdge(d.clk_i)
            cycles += 1
            if stuck and cycles > stop_taking_after + 2000:
                break  # the host never came back: report what the device did meanwhile
        assert int(d.violations_o.value) == 0
        return {"order": order, "issued": issued, "cycles": cycles,
                "accepted_while_stuck": accepted_while_stuck, "outstanding": len(expect)}


def expected_status(addr: int, opcode: int, defined: tuple[int, ...]) -> RspStatus:
    """What the slave answers: the opcode is checked first, then the address."""
    if opcode not in defined:
        return RspStatus.OPCODE_ERROR
    return RspStatus.OK if addr % 64 == 0 and addr < MEM_BYTES else RspStatus.ADDR_ERROR


def random_ops(rng: random.Random, n: int, lines: list[int], bad: float = 0.0) -> list[tuple]:
    """Reads and writes; with probability ``bad`` an address beyond memory or misaligned, and
    (independently) an opcode the channel does not define."""
    ops, next_tag = [], {"rd": 0, "wr": 0}
    for _ in range(n):
        kind = "wr" if rng.random() < 0.5 else "rd"
        addr = rng.choice(lines)
        if rng.random() < bad:
            addr = rng.choice([addr + MEM_BYTES, addr + 8])  # beyond memory, or misaligned
        tag = next_tag[kind]
        next_tag[kind] = (tag + 1) & 0xFFFF
        if kind == "rd":
            op = rng.choice([0, 2, 0xFF]) if rng.random() < bad else M2SReqOpcode.MEM_RD
            ops.append(("rd", tag, addr, op))
        else:
            be = rng.choice([(1 << 64) - 1, rng.getrandbits(64)])
            op = M2SRwDOpcode.MEM_WR if be == (1 << 64) - 1 else M2SRwDOpcode.MEM_WR_PTL
            if rng.random() < bad:
                op = rng.choice([0, 3, 0xFF])
            ops.append(("wr", tag, addr, rng.getrandbits(512), be, op))
    return ops


@cocotb.test()
async def random_reads_and_partial_writes_under_stalls(dut):
    tb = TB(dut, stall=0.3, seed=1)
    await tb.reset()
    rng = random.Random(2)
    lines = [rng.randrange(0, MEM_BYTES // 64) * 64 for _ in range(40)] + [MEM_BYTES - 64]
    res = await tb.run(random_ops(rng, 1200, lines))
    assert len(res["order"]) == 1200
    # different sub-channels answer at different times: responses leave request order
    reads_issued = [k for k in res["issued"] if k[0] == "rd"]
    reads_done = [k for k in res["order"] if k[0] == "rd"]
    assert reads_done != reads_issued


@cocotb.test()
async def out_of_range_misaligned_and_undefined_requests_get_errors(dut):
    tb = TB(dut, stall=0.1, seed=3)
    await tb.reset()
    rng = random.Random(4)
    lines = [rng.randrange(0, 64) * 64 for _ in range(8)]  # low lines: a wrap would hit them
    res = await tb.run(random_ops(rng, 600, lines, bad=0.3))
    assert len(res["order"]) == 600


@cocotb.test()
async def a_host_that_stops_taking_responses_back_pressures(dut):
    """Responses pile up to the FIFO depth, then the device stops accepting requests; when the
    host returns nothing has been lost (every response still arrives, checked)."""
    tb = TB(dut, seed=5)
    await tb.reset()
    rng = random.Random(6)
    lines = [rng.randrange(0, MEM_BYTES // 64) * 64 for _ in range(64)]
    ops = random_ops(rng, 600, lines)
    res = await tb.run(ops, stop_taking_after=50)
    # while stuck the device took at most one response FIFO's worth per channel
    assert res["accepted_while_stuck"] <= 2 * 64, res
    assert res["outstanding"] > 0
    # the host comes back: everything still owed arrives, each response checked as before
    owed = res["outstanding"]
    res2 = await tb.run([])
    assert len(res2["order"]) == owed and not tb.expect


@pytest.mark.rtl
def test_cxl_mem_slave():
    from cocotb_runner import run_cocotb

    # one attention unit: the slave is what is tested, and one engine builds faster than two
    run_cocotb("nelssa_device_sim", "test_cxl_mem_slave", sources=DEVICE_SIM,
               parameters={"NumUnits": 1},
               build_extra=[str(DDR5_STORE_CPP), *DDR5_VERILATOR_ARGS, *FP_GATED_ARGS])
