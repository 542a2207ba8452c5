"""`nelssa node` and `nelssa device serve` from the command line: status and stop against a
running node, a node over devices started separately (--attach, tcp://), key making, and the
bind and argument checks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_cli
from node_helpers import NodeProcess, pid_alive

from nelssa.cli import main

CLI = [sys.executable, "-m", "nelssa.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """A client command (status, stop, keygen, a refusal at parse time) in this process: what
    it prints and returns is the check, not its process (cli_helpers)."""
    return run_cli(*args)


def _process(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`node up` in a process of its own, where a regression would serve instead of refusing
    (in this process it would never return)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with a short name (socket paths have a 107-byte limit) that is also TMPDIR of
    the nodes started here, so what they leave behind is seen; removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="nt-", dir="/tmp"))
    (folder / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(folder / "tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids)


def test_status_and_stop(short_tmp: Path) -> None:
    """...and `node stop` leaves nothing behind: neither the node's socket nor the devices'
    folder."""
    node = NodeProcess(f"ipc://{short_tmp}/node", 2, "model")
    try:
        st = _run("node", "status", "--endpoint", node.endpoint)
        assert st.returncode == 0, st.stderr
        assert "0 sessions" in st.stdout and "link roce-400g" in st.stdout
        assert "duplicates: frames the node had already taken" in st.stdout  # explained
        assert st.stdout.count(" up ") == 2 and "64Gi" in st.stdout
        js = json.loads(_run("node", "status", "--endpoint", node.endpoint, "--json").stdout)
        assert [d["alive"] for d in js["devices"]] == [True, True]
        assert js["devices"][0]["mem_bytes"] == 64 << 30
        # only the node's operator stops it: without the admin token it reads, `stop` is
        # refused here, and the node serves on
        token = short_tmp / "node.admin"
        assert token.stat().st_mode & 0o777 == 0o600
        token.rename(short_tmp / "elsewhere")
        stop = _run("node", "stop", "--endpoint", node.endpoint)
        assert stop.returncode == 2 and "Traceback" not in stop.stderr
        assert stop.stderr.count("\n") == 1 and "no admin token" in stop.stderr
        assert _run("node", "status", "--endpoint", node.endpoint).returncode == 0
        (short_tmp / "elsewhere").rename(token)
        stop = _run("node", "stop", "--endpoint", node.endpoint)
        assert stop.returncode == 0 and "stopping" in stop.stdout
        assert node.proc.wait(30) == 0
        _wait_gone(node.device_pids)
    finally:
        node.kill()
    assert sorted(short_tmp.rglob("*")) == [short_tmp / "tmp"]


def test_status_of_no_node(tmp_path: Path) -> None:
    """Nothing at the endpoint: refused at once; something there that does not answer: a
    timeout, said in one line."""
    st = _run("node", "status", "--endpoint", f"ipc://{tmp_path}/nothing", "--timeout", "5")
    assert st.returncode == 2 and "Traceback" not in st.stderr
    assert st.stderr.count("\n") == 1 and "nothing is listening" in st.stderr
    with socket.socket(socket.AF_UNIX) as mute:
        mute.bind(str(tmp_path / "mute"))
        mute.listen()
        (tmp_path / "mute.admin").write_bytes(bytes(32))  # `stop` has a token to present
        (tmp_path / "mute.admin").chmod(0o600)
        for op in ("status", "stop"):
            st = _run("node", op, "--endpoint", f"ipc://{tmp_path}/mute", "--timeout", "0.5")
            assert st.returncode == 1 and "Traceback" not in st.stderr, st.stderr
            assert st.stderr.count("\n") == 1 and "no reply" in st.stderr
            assert "within 0.5 s" in st.stderr


def test_a_second_node_on_a_live_endpoint_is_refused(short_tmp: Path) -> None:
    """ZeroMQ lets a second process bind the same ipc:// path (the first is orphaned): the
    second `node up` finds the live node first and starts nothing."""
    endpoint = f"ipc://{short_tmp}/node"
    node = NodeProcess(endpoint, 1, "model")
    try:
        second = _process("node", "up", "--devices", "1", "--endpoint", endpoint, timeout=20)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and endpoint in lines[0] and "already" in lines[0], lines
        assert "device 0" not in second.stdout
        assert len(list((short_tmp / "tmp").iterdir())) == 1  # the first node's devices
        st = _run("node", "status", "--endpoint", endpoint)
        assert st.returncode == 0 and st.stdout.count(" up ") == 1
        assert _run("node", "stop", "--endpoint", endpoint).returncode == 0
        assert node.proc.wait(30) == 0
    finally:
        node.kill()
    assert sorted(short_tmp.rglob("*")) == [short_tmp / "tmp"]


def test_a_device_server_removes_its_socket(short_tmp: Path) -> None:
    """`nelssa device serve` on ipc:// removes its socket file when it exits (here: its parent,
    a shell, is gone); ZeroMQ leaves the file behind."""
    sock = short_tmp / "dev"
    cli = " ".join(CLI)
    shell = subprocess.run(
        ["bash", "-c", f"{cli} device serve --endpoint ipc://{sock} --parent-pid $$ "
                       f"</dev/null >/dev/null 2>&1 & echo $!; for i in $(seq 300); do "
                       f"test -S {sock} && echo bound && break; sleep 0.1; done"],
        capture_output=True, text=True, timeout=60)
    pid, bound = shell.stdout.split()
    assert bound == "bound"
    _wait_gone([int(pid)], timeout=30)
    assert not sock.exists()


def test_a_killed_node_leaves_nothing_once_the_next_has_run(short_tmp: Path) -> None:
    """A node killed outright cannot clean up: its socket and its devices' folder stay. The
    next node on that endpoint binds over the dead socket and sweeps the dead folder."""
    endpoint = f"ipc://{short_tmp}/node"
    node = NodeProcess(endpoint, 1, "model")
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait(10)
    _wait_gone(node.device_pids)  # the devices watch their parent
    assert (short_tmp / "node").exists() and len(list((short_tmp / "tmp").iterdir())) == 1
    again = NodeProcess(endpoint, 1, "model")
    try:
        assert len(list((short_tmp / "tmp").iterdir())) == 1  # the dead node's folder swept
        assert _run("node", "stop", "--endpoint", endpoint).returncode == 0
        assert again.proc.wait(30) == 0
        _wait_gone(again.device_pids)
    finally:
        again.kill()
    assert sorted(short_tmp.rglob("*")) == [short_tmp / "tmp"]


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


def test_attached_devices_take_the_node_only_with_their_token(tmp_path: Path) -> None:
    """Issue 44, defect 14: a device started with --token-file takes a node that presents that
    token (--device-token); without it, or with another, `node up` ends with one line naming
    --device-token, exit 2."""
    from nelssa.emu.link.tokens import new_token, write_token_file

    token, wrong = tmp_path / "dev.token", tmp_path / "wrong.token"
    write_token_file(token, new_token())
    write_token_file(wrong, new_token())
    ep = f"tcp://127.0.0.1:{_free_port()}"
    device = subprocess.Popen([*CLI, "device", "serve", "--endpoint", ep, "--token-file",
                               str(token)], stdout=subprocess.DEVNULL)
    node_ep = f"ipc://{tmp_path}/node"
    try:
        for extra, words in (([], "--device-token FILE"), (["--device-token", str(wrong)],
                                                             "wrong token")):
            out = _process("node", "up", "--endpoint", node_ep, "--attach", ep, *extra)
            assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
            assert words in out.stderr and "Traceback" not in out.stderr
        node = subprocess.Popen([*CLI, "node", "up", "--endpoint", node_ep, "--attach", ep,
                                 "--device-token", str(token)], stdout=subprocess.PIPE, text=True)
        assert node.stdout is not None
        assert [node.stdout.readline() for _ in range(3)][-1].startswith("listening at")
        assert _run("node", "stop", "--endpoint", node_ep).returncode == 0
        assert node.wait(30) == 0 and device.poll() is None
    finally:
        device.kill()
        device.wait()


def test_binding_beyond_loopback_needs_keys(tmp_path: Path) -> None:
    out = _process("node", "up", "--devices", "1", "--endpoint",
                   f"tcp://0.0.0.0:{_free_port()}")
    assert out.returncode == 2
    assert "not a loopback address" in out.stderr and "nelssa node keygen" in out.stderr
    out = _process("device", "serve", "--endpoint", f"tcp://0.0.0.0:{_free_port()}")
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
    (["node", "up", "--devices", "0"], "argument --devices: must be an integer in 1..32, got 0"),
    (["node", "up", "--device-timeout", "0"], "argument --device-timeout: must be a finite "
                                              "number of seconds > 0, got 0"),
    (["node", "up", "--curve-clients", "."], "--curve-clients needs --curve-secret"),
    (["node", "up", "--link", "roce-1t"], "invalid choice: 'roce-1t'"),
    (["node", "up", "--max-queued", "0"], "argument --max-queued: must be a positive integer, "
                                          "got 0"),
    (["node", "up", "--max-sessions", "1.5"], "argument --max-sessions: must be a positive "
                                              "integer, got '1.5'"),
    (["node", "up", "--max-client-bytes", "nan"], "argument --max-client-bytes: must be a "
                                                  "positive integer, got 'nan'"),
    (["node", "up", "--max-request-heads", "true"], "argument --max-request-heads: must be a "
                                                    "positive integer, got 'true'"),
])
def test_node_argument_checks(capsys: pytest.CaptureFixture[str], argv: list[str],
                              words: str) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert words in capsys.readouterr().err


def test_node_limits_are_options_with_the_configs_defaults_and_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each NodeConfig limit `node up` takes has its default and its help from the field."""
    from dataclasses import fields

    from nelssa.cli_node import NODE_OPTIONS
    from nelssa.config_args import field_docs, option_name
    from nelssa.host.pnm_node.config import NodeConfig

    with pytest.raises(SystemExit):
        main(["node", "up", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    docs, defaults = field_docs(NodeConfig), {f.name: f.default for f in fields(NodeConfig)}
    for name in NODE_OPTIONS:
        assert docs[name], name
        assert option_name(name) in text
        assert " ".join(docs[name].split()[:6]) in text, name
        d = defaults[name]
        shown = "none" if d is None else f"{d:g}" if isinstance(d, float) else str(d)
        assert f"[default: {shown}]" in text, name


def test_the_default_endpoints_are_per_user_in_a_private_folder(tmp_path, monkeypatch):
    import stat

    from nelssa.cli_node import DEFAULT_ENDPOINT, check_bind
    from nelssa.emu.link import tokens

    mine = f"nelssa-{os.getuid()}"
    assert DEFAULT_ENDPOINT.startswith("ipc://") and f"/{mine}/" in DEFAULT_ENDPOINT
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ep = tokens.default_endpoint("node")
    assert ep == f"ipc://{tmp_path / mine / 'node'}"
    check_bind(ep, None)  # makes the folder, this user's alone
    st = (tmp_path / mine).lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700
    os.chmod(tmp_path / mine, 0o755)  # a folder others may enter is refused, in one line
    from nelssa.options import UsageError

    with pytest.raises(UsageError, match="not a folder of this user's alone"):
        check_bind(ep, None)


def test_node_up_help_points_into_no_source_file():
    from nelssa.config_args import user_help

    assert user_help("marked down (its work does not count: driver/remote.py HEARTBEAT_S).") \
        == "marked down (its work does not count)."
    assert user_help("refused with BUSY (emu/link/server.py). A ``twin``") \
        == "refused with BUSY. A twin"
    done = _run("node", "up", "--help")
    assert done.returncode == 0
    out = done.stdout
    assert ".py" not in out and "``" not in out
