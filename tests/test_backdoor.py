"""Bulk KV ingestion by backdoor (issue 24 item 1): the Memory API's writes through a device's
backdoor (``dma_write``) leave the same device memory, give the same attention results and meter
the same bytes (so the same emulated CXL time) as every line sent over CXL.mem, on the model
and rtl backends; partial lines keep their other bytes; a backdoor access after front-door
writes sees them."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver import cxl
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.host.pnm_node.devices import MeteredPort
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.sparse_memory import PAGE_BYTES, SparseMemory

BASE, LIMIT = 1 << 20, 1 << 26


def _clusters(seed: int, n: int = 7, head_dim: int = 64):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 33, n)  # odd sizes: clusters end inside a line
    def bf16(t):
        return (rng.standard_normal((t, head_dim)).astype(np.float32).view(np.uint32)
                >> 16).astype(np.uint16)
    return [bf16(int(t)) for t in tokens], [bf16(int(t)) for t in tokens]


def _ingest_and_attend(port, bulk: bool, seed: int):
    """Write a region's clusters (front door or back), attend over some; (metered bytes, O
    bits, LSE bits, the region, its Memory API, its command queue)."""
    metered = MeteredPort(port)
    dev = Device(metered, bulk=bulk)
    mem = MemoryApi(dev, BASE, LIMIT)
    metered.take()
    keys, values = _clusters(seed)
    region = mem.alloc_kv(seed, 0, 0, 64, 16, 512)
    mem.write_clusters(region, keys, values)
    written = metered.take()
    cq = CommandQueue(mem, entries=8)
    (i,) = cq.submit([AttnRequest(region, keys[0][:4], [6, 0, 3, 5])])
    out = cq.wait([i])[i]
    return (written, out.o.view(np.uint32).copy(), out.lse.view(np.uint32).copy(), region, mem,
            cq)


def test_model_front_and_back_door_agree():
    front, back = ModelDevice(), ModelDevice()
    wf, of, lf, *_ = _ingest_and_attend(front, bulk=False, seed=3)
    wb, ob, lb, *_ = _ingest_and_attend(back, bulk=True, seed=3)
    assert wf == wb and wf[0] > 0  # the same bytes metered: the same emulated CXL time
    assert np.array_equal(of, ob) and np.array_equal(lf, lb)
    assert front.mem.image() == back.mem.image()
    assert front.mem.line_count == back.mem.line_count
    assert front.cycle == back.cycle  # the model's time depends on what was run, not how


def test_sparse_memory_pages_hold_partial_writes():
    mem = SparseMemory(1 << 30)
    mem.write(PAGE_BYTES - 3, b"abcdefg")  # across a page boundary
    mem.write_line(0, bytes(range(64)), 0b101)
    assert mem.read(PAGE_BYTES - 4, 9) == b"\0abcdefg\0"
    assert mem.read(0, 3) == b"\x00\x00\x02"
    # lines written: line 0, the page's last line, the next page's first
    assert mem.line_count == 3 and sorted(mem.written()) == [0, PAGE_BYTES - 64, PAGE_BYTES]
    assert mem.read(1 << 29, 4) == bytes(4) and mem.line_count == 3


def test_model_backdoor_refuses_outside_memory():
    dev = ModelDevice()
    with pytest.raises(ValueError, match="outside device memory"):
        dev.dma_write(dev.config.mem_bytes - 2, b"abc")
    with pytest.raises(ValueError, match="outside device memory"):
        dev.dma_read(-1, 4)
    assert dev.mem.line_count == 0


@pytest.mark.rtl
@pytest.mark.shared_build  # the default device, which most RTL test files use
def test_rtl_front_and_back_door_agree():
    """One Verilated device (one per process): the clusters written by the front door, then
    other data by backdoor over the same bytes, then the clusters again by backdoor: the
    device memory is what the front door left, and attention gives the same bits."""
    from nelssa.hw.sim.device import RtlDevice

    port = RtlDevice()
    wf, of, lf, region, mem, cq = _ingest_and_attend(port, bulk=False, seed=5)
    image_front = port.image()
    lines_front = port.store_lines
    # overwrite the region's data by backdoor with noise, then write the clusters again
    port.dma_write(region.data_addr, np.random.default_rng(1).bytes(region.data_used))
    assert port.image() != image_front
    metered = mem.device.port
    mem.device.bulk = True
    keys, values = _clusters(5)
    region.clusters.clear()
    region.data_used = 0
    metered.take()
    mem.write_clusters(region, keys, values)
    assert metered.take() == wf  # the same bytes metered as the front door's
    assert port.image() == image_front and port.store_lines == lines_front
    (i,) = cq.submit([AttnRequest(region, keys[0][:4], [6, 0, 3, 5])])
    out = cq.wait([i])[i]
    assert np.array_equal(out.o.view(np.uint32), of)
    assert np.array_equal(out.lse.view(np.uint32), lf)
    # against the model: the same bits
    _, om, lm, *_ = _ingest_and_attend(ModelDevice(), bulk=True, seed=5)
    assert np.array_equal(of, om) and np.array_equal(lf, lm)

    # partial lines by backdoor keep their other bytes, and see front-door writes at once
    # (the device drains its DRAM controllers first)
    front = Device(port, bulk=False)
    addr = LIMIT + 4096
    front.mem_write(addr, bytes(range(1, 129)))  # two lines, posted writes in the controller
    port.dma_write(addr + 60, b"\xff" * 8)  # straddles the two lines
    want = bytearray(range(1, 129))
    want[60:68] = b"\xff" * 8
    assert port.dma_read(addr, 128) == bytes(want)
    assert front.mem_read(addr, 128) == bytes(want)
    assert port.violations == 0


def test_node_front_and_back_door_agree(tmp_path):
    """Through a node and its device processes: the same write timings (the CXL time the node
    charges), the same results and device cycles with the backdoor as with every line over
    CXL.mem (`node up --no-kv-backdoor`)."""
    from nelssa.host.pnm_node.client import NodeClient
    from tests.node_helpers import GROUP, HEAD_DIM, InProcessNode, Workload

    w = Workload.make(21, [0, 1, 2, 3], clusters=40)
    seen = []
    for backdoor in (False, True):
        node = InProcessNode(f"ipc://{tmp_path}/node-{backdoor}", 2, kv_backdoor=backdoor)
        try:
            with NodeClient(node.endpoint) as c:
                s = c.open_session(HEAD_DIM, GROUP)
                c.alloc_kv(s, 0, list(w.heads), w.max_clusters, w.max_tokens)
                writes = [c.write_kv(s, 0, h, d.keys, d.values).timing
                          for h, d in w.heads.items()]
                r = c.attend(s, 0, {h: d.q for h, d in w.heads.items()},
                             {h: d.ids for h, d in w.heads.items()})
                seen.append(([(t.cxl_ps, t.total_ps) for t in writes], r.device_cycles,
                             {h: (r.o[h].tobytes(), r.lse[h].tobytes()) for h in w.heads}))
        finally:
            node.stop()
    assert seen[0] == seen[1]
    assert all(cxl > 0 for cxl, _ in seen[0][0])


def test_file_memory_reads_and_counts_as_the_sparse_memory(tmp_path):
    """`device serve --memory-file`: device memory in a sparse file holds what the pages
    hold, line counts and written lines included; closing removes the file."""
    from nelssa.hw.model.sparse_memory import SparseFileMemory

    ram, disk = SparseMemory(1 << 30), SparseFileMemory(1 << 30, tmp_path / "dev.mem")
    rng = np.random.default_rng(1)
    for mem in (ram, disk):
        mem.write(PAGE_BYTES - 3, b"abcdefg")
        mem.write(5 * PAGE_BYTES, rng.integers(0, 256, 3 * PAGE_BYTES, np.uint8).tobytes())
        mem.write_line(0, bytes(range(64)), 0b101)
        mem.write_line(7 * PAGE_BYTES + 128, bytes(range(64, 128)), cxl.FULL_LINE)
        rng = np.random.default_rng(1)
    for addr, n in ((PAGE_BYTES - 4, 9), (0, 3), (5 * PAGE_BYTES - 10, 3 * PAGE_BYTES + 20),
                    (7 * PAGE_BYTES + 100, 100), (1 << 29, 4), ((1 << 30) - 8, 8)):
        assert disk.read(addr, n) == ram.read(addr, n)
    assert disk.line_count == ram.line_count and disk.written() == ram.written()
    assert disk.image() == ram.image() and disk.bytes_held == ram.bytes_held
    with pytest.raises(FileExistsError):
        SparseFileMemory(1 << 30, tmp_path / "dev.mem")
    disk.close()
    assert not (tmp_path / "dev.mem").exists()
    with pytest.raises(ValueError, match="closed"):
        disk.read(0, 1)
