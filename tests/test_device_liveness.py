"""Liveness of a served device, judged apart from how long its work takes (issue 20, defect 5):
a call that outlasts the port's timeout but keeps the device busy completes; a device that stops
answering, or answers without making progress, is given up after the timeout; a call can be
abandoned from another thread at once (defect 11: the node saw the device process exit).

The device is a model device behind ``serve_port`` in a thread, made slow by a wrapper that
either computes (burns CPU: slow but progressing) or blocks (no progress) inside the call."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nelssa.driver.port import DevicePort
from nelssa.driver.remote import PortAbortedError, PortTimeoutError, RemotePort
from nelssa.driver.remote_server import serve_port
from nelssa.hw.model.device import ModelDevice


class SlowPort(DevicePort):
    """A model device whose ``run_until_idle`` first spends ``seconds`` computing (``burn``)
    or blocked on an event (a device stuck inside the call)."""

    def __init__(self, seconds: float, burn: bool) -> None:
        self.inner, self.seconds, self.burn = ModelDevice(), seconds, burn
        self.release = threading.Event()

    def send(self, message: bytes) -> None:
        self.inner.send(message)

    def receive(self) -> list[bytes]:
        return self.inner.receive()

    def advance(self, cycles: int) -> None:
        self.inner.advance(cycles)

    def run_until_idle(self, max_cycles: int) -> int:
        end = time.monotonic() + self.seconds
        if self.burn:
            x = 0
            while time.monotonic() < end and not self.release.is_set():
                x += 1
        else:
            self.release.wait(self.seconds)
        return 1234

    @property
    def cycle(self) -> int:
        return self.inner.cycle

    @property
    def clock_hz(self) -> int:
        return self.inner.clock_hz


def _serve(tmp_path: Path, port: SlowPort) -> Iterator[str]:
    endpoint = f"ipc://{tmp_path}/slow"
    server = threading.Thread(target=serve_port, args=(port, endpoint), daemon=True)
    server.start()
    yield endpoint
    port.release.set()
    stopper = RemotePort(endpoint, timeout_ms=5000)
    stopper.shutdown()
    stopper.close()
    server.join(5)
    assert not server.is_alive()


@pytest.fixture
def burning(tmp_path: Path) -> Iterator[str]:
    yield from _serve(tmp_path, SlowPort(2.0, burn=True))


@pytest.fixture
def stuck(tmp_path: Path) -> Iterator[str]:
    yield from _serve(tmp_path, SlowPort(30.0, burn=False))


def test_work_longer_than_the_timeout_completes(burning: str) -> None:
    port = RemotePort(burning, timeout_ms=500)
    t0 = time.monotonic()
    assert port.run_until_idle(10) == 1234  # 2 s of work against a 0.5 s timeout
    assert time.monotonic() - t0 >= 2.0
    assert port.cycle == 0  # and the port is still usable
    port.close()


def test_a_device_that_makes_no_progress_is_given_up(stuck: str) -> None:
    port = RemotePort(stuck, timeout_ms=500)
    t0 = time.monotonic()
    with pytest.raises(PortTimeoutError, match=r"made no progress on RUN_UNTIL_IDLE for 0\.5 s"):
        port.run_until_idle(10)
    assert 0.5 <= time.monotonic() - t0 < 3.0
    with pytest.raises(PortTimeoutError, match="stopped answering earlier"):
        port.cycle  # noqa: B018 - the port is closed for good
    port.close()


def test_a_call_is_abandoned_at_once_from_another_thread(stuck: str) -> None:
    port = RemotePort(stuck, timeout_ms=60_000)
    threading.Timer(0.3, port.abort, args=("device process exited (signal 9)",)).start()
    t0 = time.monotonic()
    with pytest.raises(PortAbortedError, match=r"device process exited \(signal 9\)"):
        port.run_until_idle(10)
    assert time.monotonic() - t0 < 1.0
    port.close()


def test_a_silent_device_is_given_up_after_the_timeout(tmp_path: Path) -> None:
    port = RemotePort(f"ipc://{tmp_path}/nobody", timeout_ms=300)
    t0 = time.monotonic()
    with pytest.raises(PortTimeoutError, match=r"did not answer CYCLE within 0\.3 s"):
        port.cycle  # noqa: B018
    assert time.monotonic() - t0 < 2.0
    port.close()
