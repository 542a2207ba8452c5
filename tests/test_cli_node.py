"""`nelssa node` and `nelssa device serve` from the command line: status and stop against a
running node, a node over devices started separately (--attach, tcp://), key making, and the
bind and argument checks."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from node_helpers import NodeProcess, pid_alive

from nelssa.cli import main

CLI = [sys.executable, "-m", "nelssa.cli"]


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_status_and_stop(tmp_path: Path) -> None:
    node = NodeProcess(f"ipc://{tmp_path}/node", 2, "model")
    try:
        st = _run("node", "status", "--endpoint", node.endpoint)
        assert st.returncode == 0, st.stderr
        assert "0 sessions" in st.stdout and "link roce-400g" in st.stdout
        assert st.stdout.count(" up ") == 2 and "64Gi" in st.stdout
        js = json.loads(_run("node", "status", "--endpoint", node.endpoint, "--json").stdout)
        assert [d["alive"] for d in js["devices"]] == [True, True]
        assert js["devices"][0]["mem_bytes"] == 64 << 30
        stop = _run("node", "stop", "--endpoint", node.endpoint)
        assert stop.returncode == 0 and "stopping" in stop.stdout
        assert node.proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in node.device_pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(pid_alive(p) for p in node.device_pids)
    finally:
        node.kill()


def test_status_of_no_node_times_out_clearly(tmp_path: Path) -> None:
    st = _run("node", "status", "--endpoint", f"ipc://{tmp_path}/nothing", "--timeout", "0.5")
    assert st.returncode == 1
    assert "no reply to op 7" in st.stderr and "within 0.5 s" in st.stderr


def test_node_over_devices_started_apart(tmp_path: Path) -> None:
    """Devices in processes of their own over tcp:// (as on other hosts), joined with --attach;
    the node leaves them running when it stops: it did not start them."""
    ports = [_free_port(), _free_port()]
    devices = [subprocess.Popen([*CLI, "device", "serve", "--backend", "model", "--endpoint",
                                 f"tcp://127.0.0.1:{p}"]) for p in ports]
    try:
        up = [*CLI, "node", "up", "--endpoint", f"ipc://{tmp_path}/node"]
        for p in ports:
            up += ["--attach", f"tcp://127.0.0.1:{p}"]
        node = subprocess.Popen(up, stdout=subprocess.PIPE, text=True)
        assert node.stdout is not None
        lines = [node.stdout.readline() for _ in range(4)]
        assert "2 remote devices" in lines[0] and lines[-1].startswith("listening at")
        st = _run("node", "status", "--endpoint", f"ipc://{tmp_path}/node")
        assert f"tcp://127.0.0.1:{ports[1]}" in st.stdout and st.stdout.count(" up ") == 2
        assert _run("node", "stop", "--endpoint", f"ipc://{tmp_path}/node").returncode == 0
        assert node.wait(30) == 0
        assert all(d.poll() is None for d in devices)
    finally:
        for d in devices:
            d.kill()
            d.wait()


def test_binding_beyond_loopback_needs_keys(tmp_path: Path) -> None:
    out = _run("node", "up", "--devices", "1", "--endpoint", f"tcp://0.0.0.0:{_free_port()}")
    assert out.returncode == 2
    assert "not a loopback address" in out.stderr and "nelssa node keygen" in out.stderr
    out = _run("device", "serve", "--endpoint", f"tcp://0.0.0.0:{_free_port()}")
    assert out.returncode == 2 and "not a loopback address" in out.stderr


def test_keygen_and_a_curve_node(tmp_path: Path) -> None:
    out = _run("node", "keygen", str(tmp_path / "keys"))
    assert out.returncode == 0
    public, secret = tmp_path / "keys/node.key", tmp_path / "keys/node.key_secret"
    assert public.is_file() and secret.is_file()
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    node = subprocess.Popen([*CLI, "node", "up", "--devices", "1", "--endpoint", endpoint,
                             "--curve-secret", str(secret)], stdout=subprocess.PIPE, text=True)
    try:
        assert node.stdout is not None
        while not node.stdout.readline().startswith("listening at"):
            pass
        ok = _run("node", "status", "--endpoint", endpoint, "--curve-server-key", str(public))
        assert ok.returncode == 0 and " up " in ok.stdout
        plain = _run("node", "status", "--endpoint", endpoint, "--timeout", "0.5")
        assert plain.returncode == 1  # no CURVE handshake, no answer
        assert _run("node", "stop", "--endpoint", endpoint, "--curve-server-key",
                    str(public)).returncode == 0
        assert node.wait(30) == 0
    finally:
        node.kill()
        node.wait()


@pytest.mark.parametrize("argv, words", [
    (["node", "up", "--devices", "0"], "--devices must be in 1..32, got 0"),
    (["node", "up", "--device-timeout", "0"], "--device-timeout must be > 0"),
    (["node", "up", "--curve-clients", "x"], "--curve-clients needs --curve-secret"),
    (["node", "up", "--link", "roce-1t"], "invalid choice: 'roce-1t'"),
])
def test_node_argument_checks(capsys: pytest.CaptureFixture[str], argv: list[str],
                              words: str) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert words in capsys.readouterr().err
