"""Reliable links over faults (issue 20, "Also required"): each request runs once and in order
whatever the link loses, duplicates, damages or reorders; a retransmitted request is answered by
replaying the reply it got, never by running it again; what a server holds is bounded; every
damaged frame is refused by a check; and decode steps over a faulty RoCE and CXL link give the
bits of a run without faults (the long campaign: nelssa/experiments/link_faults.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zmq
from test_remote_device import _peak_rss, _raw, _run

from nelssa.driver.remote import RemotePort
from nelssa.driver.remote_server import serve_port
from nelssa.emu.link.frame import (
    Frame,
    FrameKind,
    LinkErrorCode,
    decode_frame,
    encode_frame,
    parse_error,
)
from nelssa.emu.link.model import LinkFaults, link_preset
from nelssa.emu.link.transport import (
    LinkClient,
    LinkLimits,
    LinkServer,
    Reply,
    RetryPolicy,
    ServiceRequest,
)
from nelssa.experiments import link_faults
from nelssa.hw.model.device import ModelDevice

SPEC = link_preset("roce-400g")


class Chain:
    """A handler that is not idempotent: each request extends a hash chain, and the reply is
    the chain so far; a request run twice, or out of order, shows in every later reply."""

    def __init__(self) -> None:
        self.state = b""
        self.ran: list[bytes] = []

    def __call__(self, request: ServiceRequest) -> Reply:
        self.ran.append(request.payload)
        self.state = hashlib.sha256(self.state + request.payload).digest()
        return Reply(request.op, self.state, request.arrive_ps + 1000)

    @staticmethod
    def expected(payloads: list[bytes]) -> list[bytes]:
        state, out = b"", []
        for p in payloads:
            state = hashlib.sha256(state + p).digest()
            out.append(state)
        return out


class Served:
    def __init__(self, endpoint: str, handler, limits: LinkLimits | None = None,
                 faults: LinkFaults | None = None) -> None:
        self.server = LinkServer(endpoint, handler, SPEC, limits=limits, faults=faults)
        self.thread = threading.Thread(target=self.server.serve, args=(20,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.stop()
        self.thread.join(10)
        self.server.close()


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[tuple[Served, Chain]]:
    handler = Chain()
    s = Served(f"ipc://{tmp_path}/chain", handler, LinkLimits(window=4))
    yield s, handler
    s.close()


def _dealer(endpoint: str) -> zmq.Socket:
    return _raw(endpoint, zmq.DEALER)


def _req(seq: int, ref: int, payload: bytes) -> list[bytes]:
    return encode_frame(Frame(FrameKind.REQUEST, 1, seq, ref, 0, payload))


def _quiet(raw: zmq.Socket, seconds: float = 0.3) -> bool:
    return not raw.poll(int(seconds * 1000))


def test_each_request_runs_once_and_in_order(chain: tuple[Served, Chain]) -> None:
    served, handler = chain
    raw = _dealer(served.server.endpoint)
    try:
        # frame 2 overtakes frame 1: held until 1 arrives, then both run, 1 first
        raw.send_multipart(_req(2, 1, b"b"))
        assert _quiet(raw)
        raw.send_multipart(_req(1, 1, b"a"))
        got = [decode_frame(raw.recv_multipart()) for _ in range(2)]
        want = Chain.expected([b"a", b"b"])
        assert [(f.ref, f.payload) for f in got] == [(1, want[0]), (2, want[1])]
        assert handler.ran == [b"a", b"b"]
        # a retransmission is answered by replaying the reply, not by running it again
        raw.send_multipart(_req(1, 1, b"a"))
        again = decode_frame(raw.recv_multipart())
        assert (again.ref, again.payload) == (1, want[0])
        assert handler.ran == [b"a", b"b"] and served.server.replays == 1
        # the acknowledgement floor releases what the client has: a stale copy gets nothing
        raw.send_multipart(_req(3, 3, b"c"))
        assert decode_frame(raw.recv_multipart()).payload == Chain.expected([b"a", b"b", b"c"])[2]
        raw.send_multipart(_req(2, 1, b"b"))
        assert _quiet(raw)
        assert handler.ran == [b"a", b"b", b"c"]
        # a reply pushed out of the window (4 per client) is not run again: REPLY_LOST
        for seq in range(4, 9):
            raw.send_multipart(_req(seq, 3, bytes([seq])))
            decode_frame(raw.recv_multipart())
        raw.send_multipart(_req(3, 3, b"c"))
        lost = decode_frame(raw.recv_multipart())
        assert lost.kind == FrameKind.ERROR
        code, text = parse_error(lost.payload)
        assert code == LinkErrorCode.REPLY_LOST and "ran once" in text
        assert len(handler.ran) == 8
    finally:
        raw.close()


def test_what_a_server_holds_is_bounded(tmp_path: Path) -> None:
    handler = Chain()
    s = Served(f"ipc://{tmp_path}/bounded", handler,
               LinkLimits(window=8, early_bytes=450, max_peers=2))
    raw = _dealer(s.server.endpoint)
    try:
        # frame 1 is lost; of the 19 that overtake it the server holds 4 (450 bytes) and drops
        # the rest (their sender sends them again)
        for seq in range(2, 21):
            raw.send_multipart(_req(seq, 1, bytes(100)))
        assert _quiet(raw)
        assert s.server.overflow == 15 and s.server._early_bytes == 400
        raw.send_multipart(_req(1, 1, b"first"))
        assert [decode_frame(raw.recv_multipart()).ref for _ in range(5)] == [1, 2, 3, 4, 5]
        for seq in range(6, 21):  # sent again, in order: served
            raw.send_multipart(_req(seq, 6, bytes(100)))
        assert [decode_frame(raw.recv_multipart()).ref for _ in range(15)] == list(range(6, 21))
        assert len(handler.ran) == 20 and s.server._early_bytes == 0
        assert len(s.server._peers[next(iter(s.server._peers))].replies) <= 8
        # peers beyond max_peers: the one heard from least recently is forgotten
        others = [_dealer(s.server.endpoint) for _ in range(2)]
        for o in others:
            o.send_multipart(_req(1, 1, b"x"))
            decode_frame(o.recv_multipart())
            o.close()
        assert len(s.server._peers) == 2
    finally:
        raw.close()
        s.close()


def test_oversize_message_refused_before_it_is_read(tmp_path: Path) -> None:
    """Defect 10 of issue 20 (link server): a message part beyond the largest legal payload is
    refused by ZeroMQ from its announced size (the sender is cut off) before it is read; a
    legal client is served meanwhile. The server is a process of its own, so its memory is
    its own."""
    endpoint = f"ipc://{tmp_path}/big"
    code = ("import sys\n"
            "from nelssa.emu.link.model import link_preset\n"
            "from nelssa.emu.link.transport import LinkLimits, LinkServer, Reply\n"
            "s = LinkServer(sys.argv[1], lambda r: Reply(r.op, r.payload[::-1], r.arrive_ps),\n"
            "               link_preset('roce-400g'), limits=LinkLimits(max_payload=1 << 20))\n"
            "print('ready', flush=True)\n"
            "s.serve()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, endpoint], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        client = LinkClient(endpoint, SPEC, timeout_s=10)
        legal = bytes(range(256)) * 4096  # 1 MiB: the largest legal payload
        assert client.call(1, legal).payload == legal[::-1]
        peak = _peak_rss(proc.pid)
        raw = _dealer(endpoint)
        t0 = time.monotonic()
        raw.send_multipart([bytes(32), bytes(128 << 20)], copy=False)
        assert client.call(1, b"abc").payload == b"cba"
        took = time.monotonic() - t0
        raw.close()
        grew = _peak_rss(proc.pid) - peak
        assert took < 2.0 and grew < 32 << 20, (took, grew >> 20)
        assert client.call(1, legal).payload == legal[::-1]
        client.close()
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


FAULTS = LinkFaults(drop=0.05, duplicate=0.05, corrupt=0.05, late=0.05, late_ms=2.0,
                    delay_ns=100.0, seed=11)
FAST = RetryPolicy(rto_s=0.02, min_rto_s=0.02, max_rto_s=0.2, window=16)


def _check_refusals(client: dict[str, int], server: dict[str, int], both: bool) -> None:
    """Every damaged frame was refused by the end that received it. With faults at one end
    only, the counts match exactly; with faults at both ends a frame one end damaged may be
    lost or doubled by the other's, so each end's own damage is a lower bound."""
    if both:
        assert server["frames_bad"] >= server["in_corrupted"] > 0
        assert client["frames_bad"] >= client["in_corrupted"] > 0
    else:
        assert server["frames_bad"] == client["out_corrupted"] > 0
        assert client["frames_bad"] == client["in_corrupted"] > 0


@pytest.mark.parametrize("both", [False, True], ids=["client-end", "both-ends"])
def test_many_requests_over_faults_are_exact(tmp_path: Path, both: bool) -> None:
    """600 pipelined requests to a non-idempotent handler with frames dropped, duplicated,
    corrupted and reordered (5 % each, both directions): every reply is the bits of a run
    without faults, the handler ran each request once and in order, and every damaged frame
    was refused."""
    handler = Chain()
    s = Served(f"ipc://{tmp_path}/faulty", handler,
               faults=replace(FAULTS, seed=12) if both else None)
    client = LinkClient(s.server.endpoint, SPEC, timeout_s=30, faults=FAULTS, retry=FAST)
    payloads = [i.to_bytes(4, "little") * (1 + i % 50) for i in range(600)]
    try:
        pending = [client.request(1, p) for p in payloads]
        replies = [p.result().payload for p in pending]
        client.set_faults(None)  # what the injectors held back goes out now
    finally:
        s.close()
    client.drain(0.3)  # the server's last (late) copies
    assert replies == Chain.expected(payloads)
    assert handler.ran == payloads
    c, sv = client.counters(), s.server.counters()
    for end in (c, sv) if both else (c,):  # every kind of fault, both directions
        assert min(end[f"{w}_{k}"] for w in ("out", "in")
                   for k in ("dropped", "duplicated", "corrupted", "delayed")) > 0, end
    _check_refusals(c, sv, both)
    assert c["retransmits"] > 0 and sv["replays"] > 0 and sv["internal_errors"] == 0
    client.close()


@pytest.mark.parametrize("both", [False, True], ids=["host-end", "both-ends"])
def test_device_calls_over_a_faulty_cxl_link_are_exact(tmp_path: Path, both: bool) -> None:
    """The device RPC over faults (RECEIVE and ADVANCE are not idempotent; a short exchange,
    so 20 % of each fault): the same output bits as an in-process model device, every damaged
    frame refused."""
    endpoint = f"ipc://{tmp_path}/dev"
    faults = replace(FAULTS, drop=0.2, duplicate=0.2, corrupt=0.2, late=0.2)
    counters: dict[str, int] = {}
    server = threading.Thread(target=lambda: counters.update(serve_port(
        ModelDevice(), endpoint, faults=replace(faults, seed=13) if both else None)),
        daemon=True)
    server.start()
    port = RemotePort(endpoint, timeout_ms=30_000, faults=faults, retry=FAST)
    o, lse, done = _run(port)
    o_ref, lse_ref, _ = _run(ModelDevice())
    assert done == 1
    assert np.array_equal(o.view(np.uint32), o_ref.view(np.uint32))
    assert np.array_equal(lse.view(np.uint32), lse_ref.view(np.uint32))
    port.link.set_faults(None)
    port.shutdown()
    server.join(10)
    port.link.drain(0.3)
    c = port.link.counters()
    assert c["retransmits"] > 0
    _check_refusals(c, counters, both)
    port.close()


def test_decode_over_faulty_roce_and_cxl_links_gives_the_same_bits(capsys) -> None:
    """The link-fault campaign (nelssa/experiments/link_faults.py) at a small scale: decode
    steps over a node whose RoCE and CXL links drop, duplicate, corrupt and reorder frames (5 %
    each, both directions), against a fresh node without faults."""
    code = link_faults.main(["--steps", "2", "--devices", "1", "--roce-rate", "0.05",
                             "--cxl-rate", "0.05", "--json"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["problems"] == []
    assert out["faulty"]["digest"] == out["clean"]["digest"]
    s = out["sums"]
    assert s["cxl_dropped"] > 0 and s["cxl_retransmits"] > 0
    assert s["cxl_down_corrupted"] + s["cxl_up_corrupted"] > 0
