"""Start and stop the device processes of a node (``nelssa device serve``), each in a session
of its own so a Ctrl-C at the terminal reaches only the node, which then stops them in order.
Only processes started here are ever signalled.

Also what a process that binds or reaches an endpoint checks first (``check_bindable``,
``check_listening``), and the cleanup ZeroMQ leaves to us: it never removes the file of an
ipc:// socket, and it lets a second process bind a path a live one serves (the first is then
cut off). Private folders carry their owner's pid, so one left by a killed process is removed
by the next."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)



def per_device_trace(trace: Path, device: int) -> Path:
    """Device ``device``'s ``--command-trace`` file of a node's run to ``trace``."""
    return trace.with_name(f"{trace.stem}-dev{device}{trace.suffix}")

class EndpointError(ValueError):
    """An endpoint that cannot be bound or has nothing behind it; the message names it."""


def _ipc_path(endpoint: str) -> str | None:
    """The socket's path of an ipc:// endpoint (a leading NUL for an abstract one), else
    None."""
    scheme, _, rest = endpoint.partition("://")
    if scheme != "ipc":
        return None
    return "\0" + rest[1:] if rest.startswith("@") else rest


def _tcp_address(endpoint: str) -> tuple[str, int] | None:
    """(host, port) of a tcp:// endpoint with a numeric port, else None."""
    scheme, _, rest = endpoint.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _unix_answers(path: str, timeout_s: float = 1.0) -> bool:
    """Whether a process accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except TimeoutError:  # a full backlog: someone is there
            return True
        except OSError:
            return False
        return True


def check_bindable(endpoint: str) -> None:
    """Refuse (EndpointError) an endpoint a live process serves or that cannot be bound: a
    missing folder, a path that is not a socket, a tcp port in use. A socket file with nothing
    behind it (its server was killed) is fine: binding replaces it."""
    path = _ipc_path(endpoint)
    if path is not None:
        if path.startswith("\0"):
            if _unix_answers(path):
                raise EndpointError(f"{endpoint}: a process is already listening there")
            return
        folder = Path(path).parent
        if not folder.is_dir():
            raise EndpointError(f"{endpoint}: folder {folder} does not exist")
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise EndpointError(f"{endpoint}: {path} exists and is not a socket")
        if _unix_answers(path):
            raise EndpointError(f"{endpoint}: a node or another server is already listening "
                                "there (stop it first: `nelssa node stop --endpoint "
                                f"{endpoint}`)")
        return
    address = _tcp_address(endpoint)
    if address is None or address[1] == 0:
        return
    host = None if address[0] in ("", "*") else address[0]
    try:
        infos = socket.getaddrinfo(host, address[1], type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror:  # an interface name (ZeroMQ takes eth0:5555): its bind will tell
        return
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ binds
        try:
            s.bind(sockaddr)
        except OSError as e:
            why = "in use" if e.errno == errno.EADDRINUSE else e.strerror
            raise EndpointError(f"{endpoint}: cannot bind: {why}") from None


def check_listening(endpoint: str, timeout_s: float = 1.0) -> None:
    """Refuse (EndpointError) an endpoint where certainly nothing listens: no socket file, a
    dead socket file, a refused tcp connection. Where it cannot tell (no answer within
    ``timeout_s``), the caller's own request will time out instead."""
    path = _ipc_path(endpoint)
    if path is not None:
        if not path.startswith("\0") and not os.path.exists(path):
            raise EndpointError(f"{endpoint}: nothing is listening there (no such socket)")
        if not _unix_answers(path, timeout_s):
            raise EndpointError(f"{endpoint}: nothing is listening there")
        return
    address = _tcp_address(endpoint)
    if address is None:
        return
    try:
        with socket.create_connection(address, timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        raise EndpointError(f"{endpoint}: nothing is listening there (connection "
                            "refused)") from None
    except socket.gaierror as e:
        raise EndpointError(f"{endpoint}: cannot resolve {address[0]!r}: {e.strerror}") from None
    except OSError:  # no route, a firewall's silence: let the request itself time out
        pass


def remove_socket_file(endpoint: str) -> None:
    """Remove the file of an ipc:// socket this process bound and has closed."""
    path = _ipc_path(endpoint)
    if path is None or path.startswith("\0"):
        return
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def private_folder(prefix: str) -> Path:
    """A new temporary folder ``<prefix><pid>-XXXX`` (mode 0700); folders of the same prefix
    whose owner process is gone (killed before it could remove them) are removed first."""
    tmp = Path(tempfile.gettempdir())
    for old in tmp.glob(f"{prefix}*-*"):
        pid = old.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)) and old.is_dir() and old.stat().st_uid \
                == os.getuid():
            log.info("removing %s, left by process %s", old, pid)
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


class DeviceProcesses:
    """``count`` device processes serving at ipc:// endpoints in a private folder, each taking
    calls only from who presents the token in ``token_file`` (emu/link/tokens.py)."""

    def __init__(self, count: int, backend: str, engines: int | None = None,
                 preset: str = "ddr5-6400", verbose: bool = False,
                 file_memory: bool = False, device_args: tuple[str, ...] = (),
                 token_file: Path | None = None, command_trace: Path | None = None) -> None:
        """``engines``: attention units per device (None: `device serve`'s default, the
        device's own); ``file_memory``: model devices hold their memory in sparse files in
        the private folder (`device serve --memory-file`), removed with it; ``device_args``:
        more `device serve` options (the DDR5 overrides, sub-channels, units' latencies);
        ``token_file``: the devices' token (default: a new one in the private folder, never
        on a command line); ``command_trace``: each model device writes its DDR5 commands to
        its own file named from it (per_device_trace) when it stops."""
        from nelssa.emu.link.tokens import new_token, write_token_file

        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self.folder = private_folder("nelssa-node-")
        if token_file is None:
            token_file = self.folder / "device.token"
            write_token_file(token_file, new_token())
        self.token_file = token_file
        self.endpoints = [f"ipc://{self.folder}/device-{i}" for i in range(count)]
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for i, ep in enumerate(self.endpoints):
                mem = (["--memory-file", str(self.folder / f"device-{i}.mem")]
                       if file_memory else [])
                if command_trace is not None:
                    mem += ["--command-trace", str(per_device_trace(command_trace, i))]
                cmd = [sys.executable, "-m", "nelssa.cli", *(["-v"] if verbose else []),
                       "device", "serve", "--backend", backend, "--endpoint", ep, *mem,
                       *(["--engines", str(engines)] if engines is not None else []),
                       "--preset", preset, *device_args, "--token-file", str(token_file),
                       "--parent-pid", str(os.getpid())]
                self.procs.append(subprocess.Popen(cmd, start_new_session=True,
                                                   stdin=subprocess.DEVNULL))
                log.info("started device process %d: %s", self.procs[-1].pid, ep)
        except Exception:
            self.stop()
            raise

    def dead(self) -> list[tuple[int, int]]:
        """(index, exit status) of device processes that have exited."""
        return [(i, p.returncode) for i, p in enumerate(self.procs) if p.poll() is not None]

    def stop(self, grace_s: float = 5.0) -> None:
        """Terminate what still runs (after the node asked the devices to exit), then kill
        what ignores it."""
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("device process %d ignored SIGTERM; killing it", p.pid)
                p.kill()
                p.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class NodeLauncher:
    """`nelssa node up` as a child process: started, waited for until it listens, and stopped
    with Ctrl-C (so it stops its own devices)."""

    def __init__(self, endpoint: str, devices: int, backend: str, link: str,
                 ready_timeout_s: float = 900.0, extra: list[str] | None = None) -> None:
        import queue
        import threading

        cmd = [sys.executable, "-m", "nelssa.cli", "node", "up", "--devices", str(devices),
               "--backend", backend, "--link", link, "--endpoint", endpoint, *(extra or [])]
        self.endpoint = endpoint
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, stdin=subprocess.DEVNULL)
        self.lines: list[str] = []
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                lines.put(line.rstrip())
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                break
            if line.startswith("listening at"):
                return
        self.stop()
        raise RuntimeError("the node did not come up:\n" + "\n".join(self.lines[-20:]))

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("node %d did not stop; killing it", self.proc.pid)
                self.proc.kill()
                self.proc.wait()
