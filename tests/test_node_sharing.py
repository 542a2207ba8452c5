"""A PNM node shared by several clients: requests for different devices run at the same time,
each device's queue is shared fairly, one client's share and one request's work are bounded,
and a device that answers again is re-admitted (host/pnm_node/dispatch.py, lanes.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from node_helpers import FakeSlot, NodeProcess

from nelssa.experiments.node_sharing import load_head
from nelssa.host.pnm_node.client import NodeClient
from nelssa.host.pnm_node.dispatch import QUANTUM_TOKENS, DeviceQueues, DeviceWork
from nelssa.host.pnm_node.errors import DeviceDownError, DeviceQueueFullError, NodeLimitError

TOKENS = 32
"""Tokens per cluster of the test KV."""




def test_a_flood_does_not_starve_another_client_on_the_same_device() -> None:
    slot = FakeSlot(0)
    d = DeviceQueues([slot], cap_tokens=1 << 30)  # type: ignore[list-item]
    gate, order = threading.Event(), []

    def work(name: str, wait: bool = False) -> Any:
        def fn(_: Any) -> str:
            if wait:
                gate.wait(10)
            order.append(name)
            return name
        return fn

    jobs = [d.run(b"flood", [DeviceWork(slot, work("f0", wait=True), 5000)])]  # type: ignore[arg-type]
    time.sleep(0.05)  # f0 runs, holding the device
    jobs += [d.run(b"flood", [DeviceWork(slot, work(f"f{i}"), 5000)])  # type: ignore[arg-type]
             for i in range(1, 20)]
    jobs.append(d.run(b"other", [DeviceWork(slot, work("other"), 5000)]))  # type: ignore[arg-type]
    gate.set()
    for j in jobs:
        j.future.result(10)
    d.stop()
    # round robin by work: the other client is served within two of the flood's requests
    # (each a little over a quantum) after the one running
    assert QUANTUM_TOKENS < 5000
    assert order.index("other") <= 3
    assert [x for x in order if x != "other"] == [f"f{i}" for i in range(20)]  # order kept


def test_requests_for_other_devices_do_not_wait(tmp_path: Path) -> None:
    big = 2048 * TOKENS
    node = NodeProcess(f"ipc://{tmp_path}/node", 2, "model", extra=[
        "--max-request-tokens", str(big), "--max-client-queued-tokens", str(big)])
    try:
        with NodeClient(node.endpoint, timeout_s=120) as a, \
                NodeClient(node.endpoint, timeout_s=120) as b, NodeClient(node.endpoint) as w:
            sa, qa = load_head(a, 0, 64, TOKENS, seed=1)  # head-wise: KV head 0 on device 0
            sb, qb = load_head(b, 1, 8, TOKENS, seed=2)  # KV head 1 on device 1
            alone = b.attend(sb, 0, {1: qb}, {1: [0, 3, 5]})
            with pytest.raises(NodeLimitError, match="max_request_tokens"):
                a.attend(sa, 0, {0: qa}, {0: [i % 64 for i in range(2049)]})
            fa = a.attend_async(sa, 0, {0: qa}, {0: [i % 64 for i in range(2048)]})
            while w.status().devices[0].queue_depth == 0:
                time.sleep(0.01)
            during = b.attend(sb, 0, {1: qb}, {1: [0, 3, 5]})
            assert not fa.done()  # B's answer came while A's ATTEND still ran on device 0
            with pytest.raises(DeviceQueueFullError, match="max_client_queued_tokens"):
                a.attend(sa, 0, {0: qa}, {0: [1]})  # A's share of device 0 is taken
            assert not fa.done()
            r = fa.result()
            assert r.o[0].shape == (4, 128) and np.isfinite(r.o[0]).all()
            assert np.array_equal(during.o[1], alone.o[1])  # results per client unchanged
    finally:
        node.kill()


def test_a_flood_on_a_device_leaves_the_other_client_its_turn(tmp_path: Path) -> None:
    node = NodeProcess(f"ipc://{tmp_path}/node", 1, "model")
    try:
        with NodeClient(node.endpoint, timeout_s=120) as f, \
                NodeClient(node.endpoint, timeout_s=120) as v, NodeClient(node.endpoint) as w:
            sf, qf = load_head(f, 0, 32, TOKENS, seed=3)
            sv, qv = load_head(v, 0, 32, TOKENS, seed=4)
            ids = [i % 32 for i in range(160)]  # 5,120 tokens: a little over a quantum
            flood = [f.attend_async(sf, 0, {0: qf}, {0: ids}) for _ in range(12)]
            while w.status().devices[0].queue_depth < 12:
                time.sleep(0.01)
            v.attend(sv, 0, {0: qv}, {0: ids})
            left = w.status().devices[0].queue_depth
            assert left >= 12 - 4, f"the other client waited for {12 - left} flood requests"
            for fut in flood:
                fut.result()
    finally:
        node.kill()


def test_a_device_that_answers_again_is_readmitted(tmp_path: Path) -> None:
    node = NodeProcess(f"ipc://{tmp_path}/node", 2, "model", device_timeout=2.0,
                       extra=["--probe-period", "0.2"])
    try:
        with NodeClient(node.endpoint, timeout_s=30) as c:
            s, q = load_head(c, 1, 8, TOKENS, seed=5)  # KV head 1 on device 1
            before = c.attend(s, 0, {1: q}, {1: [1, 2]})
            os.kill(node.device_pids[1], signal.SIGSTOP)
            with pytest.raises(DeviceDownError, match="device 1"):
                c.attend(s, 0, {1: q}, {1: [1, 2]})
            assert not c.status().devices[1].alive
            os.kill(node.device_pids[1], signal.SIGCONT)
            deadline = time.monotonic() + 30
            while not c.status().devices[1].alive:
                assert time.monotonic() < deadline, "device 1 was not re-admitted"
                time.sleep(0.1)
            assert "re-admitted" in node.output()
            with pytest.raises(DeviceDownError, match="lost when the device went down"):
                c.attend(s, 0, {1: q}, {1: [1, 2]})  # its KV went with it
            s2, q2 = load_head(c, 1, 8, TOKENS, seed=5)  # the same KV, written again
            assert c.status().devices[1].regions == 1  # new KV landed on device 1
            after = c.attend(s2, 0, {1: q2}, {1: [1, 2]})
            assert np.array_equal(after.o[1], before.o[1])
            c.free_kv(s, 0)  # what was lost is freed without touching the device
            c.close_session(s)
            c.close_session(s2)
            assert c.status().devices[1].regions == 0
    finally:
        node.kill()
