"""A PNM node as real processes (`nelssa node up` and its device processes) on loopback: results
against a single device and float64, head-wise against cluster-wise, the emulated-time
breakdown, and every fault the node must survive."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from node_helpers import (
    GROUP,
    HEAD_DIM,
    NodeProcess,
    Workload,
    float64_reference,
    pid_alive,
    single_device_reference,
    vmax,
)

from nelssa.emu.link.frame import FrameKind, LinkErrorCode, decode_frame, parse_error
from nelssa.emu.link.model import LinkFaults, link_preset
from nelssa.host.pnm_node.client import AttendResult, NodeClient
from nelssa.host.pnm_node.errors import (
    BadRequestError,
    ChecksumError,
    DeviceDownError,
    NodeOutOfMemoryError,
    NotAllocatedError,
    UnknownSessionError,
)

KV_HEADS = [0, 1, 2, 3]


def _load(client: NodeClient, w: Workload, partition: str, layer: int = 0) -> int:
    s = client.open_session(HEAD_DIM, GROUP, partition)
    client.alloc_kv(s, layer, list(w.heads), w.max_clusters, w.max_tokens)
    for h, d in w.heads.items():
        assert client.write_kv(s, layer, h, d.keys, d.values).cluster_ids == range(len(d.keys))
    return s


def _attend(client: NodeClient, s: int, w: Workload, layer: int = 0) -> AttendResult:
    return client.attend(s, layer, {h: d.q for h, d in w.heads.items()},
                         {h: d.ids for h, d in w.heads.items()})


def _check_timing(r: AttendResult, link: str = "roce-400g") -> None:
    t = r.timing
    assert t.total_ps == (t.link_up_ps + t.host_ps + t.queue_ps + t.cxl_ps + t.device_ps
                          + t.link_down_ps)
    spec = link_preset(link)
    assert t.link_up_ps >= spec.transfer_ps(0) and t.link_down_ps >= spec.transfer_ps(0)
    assert t.device_ps == round(r.device_cycles[t.critical_device] * 1250)
    assert t.device_cycles == max(r.device_cycles.values()) or t.cxl_ps > 0
    assert t.cxl_ps > 0 and t.host_ps > 0


@pytest.mark.parametrize("backend, devices", [
    ("model", 1), ("model", 2), ("model", 4),
    pytest.param("rtl", 1, marks=pytest.mark.rtl), pytest.param("rtl", 2, marks=pytest.mark.rtl),
    pytest.param("rtl", 4, marks=pytest.mark.rtl),
])
def test_node_matches_single_device_and_float64(tmp_path: Path, backend: str,
                                                devices: int) -> None:
    w = Workload.make(seed=devices, kv_heads=KV_HEADS)
    ref = single_device_reference(w, devices)
    node = NodeProcess(f"ipc://{tmp_path}/node", devices, backend)
    try:
        with NodeClient(node.endpoint, timeout_s=120) as c:
            head = _load(c, w, "head")
            cluster = _load(c, w, "cluster")
            used = [d.used_bytes for d in c.status().devices]
            assert all(u > 0 for u in used)
            rh, rc = _attend(c, head, w), _attend(c, cluster, w)
            for h, d in w.heads.items():
                # head-wise: each head whole on one device, bit for bit a single device's result
                assert np.array_equal(rh.o[h], ref[h][0]) and np.array_equal(rh.lse[h], ref[h][1])
                # cluster-wise: partials merged by LSE; equal within the engine's bound
                o64, lse64 = float64_reference(d)
                bound = 1e-3 * vmax(d)
                for r in (rh, rc):
                    assert np.abs(r.o[h].astype(np.float64) - o64).max() <= bound
                    assert np.abs(r.lse[h].astype(np.float64) - lse64).max() <= 1e-3
                assert np.abs(rc.o[h] - rh.o[h]).max() <= 2 * bound
            _check_timing(rh)
            _check_timing(rc)
            assert len(rh.device_cycles) == min(devices, len(KV_HEADS))
            assert len(rc.device_cycles) == devices
            if devices == 1:
                assert all(np.array_equal(rc.o[h], rh.o[h]) for h in w.heads)
            st = c.status()
            assert st.sessions == 2 and st.errors == 0
            assert all(d.alive and d.backend == backend for d in st.devices)
            c.close_session(head)
            c.close_session(cluster)
            assert [d.used_bytes for d in c.status().devices] == [0] * devices
    finally:
        node.kill()


@pytest.fixture(scope="module")
def node2(tmp_path_factory: pytest.TempPathFactory):
    """A node of two model devices for the tests that leave it serving (each opens sessions
    of its own and counts from what the node had counted before it)."""
    node = NodeProcess(f"ipc://{tmp_path_factory.mktemp('node2')}/node", 2, "model",
                       device_timeout=2.0)
    yield node
    node.kill()


def test_async_attends_pipeline_and_match_sync(node2: NodeProcess) -> None:
    w = Workload.make(seed=5, kv_heads=[0, 1])
    with NodeClient(node2.endpoint) as c:
        s = _load(c, w, "head")
        sync = _attend(c, s, w)
        futures = [c.attend_async(s, 0, {h: d.q for h, d in w.heads.items()},
                                  {h: d.ids for h, d in w.heads.items()}) for _ in range(6)]
        results = [f.result() for f in futures]
        for r in results:
            for h in w.heads:
                assert np.array_equal(r.o[h], sync.o[h])
        # emulated time runs on: each later request was sent no earlier than the one before;
        # sent at once, they queue for the devices one behind the other
        sent = [r.timing.sent_ps for r in results]
        assert sent == sorted(sent)
        queued = [c.attend_async(s, 0, {h: d.q for h, d in w.heads.items()},
                                 {h: d.ids for h, d in w.heads.items()}, send_ps=10**12)
                  for _ in range(3)]
        t = [f.result().timing for f in queued]
        assert t[0].queue_ps == 0 and t[1].queue_ps > 0 and t[2].queue_ps > t[1].queue_ps
        done = [x.sent_ps + x.total_ps - x.link_down_ps for x in t]
        assert done[1] - done[0] == t[1].cxl_ps + t[1].device_ps


def test_bad_requests_get_clear_errors_and_lose_nothing(node2: NodeProcess) -> None:
    w = Workload.make(seed=7, kv_heads=[0, 1])
    with NodeClient(node2.endpoint, timeout_s=30) as c:
        counted = c.status()
        a = _load(c, w, "head")
        before = _attend(c, a, w)
        used = [d.used_bytes for d in c.status().devices]
        with pytest.raises(UnknownSessionError, match="unknown session 999"):
            c.attend(999, 0, {0: w.heads[0].q}, {0: [0]})
        with pytest.raises(NotAllocatedError, match=f"session {a} layer 0 KV head 5 has no KV"):
            c.attend(a, 0, {5: w.heads[0].q}, {5: [0]})
        with pytest.raises(NotAllocatedError, match=f"session {a} layer 3 KV head 0"):
            c.write_kv(a, 3, 0, w.heads[0].keys[:1], w.heads[0].values[:1])
        with pytest.raises(BadRequestError, match="cluster id 24 not written"):
            c.attend(a, 0, {0: w.heads[0].q}, {0: [1, 24]})
        with pytest.raises(BadRequestError, match="already allocated"):
            c.alloc_kv(a, 0, [1], 4, 64)
        with pytest.raises(BadRequestError, match="query of 2 heads"):
            c.attend(a, 0, {0: w.heads[0].q[:2]}, {0: [0]})
        # out of memory on a device: refused whole, nothing reserved
        b = c.open_session(HEAD_DIM, GROUP, "cluster")
        with pytest.raises(NodeOutOfMemoryError, match="device 0 cannot hold session"):
            c.alloc_kv(b, 0, [0, 1], 1000, 2**31)
        # a region's own capacity: checked on every shard before anything is written
        c.alloc_kv(b, 1, [0], 2, 64)
        with pytest.raises(NodeOutOfMemoryError, match=r"region on device \d is full"):
            c.write_kv(b, 1, 0, w.heads[0].keys[:6], w.heads[0].values[:6])
        c.close_session(b)
        assert [d.used_bytes for d in c.status().devices] == used
        # a corrupted frame is caught by its checksum
        with (NodeClient(node2.endpoint, faults=LinkFaults(corrupt=1.0)) as bad,
              pytest.raises(ChecksumError, match="checksum mismatch")):
            bad.attend(a, 0, {0: w.heads[0].q}, {0: [0]})
        damaged = bad.link.faults_out.corrupted  # each refused by the node, then sent again
        # a malformed frame from a foreign socket gets an error frame back
        raw = zmq.Context.instance().socket(zmq.DEALER)
        raw.setsockopt(zmq.RCVTIMEO, 5000)
        raw.connect(node2.endpoint)
        raw.send_multipart([b"NLNK", b"not a frame", b"!"])
        frame = decode_frame(raw.recv_multipart())
        raw.close()
        assert frame.kind == FrameKind.ERROR
        assert parse_error(frame.payload)[0] == LinkErrorCode.MALFORMED_FRAME
        # a payload that does not parse as its operation
        with pytest.raises(BadRequestError, match="malformed ATTEND payload"):
            c.link.call(6, b"\x01\x02")
        after = _attend(c, a, w)
        for h in w.heads:
            assert np.array_equal(after.o[h], before.o[h])
            assert np.array_equal(after.lse[h], before.lse[h])
        st = c.status()
        assert (st.errors - counted.errors, st.bad_frames - counted.bad_frames) == (
            9, 1 + damaged)


def test_device_that_dies_or_hangs_fails_only_its_sessions(tmp_path: Path) -> None:
    node = NodeProcess(f"ipc://{tmp_path}/node", 3, "model", device_timeout=2.0)
    try:
        w = Workload.make(seed=9, kv_heads=[0, 1, 2])
        with NodeClient(node.endpoint, timeout_s=30) as c:
            sessions = {}
            for h in w.heads:  # head-wise: KV head h on device h
                one = Workload({h: w.heads[h]})
                sessions[h] = (_load(c, one, "head"), one)
            before = {h: _attend(c, s, one) for h, (s, one) in sessions.items()}
            os.kill(node.device_pids[1], signal.SIGSTOP)  # stops answering
            os.kill(node.device_pids[2], signal.SIGKILL)  # dies
            for h in (1, 2):
                s, one = sessions[h]
                t0 = time.monotonic()
                with pytest.raises(DeviceDownError, match=f"device {h} at .* is down"):
                    _attend(c, s, one)
                assert time.monotonic() - t0 < 2.0 + 3.0
                t0 = time.monotonic()
                with pytest.raises(DeviceDownError):  # known down: refused at once
                    _attend(c, s, one)
                assert time.monotonic() - t0 < 1.0
            s0, one0 = sessions[0]
            after = _attend(c, s0, one0)
            assert np.array_equal(after.o[0], before[0].o[0])
            st = c.status()
            assert [d.alive for d in st.devices] == [True, False, False]
            assert "did not answer" in st.devices[1].error
            c.close_session(sessions[2][0])  # closing a session on a dead device works
    finally:
        node.kill()


def test_ctrl_c_stops_everything_and_restart_starts_clean(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/node"
    node = NodeProcess(endpoint, 2, "model")
    w = Workload.make(seed=11, kv_heads=[0, 1])
    with NodeClient(endpoint) as c:
        _load(c, w, "cluster")
        assert sum(d.used_bytes for d in c.status().devices) > 0
    assert node.interrupt() == 0
    assert "node stopped" in node.output()
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in node.device_pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in node.device_pids)
    node = NodeProcess(endpoint, 2, "model")
    try:
        with NodeClient(endpoint) as c:
            st = c.status()
            assert st.sessions == 0
            assert [d.used_bytes for d in st.devices] == [0, 0]
            with pytest.raises(UnknownSessionError):
                c.close_session(1)
    finally:
        node.kill()


def test_devices_exit_when_their_node_is_killed(tmp_path: Path) -> None:
    node = NodeProcess(f"ipc://{tmp_path}/node", 2, "model")
    node.proc.kill()  # no chance to stop anything
    node.proc.wait(10)
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in node.device_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(p) for p in node.device_pids)
