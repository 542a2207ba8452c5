"""The ``rtl`` backend (Verilated device in a shared library) against the ``model`` backend
through the same driver calls: same memory contents, same register behaviour, same errors."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver import cxl, regs
from nelssa.driver.device import Device, DeviceError
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model.device import ModelDevice

pytestmark = pytest.mark.rtl


@pytest.fixture(scope="module")
def rtl_port():
    from nelssa.hw.sim.device import RtlDevice

    port = RtlDevice()
    yield port
    port.close()


# counters of time and work differ between backends by design
TIMING_REGS = {"PERF_CYCLES_LO", "PERF_CYCLES_HI", "PERF_BUSY_LO", "PERF_BUSY_HI"}


def _workload(port) -> tuple[list[bytes], dict[str, int]]:
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 34)
    rng = np.random.default_rng(21)
    reads = []
    for session in range(3):
        hd = (64, 128)[session % 2]
        region = mem.alloc_kv(session, 0, session, hd, 40, 40 * 64)
        tokens = rng.integers(1, 65, 17)
        ks = [rng.integers(0, 1 << 16, (t, hd), dtype=np.uint16) for t in tokens]
        vs = [rng.integers(0, 1 << 16, (t, hd), dtype=np.uint16) for t in tokens]
        mem.write_clusters(region, ks[:9], vs[:9])
        mem.append_chunk(region, ks[9:], vs[9:])
        for cid in (0, 8, 9, 16):
            k, v = mem.read_cluster(region, cid)
            assert np.array_equal(k, ks[cid]) and np.array_equal(v, vs[cid])
        reads.append(dev.mem_read(region.dir_addr, 17 * 16))
        reads.append(dev.mem_read(region.data_addr, region.data_used))
    # partial writes at odd offsets, across lines, at the very end of memory
    dev.mem_write(0x2_0003, bytes(range(200)))
    dev.mem_write(dev.mem_bytes - 5, b"tail!")
    reads.append(dev.mem_read(0x2_0000, 256))
    reads.append(dev.mem_read(dev.mem_bytes - 64, 64))
    # register behaviour
    dev.reg_read(0xFFC)
    dev.reg_write(0x800, 7)
    dev.reg_write("CAPS", 0)
    dev.reg_write("SQ_SIZE", 8)
    dev.reg_write("SQ_TAIL", 9)  # outside the ring: ignored, counted
    dev.reg_write64("REGION_LIMIT", 0x1234_5678_9ABC)
    with pytest.raises(DeviceError, match="ADDR_ERROR"):
        port.send(cxl.mem_rd(99, dev.mem_bytes))
        dev._expect_ok(dev._collect({99}, cxl.Channel.S2M_DRS))
    with pytest.raises(DeviceError, match="ADDR_ERROR"):
        port.send(cxl.mem_wr(98, 0x40 + 8, bytes(64)))  # misaligned
        dev._expect_ok(dev._collect({98}, cxl.Channel.S2M_NDR))
    values = {r.name: dev.reg_read(r.name) for r in regs.REGISTERS if r.name not in TIMING_REGS}
    values["REGION_LIMIT (64-bit)"] = dev.reg_read64("REGION_LIMIT")
    return reads, values


def test_rtl_and_model_agree_on_memory_and_registers(rtl_port):
    rtl_reads, rtl_regs = _workload(rtl_port)
    model_reads, model_regs = _workload(ModelDevice())
    assert rtl_reads == model_reads
    assert rtl_regs == model_regs
    assert rtl_regs["ERR_UNMAPPED"] == 2 and rtl_regs["ERR_RO_WRITE"] == 1
    assert rtl_regs["ERR_DOORBELL"] == 1 and rtl_regs["ERR_MEM"] == 2
    assert rtl_regs["REGION_LIMIT (64-bit)"] == 0x1234_5678_9ABC
    assert rtl_port.violations == 0


def test_malformed_messages_are_refused(rtl_port):
    with pytest.raises(ValueError, match="not a host-to-device message: channel 3"):
        rtl_port.send(bytes([3, 0, 1, 0, 0]))
    with pytest.raises(ValueError, match="13 bytes"):
        rtl_port.send(cxl.mem_rd(1, 0) + b"\x00")
    assert rtl_port.receive() == []
