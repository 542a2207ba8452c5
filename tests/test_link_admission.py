"""Admission control of a LinkServer (issue 20, the soak): a server that cannot keep up refuses
what its queue cannot hold at once, with BUSY, instead of letting requests wait without bound;
a flooding client fills only its own share of the queue; a client's stream runs in the order it
was sent even across refusals; and every request taken in gets an answer, stopping included.

Before the fix, a request waited unseen in the sockets until the server got to it (the soak's
p50 latency was 25 s at 10x the sustainable rate) and no answer said the server was full: the
tests below that expect BUSY failed (no request was ever refused)."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import zmq

from nelssa.emu.link.frame import Frame, FrameKind, LinkErrorCode, decode_frame, encode_frame
from nelssa.emu.link.model import link_preset
from nelssa.emu.link.transport import (
    WINDOW,
    LinkClient,
    LinkLimits,
    LinkServer,
    RemoteError,
    Reply,
    ServiceRequest,
)

SPEC = link_preset("roce-400g")
SERVICE_S = 0.1
"""Wall time the slow handler takes per request: the server takes in what arrived only
between two requests, so a refusal comes within one request's time."""


class Slow:
    """A handler that takes SERVICE_S a request and extends a per-client hash chain (a request
    run twice or out of order shows), noting the deepest queue it saw."""

    def __init__(self) -> None:
        self.ran: dict[bytes, list[bytes]] = {}
        self.state: dict[bytes, bytes] = {}
        self.server: LinkServer | None = None
        self.deepest = 0

    def __call__(self, request: ServiceRequest) -> Reply:
        assert self.server is not None
        self.deepest = max(self.deepest, self.server.queued)
        time.sleep(SERVICE_S)
        self.ran.setdefault(request.peer, []).append(request.payload)
        st = hashlib.sha256(self.state.get(request.peer, b"") + request.payload).digest()
        self.state[request.peer] = st
        return Reply(request.op, st, request.arrive_ps + 1000)


class Served:
    def __init__(self, endpoint: str, handler: Slow, limits: LinkLimits, **kw) -> None:
        self.server = handler.server = LinkServer(endpoint, handler, SPEC, limits=limits, **kw)
        self.thread = threading.Thread(target=self.server.serve, args=(20,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.stop()
        self.thread.join(10)
        self.server.close()


def _outcomes(pending) -> list[tuple[str, int | bytes]]:
    out = []
    for p in pending:
        try:
            out.append(("ok", p.result().payload))
        except RemoteError as e:
            out.append(("err", e.code))
    return out


def test_a_flood_is_refused_at_once_and_what_ran_kept_its_order(tmp_path) -> None:
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/flood", handler, LinkLimits(max_queued=4))
    c = LinkClient(s.server.endpoint, SPEC, timeout_s=20)
    try:
        payloads = [i.to_bytes(4, "little") for i in range(24)]
        start = time.monotonic()
        pending = [c.request(1, p) for p in payloads]
        # all 24 would take 2.4 s to run; the refused hear so after the one running
        assert pending[-1].wait(8 * SERVICE_S), "a flood's last request got no answer at once"
        refusal_s = time.monotonic() - start
        got = _outcomes(pending)
    finally:
        c.close()
        s.close()
    kinds = [k for k, _ in got]
    assert kinds.count("ok") >= 4 and kinds.count("err") >= 10, kinds
    assert {v for k, v in got if k == "err"} == {LinkErrorCode.BUSY}
    assert refusal_s < 8 * SERVICE_S
    # what ran is a prefix of the stream, in order: nothing after the first refusal ran
    first_refused = kinds.index("err")
    assert set(kinds[first_refused:]) == {"err"}, kinds
    ran = handler.ran[c.routing_id]
    assert ran == payloads[:first_refused]
    chain, state = [], b""
    for p in ran:
        state = hashlib.sha256(state + p).digest()
        chain.append(state)
    assert [v for _, v in got[:first_refused]] == chain
    assert s.server.counters()["busy"] == kinds.count("err")
    assert handler.deepest <= 4


def test_sent_again_after_a_refusal_it_runs(tmp_path) -> None:
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/again", handler, LinkLimits(max_queued=2))
    c = LinkClient(s.server.endpoint, SPEC, timeout_s=20)
    try:
        got = _outcomes([c.request(1, bytes([i])) for i in range(8)])
        refused = [i for i, (k, _) in enumerate(got) if k == "err"]
        assert refused
        # in order, after the refusal, one at a time (a burst of them would be refused too)
        again_got = [_outcomes([c.request(1, bytes([i]))])[0] for i in refused]
    finally:
        c.close()
        s.close()
    assert [k for k, _ in again_got] == ["ok"] * len(refused)
    assert handler.ran[c.routing_id] == [bytes([i]) for i in range(8)]


def test_a_flooding_client_fills_only_its_share(tmp_path) -> None:
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/share", handler, LinkLimits(max_queued=8))
    flood = LinkClient(s.server.endpoint, SPEC, timeout_s=20)
    polite = LinkClient(s.server.endpoint, SPEC, timeout_s=20)
    try:
        flooded = [flood.request(1, bytes([i])) for i in range(40)]
        assert flooded[-1].wait(8 * SERVICE_S)  # refused: the queue is full, all the flood's
        asked = [polite.request(1, bytes([i])) for i in range(3)]
        polite_got = _outcomes(asked)
        flood_got = _outcomes(flooded)
    finally:
        flood.close()
        polite.close()
        s.close()
    assert [k for k, _ in polite_got] == ["ok"] * 3, polite_got
    assert [k for k, _ in flood_got].count("ok") <= 9
    assert [k for k, _ in flood_got].count("err") >= 30


def test_a_lone_client_on_two_connections_is_never_refused(tmp_path) -> None:
    """The default queue holds a window on each of a client's two connections (a GPU node and
    its bulk queue pair), so a lone client's full pipeline never sees BUSY."""
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/lone", handler, LinkLimits(),
               admission_group=lambda peer: b"one client")
    a = LinkClient(s.server.endpoint, SPEC, timeout_s=60)
    b = LinkClient(s.server.endpoint, SPEC, timeout_s=60)
    try:
        pending = [c.request(1, bytes([i % 256])) for i in range(WINDOW - 1) for c in (a, b)]
        got = _outcomes(pending)
    finally:
        a.close()
        b.close()
        s.close()
    assert all(k == "ok" for k, _ in got)
    assert s.server.counters()["busy"] == 0
    assert handler.deepest >= WINDOW  # the queue held more than one connection's window


def test_always_admitted_ops_are_queued_when_the_queue_is_full(tmp_path) -> None:
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/free", handler, LinkLimits(max_queued=2), always_admitted={7})
    c = LinkClient(s.server.endpoint, SPEC, timeout_s=20)
    try:
        full = [c.request(1, bytes([i])) for i in range(6)]
        assert full[-1].wait(8 * SERVICE_S)  # refused: the queue is full
        # sent before this client collected its refusals: work is refused, freeing is not
        freeing = [c.request(7, b"free"), c.request(7, b"status")]
        work = c.request(1, b"work")
        assert _outcomes([work]) == [("err", LinkErrorCode.BUSY)]
        assert [k for k, _ in _outcomes(freeing)] == ["ok", "ok"]
        assert "err" in [k for k, _ in _outcomes(full)]
    finally:
        c.close()
        s.close()
    assert handler.ran[c.routing_id][-2:] == [b"free", b"status"]


def _raw(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTING_ID, b"\x01raw-admission")
    sock.connect(endpoint)
    return sock


def _take(sock: zmq.Socket, n: int, timeout_s: float = 5.0) -> list[Frame]:
    out = []
    end = time.monotonic() + timeout_s
    while len(out) < n and sock.poll(max(1, int((end - time.monotonic()) * 1000))):
        out.append(decode_frame(sock.recv_multipart()))
    return out


def test_a_copy_of_a_waiting_request_gets_its_reply_too(tmp_path) -> None:
    """A copy that arrives while its original waits in the queue is answered with the
    original's reply once it has run (a replay, as a copy arriving after it would be), never
    REPLY_LOST, and the request runs once. Found by the frame fuzzer's long campaign: the copy
    of a queued frame went unanswered, unlike a copy that came after its reply."""
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/dup", handler, LinkLimits(max_queued=8))
    sock = _raw(s.server.endpoint)
    try:
        frames = [encode_frame(Frame(FrameKind.REQUEST, 1, seq, 1, 0, bytes([seq])))
                  for seq in (1, 2, 3)]
        for f in frames:
            sock.send_multipart(f)
        time.sleep(SERVICE_S / 2)
        sock.send_multipart(frames[2])  # a copy of one still waiting to run
        got = _take(sock, 4)
        extra = _take(sock, 1, 0.5)
    finally:
        sock.close()
        s.close()
    assert [(f.kind, f.ref) for f in got] == [(FrameKind.REPLY, 1), (FrameKind.REPLY, 2),
                                              (FrameKind.REPLY, 3), (FrameKind.REPLY, 3)]
    assert got[2].payload == got[3].payload and extra == []
    assert handler.ran[b"\x01raw-admission"] == [b"\x01", b"\x02", b"\x03"]  # once each
    assert s.server.counters()["replays"] == 1


def test_a_copy_below_the_clients_floor_is_dropped_even_while_it_waits(tmp_path) -> None:
    """A copy of a queued frame that arrives after a later frame acknowledged it (its ``ref``
    past it) is stale: it draws no answer, as it would not had the original already run.
    Found by the 100,000-frame campaign (3 extra replies)."""
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/floor", handler, LinkLimits(max_queued=8))
    sock = _raw(s.server.endpoint)
    try:
        first = encode_frame(Frame(FrameKind.REQUEST, 1, 1, 1, 0, b"\x01"))
        sock.send_multipart(encode_frame(Frame(FrameKind.REQUEST, 1, 0, 0, 0, b"")))  # refused
        sock.send_multipart(first)
        sock.send_multipart(encode_frame(Frame(FrameKind.REQUEST, 1, 2, 2, 0, b"\x02")))
        sock.send_multipart(first)  # below the floor of 2 the frame before it set
        got = _take(sock, 3)
        extra = _take(sock, 1, 0.5)
    finally:
        sock.close()
        s.close()
    assert sorted((f.kind, f.ref) for f in got) == [(FrameKind.REPLY, 1), (FrameKind.REPLY, 2),
                                                     (FrameKind.ERROR, 0)]
    assert extra == []


def test_stopping_answers_what_was_queued(tmp_path) -> None:
    handler = Slow()
    s = Served(f"ipc://{tmp_path}/stop", handler, LinkLimits(max_queued=16, linger_s=0.5))
    c = LinkClient(s.server.endpoint, SPEC, timeout_s=20)
    try:
        pending = [c.request(1, bytes([i])) for i in range(6)]
        time.sleep(SERVICE_S / 2)
        s.server.stop()  # while the first runs
        got = _outcomes(pending)
    finally:
        c.close()
        s.thread.join(10)
        s.server.close()
    assert got[0][0] == "ok"
    assert all(k == "err" and v == LinkErrorCode.STOPPING for k, v in got[1:]), got


@pytest.mark.parametrize("bad", [0, -1])
def test_max_queued_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="max_queued"):
        LinkLimits(max_queued=bad)
