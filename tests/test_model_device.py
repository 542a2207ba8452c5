"""The model device through the driver: attention results bit-identical to the engine model,
bad descriptors (through the driver and past it) completing with their status and touching
nothing, register and memory edge cases, ring wrap-around."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver import regs
from nelssa.driver.command import AttnRequest, CommandQueue, RingFullError
from nelssa.driver.device import Device, DeviceError
from nelssa.driver.formats import DESCRIPTOR, DescOpcode, DescStatus
from nelssa.driver.memory import KvCapacityError, MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.engine import EngineParams, attend

REGION = (1 << 20, 1 << 28)


def bf16(rng: np.random.Generator, shape) -> np.ndarray:
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


@pytest.fixture
def stack():
    port = ModelDevice()
    dev = Device(port)
    mem = MemoryApi(dev, *REGION)
    return port, dev, mem, CommandQueue(mem, entries=16)


def test_random_workloads_match_the_engine_model(stack):
    port, dev, mem, cq = stack
    rng = np.random.default_rng(5)
    cases = []
    for session, (hd, heads, n_clusters, n_sel) in enumerate(
            [(128, 4, 40, 12), (64, 1, 8, 8), (128, 8, 300, 256), (64, 3, 20, 1)]):
        tokens = rng.integers(1, 65, n_clusters)
        ks = [bf16(rng, (t, hd)) for t in tokens]
        vs = [bf16(rng, (t, hd)) for t in tokens]
        region = mem.alloc_kv(session, 0, 0, hd, n_clusters, int(tokens.sum()))
        assert mem.write_clusters(region, ks, vs) == list(range(n_clusters))
        sel = rng.choice(n_clusters, n_sel, replace=False).tolist()
        q = bf16(rng, (heads, hd))
        cases.append((AttnRequest(region, q, sel), ks, vs))
    ids = cq.submit([c[0] for c in cases])
    out = cq.wait(ids)
    for desc_id, (req, ks, vs) in zip(ids, cases, strict=True):
        ref = attend(EngineParams(), req.q, [ks[i] for i in req.cluster_ids],
                     [vs[i] for i in req.cluster_ids], np.float32(1 / np.sqrt(req.q.shape[1])))
        got = out[desc_id]
        assert got.status == DescStatus.OK
        assert np.array_equal(got.o.view(np.uint32), ref.o)
        assert np.array_equal(got.lse.view(np.uint32), ref.lse)
    assert dev.reg_read("PERF_DESC_DONE") == 4
    assert dev.reg_read64("PERF_BYTES_READ") > 0 and port.cycle > 0


def test_clusters_read_back_and_append(stack):
    _, _, mem, _ = stack
    rng = np.random.default_rng(1)
    region = mem.alloc_kv(9, 3, 1, 64, 4, 100)
    ks, vs = [bf16(rng, (5, 64)), bf16(rng, (7, 64))], [bf16(rng, (5, 64)), bf16(rng, (7, 64))]
    mem.write_clusters(region, ks[:1], vs[:1])
    assert mem.append_chunk(region, ks[1:], vs[1:]) == [1]
    for i in range(2):
        k, v = mem.read_cluster(region, i)
        assert np.array_equal(k, ks[i]) and np.array_equal(v, vs[i])
    with pytest.raises(KvCapacityError, match="holds 4 clusters"):
        mem.write_clusters(region, [ks[0]] * 3, [vs[0]] * 3)
    with pytest.raises(ValueError, match=r"must both be \(tokens, 64\)"):
        mem.write_clusters(region, [ks[0]], [vs[1]])


def _raw(**fields) -> bytes:
    d = {"opcode": DescOpcode.ATTN, "flags": 0, "head_dim": 64, "q_heads": 1, "reserved0": 0,
         "num_ids": 1, "desc_id": 0, "num_clusters": 1, "q_addr": 0, "dir_addr": 0,
         "ids_addr": 0, "out_addr": 0, "scale": 0x3E000000, "reserved1": bytes(12)}
    d.update(fields)
    return DESCRIPTOR.build(d)


def test_bad_descriptors_past_the_driver_complete_with_their_status(stack):
    port, dev, mem, cq = stack
    rng = np.random.default_rng(2)
    region = mem.alloc_kv(0, 0, 0, 64, 2, 64)
    mem.write_clusters(region, [bf16(rng, (4, 64))], [bf16(rng, (4, 64))])
    q_addr, ids_addr = mem.alloc.alloc(128), mem.alloc.alloc(64)
    out_addr = mem.alloc.alloc(4096)
    dev.mem_write(ids_addr, np.array([0], "<u4").tobytes())
    good = {"q_addr": q_addr, "dir_addr": region.dir_addr, "ids_addr": ids_addr,
            "out_addr": out_addr}
    bad_ids = mem.alloc.alloc(64)
    dev.mem_write(bad_ids, np.array([7], "<u4").tobytes())
    cases = {
        DescStatus.ERR_OPCODE: _raw(opcode=9, **good),
        DescStatus.ERR_RESERVED: _raw(reserved1=b"\x01" + bytes(11), **good),
        DescStatus.ERR_HEAD_DIM: _raw(head_dim=96, **good),
        DescStatus.ERR_QHEADS: _raw(q_heads=0, **good),
        DescStatus.ERR_COUNT: _raw(num_ids=0, **good),
        DescStatus.ERR_ALIGN: _raw(**{**good, "q_addr": q_addr + 4}),
        DescStatus.ERR_REGION: _raw(**{**good, "out_addr": 0}),
        DescStatus.ERR_CLUSTER_ID: _raw(**{**good, "ids_addr": bad_ids}),
    }
    outside = {a: b for a, b in port.mem.image().items()
               if not cq.sq_addr <= a < cq.sq_addr + 16 * 64
               and not cq.cq_addr <= a < cq.cq_addr + 16 * 16}
    raws = [DESCRIPTOR.build({**DESCRIPTOR.parse(r), "desc_id": 100 + i})
            for i, r in enumerate(cases.values())]
    raws.append(_raw(desc_id=200, **good))  # and a good one behind them
    cq.submit_raw(raws)
    port.run_until_idle(1_000_000)
    done = {o.desc_id: o.status for o in cq.poll()}
    for i, status in enumerate(cases):
        assert done[100 + i] == status, status.name
    assert done[200] == DescStatus.OK
    after = {a: b for a, b in port.mem.image().items()
             if not cq.sq_addr <= a < cq.sq_addr + 16 * 64
             and not cq.cq_addr <= a < cq.cq_addr + 16 * 16}
    changed = {a for a in set(outside) | set(after) if outside.get(a) != after.get(a)}
    assert changed and min(changed) >= out_addr and max(changed) < out_addr + 4096, \
        "only the good descriptor's output may change"
    assert dev.reg_read("ERR_DESC") == len(cases)


def test_driver_rejects_bad_requests_before_writing(stack):
    _port, dev, mem, cq = stack
    rng = np.random.default_rng(3)
    region = mem.alloc_kv(0, 0, 0, 128, 4, 64)
    mem.write_clusters(region, [bf16(rng, (3, 128))], [bf16(rng, (3, 128))])
    q = bf16(rng, (2, 128))
    with pytest.raises(ValueError, match="cluster id 1 not in the region"):
        cq.submit([AttnRequest(region, q, [0, 1])])
    with pytest.raises(TypeError, match="bf16 bits"):
        cq.submit([AttnRequest(region, q.astype(np.float32), [0])])
    with pytest.raises(ValueError, match="9 query heads"):
        cq.submit([AttnRequest(region, bf16(rng, (9, 128)), [0])])
    with pytest.raises(ValueError, match="head_dim 64"):
        cq.submit([AttnRequest(region, bf16(rng, (2, 64)), [0])])
    with pytest.raises(RingFullError, match="15 ring entries free"):
        cq.submit([AttnRequest(region, q, [0])] * 16)
    assert dev.reg_read("SQ_TAIL") == 0 and dev.reg_read("ERR_DESC") == 0


def test_ring_wraps_many_times(stack):
    _port, dev, mem, cq = stack
    rng = np.random.default_rng(4)
    region = mem.alloc_kv(0, 0, 0, 64, 4, 64)
    k, v = bf16(rng, (2, 64)), bf16(rng, (2, 64))
    mem.write_clusters(region, [k], [v])
    q = bf16(rng, (1, 64))
    ref = attend(EngineParams(), q, [k], [v], np.float32(0.125))
    for _ in range(5):
        ids = cq.submit([AttnRequest(region, q, [0])] * 11)
        out = cq.wait(ids)
        assert all(np.array_equal(o.o.view(np.uint32), ref.o) for o in out.values())
    assert dev.reg_read("PERF_DESC_DONE") == 55


def test_registers_unmapped_read_only_and_doorbell_overrun(stack):
    port, dev, _, _cq = stack
    assert dev.reg_read(0xFFC) == regs.UNMAPPED_VALUE
    dev.reg_write(0xFF8, 1)
    assert dev.reg_read("ERR_UNMAPPED") == 2
    dev.reg_write("MAGIC", 0)
    dev.reg_write("SQ_HEAD", 3)
    assert dev.reg_read("MAGIC") == regs.DEVICE_MAGIC and dev.reg_read("SQ_HEAD") == 0
    assert dev.reg_read("ERR_RO_WRITE") == 2
    dev.reg_write("SQ_TAIL", 16)  # outside a 16-entry ring
    assert dev.reg_read("SQ_TAIL") == 0 and dev.reg_read("ERR_DOORBELL") == 1
    port.run_until_idle(1000)  # nothing to do, returns


def test_memory_access_errors(stack):
    _, dev, _, _ = stack
    dev.mem_write(0x1003, b"hello, device")  # straddles nothing, partial line
    assert dev.mem_read(0x1000, 20)[3:16] == b"hello, device"
    with pytest.raises(ValueError, match="outside device memory"):
        dev.mem_read(dev.mem_bytes - 32, 64)
    with pytest.raises(DeviceError, match="ADDR_ERROR"):
        from nelssa.driver import cxl
        dev.port.send(cxl.mem_rd(1, dev.mem_bytes))
        dev._expect_ok(dev._collect({1}, cxl.Channel.S2M_DRS))
