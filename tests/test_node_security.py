"""Trust boundaries of a PNM node (issue 20): a session is reached only by the client that
opened it, emulated time is checked before it changes anything and one client's clock moves
only its own results, every payload is checked whole (a malformed one is BAD_REQUEST), and
per-client and per-request limits hold. Real ZeroMQ sockets, real device processes."""

from __future__ import annotations

import contextlib
import math
import secrets
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from construct import ConstructError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from node_helpers import GROUP, HEAD_DIM, InProcessNode, Workload, single_device_reference

from nelssa.emu.link.frame import HEADER_BYTES, MAX_EMU_TIME_PS, LinkErrorCode
from nelssa.emu.link.model import link_preset
from nelssa.emu.link.transport import RemoteError, ServiceError
from nelssa.host.pnm_node import protocol as p
from nelssa.host.pnm_node.access import ClientTable
from nelssa.host.pnm_node.admin import ADMIN_TOKEN_BYTES, read_token, token_path
from nelssa.host.pnm_node.client import AttendResult, NodeClient
from nelssa.host.pnm_node.config import NodeConfig
from nelssa.host.pnm_node.errors import (
    BadRequestError,
    NodeError,
    NodeLimitError,
    UnknownSessionError,
)
from nelssa.host.pnm_node.protocol import MAX_ARRIVE_PS, NodeErrorCode, NodeOp
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig
from nelssa.hw.model.device_timing import Refresh, UnitTiming

KV = [0, 1]
U64 = 1 << 64


def _load(c: NodeClient, w: Workload, layer: int = 0, room: int = 4) -> int:
    """A session with ``w`` written and room for ``room`` more clusters per head."""
    s = c.open_session(HEAD_DIM, GROUP, "head")
    c.alloc_kv(s, layer, list(w.heads), w.max_clusters + room, w.max_tokens + 64 * room)
    for h, d in w.heads.items():
        c.write_kv(s, layer, h, d.keys, d.values)
    return s


def _attend(c: NodeClient, s: int, w: Workload, send_ps: int | None = None) -> AttendResult:
    return c.attend_async(s, 0, {h: d.q for h, d in w.heads.items()},
                          {h: d.ids for h, d in w.heads.items()}, send_ps=send_ps).result()


def _same(a: AttendResult, b: AttendResult) -> bool:
    return all(np.array_equal(a.o[h], b.o[h]) and np.array_equal(a.lse[h], b.lse[h])
               for h in a.o)


def _used(c: NodeClient) -> list[int]:
    return [d.used_bytes for d in c.status().devices]


def _attend_payload(s: int, w: Workload, scale: float = 0.0) -> bytes:
    groups = [{"kv_head": h, "num_ids": len(d.ids),
               "ids": np.asarray(d.ids, dtype="<u4").tobytes(), "q": d.q.astype("<u2").tobytes()}
              for h, d in w.heads.items()]
    return p.ATTEND_REQ.build({"session": s, "layer": 0, "q_heads": GROUP, "head_dim": HEAD_DIM,
                               "scale": scale, "count": len(groups), "groups": groups})


def _write_payload(s: int, h: int, keys: list[np.ndarray], values: list[np.ndarray]) -> bytes:
    tokens = np.array([k.shape[0] for k in keys], dtype="<u4")
    data = b"".join(k.astype("<u2").tobytes() + v.astype("<u2").tobytes()
                    for k, v in zip(keys, values, strict=True))
    return p.WRITE_KV_REQ.build({"session": s, "layer": 0, "kv_head": h, "count": len(keys),
                                 "tokens": tokens.tobytes(), "data": data})


SID = 0x0123456789ABCDEF
SID_BYTES = bytes.fromhex("efcdab8967452301")  # a 64-bit handle, little endian


def test_request_formats_byte_for_byte() -> None:
    cases = [
        (p.OPEN_SESSION_REQ, {"partition": 1, "head_dim": 128, "group": 4}, "01 8000 04"),
        (p.OPEN_SESSION_REP, {"session": SID}, ""),
        (p.SESSION_REQ, {"session": SID}, ""),
        (p.FREE_KV_REQ, {"session": SID, "layer": 2}, "0200"),
        (p.ALLOC_KV_REQ, {"session": SID, "layer": 2, "max_clusters": 3, "max_tokens": 64,
                          "count": 2, "kv_heads": [5, 6]},
         "0200 03000000 40000000 0200 0500 0600"),
        (p.WRITE_KV_REQ, {"session": SID, "layer": 2, "kv_head": 1, "count": 1,
                          "tokens": bytes([1, 0, 0, 0]), "data": b"\xaa\xbb"},
         "0200 0100 01000000 01000000 aabb"),
        (p.ATTEND_REQ, {"session": SID, "layer": 2, "q_heads": 1, "head_dim": 1, "scale": 0.5,
                        "count": 1, "groups": [{"kv_head": 3, "num_ids": 1,
                                                "ids": bytes([7, 0, 0, 0]), "q": b"\x80\x3f"}]},
         "0200 01 0100 0000003f 0100 0300 01000000 07000000 803f"),
    ]
    for fmt, value, rest in cases:
        want = (b"" if fmt is p.OPEN_SESSION_REQ else SID_BYTES) + bytes.fromhex(rest)
        assert fmt.build(value) == want, fmt
        # requests: not a byte more, not a byte less (WRITE_KV's data is as long as the
        # payload; the node holds it to its token counts)
        if fmt not in (p.OPEN_SESSION_REP, p.WRITE_KV_REQ):
            for bad in (want + b"\0", want[:-1]):
                with pytest.raises(ConstructError):
                    fmt.parse(bad)
    status = p.STATUS_REP.build({"version": "1", "link": "r", "sessions": 2, "requests": 3,
                                 "errors": 4, "clock_khz": 800_000, "bad_frames": 5,
                                 "duplicates": 6, "busy": 7, "queued": 8, "ndev": 0,
                                 "devices": [], "sampling": {
                                     "rtl_layers": 4, "batches": 9, "descriptors": 10,
                                     "mismatches": 0, "rtl_cycles": 11, "model_cycles": 12,
                                     "worst_ppm": 13}})
    assert status == bytes.fromhex("0131 0172 02000000 0300000000000000 0400000000000000 "
                                   "00350c00 0500000000000000 0600000000000000 "
                                   "0700000000000000 08000000 00 "
                                   "0400 0900000000000000 0a00000000000000 0000000000000000 "
                                   "0b00000000000000 0c00000000000000 0d000000")
    dev = {"index": 1, "alive": 1, "endpoint": "e", "backend": "m", "mem_bytes": 2,
           "used_bytes": 3, "regions": 4, "queue_depth": 5, "descriptors": 6, "cycles": 7,
           "caps": 0x0040_0376, "error": ""}
    assert p.DEVICE_STATUS.build(dev) == bytes.fromhex(
        "01 01 0100 65 01 6d 0200000000000000 0300000000000000 04000000 05000000 "
        "0600000000000000 0700000000000000 76034000 0000")
    assert p.JOIN_REQ.build({"ticket": bytes(range(16))}) == bytes(range(16))
    assert p.EMPTY.build({}) == b""
    with pytest.raises(ConstructError):
        p.EMPTY.parse(b"\0")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    n = InProcessNode(f"ipc://{tmp_path_factory.mktemp('sec')}/node", 2)
    yield n
    n.stop()


# -- defect 1: sessions are owned -----------------------------------------------------------------
def test_session_handles_are_unguessable(node: InProcessNode) -> None:
    with NodeClient(node.endpoint, timeout_s=10) as c:
        ids = [c.open_session(HEAD_DIM, GROUP) for _ in range(32)]
        for s in ids:
            c.close_session(s)
    assert len(set(ids)) == len(ids)
    assert all(0 < s < U64 for s in ids)
    # 64 random bits: 32 handles all below 2**40, or two of them adjacent, is next to impossible
    assert max(ids) >= 1 << 40
    assert not any(abs(a - b) == 1 for a in ids for b in ids)


def test_no_client_stops_the_node(node: InProcessNode) -> None:
    """Any client could stop the node with a SHUTDOWN over its socket. Only its operator may:
    the admin token is in a file only the node's user reads (admin.py), beside the socket."""
    path = token_path(node.endpoint)
    assert path == Path(node.endpoint.removeprefix("ipc://") + ".admin")
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_token(node.endpoint) == node.host.admin_token
    with NodeClient(node.endpoint, timeout_s=10) as c:
        s = c.open_session(HEAD_DIM, GROUP)
        for payload in (b"", bytes(ADMIN_TOKEN_BYTES), node.host.admin_token[:-1],
                        node.host.admin_token + b"\0"):
            with pytest.raises(BadRequestError, match="SHUTDOWN refused: it needs the node's "
                               "admin token"):
                c.link.call(NodeOp.SHUTDOWN, payload)
        with pytest.raises(BadRequestError, match="admin token"):
            c.shutdown(token=secrets.token_bytes(ADMIN_TOKEN_BYTES))
        assert not node.host.stop_requested
        assert c.status().sessions >= 1  # still serving, the session still there
        c.close_session(s)


def test_no_client_reaches_another_clients_session(node: InProcessNode) -> None:
    w = Workload.make(seed=3, kv_heads=KV)
    with NodeClient(node.endpoint, timeout_s=10) as a, NodeClient(node.endpoint,
                                                                  timeout_s=10) as b:
        s = _load(a, w)
        before = _attend(a, s, w)
        used = _used(a)
        never = s ^ (1 << 41)  # a handle nobody was given
        d = w.heads[0]
        attempts = {
            "attend": lambda sid: b.attend(sid, 0, {0: d.q}, {0: [0]}),
            "write_kv": lambda sid: b.write_kv(sid, 0, 0, d.keys[:1], d.values[:1]),
            "alloc_kv": lambda sid: b.alloc_kv(sid, 1, [0], 4, 64),
            "free_kv": lambda sid: b.free_kv(sid, 0),
            "close_session": lambda sid: b.close_session(sid),
        }
        for name, call in attempts.items():
            seen = []
            for sid in (s, never):
                with pytest.raises(UnknownSessionError) as e:
                    call(sid)
                seen.append((e.value.code, str(e.value).replace(str(sid), "ID")))
            # no oracle: another client's session and one that does not exist look the same
            assert seen[0] == seen[1], name
        assert _used(a) == used
        after = _attend(a, s, w)
        assert _same(after, before)
        a.close_session(s)


class _Cuttable:
    """A byte pipe from a TCP port to the node's ipc:// socket that can cut every connection
    through it, as a dropped link does: the DEALER behind a NodeClient reconnects by itself."""

    def __init__(self, path: str) -> None:
        self.path, self.connections = path, 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX)
            up.connect(self.path)
            with self._lock:
                self._open += [down, up]
                self.connections += 1
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(1 << 16):
                b.sendall(data)

    def cut(self) -> None:
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def close(self) -> None:
        self._listener.close()
        self.cut()


def test_a_client_that_reconnects_keeps_its_sessions(node: InProcessNode) -> None:
    """ZeroMQ gave each connection a routing id of its own making, so a client whose
    connection dropped came back a stranger to its sessions. A LinkClient names itself (128
    random bits); no other client reaches its sessions, and one that forges its id while it is
    connected is ignored (ROUTER_HANDOVER off)."""
    w = Workload.make(seed=9, kv_heads=KV)
    pipe = _Cuttable(node.endpoint.removeprefix("ipc://"))
    try:
        with NodeClient(pipe.endpoint, timeout_s=10) as a:
            s = _load(a, w)
            before = _attend(a, s, w)
            pipe.cut()  # the connection drops; the DEALER reconnects through the pipe
            assert _same(_attend(a, s, w), before)
            assert pipe.connections == 2
            with (NodeClient(node.endpoint, timeout_s=10) as b,
                  pytest.raises(UnknownSessionError)):
                b.close_session(s)
            with (NodeClient(node.endpoint, timeout_s=1.0, routing_id=a.link.routing_id)
                  as forger, pytest.raises(TimeoutError)):
                forger.close_session(s)
            assert _same(_attend(a, s, w), before)
            a.close_session(s)
    finally:
        pipe.close()


def test_a_queue_pair_reaches_the_sessions_of_its_client(node: InProcessNode) -> None:
    w = Workload.make(seed=4, kv_heads=KV)
    with (NodeClient(node.endpoint, timeout_s=10) as a, a.queue_pair() as bulk,
          NodeClient(node.endpoint, timeout_s=10) as other):
        s = _load(bulk, w)  # opened and written on the bulk queue pair, as the GPU node does
        r = _attend(a, s, w)
        ref = single_device_reference(w, 2)  # as the 2-device node cuts it
        assert all(np.array_equal(r.o[h], ref[h][0]) for h in w.heads)
        with pytest.raises(UnknownSessionError):
            _attend(other, s, w)
        # a join ticket works once, for whoever holds it; a guessed one never
        ticket = a.link.call(NodeOp.JOIN_TICKET, b"").payload
        with NodeClient(node.endpoint, timeout_s=10) as c2, NodeClient(node.endpoint,
                                                                       timeout_s=10) as c3:
            c2.link.call(NodeOp.JOIN, ticket)
            assert _same(_attend(c2, s, w), r)
            with pytest.raises(BadRequestError, match="join ticket"):
                c3.link.call(NodeOp.JOIN, ticket)
            with pytest.raises(BadRequestError, match="join ticket"):
                c3.link.call(NodeOp.JOIN, bytes(len(ticket)))
            with pytest.raises(UnknownSessionError):
                _attend(c3, s, w)
        a.close_session(s)


def test_sessions_and_memory_are_limited_per_client(tmp_path: Path) -> None:
    node = InProcessNode(f"ipc://{tmp_path}/node", 2, max_sessions_per_client=2,
                         max_sessions=3, max_client_bytes=3 << 20)
    try:
        with (NodeClient(node.endpoint, timeout_s=10) as a, a.queue_pair() as qp,
              NodeClient(node.endpoint, timeout_s=10) as b,
              NodeClient(node.endpoint, timeout_s=10) as c):
            s1, s2 = a.open_session(HEAD_DIM, GROUP), qp.open_session(HEAD_DIM, GROUP)
            with pytest.raises(NodeLimitError, match="max_sessions_per_client = 2") as e:
                a.open_session(HEAD_DIM, GROUP)
            assert e.value.code == NodeErrorCode.LIMIT_EXCEEDED
            b.open_session(HEAD_DIM, GROUP)  # another client has a quota of its own
            with pytest.raises(NodeLimitError, match="max_sessions = 3"):
                c.open_session(HEAD_DIM, GROUP)
            a.alloc_kv(s1, 0, [0], 16, 2048)  # about 1 MiB
            used = _used(a)
            with pytest.raises(NodeLimitError, match="max_client_bytes"):
                qp.alloc_kv(s2, 0, [0, 1], 16, 2048)  # two more: over 3 MiB in all
            assert _used(a) == used  # refused whole: nothing reserved
            qp.alloc_kv(s2, 0, [1], 16, 2048)
            a.close_session(s1)  # closing gives back the session and its memory
            s3 = a.open_session(HEAD_DIM, GROUP)
            a.alloc_kv(s3, 0, [0], 16, 2048)
            st = a.status()
            assert st.sessions == 3 and st.errors == 3
    finally:
        node.stop()


# -- defect 3: emulated time ----------------------------------------------------------------------
def test_time_that_would_overflow_is_refused_before_it_changes_anything(
        node: InProcessNode) -> None:
    w = Workload.make(seed=5, kv_heads=KV)
    spec = link_preset("roce-400g")
    # the far-future requests go over a queue pair of a's; refused, they leave its link as it
    # was (finding F1), so the same connection answers at its own clock afterwards
    with (NodeClient(node.endpoint, timeout_s=10) as a, NodeClient(node.endpoint,
                                                                   timeout_s=10) as b,
          a.queue_pair() as late):
        s, t = _load(a, w), _load(b, w)
        before_b = _attend(b, t, w)
        sessions = late.status().sessions  # (its first call joins a's client)

        def last_moment(payload: bytes) -> int:  # the latest a frame takes; no reply fits
            return MAX_EMU_TIME_PS - 1 - spec.transfer_ps(HEADER_BYTES + len(payload))

        attend = _attend_payload(s, w)
        with pytest.raises(RemoteError):
            late.link.call(NodeOp.ATTEND, attend, send_ps=last_moment(attend))
        opening = p.OPEN_SESSION_REQ.build({"partition": 0, "head_dim": HEAD_DIM,
                                            "group": GROUP})
        with pytest.raises(RemoteError):
            late.link.call(NodeOp.OPEN_SESSION, opening, send_ps=last_moment(opening))
        d = w.heads[0]
        write = _write_payload(s, 0, d.keys[:1], d.values[:1])
        with pytest.raises(RemoteError):
            late.link.call(NodeOp.WRITE_KV, write, send_ps=last_moment(write))
        with pytest.raises(BadRequestError, match="emulated time"):
            late.link.call(NodeOp.ATTEND, attend, send_ps=MAX_ARRIVE_PS + 1)
        # nothing moved: no session opened, no cluster written, every device still usable
        assert late.status().sessions == sessions
        assert a.status().sessions == sessions
        assert a.write_kv(s, 0, 0, d.keys[:1], d.values[:1]).cluster_ids.start == len(d.keys)
        after_b = _attend(b, t, w)
        assert _same(after_b, before_b)
        assert after_b.timing.queue_ps == 0
        _attend(a, s, w)
        a.close_session(s)
        b.close_session(t)


def test_one_clients_clock_moves_only_its_own_results(node: InProcessNode) -> None:
    w = Workload.make(seed=6, kv_heads=KV)
    with (NodeClient(node.endpoint, timeout_s=10) as a, NodeClient(node.endpoint,
                                                                   timeout_s=10) as b):
        s, t = _load(a, w), _load(b, w)
        start = 10**9
        t0 = _attend(b, t, w, send_ps=start).timing
        far = 10**16  # ten thousand seconds ahead of everyone else, and legal
        assert _attend(a, s, w, send_ps=far).timing.queue_ps == 0
        t1 = _attend(b, t, w, send_ps=start + 10**9).timing  # b's own queue is empty again
        assert t1.queue_ps == 0
        assert (t1.host_ps, t1.cxl_ps) == (t0.host_ps, t0.cxl_ps)
        # the device's own clock ran on meanwhile, so b's batch may meet a DDR5 refresh window
        # the first did not (hw/model/device_timing.Refresh): one at most
        cfg = DeviceConfig()
        window_ps = 1e12 * Refresh.of(PRESETS[cfg.preset], UnitTiming.load()).stall / cfg.clock_hz
        assert abs(t1.device_ps - t0.device_ps) <= window_ps + 1, (t0, t1)
        # a's own later requests still wait behind its own far-future one (on the link or at
        # the devices)
        t2 = _attend(a, s, w, send_ps=start).timing
        assert t2.link_up_ps + t2.queue_ps > far - start
        # several at once from one client still queue one behind the other
        fs = [b.attend_async(t, 0, {h: x.q for h, x in w.heads.items()},
                             {h: x.ids for h, x in w.heads.items()}, send_ps=start + 10**10)
              for _ in range(3)]
        q = [f.result().timing.queue_ps for f in fs]
        assert q[0] == 0 < q[1] < q[2]
        a.close_session(s)
        b.close_session(t)


# -- defect 8: malformed payloads -----------------------------------------------------------------
def test_malformed_payloads_are_bad_requests_and_change_nothing(node: InProcessNode) -> None:
    w = Workload.make(seed=8, kv_heads=KV)
    with NodeClient(node.endpoint, timeout_s=10) as c:
        s = _load(c, w)
        before = _attend(c, s, w)
        st0 = c.status()
        d = w.heads[0]
        attend = _attend_payload(s, w)
        write = _write_payload(s, 0, d.keys[:2], d.values[:2])
        opening = p.OPEN_SESSION_REQ.build({"partition": 0, "head_dim": HEAD_DIM,
                                            "group": GROUP})
        sess = p.SESSION_REQ.build({"session": s})
        no_groups = p.ATTEND_REQ.build({"session": s, "layer": 0, "q_heads": GROUP,
                                        "head_dim": HEAD_DIM, "scale": 0.0, "count": 0,
                                        "groups": []})
        no_clusters = p.WRITE_KV_REQ.build({"session": s, "layer": 0, "kv_head": 0,
                                            "count": 0, "tokens": b"", "data": b""})
        cases = {
            "undefined partition": (NodeOp.OPEN_SESSION, bytes([7]) + opening[1:]),
            "open, a byte too many": (NodeOp.OPEN_SESSION, opening + b"\0"),
            "open, a byte short": (NodeOp.OPEN_SESSION, opening[:-1]),
            "close, a byte too many": (NodeOp.CLOSE_SESSION, sess + b"\0"),
            "free, a byte too many": (NodeOp.FREE_KV, p.FREE_KV_REQ.build(
                {"session": s, "layer": 0}) + b"\0"),
            "alloc, no heads": (NodeOp.ALLOC_KV, p.ALLOC_KV_REQ.build(
                {"session": s, "layer": 2, "max_clusters": 4, "max_tokens": 64, "count": 0,
                 "kv_heads": []})),
            "alloc, a byte too many": (NodeOp.ALLOC_KV, p.ALLOC_KV_REQ.build(
                {"session": s, "layer": 2, "max_clusters": 4, "max_tokens": 64, "count": 1,
                 "kv_heads": [0]}) + b"\0"),
            "attend, NaN scale": (NodeOp.ATTEND, _attend_payload(s, w, math.nan)),
            "attend, infinite scale": (NodeOp.ATTEND, _attend_payload(s, w, math.inf)),
            "attend, negative scale": (NodeOp.ATTEND, _attend_payload(s, w, -0.5)),
            "attend, a byte too many": (NodeOp.ATTEND, attend + b"\0"),
            "attend, a byte short": (NodeOp.ATTEND, attend[:-1]),
            "attend, no groups": (NodeOp.ATTEND, no_groups),
            "write, no clusters": (NodeOp.WRITE_KV, no_clusters),
            "write, a byte short": (NodeOp.WRITE_KV, write[:-1]),
            "write, an empty cluster": (NodeOp.WRITE_KV, _write_payload(
                s, 0, [d.keys[0][:0], d.keys[1]], [d.values[0][:0], d.values[1]])),
            "status with a payload": (NodeOp.STATUS, b"\0"),
            "shutdown with a payload": (NodeOp.SHUTDOWN, b"\0"),
        }
        for name, (op, payload) in cases.items():
            with pytest.raises(NodeError) as e:
                c.link.call(op, payload)
            assert e.value.code == NodeErrorCode.BAD_REQUEST, (name, str(e.value))
            assert str(e.value), name
        st = c.status()
        assert st.sessions == st0.sessions and st.errors == st0.errors + len(cases)
        assert [x.used_bytes for x in st.devices] == [x.used_bytes for x in st0.devices]
        assert c.write_kv(s, 0, 0, d.keys[:1], d.values[:1]).cluster_ids.start == len(d.keys)
        assert _same(_attend(c, s, w), before)
        c.close_session(s)


FUZZ_OPS = [NodeOp.OPEN_SESSION, NodeOp.CLOSE_SESSION, NodeOp.ALLOC_KV, NodeOp.FREE_KV,
            NodeOp.WRITE_KV, NodeOp.ATTEND, NodeOp.STATUS, NodeOp.JOIN_TICKET, NodeOp.JOIN]


@pytest.fixture(scope="module")
def fuzz_setup(node: InProcessNode):
    """A fuzzing client with a session of its own to mutate requests on, and a keeper client
    whose session must come through untouched."""
    w = Workload.make(seed=10, kv_heads=KV, clusters=6, selected=3)
    fuzzer = NodeClient(node.endpoint, timeout_s=10)
    keeper = NodeClient(node.endpoint, timeout_s=10)
    s, k = _load(fuzzer, w), _load(keeper, w)
    d = w.heads[0]
    base = {
        NodeOp.OPEN_SESSION: p.OPEN_SESSION_REQ.build({"partition": 1, "head_dim": HEAD_DIM,
                                                       "group": GROUP}),
        NodeOp.CLOSE_SESSION: p.SESSION_REQ.build({"session": s}),
        NodeOp.ALLOC_KV: p.ALLOC_KV_REQ.build({"session": s, "layer": 1, "max_clusters": 8,
                                               "max_tokens": 256, "count": 2,
                                               "kv_heads": [0, 1]}),
        NodeOp.FREE_KV: p.FREE_KV_REQ.build({"session": s, "layer": 1}),
        NodeOp.WRITE_KV: _write_payload(s, 0, d.keys[:2], d.values[:2]),
        NodeOp.ATTEND: _attend_payload(s, w),
        NodeOp.STATUS: b"",
        NodeOp.JOIN_TICKET: b"",
        NodeOp.JOIN: bytes(16),
    }
    yield fuzzer, keeper, k, w, base, _attend(keeper, k, w)
    fuzzer.close()
    keeper.close_session(k)
    keeper.close()


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(FUZZ_OPS),
       flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=4),
       cut=st.integers(0, 8), extra=st.binary(max_size=6), send_ps=st.sampled_from(
           [None, 0, 10**12, MAX_ARRIVE_PS - 10**6, MAX_ARRIVE_PS + 1, MAX_EMU_TIME_PS]))
def test_fuzzed_node_requests_never_fail_inside_the_node(fuzz_setup, op: NodeOp,
                                                         flips: list[tuple[int, int]], cut: int,
                                                         extra: bytes,
                                                         send_ps: int | None) -> None:
    fuzzer, keeper, k, w, base, keeper_before = fuzz_setup
    payload = bytearray(base[op])
    for pos, value in flips:
        if payload:
            payload[pos % len(payload)] = value
    payload = payload[:max(0, len(payload) - cut)] + extra
    try:
        fuzzer.link.call(op, bytes(payload), send_ps=send_ps)
    except NodeError as e:  # the node's own refusals only: never INTERNAL or a link error
        assert e.code >= 100 and e.code != NodeErrorCode.DEVICE_DOWN, (op.name, str(e))
    assert _same(_attend(keeper, k, w), keeper_before)


# -- defect 10: per-request limits ----------------------------------------------------------------
def test_per_request_limits_refuse_before_the_body_is_parsed(tmp_path: Path) -> None:
    node = InProcessNode(f"ipc://{tmp_path}/node", 2, max_write_kv_bytes=64 << 10,
                         max_request_heads=2)
    w = Workload.make(seed=12, kv_heads=[0, 1, 2])
    try:
        # the link takes the largest legal request: a write at the limit, or an ATTEND of
        # max_request_heads groups of 4096 ids each
        assert node.service.server.limits.max_payload == 2 * node.host.max_request_bytes()
        assert node.host.max_request_bytes() >= p.ATTEND_HEAD.sizeof() + 2 * (6 + 4 * 4096)
        with NodeClient(node.endpoint, timeout_s=10, max_write_bytes=64 << 10) as c:
            s = c.open_session(HEAD_DIM, GROUP, "head")
            with pytest.raises(NodeLimitError, match="max_request_heads = 2"):
                c.alloc_kv(s, 0, list(w.heads), w.max_clusters, w.max_tokens)
            c.alloc_kv(s, 0, [0, 1], w.max_clusters, w.max_tokens)
            c.alloc_kv(s, 0, [2], w.max_clusters, w.max_tokens)
            d = w.heads[0]
            n = next(n for n in range(len(d.keys))
                     if len(_write_payload(s, 0, d.keys[:n], d.values[:n])) > 64 << 10)
            big = _write_payload(s, 0, d.keys[:n], d.values[:n])  # over the limit, not 2x
            with pytest.raises(NodeLimitError, match="max_write_kv_bytes"):
                c.link.call(NodeOp.WRITE_KV, big)
            # a header that announces far more than the limit, with no body behind it
            huge = struct.pack("<QHHI", s, 0, 0, 1 << 30)
            with pytest.raises(NodeLimitError, match="max_write_kv_bytes"):
                c.link.call(NodeOp.WRITE_KV, huge + bytes(1 << 12))
            # the client splits a large write under the limit: every cluster arrives, in order
            for h, x in w.heads.items():
                assert c.write_kv(s, 0, h, x.keys, x.values).cluster_ids == range(
                    len(x.keys))
            two = {h: w.heads[h] for h in (0, 1)}
            r = c.attend(s, 0, {h: x.q for h, x in two.items()},
                         {h: x.ids for h, x in two.items()})
            ref = single_device_reference(Workload(two), 2)  # as the 2-device node cuts it
            assert all(np.array_equal(r.o[h], ref[h][0]) for h in two)
            with pytest.raises(NodeLimitError, match="max_request_heads = 2"):
                c.attend(s, 0, {h: x.q for h, x in w.heads.items()},
                         {h: x.ids for h, x in w.heads.items()})
    finally:
        node.stop()


# -- the soak, short ------------------------------------------------------------------------------
def test_short_soak_loses_nothing_and_memory_stays_bounded(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """The soak (nelssa/experiments/soak.py) at 10x the measured sustainable rate for 2 s, two
    client processes."""
    import json
    import subprocess
    import sys

    script = ["-m", "nelssa.experiments.soak"]
    out, raw = tmp_path / "soak.md", tmp_path / "soak.json"
    run = subprocess.run([sys.executable, *script, "--seconds", "2", "--clients", "2",
                          "--measure-s", "1", "--max-queued", "4", "--out", str(out),
                          "--json", str(raw)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    r = json.loads(raw.read_text())
    assert r["sustainable_rate"] > 0 and r["offered_rate"] == pytest.approx(
        10 * r["sustainable_rate"])
    refused: dict[str, int] = {}
    for c in r["results"]:
        assert c["sent"] > 0 and c["wrong"] == 0 and not c["failed"]
        assert c["sent"] == c["answered"] + sum(c["refused"].values())  # nothing lost
        for k, v in c["refused"].items():
            refused[k] = refused.get(k, 0) + v
    assert set(refused) <= {"UNKNOWN_SESSION", "BAD_REQUEST", "LIMIT_EXCEEDED", "BUSY"}
    assert refused.get("BUSY", 0) > 0  # `node up --max-queued 4` at 10x: refused at once
    assert r["rss_end_kib"] - r["rss_quarter_kib"] <= 32 << 10
    assert "lost 0" in out.read_text() and "PASS" in out.read_text()
    # bad options: one line, exit 2
    from nelssa.experiments import soak

    with pytest.raises(SystemExit) as refused:  # the option's check, in this process
        soak.main(["--seconds", "nan"])
    assert refused.value.code == 2 and "--seconds" in capsys.readouterr().err


# -- found by the soak: completions a node consumed stayed in memory ------------------------------
def test_completions_taken_by_poll_are_not_kept() -> None:
    """The node collects completions with CommandQueue.poll; each output it took stayed in the
    queue too (a few KiB per descriptor, for as long as the node ran)."""
    import gc
    import tracemalloc

    from nelssa.driver.command import AttnRequest, CommandQueue
    from nelssa.driver.device import Device
    from nelssa.driver.memory import MemoryApi
    from nelssa.hw.model.device import ModelDevice

    port = ModelDevice()
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 30)
    cq = CommandQueue(mem, entries=16)
    w = Workload.make(seed=13, kv_heads=[0], clusters=4, selected=2)
    d = w.heads[0]
    region = mem.alloc_kv(0, 0, 0, HEAD_DIM, 4, sum(k.shape[0] for k in d.keys))
    mem.write_clusters(region, d.keys, d.values)

    def rounds(n: int) -> None:
        for _ in range(n):
            ids = cq.submit([AttnRequest(region, d.q, d.ids)] * 8)
            port.run_until_idle(10_000_000)
            got = cq.poll()
            assert sorted(o.desc_id for o in got) == sorted(ids)

    rounds(1)
    tracemalloc.start()
    try:
        rounds(1)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        rounds(6)  # 48 descriptors: an output kept for each is about 120 KiB
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 48 << 10, grown


# -- the soak: a node that cannot keep up refuses at once -----------------------------------------
def test_a_busy_node_refuses_with_busy_and_serves_its_operator(tmp_path: Path) -> None:
    """Before admission control a flood waited unseen in the sockets (the soak's p50 latency
    was 25 s at 10x the sustainable rate). Now the node's queue holds max_queued requests,
    the rest are refused at once with BUSY (NodeBusyError), what ran is correct, and STATUS and
    CLOSE_SESSION are served however full the queue is."""
    from nelssa.emu.link.frame import LinkErrorCode
    from nelssa.host.pnm_node.errors import NodeBusyError

    node = InProcessNode(f"ipc://{tmp_path}/node", 1, max_queued=2)
    w = Workload.make(seed=21, kv_heads=KV)
    try:
        with NodeClient(node.endpoint, timeout_s=60) as a, NodeClient(node.endpoint,
                                                                      timeout_s=60) as b:
            s = _load(a, w)
            want = _attend(a, s, w)
            flood = [a.attend_async(s, 0, {h: d.q for h, d in w.heads.items()},
                                    {h: d.ids for h, d in w.heads.items()}) for _ in range(24)]
            st = b.status()  # the operator's view while the queue is full
            assert st.busy >= 1  # the refusals before it, counted
            busy, served = 0, 0
            for f in flood:
                try:
                    assert _same(f.result(), want)
                    served += 1
                except NodeBusyError as e:  # the first names the limit, the rest the order
                    assert e.code == LinkErrorCode.BUSY
                    assert ("max_queued = 2" if not busy else "refused too") in str(e)
                    busy += 1
            a.close_session(s)
            after = b.status()
            assert after.sessions == 0 and after.busy == busy
    finally:
        node.stop()
    assert served >= 2 and busy >= 12 and served + busy == 24, (served, busy)
    assert st.sessions == 1


# -- issue 44, defect 18: join tickets bounded per client -----------------------------------------
def test_no_client_evicts_another_clients_join_ticket() -> None:
    """One table of join tickets bounded for all clients let any client push another's ticket
    out with max_clients JOIN_TICKET calls. A client's tickets are bounded per client: its own
    newest push out its own oldest, never someone else's."""
    table = ClientTable(NodeConfig(devices=("x",), max_clients=8, max_queue_pairs=2))
    victim = table.ticket(b"victim")
    for _ in range(1024):  # a flood of tickets from another client
        table.ticket(b"flood")
    table.join(b"victim-qp", victim)
    assert table.client_id(b"victim-qp") == b"victim"
    # the flooder kept only its newest max_queue_pairs tickets: the older ones are refused
    mine = [table.ticket(b"flood") for _ in range(3)]
    with pytest.raises(ServiceError, match="join ticket"):
        table.join(b"flood-qp0", mine[0])
    table.join(b"flood-qp1", mine[1])
    table.join(b"flood-qp2", mine[2])
    assert {table.client_id(q) for q in (b"flood-qp1", b"flood-qp2")} == {b"flood"}


def test_many_clients_with_tickets_do_not_evict_a_waiting_ticket() -> None:
    """Clients that each ask for a ticket fill the client table: a client whose ticket is still
    live is not forgotten for them (the newcomer is refused, naming max_clients)."""
    table = ClientTable(NodeConfig(devices=("x",), max_clients=4))
    victim = table.ticket(b"victim")
    for i in range(3):
        table.ticket(b"sybil%d" % i)
    with pytest.raises(ServiceError, match="max_clients = 4"):
        table.ticket(b"sybil-late")
    table.join(b"victim-qp", victim)
    assert table.client_id(b"victim-qp") == b"victim"


# -- issue 44, defect 15: a message over the node's limit is answered ---------------------------
def test_a_write_over_the_links_limit_is_answered_not_dropped(tmp_path: Path) -> None:
    """A WRITE_KV larger than the node's link takes was dropped by ZeroMQ with its connection,
    unanswered: the client retransmitted until LinkTimeoutError. The node tells each
    connection its limits (the link's hello): the client splits a write to the node's
    max_write_kv_bytes, and refuses at once a message the link would drop, naming the limit."""
    node = InProcessNode(f"ipc://{tmp_path}/node", 1, max_write_kv_bytes=64 << 10,
                         max_request_heads=1)
    rng = np.random.default_rng(15)
    keys = [rng.integers(0, 1 << 15, (16, HEAD_DIM), dtype=np.uint16) for _ in range(128)]
    values = [k[::-1].copy() for k in keys]
    try:
        link_max = node.service.server.limits.max_payload
        assert link_max < 1 << 20  # a 1 MiB write is beyond what the link takes
        with NodeClient(node.endpoint, timeout_s=5) as c:  # its own limit: the default 64 MiB
            s = c.open_session(HEAD_DIM, GROUP, "head")
            c.alloc_kv(s, 0, [0], len(keys), 16 * len(keys))
            t0 = time.monotonic()
            assert c.write_kv(s, 0, 0, keys, values).cluster_ids == range(len(keys))
            raw = _write_payload(s, 0, keys, values)
            assert len(raw) > link_max
            with pytest.raises(NodeLimitError, match=f"at most {link_max} bytes") as e:
                c.link.call(NodeOp.WRITE_KV, raw)
            assert e.value.code == LinkErrorCode.TOO_LARGE
            assert time.monotonic() - t0 < 4.0
            c.close_session(s)
    finally:
        node.stop()
