"""One PNM device as NelssaHost holds it: the driver stack (Device, MemoryApi, CommandQueue)
over a port opened from its spec (hw/ports.py: a device process's endpoint, or a board), a
thread of its own so the devices work concurrently, byte counters for the CXL link model, and
the device's health: marked down when it stops answering, probed while down, and re-admitted,
empty, once it answers again (``HealthWatch``)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

import zmq

from nelssa.driver import cxl as cxl_msg
from nelssa.driver.command import AttnOutput, AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import LINE_BYTES
from nelssa.driver.memory import MemoryApi
from nelssa.driver.port import DevicePort
from nelssa.driver.remote import DeviceBusyError, PortTimeoutError
from nelssa.emu.link.model import LinkSpec
from nelssa.hw.ports import PortOptions, open_port

log = logging.getLogger(__name__)

T = TypeVar("T")
KV_BASE = 1 << 20
"""Device memory below this stays unused by KV (room for future firmware structures)."""
RUN_CHUNK_CYCLES = 200_000
"""Cycles per run call while waiting for descriptors (how long a call takes in wall time does
not matter: a served device answers while it works, driver/remote.HEARTBEAT_S)."""
WATCH_PERIOD_S = 0.1
"""How often the node looks whether a device process it started has exited."""


_RWD_BYTES = len(cxl_msg.mem_wr(0, 0, bytes(LINE_BYTES)))
_REQ_BYTES = len(cxl_msg.mem_rd(0, 0))
_NDR_BYTES = len(cxl_msg.build_message(cxl_msg.Channel.S2M_NDR,
                                       {"opcode": 0, "tag": 0, "status": 0}))
_DRS_BYTES = len(cxl_msg.build_message(cxl_msg.Channel.S2M_DRS, {"opcode": 0, "tag": 0,
                                                                  "status": 0,
                                                                  "data": bytes(LINE_BYTES)}))


def _lines(addr: int, n: int) -> int:
    return (addr + n - 1) // LINE_BYTES - addr // LINE_BYTES + 1 if n else 0


class MeteredPort(DevicePort):
    """A port that counts the bytes crossing it, for the CXL link model."""

    def __init__(self, inner: DevicePort) -> None:
        self.inner = inner
        self.bytes_out = 0  # host to device
        self.bytes_in = 0  # device to host

    def take(self) -> tuple[int, int]:
        """(host-to-device, device-to-host) bytes since the last call."""
        out = (self.bytes_out, self.bytes_in)
        self.bytes_out = self.bytes_in = 0
        return out

    def send(self, message: bytes) -> None:
        self.bytes_out += len(message)
        self.inner.send(message)

    def receive(self) -> list[bytes]:
        msgs = self.inner.receive()
        self.bytes_in += sum(len(m) for m in msgs)
        return msgs

    def advance(self, cycles: int) -> None:
        self.inner.advance(cycles)

    def set_timeout(self, timeout_ms: int) -> None:
        self.inner.set_timeout(timeout_ms)

    def abort(self, reason: str) -> None:
        self.inner.abort(reason)

    def shutdown(self) -> None:
        self.inner.shutdown()

    # a DMA transfer is metered as the CXL.mem messages it replaces
    def dma_write(self, addr: int, data: bytes) -> bool:
        if not self.inner.dma_write(addr, data):
            return False
        self.bytes_out += _lines(addr, len(data)) * _RWD_BYTES
        self.bytes_in += _lines(addr, len(data)) * _NDR_BYTES
        return True

    def dma_read(self, addr: int, n: int) -> bytes | None:
        data = self.inner.dma_read(addr, n)
        if data is not None:
            self.bytes_out += _lines(addr, n) * _REQ_BYTES
            self.bytes_in += _lines(addr, n) * _DRS_BYTES
        return data

    def run_until_idle(self, max_cycles: int) -> int:
        return self.inner.run_until_idle(max_cycles)

    def ddr5_counts(self) -> list[tuple[int, ...]] | None:
        return self.inner.ddr5_counts()

    def counters(self) -> tuple[int, list[tuple[int, ...]] | None]:
        return self.inner.counters()

    @property
    def cycle(self) -> int:
        return self.inner.cycle

    @property
    def clock_hz(self) -> int:
        return self.inner.clock_hz

    def close(self) -> None:
        self.inner.close()


def _summed(rows: list[tuple[int, ...]] | None) -> tuple[int, ...] | None:
    """A device's DDR5 counters summed over its sub-channels."""
    return None if rows is None else tuple(map(sum, zip(*rows, strict=True)))


class DeviceUnreachableError(RuntimeError):
    """The device stopped answering or died; it stays down until a probe finds it answering
    again (``DeviceSlot.probe``)."""


@dataclass(frozen=True)
class BatchResult:
    outputs: list[AttnOutput]
    cycles: int
    """Device cycles from the doorbell until the last descriptor completed."""
    cxl_ps: int
    """Emulated CXL time of the batch's transfers (descriptors, queries, ids, outputs)."""
    ddr5: tuple[int, ...] | None = None
    """The device's DDR5 counters over the batch, summed over its sub-channels
    (driver/port.DDR5_COUNTERS); None where the device does not count them."""


class DeviceSlot:
    """Device ``index`` at ``endpoint``, driven from its own thread."""

    def __init__(self, index: int, endpoint: str, cxl: LinkSpec, backend: str = "remote",
                 connect_timeout_s: float = 300.0, timeout_s: float = 30.0,
                 ring_entries: int = 256, fpga_manifest: str | None = None,
                 bulk: bool = True, token_file: str | None = None) -> None:
        """``endpoint``: the device's spec (hw/ports.py): a device process's ZeroMQ endpoint,
        or ``fpga:BOARD`` for a board reached from this process (a PCI device folder,
        optionally ``,H2C,C2H`` DMA devices), checked against ``fpga_manifest``. ``bulk``: KV
        goes by DMA (a board) or backdoor (a simulated device), metered as the CXL.mem lines it
        replaces; False writes every line over CXL.mem. ``token_file``: what a device process
        is presented (hw/ports.py PortOptions)."""
        self.bulk = bulk
        self.token_file = token_file
        self.fpga_manifest = fpga_manifest
        self.index, self.endpoint, self.backend = index, endpoint, backend
        self.cxl = cxl
        self.timeout_s = timeout_s
        self.alive = True
        self.error = ""
        self.descriptors = 0
        self.cycle_seen = 0
        """The device's cycle count as last read (after each piece of work)."""
        self.readmitted = 0
        """Times the device was re-admitted after being down."""
        self._ring_entries = ring_entries
        self._probing = threading.Event()
        self._exec = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pnm{index}")
        # the sockets are made and used only on the slot's thread
        self._exec.submit(self._open, connect_timeout_s).result()

    def _open(self, connect_timeout_s: float) -> None:
        self.remote = open_port(self.endpoint, PortOptions(
            manifest=self.fpga_manifest, timeout_s=self.timeout_s,
            connect_timeout_s=connect_timeout_s, token_file=self.token_file))
        try:
            self._use(self.remote, *self._stack(self.remote, connect_timeout_s))
        except Exception:  # unreachable, or its token refused
            self.remote.close()
            raise
        self.clock_hz = self.port.clock_hz
        """The device's core clock (what its cycle counts last)."""
        log.info("device %d at %s: %d GiB, caps %s", self.index, self.endpoint,
                 self.dev.mem_bytes >> 30, self.dev.caps)

    def _stack(self, remote: DevicePort, connect_timeout_s: float
               ) -> tuple[MeteredPort, Device, MemoryApi, CommandQueue]:
        """The driver stack over ``remote``: registers read, memory empty, rings set."""
        port = MeteredPort(remote)
        try:
            dev = Device(port, bulk=self.bulk)
        except PortTimeoutError as e:
            raise DeviceUnreachableError(f"device {self.index} at {self.endpoint} did not "
                                         f"answer within {connect_timeout_s:g} s") from e
        remote.set_timeout(int(self.timeout_s * 1000))
        mem = MemoryApi(dev, KV_BASE, dev.mem_bytes)
        return port, dev, mem, CommandQueue(mem, entries=self._ring_entries)

    def _use(self, remote: DevicePort, port: MeteredPort, dev: Device, mem: MemoryApi,
             cq: CommandQueue) -> None:
        self.remote, self.port, self.dev, self.mem, self.cq = remote, port, dev, mem, cq
        self._free0 = mem.alloc.bytes_free
        self.cycle_seen, ddr5 = port.counters()
        self._ddr5_seen = _summed(ddr5)
        port.take()

    # -- re-admission -----------------------------------------------------------------------------
    def probe(self, timeout_s: float) -> None:
        """While down: check, on the slot's thread, whether the device answers again (a new
        connection; its registers read); if it does, and it is the same kind of device, it is
        re-admitted with its memory taken as empty (what it held was dropped when it went
        down). At most one probe at a time."""
        if self.alive or self._probing.is_set():
            return
        self._probing.set()
        self._exec.submit(self._probe, timeout_s)

    def _probe(self, timeout_s: float) -> None:
        try:
            remote = open_port(self.endpoint, PortOptions(
                manifest=self.fpga_manifest, timeout_s=timeout_s, connect_timeout_s=timeout_s,
                token_file=self.token_file))
        except Exception as e:  # still down: the next probe tries again
            log.debug("device %d probe: %s", self.index, e)
            self._probing.clear()
            return
        try:
            stack = self._stack(remote, timeout_s)
            same = (stack[1].caps_word, stack[1].mem_bytes, remote.clock_hz) == (
                self.dev.caps_word, self.dev.mem_bytes, self.clock_hz)
            if not same:
                log.warning("device %d at %s answers again but is another kind of device "
                            "(caps, memory or clock differ): it stays down", self.index,
                            self.endpoint)
        except Exception as e:
            log.debug("device %d probe: %s", self.index, e)
            same = False
        if not same:
            remote.close()
            self._probing.clear()
            return
        with contextlib.suppress(Exception):  # the connection that stopped answering
            self.remote.close()
        self._use(remote, *stack)
        self.readmitted += 1
        log.warning("device %d at %s answers again: re-admitted, its memory empty (it was down:"
                    " %s)", self.index, self.endpoint, self.error)
        self.error = ""
        self.alive = True
        self._probing.clear()

    # -- work on the slot's thread ----------------------------------------------------------------
    def submit(self, fn: Callable[[DeviceSlot], T]) -> Future[T]:
        """Run ``fn(self)`` on the slot's thread; a device that stops answering is marked down
        and the future raises DeviceUnreachableError."""
        if not self.alive:
            f: Future[T] = Future()
            f.set_exception(DeviceUnreachableError(self.down_message()))
            return f
        return self._exec.submit(self._guarded, fn)

    def _guarded(self, fn: Callable[[DeviceSlot], T]) -> T:
        if not self.alive:
            raise DeviceUnreachableError(self.down_message())
        try:
            out = fn(self)
            self.cycle_seen, ddr5 = self.port.counters()  # one call: the cycle and DDR5
            if isinstance(out, BatchResult):
                out = replace(out, ddr5=self._ddr5_since(ddr5))  # type: ignore[assignment]
            return out
        except (PortTimeoutError, zmq.ZMQError) as e:
            if self.alive:  # the first reason stays (mark_down may have given it)
                self.alive = False
                self.error = str(e)
                log.error("device %d marked down: %s", self.index, e)
            raise DeviceUnreachableError(self.down_message()) from e

    def mark_down(self, reason: str) -> None:
        """The device is gone (e.g. its process exited): down from now on, and the call it is
        in, if any, fails at once. Safe from any thread."""
        if not self.alive:
            return
        self.error = reason
        self.alive = False
        log.error("device %d marked down: %s", self.index, reason)
        self.remote.abort(reason)

    def down_message(self) -> str:
        return f"device {self.index} at {self.endpoint} is down: {self.error}"

    def run_batch(self, requests: list[AttnRequest]) -> BatchResult:
        """Submit, run to completion and collect; call on the slot's thread."""
        outputs: list[AttnOutput] = []
        cycles = cxl_ps = 0
        step = self.cq.free_entries
        for first in range(0, len(requests), step):
            part = requests[first:first + step]
            ids = self.cq.submit(part)
            to_dev, _ = self.port.take()
            while True:
                try:
                    cycles += self.port.run_until_idle(RUN_CHUNK_CYCLES)
                    break
                except DeviceBusyError:
                    cycles += RUN_CHUNK_CYCLES
            done = {o.desc_id: o for o in self.cq.poll()}
            missing = [i for i in ids if i not in done]
            if missing:  # idle means complete; a miss is a device fault, not a wait
                raise RuntimeError(f"device {self.index} idle with descriptors {missing} "
                                   "incomplete")
            more_out, from_dev = self.port.take()
            outputs += [done[i] for i in ids]
            cxl_ps += (self.cxl.transfer_ps(to_dev + more_out)
                       + self.cxl.transfer_ps(from_dev))
        self.descriptors += len(requests)
        return BatchResult(outputs, cycles, cxl_ps)  # its DDR5 counters: _guarded's look

    def _ddr5_since(self, rows: list[tuple[int, ...]] | None) -> tuple[int, ...] | None:
        """The device's DDR5 counters since the last batch (its own, and the KV writes
        before it that went through the controllers); None where it does not count."""
        now = _summed(rows)
        seen, self._ddr5_seen = self._ddr5_seen, now
        if now is None or seen is None:
            return None
        return tuple(a - b for a, b in zip(now, seen, strict=True))

    @property
    def used_bytes(self) -> int:
        """Device memory held by KV regions."""
        return self._free0 - self.mem.alloc.bytes_free

    def close(self, shutdown: bool = False) -> None:
        def _close(slot: DeviceSlot) -> None:
            if slot.alive and shutdown:
                try:
                    slot.remote.shutdown()
                except Exception as e:  # a device that is gone cannot be asked to go
                    log.info("device %d shutdown: %s", slot.index, e)
            slot.remote.close()

        try:
            self._exec.submit(_close, self).result(timeout=self.timeout_s + 5)
        except Exception as e:
            log.warning("closing device %d: %s", self.index, e)
        self._exec.shutdown(wait=False)


class HealthWatch:
    """Probes the devices marked down every ``period_s`` (``DeviceSlot.probe``), so one that
    answers again is re-admitted."""

    def __init__(self, slots: list[DeviceSlot], period_s: float, timeout_s: float) -> None:
        self._slots, self._period_s, self._timeout_s = slots, period_s, timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="device-health", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            for slot in self._slots:
                if not slot.alive:
                    slot.probe(self._timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class ProcessWatch:
    """Marks a device down as soon as its process exits, for the device processes the node
    started: ``exited()`` gives (slot index, exit status) of those that have (emu/launcher.py
    DeviceProcesses.dead)."""

    def __init__(self, slots: list[DeviceSlot], exited: Callable[[], list[tuple[int, int]]],
                 period_s: float = WATCH_PERIOD_S) -> None:
        self._slots, self._exited, self._period_s = slots, exited, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="device-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            for index, status in self._exited():
                how = f"signal {-status}" if status < 0 else f"status {status}"
                self._slots[index].mark_down(f"its process exited ({how})")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
