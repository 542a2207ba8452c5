"""`nelssa device serve` in its own process, driven over a real ZeroMQ socket: the same results as
an in-process model device, errors reported back without killing the server, clean shutdown."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import zmq

from nelssa.driver import cxl, regs
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.driver.port import DDR5_COUNTERS
from nelssa.driver.remote import (
    DMA_READ_REQ,
    MAX_BATCH_MESSAGES,
    MAX_BATCH_PAYLOAD,
    MAX_DMA_BYTES,
    MAX_PORT_MESSAGE,
    MAX_RPC_PAYLOAD,
    RPC_REPLY,
    RPC_REQUEST,
    RemotePort,
    RpcErrorCode,
    RpcOp,
    RpcStatus,
    decode_ddr5_counts,
    decode_reply,
    decode_request,
    encode_ddr5_counts,
    encode_reply,
    encode_request,
)
from nelssa.emu.link.frame import (
    HEADER_BYTES,
    Frame,
    FrameKind,
    LinkErrorCode,
    decode_frame,
    encode_frame,
    parse_error,
)
from nelssa.emu.link.tokens import read_token
from nelssa.hw.model.device import ModelDevice


def test_call_payloads_literal_bytes():
    raw = encode_request(77, [b"ab", b"", b"xyz"])
    assert raw == bytes.fromhex("4d00000000000000" "02000000") + b"ab" + bytes(4) + \
        bytes.fromhex("03000000") + b"xyz"
    assert decode_request(raw) == (77, [b"ab", b"", b"xyz"])
    # the struct path is the construct spec
    assert RPC_REQUEST.build({"arg": 77, "messages": [b"ab", b"", b"xyz"]}) == raw
    rep = encode_reply(5, [b"q"], RpcStatus.PENDING)
    assert rep == bytes.fromhex("01" "0500000000000000" "01000000") + b"q"
    assert RPC_REPLY.build({"status": RpcStatus.PENDING, "value": 5, "messages": [b"q"]}) == rep
    assert decode_reply(rep) == (RpcStatus.PENDING, 5, [b"q"])
    assert decode_reply(encode_reply(2**64 - 1, [])) == (RpcStatus.OK, 2**64 - 1, [])
    with pytest.raises(ValueError, match="unknown status 7"):
        decode_reply(b"\x07" + bytes(8))
    with pytest.raises(ValueError, match="truncated"):
        decode_request(raw[:-1])
    with pytest.raises(ValueError, match="shorter than its 8-byte argument"):
        decode_request(b"\x01")
    with pytest.raises(ValueError, match="more than 4096 messages"):
        decode_request(encode_request(0, [b""] * (MAX_BATCH_MESSAGES + 1)))
    # the largest legal call: a full batch of the largest port message
    assert MAX_PORT_MESSAGE == 1 + 83  # an M2S RwD
    assert len(encode_request(0, [bytes(MAX_PORT_MESSAGE)] * 4096)) == MAX_BATCH_PAYLOAD
    # the largest call of all: a backdoor write
    assert MAX_RPC_PAYLOAD == 8 + MAX_DMA_BYTES


def _run(port) -> tuple[np.ndarray, np.ndarray, int]:
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 26)
    rng = np.random.default_rng(8)
    ks = [(rng.standard_normal((9, 64)).astype(np.float32).view(np.uint32) >> 16)
          .astype(np.uint16) for _ in range(6)]
    region = mem.alloc_kv(0, 0, 0, 64, 6, 64)
    mem.write_clusters(region, ks, ks[::-1])
    cq = CommandQueue(mem, entries=8)
    q = ks[0][:2]
    (desc,) = cq.submit([AttnRequest(region, q, [5, 0, 2])])
    out = cq.wait([desc])[desc]
    return out.o, out.lse, dev.reg_read("PERF_DESC_DONE")


def test_counters_answer_is_checked_whole():
    """A COUNTERS answer's DDR5 part: no message (not counted), or one of 1..8 whole
    sub-channel rows; anything else is refused, naming what came."""
    rows = [tuple(range(i, i + len(DDR5_COUNTERS))) for i in range(3)]
    msgs = encode_ddr5_counts(rows)
    assert decode_ddr5_counts(msgs, "dev") == rows
    assert encode_ddr5_counts(None) == [] and decode_ddr5_counts([], "dev") is None
    for bad in ([msgs[0][:-1]], msgs * 2, [b""], [bytes(9 * 72)], [msgs[0] + b"x"]):
        with pytest.raises(RuntimeError, match="dev: COUNTERS answered"):
            decode_ddr5_counts(bad, "dev")
    with pytest.raises(ValueError, match="at most 8"):
        encode_ddr5_counts(rows * 3)


@pytest.mark.parametrize("backend", ["model", pytest.param("rtl", marks=pytest.mark.rtl)])
def test_served_device_matches_in_process_model(tmp_path, backend):
    if backend == "rtl":  # build (or find) the library here, not inside the server's timeout
        from nelssa.hw.sim.device import build_library

        build_library()
    endpoint = f"ipc://{tmp_path}/dev0"
    proc = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "device", "serve",
                             "--backend", backend, "--endpoint", endpoint],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        remote = RemotePort(endpoint, timeout_ms=30_000)
        o, lse, done = _run(remote)
        local = ModelDevice()
        o_local, lse_local, _ = _run(local)
        assert done == 1
        assert np.array_equal(o.view(np.uint32), o_local.view(np.uint32))
        assert np.array_equal(lse.view(np.uint32), lse_local.view(np.uint32))
        # the cycle and the DDR5 counters over the link in one call (COUNTERS): a served model
        # device's are the in-process one's; the rtl device's, what its controllers counted
        cycle, counts = remote.counters()
        assert cycle == remote.cycle > 0
        assert counts is not None and len(counts) == 8
        assert sum(r[DDR5_COUNTERS.index("RD")] for r in counts) > 0
        if backend == "model":
            assert counts == local.ddr5_counts()
        # a malformed message is answered with an error naming it; the server carries on
        remote.send(b"\x07garbage")
        with pytest.raises(RuntimeError, match="device at ipc://"):
            remote.receive()
        assert remote.cycle > 0
        remote.shutdown()
        remote.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _peak_rss(pid: int) -> int:
    """Peak resident memory of a process, bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """A `nelssa device serve` process (model backend) and its endpoint."""
    endpoint = f"ipc://{tmp_path_factory.mktemp('dev')}/dev"
    proc = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "device", "serve",
                             "--backend", "model", "--endpoint", endpoint],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = RemotePort(endpoint, timeout_ms=30_000)
    port.cycle  # noqa: B018 - wait until it serves
    yield proc, endpoint, port
    port.close()
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _raw(endpoint: str, kind: int) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


def _authorized(endpoint: str) -> zmq.Socket:
    """A raw DEALER that presented the device's token (frame 1): its next frame is 2."""
    dealer = _raw(endpoint, zmq.DEALER)
    dealer.send_multipart(encode_frame(Frame(FrameKind.REQUEST, RpcOp.AUTH, 1, 0, 0,
                                             read_token(endpoint))))
    assert decode_frame(dealer.recv_multipart()).kind == FrameKind.REPLY
    return dealer


def test_malformed_messages_do_not_stop_the_server(device):
    """Defect 4 of issue 20: a two-part message made the REP server raise EFSM inside its own
    error handler, and the device process exited."""
    proc, endpoint, port = device
    req = _raw(endpoint, zmq.REQ)
    req.send_multipart([b"\x04" + bytes(8), b"a second part"])
    req.close()
    dealer = _raw(endpoint, zmq.DEALER)
    try:
        for parts in ([b"one part"], [b"two", b"parts"], [b"", b"", b""], [b"x" * 32, b""]):
            dealer.send_multipart(parts)
            frame = decode_frame(dealer.recv_multipart())
            assert frame.kind == FrameKind.ERROR
            assert parse_error(frame.payload)[0] == LinkErrorCode.MALFORMED_FRAME
    finally:
        dealer.close()
    assert proc.poll() is None
    assert port.cycle >= 0


def test_huge_advance_is_refused(device):
    """Defect 4 of issue 20: ADVANCE 2^64 - 1 was run, and then most requests failed."""
    _, endpoint, port = device
    before = port.cycle
    with pytest.raises(ValueError, match=r"cycles must be in 0\.\.16777216"):
        port.advance(2**64 - 1)
    # the server refuses it too, whoever sends it
    dealer = _authorized(endpoint)
    try:
        for op in (RpcOp.ADVANCE, RpcOp.RUN_UNTIL_IDLE):
            dealer.send_multipart(encode_frame(Frame(FrameKind.REQUEST, op, op, 0, 0,
                                                     encode_request(2**64 - 1, []))))
            frame = decode_frame(dealer.recv_multipart())
            code, text = parse_error(frame.payload)
            assert (frame.kind, code) == (FrameKind.ERROR, RpcErrorCode.BAD_REQUEST)
            assert "18446744073709551615 cycles" in text
    finally:
        dealer.close()
    port.advance(1000)
    assert port.cycle == before + 1000
    port.send(cxl.mmio_rd(1, regs.offset("VERSION")))
    (rsp,) = port.receive()
    assert cxl.parse_message(rsp).body.tag == 1


def test_oversize_message_refused_before_it_is_read(device):
    """Defect 10 of issue 20 (device server): a huge malformed message was read whole before it
    was refused. It is now refused by its announced size: quickly, in bounded memory."""
    proc, endpoint, port = device
    peak = _peak_rss(proc.pid)
    big = bytes(MAX_RPC_PAYLOAD + 1)
    blob = bytes(256 << 20)
    dealer = _raw(endpoint, zmq.DEALER)
    try:
        t0 = time.monotonic()
        dealer.send_multipart([bytes(HEADER_BYTES), big])
        dealer.send_multipart([bytes(HEADER_BYTES), blob])
        assert port.cycle >= 0  # a legal client is served meanwhile
        took = time.monotonic() - t0
    finally:
        dealer.close()
    assert took < 2.0
    grew = _peak_rss(proc.pid) - peak
    assert grew < 32 << 20, f"the server's peak memory grew by {grew >> 20} MiB"
    assert proc.poll() is None


def test_backdoor_over_the_link(device):
    """Device memory by backdoor (issue 24 item 1) through the device server: in calls of at
    most MAX_DMA_BYTES, each checked whole; a bad one is refused naming what is wrong, writes
    nothing, and the server goes on (a write beyond MAX_DMA_BYTES is beyond MAX_RPC_PAYLOAD,
    dropped unread: test_oversize_message_refused_before_it_is_read)."""
    proc, endpoint, port = device
    data = np.random.default_rng(2).bytes(MAX_DMA_BYTES + 1000)  # two calls
    addr = (1 << 30) + 17  # not line-aligned
    assert port.dma_write(addr, data)
    assert port.dma_read(addr, len(data)) == data
    mem_bytes = Device(port).mem_bytes
    dealer = _authorized(endpoint)
    bad = [
        (RpcOp.DMA_WRITE, b"\x01\x02", "shorter than its 8-byte address"),
        (RpcOp.DMA_WRITE, (mem_bytes - 8).to_bytes(8, "little") + bytes(16),
         "outside device memory"),
        (RpcOp.DMA_WRITE, (2**64 - 8).to_bytes(8, "little") + bytes(16), "outside device memory"),
        (RpcOp.DMA_READ, DMA_READ_REQ.build({"addr": 0, "length": MAX_DMA_BYTES + 1}), "at most"),
        (RpcOp.DMA_READ, DMA_READ_REQ.build({"addr": mem_bytes, "length": 1}),
         "outside device memory"),
        (RpcOp.DMA_READ, bytes(9), "it is 16 (address, length)"),
    ]
    try:
        for seq, (op, payload, why) in enumerate(bad, start=2):
            dealer.send_multipart(encode_frame(Frame(FrameKind.REQUEST, op, seq, 0, 0, payload)))
            frame = decode_frame(dealer.recv_multipart())
            code, text = parse_error(frame.payload)
            assert (frame.kind, code) == (FrameKind.ERROR, RpcErrorCode.BAD_REQUEST), text
            assert why in text, text
    finally:
        dealer.close()
    assert proc.poll() is None
    assert port.dma_read(mem_bytes - 8, 8) == bytes(8)  # the refused write left nothing
    assert port.dma_read(addr, 64) == data[:64]
