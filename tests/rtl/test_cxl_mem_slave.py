"""The CXL.mem slave alone (nelssa_cxl_mem_slave), built at the smallest response depth with two
read lanes (PARAMS): M2S Req and RwD sources and S2M NDR and DRS sinks (tests/rtl/buses.py) with
random idle cycles and back-pressure on every channel, a memory with random latency and
back-pressure on its port, and a scoreboard that holds every response to the device model
(hw/model/device.ModelDevice, fed the requests in the order the slave took them). Then the
slave's assertions, each shown firing by a test that breaks its rule."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace

import cocotb
import pytest
from buses import (
    LineMemory,
    Packed,
    StreamSink,
    StreamSource,
    always,
    clock_and_reset,
    layout_of,
    never,
    pulse,
    random_pauses,
    wait_cycles,
)
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.driver import cxl
from nelssa.driver.cxl import Channel, M2SReqOpcode, M2SRwDOpcode, RspStatus
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.sim.rtl_sources import CXL_MEM_SLAVE

TOP = "nelssa_cxl_mem_slave"
MEM_BYTES = 1 << 36  # the slave's default MemBytes, the model's memory
FULL = (1 << 64) - 1
PARAMS = {"RspDepth": 2, "ReadLanes": 2}
"""One build: the smallest response FIFOs (full after two: their edge cases come often); two
read lanes, so reads are answered out of request order and two lines may arrive in one cycle;
and three DRS sources (two lanes and the slave itself), a count no power of two, so the
round-robin among them wraps by its own compare, not by its counter's overflow. (It replaced
two builds, RspDepth 2 with one lane and RspDepth 4 with three (four sources): what either
exercised this one does, and the depth changes nothing in the slave but its counters' widths.
The device's RspDepth 64 and 8 lanes run in tests/test_rtl_device.py and test_fpga_top.)"""
WITHIN_CONTRACT = r"\.(?!breaks_)\w+$"


# ---- transactions: the channels' structs (rtl/top/nelssa_dev_pkg.sv) ----------------------
@dataclass(frozen=True)
class M2SReq(Packed):
    LAYOUT = layout_of(cxl.M2S_REQ)
    opcode: int
    tag: int
    addr: int

    def message(self) -> bytes:
        return cxl.build_message(Channel.M2S_REQ, asdict(self))


@dataclass(frozen=True)
class M2SRwD(Packed):
    """Data and byte enables little-endian: byte b is bits 8b+7..8b, its enable bit b."""
    LAYOUT = layout_of(cxl.M2S_RWD)
    opcode: int
    tag: int
    addr: int
    byte_enable: int
    data: int

    def message(self) -> bytes:
        return cxl.build_message(Channel.M2S_RWD, {**asdict(self),
                                                   "data": self.data.to_bytes(64, "little")})


@dataclass(frozen=True)
class S2MNdr(Packed):
    LAYOUT = layout_of(cxl.S2M_NDR)
    opcode: int
    tag: int
    status: int


@dataclass(frozen=True)
class S2MDrs(Packed):
    LAYOUT = layout_of(cxl.S2M_DRS)
    opcode: int
    tag: int
    status: int
    data: int


def response(message: bytes) -> S2MNdr | S2MDrs:
    msg = cxl.parse_message(message)
    body = msg.body
    if msg.channel == Channel.S2M_NDR:
        return S2MNdr(body.opcode, body.tag, body.status)
    assert msg.channel == Channel.S2M_DRS, msg
    return S2MDrs(body.opcode, body.tag, body.status, int.from_bytes(body.data, "little"))


class Scoreboard:
    """Each request the slave takes goes to a fresh device model; the model's answer is what
    the slave owes, matched by channel and tag (answers may leave request order)."""

    def __init__(self) -> None:
        self.model = ModelDevice()
        assert self.model.mem.size == MEM_BYTES
        self.expect: dict[tuple[type, int], S2MNdr | S2MDrs] = {}
        self.errors = {RspStatus.ADDR_ERROR: 0, RspStatus.OPCODE_ERROR: 0}
        self.taken: list[tuple[type, int]] = []
        self.answered: list[tuple[type, int]] = []

    def request(self, req: M2SReq | M2SRwD) -> None:
        self.model.send(req.message())
        (out,) = self.model.receive()
        rsp = response(out)
        key = (type(rsp), rsp.tag)
        assert key not in self.expect, f"tag {rsp.tag} reused while owed"
        self.expect[key] = rsp
        self.taken.append(key)
        if rsp.status in self.errors:
            self.errors[RspStatus(rsp.status)] += 1

    def response(self, rsp: S2MNdr | S2MDrs) -> None:
        key = (type(rsp), rsp.tag)
        assert key in self.expect, f"{rsp} answers nothing owed"
        want = self.expect.pop(key)
        assert rsp == want, f"got {rsp}, the model says {want}"
        self.answered.append(key)


# ---- testbench ---------------------------------------------------------------------------------
class TB:
    def __init__(self, dut, seed: int, idle: float = 0.2, backpressure: float = 0.3,
                 mem_stall: float = 0.2) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.lanes = int(dut.ReadLanes.value)
        self.depth = int(dut.RspDepth.value)
        self.sb = Scoreboard()
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
        clk = dut.clk_i
        self.req = StreamSource(dut, clk, "req_valid_i", "req_ready_o", "req_i", M2SReq,
                                on_accept=self.sb.request)
        self.rwd = StreamSource(dut, clk, "rwd_valid_i", "rwd_ready_o", "rwd_i", M2SRwD,
                                on_accept=self.sb.request)
        self.ndr = StreamSink(dut, clk, "ndr_valid_o", "ndr_ready_i", "ndr_o", S2MNdr,
                              on_receive=self.sb.response)
        self.drs = StreamSink(dut, clk, "drs_valid_o", "drs_ready_i", "drs_o", S2MDrs,
                              on_receive=self.sb.response)
        self.mem = LineMemory(dut, clk, self.lanes, self.rng)
        for chan, p in ((self.req, idle), (self.rwd, idle), (self.ndr, backpressure),
                        (self.drs, backpressure), (self.mem, mem_stall)):
            chan.set_pause_generator(random_pauses(random.Random(self.rng.random()), p))
        self.flagged = {RspStatus.ADDR_ERROR: 0, RspStatus.OPCODE_ERROR: 0}
        dut.hold_i.value = 0
        cocotb.start_soon(self._flags())

    async def _flags(self) -> None:
        """err_o and err_opcode_o pulse once per request answered with that error; hold_i
        keeps every request out."""
        d = self.dut
        while True:
            await RisingEdge(d.clk_i)
            await ReadOnly()
            self.flagged[RspStatus.ADDR_ERROR] += int(d.err_o.value)
            self.flagged[RspStatus.OPCODE_ERROR] += int(d.err_opcode_o.value)
            if int(d.hold_i.value):
                assert not int(d.req_ready_o.value) and not int(d.rwd_ready_o.value)

    async def reset(self) -> None:
        self.dut.rst_ni.value = 0
        for _ in range(3):
            await RisingEdge(self.dut.clk_i)
        self.dut.rst_ni.value = 1

    def send(self, ops: list[M2SReq | M2SRwD]) -> None:
        for op in ops:
            (self.req if isinstance(op, M2SReq) else self.rwd).send(op)

    async def drain(self, max_cycles: int = 100_000) -> None:
        """Until every request was taken and answered, and the memory owes nothing."""
        for _ in range(max_cycles):
            await RisingEdge(self.dut.clk_i)
            if (self.req.idle and self.rwd.idle and not self.sb.expect
                    and not self.mem.owed):
                break
        else:
            raise AssertionError(f"stuck: {len(self.sb.expect)} responses owed")
        assert self.flagged == self.sb.errors, (self.flagged, self.sb.errors)


def random_ops(rng: random.Random, n: int, lines: list[int], bad: float = 0.0
               ) -> list[M2SReq | M2SRwD]:
    """Reads and full or partial writes of ``lines``; with probability ``bad`` an address past
    memory or misaligned, and (independently) an opcode the channel does not define."""
    ops: list[M2SReq | M2SRwD] = []
    tags = {M2SReq: 0, M2SRwD: 0}
    for _ in range(n):
        kind = M2SRwD if rng.random() < 0.5 else M2SReq
        addr = rng.choice(lines)
        if rng.random() < bad:
            addr = rng.choice([addr + MEM_BYTES, addr + 8, (1 << 64) - 64])
        tag, tags[kind] = tags[kind], tags[kind] + 1
        if kind is M2SReq:
            op = rng.choice([0, 2, 0xFF]) if rng.random() < bad else M2SReqOpcode.MEM_RD
            ops.append(M2SReq(op, tag, addr))
        else:
            be = rng.choice([FULL, rng.getrandbits(64)])
            op = M2SRwDOpcode.MEM_WR if be == FULL else M2SRwDOpcode.MEM_WR_PTL
            if rng.random() < bad:
                op = rng.choice([0, 3, 0xFF])
            ops.append(M2SRwD(op, tag, addr, be, rng.getrandbits(512)))
    return ops


def some_lines(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(0, MEM_BYTES // 64) * 64 for _ in range(n)] + [MEM_BYTES - 64]


@cocotb.test()
async def random_reads_and_partial_writes(dut):
    """Idle gaps, back-pressure everywhere; reads see the writes before them; the answers of
    the lanes leave request order."""
    tb = TB(dut, seed=1)
    await tb.reset()
    tb.send(random_ops(tb.rng, 800, some_lines(tb.rng, 24)))
    await tb.drain()
    assert len(tb.sb.answered) == 800
    reads_taken = [k for k in tb.sb.taken if k[0] is S2MDrs]
    reads_done = [k for k in tb.sb.answered if k[0] is S2MDrs]
    assert reads_done != reads_taken


@cocotb.test()
async def full_rate_without_pauses(dut):
    """No idle, no back-pressure: requests every cycle, Req and RwD taking turns."""
    tb = TB(dut, seed=2, idle=0.0, backpressure=0.0, mem_stall=0.0)
    await tb.reset()
    tb.send(random_ops(tb.rng, 400, some_lines(tb.rng, 8)))
    await tb.drain()
    assert len(tb.sb.answered) == 400


@cocotb.test()
async def errors_for_bad_addresses_and_opcodes(dut):
    """Past memory, misaligned, the top of the address space, undefined opcodes: answered with
    the model's status, never reaching memory, flagged on err_o / err_opcode_o."""
    tb = TB(dut, seed=3)
    await tb.reset()
    ops = random_ops(tb.rng, 500, [tb.rng.randrange(0, 64) * 64 for _ in range(8)], bad=0.3)
    tb.send(ops)
    await tb.drain()
    good = len(tb.sb.taken) - sum(tb.sb.errors.values())
    assert tb.mem.requests == good
    assert tb.sb.errors[RspStatus.ADDR_ERROR] > 0 and tb.sb.errors[RspStatus.OPCODE_ERROR] > 0


@cocotb.test()
async def a_host_that_stops_taking_responses_back_pressures(dut):
    """With both response channels stopped the slave takes at most RspDepth requests per
    channel, then none; when the host comes back every response still arrives."""
    tb = TB(dut, seed=4)
    tb.ndr.set_pause_generator(always())
    tb.drs.set_pause_generator(always())
    await tb.reset()
    tb.send(random_ops(tb.rng, 300, some_lines(tb.rng, 16)))
    for _ in range(2000):
        await RisingEdge(dut.clk_i)
    taken = tb.req.accepted + tb.rwd.accepted
    assert 0 < taken <= 2 * tb.depth, taken
    assert tb.req.accepted <= tb.depth and tb.rwd.accepted <= tb.depth
    tb.ndr.set_pause_generator(never())
    tb.drs.set_pause_generator(random_pauses(tb.rng, 0.5))
    await tb.drain()
    assert len(tb.sb.answered) == 300


@cocotb.test()
async def hold_keeps_requests_out(dut):
    """hold_i on at random: no request is taken while it is (checked each cycle), and all
    complete."""
    tb = TB(dut, seed=5)
    await tb.reset()
    tb.send(random_ops(tb.rng, 300, some_lines(tb.rng, 16)))
    for _ in range(3000):
        await RisingEdge(dut.clk_i)
        dut.hold_i.value = int(tb.rng.random() < 0.6)
        if tb.req.idle and tb.rwd.idle:
            break
    dut.hold_i.value = 0
    await tb.drain()
    assert len(tb.sb.answered) == 300


# ---- rule breakers (each run alone: see test_cxl_mem_slave_assertion_fires) -------------------
READ = M2SReq(M2SReqOpcode.MEM_RD, 0, 0)
WRITE = M2SRwD(M2SRwDOpcode.MEM_WR, 0, 0, FULL, 0)


async def bare(dut) -> None:
    """Clock and reset, every input driven by the test itself: a read and a write of line 0
    on the request channels (not offered)."""
    dut.req_i.value = READ.pack()
    dut.rwd_i.value = WRITE.pack()
    await clock_and_reset(dut, ("req_valid_i", "rwd_valid_i", "ndr_ready_i", "drs_ready_i",
                                "mem_ready_i", "mem_cpl_valid_i", "mem_rd_valid_i", "hold_i",
                                "mem_cpl_tag_i", "mem_rd_tag_i", "mem_rd_data_i"))


@cocotb.test()
async def breaks_req_valid_dropped(dut):
    """The host withdraws a read the slave has not taken (hold_i keeps it from taking it)."""
    await bare(dut)
    dut.hold_i.value = 1
    dut.req_valid_i.value = 1
    await wait_cycles(dut, 2)
    dut.req_valid_i.value = 0
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_rwd_payload_changed(dut):
    """The host changes a write's address while it waits."""
    await bare(dut)
    dut.hold_i.value = 1
    dut.rwd_valid_i.value = 1
    await wait_cycles(dut, 2)
    dut.rwd_i.value = replace(WRITE, addr=64).pack()
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_read_data_unasked(dut):
    """The memory returns a line no read asked for."""
    await bare(dut)
    await pulse(dut, "mem_rd_valid_i")


@cocotb.test()
async def breaks_write_completion_unasked(dut):
    """The memory completes a write nobody made."""
    await bare(dut)
    await pulse(dut, "mem_cpl_valid_i")


@cocotb.test()
async def breaks_drs_fifo_overrun(dut):
    """RspDepth reads taken and answered into lane 0's FIFO while the host takes nothing;
    then the memory pushes one line more into the full FIFO."""
    await bare(dut)
    depth = int(dut.RspDepth.value)
    dut.mem_ready_i.value = 1
    dut.req_valid_i.value = 1
    for tag in range(depth):
        dut.req_i.value = replace(READ, tag=tag).pack()
        for _ in range(10):  # held until taken
            await ReadOnly()
            taken = int(dut.req_ready_o.value)
            await RisingEdge(dut.clk_i)
            if taken:
                break
        else:
            raise AssertionError(f"read {tag} not taken")
    dut.req_valid_i.value = 0
    for _ in range(depth + 1):  # the last one nobody asked for
        dut.mem_rd_valid_i.value = 1
        await wait_cycles(dut, 1)
    dut.mem_rd_valid_i.value = 0
    await wait_cycles(dut, 3)


FIRES = [
    ("breaks_req_valid_dropped", {"ReqHeld"}),
    ("breaks_rwd_payload_changed", {"RwdHeld"}),
    # the stray answer also leaves the budget counter one below zero the cycle after
    ("breaks_read_data_unasked", {"ReadDataOwed", "DrsBudget"}),
    ("breaks_write_completion_unasked", {"WriteCplOwed", "NdrBudget"}),
    ("breaks_drs_fifo_overrun", {"DrsFifoOverrun", "FifoOverflow", "ReadDataOwed",
                                 "DrsBudget"}),
]


@pytest.mark.rtl
def test_cxl_mem_slave():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_cxl_mem_slave", PARAMS, sources=CXL_MEM_SLAVE,
               test_filter=WITHIN_CONTRACT, unoptimized=True)


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_cxl_mem_slave_assertion_fires(case: str, fired: set[str]):
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_cxl_mem_slave", PARAMS, sources=CXL_MEM_SLAVE, test_filter=case,
               expect_assertion=fired, unoptimized=True)
