"""The one interface between the driver and a device implementation (like a BAR plus a DMA
engine to a real driver): port messages (driver/cxl.py) in and out, and the device's clock.
Backends: ``model`` (hw/model/device.py), ``rtl`` (the Verilated device), ``fpga`` (a board),
a remote device over ZeroMQ (driver/remote.py); the driver above never knows which. They are
opened by name from one spec string (hw/ports.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod

DDR5_COUNTERS = ("ACT", "PRE", "PREA", "RD", "WR", "REF", "ACTIVE", "PRECHARGED", "REFRESH")
"""A DDR5 sub-channel controller's performance counters, in nelssa_ddr5_pkg::ddr5_perf_t's
order (nelssa.gen.PERF_FIELDS): the commands it issued, then the cycles its banks spent active,
all precharged and refreshing (hw/model/ddr5_energy.py prices them)."""


class DevicePort(ABC):
    """One device: messages in, messages out, emulated time."""

    @abstractmethod
    def send(self, message: bytes) -> None:
        """Deliver one host-to-device message (M2S Req/RwD or MMIO request)."""

    @abstractmethod
    def receive(self) -> list[bytes]:
        """Every device-to-host message ready now (S2M NDR/DRS, MMIO read data)."""

    @abstractmethod
    def advance(self, cycles: int) -> None:
        """Let the device run ``cycles`` core cycles."""

    @abstractmethod
    def run_until_idle(self, max_cycles: int) -> int:
        """Run until no descriptor is in flight; returns the cycles run. Raises TimeoutError
        after ``max_cycles``."""

    @property
    @abstractmethod
    def cycle(self) -> int:
        """Core cycles since reset."""

    @property
    @abstractmethod
    def clock_hz(self) -> int:
        """The device's core clock: what one of its cycles lasts in emulated time."""

    def dma_write(self, addr: int, data: bytes) -> bool:
        """Write device memory through a DMA engine; False when the backend has none (the
        driver then writes line by line through CXL.mem)."""
        return False

    def dma_read(self, addr: int, n: int) -> bytes | None:
        """Read device memory through a DMA engine; None when the backend has none."""
        return None

    def ddr5_counts(self) -> list[tuple[int, ...]] | None:
        """Each DDR5 sub-channel controller's counters since reset (``DDR5_COUNTERS``, one
        tuple per sub-channel), or None where the device does not count its DDR5 commands (a
        board, the model's fluid timer): the default."""
        return None

    def counters(self) -> tuple[int, list[tuple[int, ...]] | None]:
        """The cycle count and the DDR5 counters together (a served device: one call)."""
        return self.cycle, self.ddr5_counts()

    def set_timeout(self, timeout_ms: int) -> None:  # noqa: B027 - optional hook
        """How long the device may take to answer (or stand still) before a call fails with a
        TimeoutError; a device in this process always answers, so the default ignores it."""

    def abort(self, reason: str) -> None:  # noqa: B027 - optional hook
        """Fail the call in progress and every later one (safe from any thread): the device is
        known to be gone. A port whose calls cannot hang ignores it."""

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Ask the device to stop (a served device's process exits); one that outlives its
        user (in this process, a board) ignores it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds (processes, sockets)."""
