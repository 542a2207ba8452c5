"""`nelssa device serve` in its own process, driven over a real ZeroMQ socket: the same results as
an in-process model device, errors reported back without killing the server, clean shutdown."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.driver.remote import RemotePort, RpcOp, decode_request, encode_request
from nelssa.hw.model.device import ModelDevice


def test_request_envelope_round_trip():
    raw = encode_request(RpcOp.ADVANCE, 77, [b"ab", b"", b"xyz"])
    assert raw == bytes.fromhex("02" "4d00000000000000" "02000000") + b"ab" + bytes(4) + \
        bytes.fromhex("03000000") + b"xyz"
    assert decode_request(raw) == (RpcOp.ADVANCE, 77, [b"ab", b"", b"xyz"])
    with pytest.raises(ValueError, match="truncated"):
        decode_request(raw[:-1])


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
        o_local, lse_local, _ = _run(ModelDevice())
        assert done == 1
        assert np.array_equal(o.view(np.uint32), o_local.view(np.uint32))
        assert np.array_equal(lse.view(np.uint32), lse_local.view(np.uint32))
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
