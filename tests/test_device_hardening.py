"""The device against a host that does not follow the rules, on the ``model`` and ``rtl``
backends alike (issue 20, defects 6 to 8): ring registers that point outside the queue's region
or device memory, or change under a running descriptor; port messages with undefined opcodes;
descriptor addresses that wrap 64 bits; the completion's ``sq_head``. Each bad value is refused
and counted, never served, and never crashes a backend."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nelssa.driver import cxl, regs
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import COMPLETION, DESCRIPTOR, DescOpcode, DescStatus
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.device import ModelDevice

REGION = (1 << 20, 1 << 28)
SQ_ADDR, CQ_ADDR = REGION[0], REGION[0] + 0x1000
GOOD_RINGS = {"REGION_BASE": REGION[0], "REGION_LIMIT": REGION[1], "SQ_BASE": SQ_ADDR,
              "SQ_SIZE": 16, "CQ_BASE": CQ_ADDR, "CQ_SIZE": 16}
OUTSIDE = 0x2000
"""A line of device memory below the region: nothing the device does for the queue may land
here (a CQ_BASE of 2^40 + OUTSIDE would, if the 40-bit memory address wrapped)."""


@pytest.fixture(params=["model", pytest.param("rtl", marks=pytest.mark.rtl)])
def port(request):
    """A fresh device of each backend (the RTL library is built once and shared)."""
    if request.param == "model":
        yield ModelDevice()
        return
    from nelssa.hw.sim.device import RtlDevice

    p = RtlDevice()
    yield p
    p.close()


def bf16(rng: np.random.Generator, shape) -> np.ndarray:
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def _queue(port, seed: int, clusters: int, tokens: int):
    """A command queue over REGION and one KV region of ``clusters`` equal clusters (head_dim
    64): the device, the Memory API, the queue, the KV region and the random generator."""
    dev = Device(port)
    mem = MemoryApi(dev, *REGION)
    cq = CommandQueue(mem, entries=16)
    rng = np.random.default_rng(seed)
    region = mem.alloc_kv(0, 0, 0, 64, clusters, clusters * tokens)
    mem.write_clusters(region, [bf16(rng, (tokens, 64))] * clusters,
                       [bf16(rng, (tokens, 64))] * clusters)
    return dev, mem, cq, region, rng


def _configure(dev: Device, **override: int) -> None:
    """Disable, write every ring register (good values unless overridden), enable."""
    dev.reg_write("CONTROL", 0)
    for name, value in {**GOOD_RINGS, **override}.items():
        if name.endswith("_SIZE"):
            dev.reg_write(name, value)
        else:
            dev.reg_write64(name, value)
    dev.reg_write("CONTROL", 1)


def _nop(desc_id: int) -> bytes:
    return DESCRIPTOR.build({"opcode": DescOpcode.NOP, "flags": 0, "head_dim": 0, "q_heads": 0,
                             "reserved0": 0, "num_ids": 0, "desc_id": desc_id,
                             "num_clusters": 0, "q_addr": 0, "dir_addr": 0, "ids_addr": 0,
                             "out_addr": 0, "scale": 0, "reserved1": bytes(12)})


BAD_RINGS = [
    ("CQ_BASE", (1 << 40) | OUTSIDE),    # above memory (and below the region, mod 2^40)
    ("CQ_BASE", 1 << 36),                # the first byte above the 64 GiB memory
    ("CQ_BASE", CQ_ADDR + 8),            # not line aligned
    ("CQ_BASE", REGION[1] - 128),        # the ring (256 bytes) straddles the region's limit
    ("CQ_BASE", OUTSIDE),                # in memory, below the region
    ("CQ_SIZE", 0),
    ("CQ_SIZE", 12),                     # not a power of two
    ("CQ_SIZE", 1 << 17),                # more than 65536 entries
    ("SQ_BASE", OUTSIDE),
    ("SQ_BASE", (1 << 64) - 512),        # SQ_BASE + SQ_SIZE * 64 wraps 64 bits
    ("SQ_SIZE", 1),
    ("SQ_SIZE", 3),
    ("SQ_SIZE", 1 << 20),
    ("REGION_LIMIT", REGION[0]),         # an empty region holds no ring
    ("REGION_BASE", SQ_ADDR + 64),       # the SQ starts below the region
]


def _ring_registers_outside_the_region_or_memory_are_refused(port) -> None:
    """Defect 6: an enable with bad ring registers is refused (counted, STATUS says so), so no
    descriptor is fetched from, and no completion written to, anywhere but the region."""
    dev = Device(port)
    dev.mem_write(SQ_ADDR, _nop(1) * 16)
    _configure(dev)  # good rings work: the NOP completes (the check below can fail)
    dev.reg_write("SQ_TAIL", 1)
    port.run_until_idle(100_000)
    assert dev.reg_read("PERF_DESC_DONE") == 1 and dev.reg_read("CQ_TAIL") == 1
    for name, value in BAD_RINGS:
        _configure(dev, **{name: value})
        dev.reg_write("SQ_TAIL", 1)
        port.run_until_idle(100_000)
        assert dev.reg_read("PERF_DESC_DONE") == 1, f"{name}={value:#x}: a descriptor ran"
        assert dev.mem_read(OUTSIDE, 64) == bytes(64), f"{name}={value:#x}: wrote outside"
        assert dev.reg_read("STATUS") & 0b110 == 0b100, f"{name}={value:#x}: enabled"
        assert dev.reg_read("CONTROL") == 0
    if isinstance(port, ModelDevice):
        assert max(port.mem.image()) < REGION[1]
    assert dev.reg_read(regs.offset("ERR_RING")) == len(BAD_RINGS)
    _configure(dev)  # an enable that is taken clears the status bit
    assert dev.reg_read("STATUS") & 0b110 == 0b010


def _ring_registers_cannot_change_under_a_running_descriptor(port) -> None:
    """Defect 6: CQ_SIZE = 0 (and a CQ_BASE above memory) written while a descriptor runs
    crashed the model and moved the RTL's ring; both refuse such writes now, and the descriptor
    completes into the ring it was fetched with."""
    dev, _mem, cq, region, rng = _queue(port, seed=7, clusters=4, tokens=16)
    ids = cq.submit([AttnRequest(region, bf16(rng, (2, 64)), [0, 1, 2, 3])])
    # disabled while the descriptor runs: the device is still busy, so the rings stay put
    dev.reg_write("CONTROL", 0)
    writes = [("CQ_SIZE", 0), ("CQ_BASE_LO", OUTSIDE), ("CQ_BASE_HI", 1 << 8), ("SQ_SIZE", 0),
              ("REGION_LIMIT_LO", 0), ("REGION_BASE_LO", 0)]
    for name, value in writes:
        dev.reg_write(name, value)
    out = cq.wait(ids, timeout_cycles=2_000_000)
    assert out[ids[0]].status == DescStatus.OK and out[ids[0]].o is not None
    assert dev.reg_read("CONTROL") == 0
    assert dev.reg_read("CQ_SIZE") == 16 and dev.reg_read("SQ_SIZE") == 16
    assert dev.reg_read64("CQ_BASE") == cq.cq_addr
    assert dev.reg_read64("REGION_BASE") == REGION[0]
    assert dev.mem_read(OUTSIDE, 64) == bytes(64)
    assert dev.reg_read(regs.offset("ERR_RING")) == len(writes)
    # enabled and idle, refused too; disabled and idle, taken
    dev.reg_write("CONTROL", 1)
    dev.reg_write("CQ_SIZE", 0)
    assert dev.reg_read("CQ_SIZE") == 16
    dev.reg_write("CONTROL", 0)
    dev.reg_write("CQ_SIZE", 8)
    assert dev.reg_read("CQ_SIZE") == 8
    assert dev.reg_read(regs.offset("ERR_RING")) == len(writes) + 1


def _exchange(port, message: bytes, seen: list[bytes]) -> list:
    """Send one message, run the device until it has answered (or 2,000 cycles); the answers
    parsed (and their bytes appended to ``seen``)."""
    port.send(message)
    got = []
    for _ in range(32):
        got += port.receive()
        if got:
            break
        port.advance(64)
    port.advance(64)
    got += port.receive()
    seen += got
    return [cxl.parse_message(m) for m in got]


def _undefined_opcodes_get_an_error_response_and_change_nothing(port) -> list[bytes]:
    """Defect 7: an MMIO request, an M2S Req and an M2S RwD with undefined opcodes each get one
    error response (tag echoed), read or write nothing, and are counted in ERR_OPCODE."""
    dev = Device(port)
    dev.mem_write(0x40, bytes(range(64)))
    control = regs.offset("CONTROL")
    statuses, seen = [], []
    for op in (2, 0xFF):
        got = _exchange(port, cxl.build_message(cxl.Channel.MMIO_REQ, {
            "opcode": op, "tag": 0x70 + op, "offset": control, "value": 1}), seen)
        assert len(got) == 1 and int(got[0].channel) == cxl.Channel.MMIO_RSP
        assert got[0].body.tag == 0x70 + op and got[0].body.status != cxl.RspStatus.OK
        statuses.append(got[0].body.status)
    assert dev.reg_read("CONTROL") == 0
    for op in (0, 2, 0xFF):
        got = _exchange(port, cxl.build_message(cxl.Channel.M2S_REQ, {
            "opcode": op, "tag": 0x100 + op, "addr": 0x40}), seen)
        assert len(got) == 1 and int(got[0].channel) == cxl.Channel.S2M_DRS
        body = got[0].body
        assert body.tag == 0x100 + op and body.status != cxl.RspStatus.OK
        assert body.data == bytes(64), "an undefined Req opcode was served as a read"
        statuses.append(body.status)
    for op in (0, 3, 0xFF):
        got = _exchange(port, cxl.build_message(cxl.Channel.M2S_RWD, {
            "opcode": op, "tag": 0x200 + op, "addr": 0x80, "byte_enable": cxl.FULL_LINE,
            "data": b"\xAA" * 64}), seen)
        assert len(got) == 1 and int(got[0].channel) == cxl.Channel.S2M_NDR
        assert got[0].body.tag == 0x200 + op and got[0].body.status != cxl.RspStatus.OK
        statuses.append(got[0].body.status)
    assert dev.mem_read(0x80, 64) == bytes(64), "an undefined RwD opcode wrote memory"
    assert dev.mem_read(0x40, 64) == bytes(range(64))
    assert statuses == [cxl.RspStatus.OPCODE_ERROR] * 8
    assert dev.reg_read(regs.offset("ERR_OPCODE")) == 8
    assert dev.reg_read("ERR_MEM") == 0
    return seen


def _completion_sq_head_counts_the_entries_fetched(port) -> None:
    """Defect 8: a completion's sq_head is the number of submission entries fetched so far
    (mod 65536), as driver/formats.py documents: it keeps counting when the ring wraps."""
    dev = Device(port)
    mem = MemoryApi(dev, *REGION)
    cq = CommandQueue(mem, entries=4)
    heads = []
    next_id = 1
    for _ in range(4):  # 3 per round: the 4-entry ring wraps three times
        cq.submit_raw([_nop(next_id + i) for i in range(3)])
        port.run_until_idle(100_000)
        raw = dev.mem_read(cq.cq_addr, 4 * 16)
        entries = [COMPLETION.parse(raw[16 * i:16 * i + 16]) for i in range(4)]
        new = {e.desc_id: e.sq_head for e in entries if next_id <= e.desc_id < next_id + 3}
        heads += [new[i] for i in sorted(new)]
        assert len(cq.poll()) == 3
        next_id += 3
    assert heads == list(range(1, 13))


def _addresses_that_wrap_64_bits_are_outside_the_region(port) -> None:
    """A descriptor or cluster address within a few KB of 2^64 passes ``addr + len > limit``
    once the sum wraps; the device must see it as outside the region (ERR_REGION) and read or
    write nothing for it, as the model always did."""
    dev, mem, cq, region, _rng = _queue(port, seed=3, clusters=2, tokens=4)
    near = (1 << 64) - 64
    dev.mem_write(region.dir_addr + 16, np.array([near], "<u8").tobytes())  # cluster 1's K/V
    q_addr, ids_addr, ids1_addr = (mem.alloc.alloc(128), mem.alloc.alloc(64),
                                   mem.alloc.alloc(64))
    out_addr = mem.alloc.alloc(1024)
    dev.mem_write(ids_addr, np.array([0], "<u4").tobytes())
    dev.mem_write(ids1_addr, np.array([1], "<u4").tobytes())
    good = {"opcode": DescOpcode.ATTN, "flags": 0, "head_dim": 64, "q_heads": 1,
            "reserved0": 0, "num_ids": 1, "desc_id": 0, "num_clusters": 2, "q_addr": q_addr,
            "dir_addr": region.dir_addr, "ids_addr": ids_addr, "out_addr": out_addr,
            "scale": 0x3E000000, "reserved1": bytes(12)}
    cases = [{"q_addr": near}, {"dir_addr": near}, {"ids_addr": near}, {"out_addr": near},
             {"ids_addr": ids1_addr}, {}]
    cq.submit_raw([DESCRIPTOR.build({**good, **c, "desc_id": 10 + i})
                   for i, c in enumerate(cases)])
    done = {}
    for _ in range(200):
        done.update({o.desc_id: o.status for o in cq.poll()})
        if len(done) == len(cases):
            break
        port.advance(1000)
    assert [done.get(10 + i) for i in range(len(cases))] == [DescStatus.ERR_REGION] * 5 + [
        DescStatus.OK]


def _outputs_on_the_rings_are_refused(port) -> None:
    """A descriptor whose output would overwrite submission entries (still to be fetched) or
    completion entries (forging them) completes with ERR_REGION and writes nothing; one just
    past the completion ring runs."""
    dev, mem, cq, region, _rng = _queue(port, seed=5, clusters=1, tokens=4)
    q_addr, ids_addr = mem.alloc.alloc(128), mem.alloc.alloc(64)
    dev.mem_write(ids_addr, np.array([0], "<u4").tobytes())
    rings_before = dev.mem_read(cq.sq_addr, 16 * 64 + 16 * 16)
    desc = {"opcode": DescOpcode.ATTN, "flags": 0, "head_dim": 64, "q_heads": 1,
            "reserved0": 0, "num_ids": 1, "desc_id": 0, "num_clusters": 1, "q_addr": q_addr,
            "dir_addr": region.dir_addr, "ids_addr": ids_addr, "scale": 0x3E000000,
            "reserved1": bytes(12)}
    outs = [cq.sq_addr + 8 * 64, cq.sq_addr + 15 * 64, cq.cq_addr - 64, cq.cq_addr + 128,
            cq.cq_addr + 16 * 16]
    cq.submit_raw([DESCRIPTOR.build({**desc, "out_addr": a, "desc_id": 30 + i})
                   for i, a in enumerate(outs)])
    port.run_until_idle(1_000_000)
    ring_area = dev.mem_read(cq.sq_addr, 16 * 64 + 16 * 16)
    done = {o.desc_id: o.status for o in cq.poll()}
    assert [done.get(30 + i) for i in range(len(outs))] == [DescStatus.ERR_REGION] * 4 + [
        DescStatus.OK]
    # the rings hold the descriptors and their completions, nothing else
    assert ring_area[8 * 64:16 * 64] == rings_before[8 * 64:16 * 64]
    cpl = ring_area[16 * 64:]
    assert cpl[5 * 16:] == rings_before[16 * 64 + 5 * 16:]
    assert [COMPLETION.parse(cpl[16 * i:16 * i + 16]).desc_id for i in range(5)] == [
        30, 31, 32, 33, 34]


def _reads_beyond_the_register_window_latch_nothing(port) -> None:
    """An offset above the 4 KB window whose low 12 bits name a _LO register reads as unmapped
    and must not latch that register's _HI partner (the RTL decoded only the low bits)."""
    dev = Device(port)
    assert dev.reg_read(0x1000 | regs.offset("SQ_BASE_LO")) == regs.UNMAPPED_VALUE
    dev.reg_write("SQ_BASE_HI", 5)
    assert dev.reg_read("SQ_BASE_HI") == 5
    dev.reg_read("SQ_BASE_LO")  # a mapped LO read latches: the HI read returns that value
    dev.reg_write("SQ_BASE_HI", 6)
    assert dev.reg_read("SQ_BASE_HI") == 5 and dev.reg_read("SQ_BASE_HI") == 6
    assert dev.reg_read("ERR_UNMAPPED") == 1


def _register_storm(port, seed: int = 20, steps: int = 300) -> list[bytes]:
    """A seeded host gone wrong: ring registers (good, bad, half-written 64-bit values),
    enables, doorbells and CQ_HEAD values in and out of range, undefined opcodes, reads of
    unmapped and aliased offsets, with NOPs to fetch. The device settles after every step, so
    what it ends in depends on nothing but the sequence. Rings that pass the checks never overlap
    (a completion over an entry not yet fetched would make the result depend on timing)."""
    dev = Device(port)
    rng = random.Random(seed)
    seen: list[bytes] = []
    dev.mem_write(SQ_ADDR, b"".join(_nop(i + 1) for i in range(128)))  # 8 KB of NOPs
    values = {
        "SQ_BASE": [SQ_ADDR, SQ_ADDR + 0x400, SQ_ADDR + 8, OUTSIDE, (1 << 40) | SQ_ADDR,
                    (1 << 64) - 64],
        "CQ_BASE": [CQ_ADDR + 0xF000, CQ_ADDR + 0xF400, CQ_ADDR + 0xF010, OUTSIDE, 1 << 36,
                    REGION[1] - 16],
        "SQ_SIZE": [2, 4, 16, 64, 0, 1, 3, 1 << 17, 0xFFFF_FFFF],
        "CQ_SIZE": [2, 8, 16, 64, 0, 12, 1 << 16, 1 << 17],
        "REGION_BASE": [REGION[0], REGION[0] - 0x1000, SQ_ADDR + 64, 1 << 63],
        "REGION_LIMIT": [REGION[1], 1 << 40, (1 << 64) - 1, REGION[0], CQ_ADDR + 0xF400],
    }
    _configure(dev)
    for _ in range(steps):
        action = rng.random()
        if action < 0.08:  # the host starts over with good rings (one register bad, maybe)
            bad = rng.choice(sorted(values))
            _configure(dev, **({bad: rng.choice(values[bad])} if rng.random() < 0.3 else {}))
        elif action < 0.45:
            name = rng.choice(sorted(values))
            value = rng.choice(values[name])
            if name.endswith("_SIZE"):
                dev.reg_write(name, value)
            elif rng.random() < 0.2:  # one half only
                dev.reg_write(name + rng.choice(["_LO", "_HI"]), rng.getrandbits(32))
            else:
                dev.reg_write64(name, value)
        elif action < 0.6:
            dev.reg_write("CONTROL", rng.choice([0, 1, 1, 3, 0xFFFF_FFFF]))
        elif action < 0.75:
            dev.reg_write("SQ_TAIL", rng.choice([0, 1, 3, 15, 16, 63, 64, 1 << 31]))
        elif action < 0.85:
            dev.reg_write("CQ_HEAD", rng.choice([0, 1, 7, 15, 16, 63, 64]))
        elif action < 0.95:
            ch = rng.choice([cxl.Channel.MMIO_REQ, cxl.Channel.M2S_REQ, cxl.Channel.M2S_RWD])
            op = rng.choice([0, 1, 2, 3, 0x7F, 0xFF])
            body = {"opcode": op, "tag": rng.getrandbits(16), "offset": rng.choice(
                [regs.offset("CONTROL"), regs.offset("CQ_SIZE"), 0x1000 | 0x40, 0xFFC]),
                "value": rng.getrandbits(32), "byte_enable": cxl.FULL_LINE,
                "addr": rng.choice([1 << 36, 0x41, (1 << 64) - 64, SQ_ADDR + 0x1FC0]),
                "data": rng.randbytes(64)}
            _exchange(port, cxl.build_message(ch, body), seen)
        else:
            off = rng.choice([0x1000 | regs.offset("CQ_BASE_LO"), 0xFFFF_F000 | 0x60, 0x3,
                              regs.offset("STATUS"), regs.offset("CQ_BASE_HI")])
            dev.reg_read(off)
        port.run_until_idle(1_000_000)
        if rng.random() < 0.3:  # a host that consumes its completions now and then
            dev.reg_write("CQ_HEAD", dev.reg_read("CQ_TAIL"))
    assert len(seen) > 10 and dev.reg_read("ERR_RING") > 10 and dev.reg_read("PERF_DESC_DONE")
    return seen


# time and work counters differ between backends by design
TIMING_REGS = {"PERF_CYCLES_LO", "PERF_CYCLES_HI", "PERF_BUSY_LO", "PERF_BUSY_HI"}
SCENARIOS = [_ring_registers_outside_the_region_or_memory_are_refused,
             _ring_registers_cannot_change_under_a_running_descriptor,
             _undefined_opcodes_get_an_error_response_and_change_nothing,
             _completion_sq_head_counts_the_entries_fetched,
             _addresses_that_wrap_64_bits_are_outside_the_region,
             _outputs_on_the_rings_are_refused,
             _reads_beyond_the_register_window_latch_nothing,
             _register_storm]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_scenario(port, scenario):
    """Each defect's reproduction (it failed before the fix on the backends it names)."""
    scenario(port)
    image = port.mem.image() if isinstance(port, ModelDevice) else port.image()
    assert not image or max(image) < REGION[1], "the device wrote above the region"
    assert not {a for a in image if a < REGION[0]} - {0x40}, "the device wrote below the region"


def _snapshot(port, responses: list[bytes] | None) -> dict[str, object]:
    dev = Device(port)
    state: dict[str, object] = {r.name: dev.reg_read(r.name) for r in regs.REGISTERS
                                if r.name not in TIMING_REGS}
    state["memory"] = port.mem.image() if isinstance(port, ModelDevice) else port.image()
    state["responses"] = responses or []
    return state


@pytest.mark.rtl
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_model_and_rtl_agree_bit_for_bit(scenario):
    """The same bad sequence on both backends: every register but the time counters, every
    line of device memory and every response, bit for bit."""
    from nelssa.hw.sim.device import RtlDevice

    model = ModelDevice()
    want = _snapshot(model, scenario(model))
    rtl = RtlDevice()
    try:
        got = _snapshot(rtl, scenario(rtl))
        assert rtl.violations == 0
    finally:
        rtl.close()
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key
