"""Start and stop the device processes of a node (``nelssa device serve``), each in a session
of its own so a Ctrl-C at the terminal reaches only the node, which then stops them in order.
Only processes started here are ever signalled."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)


class DeviceProcesses:
    """``count`` device processes serving at ipc:// endpoints in a private folder."""

    def __init__(self, count: int, backend: str, engines: int = 2,
                 preset: str = "ddr5-6400", verbose: bool = False) -> None:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self.folder = Path(tempfile.mkdtemp(prefix="nelssa-node-"))
        self.endpoints = [f"ipc://{self.folder}/device-{i}" for i in range(count)]
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for ep in self.endpoints:
                cmd = [sys.executable, "-m", "nelssa.cli", *(["-v"] if verbose else []),
                       "device", "serve", "--backend", backend, "--endpoint", ep,
                       "--engines", str(engines), "--preset", preset,
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
