"""Issue 44, defect 14: a device server (`nelssa device serve`) takes calls only from a connection
that presented its token (AUTH), as a node takes SHUTDOWN only from its operator. A stranger's
SHUTDOWN (any payload), backdoor reads and writes and port messages are refused with a clear
error and change nothing; the token never appears on a command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nelssa.driver.remote import (
    CXL_LINK,
    DMA_READ_REQ,
    MAX_RPC_REPLY,
    RPC_RETRY,
    DeviceAuthError,
    RemotePort,
    RpcErrorCode,
    RpcOp,
    encode_request,
)
from nelssa.emu.link.client import LinkClient
from nelssa.emu.link.model import link_preset
from nelssa.emu.link.service import RemoteError
from nelssa.host.pnm_node.admin import ADMIN_TOKEN_BYTES, read_token, token_path


def _serve(endpoint: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "nelssa.cli", "device", "serve", "--backend",
                             "model", "--endpoint", endpoint, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _stranger(endpoint: str) -> LinkClient:
    return LinkClient(endpoint, link_preset(CXL_LINK), 10.0, retry=RPC_RETRY,
                      max_reply=MAX_RPC_REPLY)


def _refused(link: LinkClient, op: int, payload: bytes) -> str:
    with pytest.raises(RemoteError) as e:
        link.call(op, payload)
    assert e.value.code == RpcErrorCode.UNAUTHORIZED, str(e.value)
    return str(e.value)


@pytest.fixture
def served(tmp_path: Path):
    endpoint = f"ipc://{tmp_path}/dev"
    proc = _serve(endpoint)
    owner = RemotePort(endpoint, timeout_ms=30_000)  # reads the token the device wrote
    owner.cycle  # noqa: B018 - up
    yield proc, endpoint, owner
    owner.close()
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_stranger_neither_stops_nor_drives_a_device(served) -> None:
    proc, endpoint, owner = served
    addr = 1 << 30
    owner.dma_write(addr, b"\x5a" * 64)
    cycle = owner.cycle
    stranger = _stranger(endpoint)
    try:
        rng = np.random.default_rng(14)
        text = _refused(stranger, RpcOp.SHUTDOWN, encode_request(0, []))
        assert "token" in text and "AUTH" in text
        for _ in range(20):  # random 8-byte payloads stopped it before
            _refused(stranger, RpcOp.SHUTDOWN, rng.bytes(8))
        _refused(stranger, RpcOp.DMA_WRITE, addr.to_bytes(8, "little") + bytes(64))
        _refused(stranger, RpcOp.DMA_READ, DMA_READ_REQ.build({"addr": addr, "length": 64}))
        _refused(stranger, RpcOp.ADVANCE, encode_request(1000, []))
        _refused(stranger, 999, b"")
        # a guessed token is refused, and leaves the connection as refused as before
        for guess in (bytes(ADMIN_TOKEN_BYTES), rng.bytes(ADMIN_TOKEN_BYTES), b"", rng.bytes(8)):
            assert "wrong token" in _refused(stranger, RpcOp.AUTH, guess)
        _refused(stranger, RpcOp.CYCLE, encode_request(0, []))
    finally:
        stranger.close()
    assert proc.poll() is None
    assert owner.dma_read(addr, 64) == b"\x5a" * 64
    assert owner.cycle == cycle
    # the token's holder may: a connection that presents it is served, and may stop it
    holder = _stranger(endpoint)
    try:
        holder.call(RpcOp.AUTH, read_token(endpoint))
        holder.call(RpcOp.SHUTDOWN, encode_request(0, []))
    finally:
        holder.close()
    assert proc.wait(30) == 0
    assert not token_path(endpoint).exists()  # the device removes its token file


def test_the_token_comes_from_a_file_never_the_command_line(tmp_path: Path) -> None:
    """`--token-file`: the token in it (made, mode 0600, when there is none); a file others may
    read is refused (exit 2, one line); the wrong token is refused by name."""
    token_file = tmp_path / "dev.token"
    endpoint = f"ipc://{tmp_path}/dev"
    proc = _serve(endpoint, "--token-file", str(token_file))
    try:
        port = RemotePort(endpoint, timeout_ms=30_000, token_file=token_file)
        port.cycle  # noqa: B018 - up
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_bytes()
        assert len(token) == ADMIN_TOKEN_BYTES and not token_path(endpoint).exists()
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token not in cmdline and token.hex().encode() not in cmdline
        wrong = tmp_path / "wrong.token"
        wrong.write_bytes(bytes(ADMIN_TOKEN_BYTES))
        wrong.chmod(0o600)
        with pytest.raises(DeviceAuthError, match="wrong token"):
            RemotePort(endpoint, timeout_ms=10_000, token_file=wrong).cycle  # noqa: B018
        port.shutdown()
        port.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    os.chmod(token_file, 0o644)
    bad = _serve(f"ipc://{tmp_path}/dev2", "--token-file", str(token_file))
    out, _ = bad.communicate(timeout=60)
    assert bad.returncode == 2 and out.count("\n") == 1, out
    assert "error:" in out and str(token_file) in out and "0600" in out


def test_a_token_file_appears_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client waiting for a starting server's token reads it whole or not at all: the file
    is not at its path while its bytes are written (it once was, empty, and a client under
    load took the server for a stranger's); a file in the way is still never written."""
    from nelssa.emu.link import tokens

    path = tmp_path / "dev.admin"
    seen: list[bool] = []
    real_fdopen = os.fdopen

    def watching(fd, *args, **kwargs):
        f = real_fdopen(fd, *args, **kwargs)
        write = f.write
        f.write = lambda data: (seen.append(path.exists()), write(data))[1]  # type: ignore
        return f

    monkeypatch.setattr(os, "fdopen", watching)
    token = tokens.new_token()
    tokens.write_token_file(path, token)
    monkeypatch.undo()
    assert seen == [False]
    assert tokens.read_token_file(path) == token and len(list(tmp_path.iterdir())) == 1
    planted = tmp_path / "planted.admin"
    planted.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(tokens.AdminTokenError, match="cannot write an admin token"):
        tokens.write_token_file(planted, token)
    assert not (tmp_path / "elsewhere").exists() and len(list(tmp_path.iterdir())) == 2
