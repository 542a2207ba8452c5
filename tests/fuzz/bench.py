"""A device under test for the descriptor, register and CXL.mem fuzzers: a port (``model`` or
``rtl``) with device memory watched, so that every write the device makes on its own (outputs,
completions) is checked against the queue's region and device memory, and the host's writes
mirrored in a reference memory.

``model``: the model device over a :class:`WatchedMemory`. ``rtl``: the Verilated device; its
memory cannot be listed, so the checks compare it with a model device driven in lockstep: the
same number of lines written (the DPI store counts them) and the same bits in each.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nelssa.driver import cxl, regs
from nelssa.driver.device import MAX_OUTSTANDING, Device
from nelssa.driver.formats import LINE_BYTES
from nelssa.hw.model.device import DeviceConfig, ModelDevice, SparseMemory
from nelssa.hw.ports import open_port, parse_spec
from tests.fuzz.device_ref import Caps, RefMemory
from tests.fuzz.oracle import Finding, Kind, guarded

TIMING_REGS = frozenset({"PERF_CYCLES_LO", "PERF_CYCLES_HI", "PERF_BUSY_LO", "PERF_BUSY_HI"})
"""Counters of time differ between backends by design."""


@dataclass(frozen=True)
class Write:
    addr: int
    size: int
    region: tuple[int, int]
    """The queue's region (REGION_BASE, REGION_LIMIT) when the device wrote."""


class WatchedMemory(SparseMemory):
    """Device memory that records every write the device makes itself (not those the host
    makes through CXL.mem, which run inside :meth:`host`), with the queue's region at that
    moment (``region_now``, set by whoever owns the device)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.device_writes: list[Write] = []
        self.region_now: Callable[[], tuple[int, int]] = lambda: (0, 0)
        self._host = 0

    @contextlib.contextmanager
    def host(self) -> Iterator[None]:
        self._host += 1
        try:
            yield
        finally:
            self._host -= 1

    def _note(self, addr: int, size: int) -> None:
        if not self._host:
            self.device_writes.append(Write(addr, size, self.region_now()))

    def write(self, addr: int, data: bytes) -> None:
        self._note(addr, len(data))
        super().write(addr, data)

    def write_line(self, line_addr: int, data: bytes, byte_enable: int) -> None:
        self._note(line_addr, LINE_BYTES)
        super().write_line(line_addr, data, byte_enable)



def outside_writes(mem: WatchedMemory) -> list[Finding]:
    """A finding for each device write outside the queue's region of that moment, or outside
    device memory."""
    out = []
    for w in mem.device_writes:
        end = w.addr + w.size
        if end > mem.size:
            out.append(Finding(Kind.OUTSIDE, f"device wrote [{w.addr:#x}, {end:#x}), beyond "
                                             f"device memory ({mem.size:#x})"))
        elif not w.region[0] <= w.addr or end > w.region[1]:
            out.append(Finding(Kind.OUTSIDE, f"device wrote [{w.addr:#x}, {end:#x}) outside "
                                             f"the queue's region [{w.region[0]:#x}, "
                                             f"{w.region[1]:#x})"))
    return out


class Backend:
    """One device behind a driver ``Device``, built fresh per input."""

    name = ""

    def __init__(self, port) -> None:
        self.port = port
        self.dev = Device(port)

    def close(self) -> None:
        self.port.close()

    @property
    def caps(self) -> Caps:
        c = self.dev.caps
        return Caps(tuple(c["head_dims"]), c["max_qheads"], c["max_cluster_tokens"])

    def registers(self) -> dict[str, int]:
        """Every register but the time counters, read through MMIO."""
        return {r.name: self.dev.reg_read(r.name) for r in regs.REGISTERS
                if r.name not in TIMING_REGS}

    def read_line(self, addr: int) -> bytes | None:
        """One line through CXL.mem; None when the device refuses the address."""
        return self.read_lines([addr])[addr]

    def read_lines(self, addrs: list[int]) -> dict[int, bytes | None]:
        """Lines through CXL.mem, many in flight at once (None where the device refuses)."""
        out: dict[int, bytes | None] = {}
        todo = sorted(set(addrs))
        for i in range(0, len(todo), MAX_OUTSTANDING):
            batch = {0x8000 + j: a for j, a in enumerate(todo[i:i + MAX_OUTSTANDING])}
            for tag, a in batch.items():
                self.port.send(cxl.mem_rd(tag, a))
            got = self.dev._collect(set(batch), cxl.Channel.S2M_DRS)
            for tag, a in batch.items():
                out[a] = (bytes(got[tag].data) if int(got[tag].status) == cxl.RspStatus.OK
                          else None)
        return out


class ModelBackend(Backend):
    name = "model"

    def __init__(self, config: DeviceConfig | None = None) -> None:
        config = config or DeviceConfig()
        self.mem = WatchedMemory(config.mem_bytes)
        super().__init__(ModelDevice(config, memory=self.mem))
        file = self.port.register_file

        def region() -> tuple[int, int]:
            r = file()
            return (r[regs.offset("REGION_BASE_LO")] | r[regs.offset("REGION_BASE_HI")] << 32,
                    r[regs.offset("REGION_LIMIT_LO")] | r[regs.offset("REGION_LIMIT_HI")] << 32)
        self.mem.region_now = region

    @contextlib.contextmanager
    def host(self) -> Iterator[None]:
        with self.mem.host():
            yield

    def line_count(self) -> int:
        return self.mem.line_count


class RtlBackend(Backend):
    name = "rtl"

    def __init__(self, port) -> None:
        super().__init__(port)

    @contextlib.contextmanager
    def host(self) -> Iterator[None]:
        yield

    def line_count(self) -> int:
        return self.port.store_lines


_RTL_PORT: list = []
"""The Verilated device of this process (one at a time: its memory is the process's)."""


@functools.cache
def build_rtl() -> None:
    """Build (or find) the Verilated device once per process, outside any input's time
    bound: a first build takes minutes."""
    from nelssa.hw.sim.device import build_library

    build_library()


def rtl_port():
    """A fresh Verilated device out of reset (the library is built once and cached)."""
    while _RTL_PORT:
        _RTL_PORT.pop().close()
    _RTL_PORT.append(open_port("rtl"))
    return _RTL_PORT[0]


BACKENDS = ("model", "rtl")
"""The device specs (hw/ports.py) a bench puts under test: ``rtl`` runs beside a model."""


class Bench:
    """The devices of one input: the one under test and, for ``rtl``, the model beside it;
    every host action goes to all of them and to the reference memory."""

    def __init__(self, backend: str) -> None:
        spec = parse_spec(backend, BACKENDS)  # PortSpecError names it and the known ones
        self.model = ModelBackend()
        self.rtl = RtlBackend(rtl_port()) if spec.name == "rtl" else None
        self.units = [b for b in (self.rtl, self.model) if b is not None]
        self.ref = RefMemory()
        self.mem_bytes = self.model.dev.mem_bytes
        self.caps = self.model.caps

    @property
    def under_test(self) -> Backend:
        return self.rtl if self.rtl is not None else self.model

    def host_write(self, addr: int, data: bytes) -> None:
        """The host writes device memory: through CXL.mem on ``rtl``; straight into the model's
        memory (the same bytes; the CXL.mem path has its own fuzzer), which is 20 times
        faster."""
        self.ref.write(addr, data)
        if self.rtl is not None:
            self.rtl.dev.mem_write(addr, data)
        with self.model.host():
            self.model.mem.write(addr, data)

    def reg_write(self, reg: str | int, value: int) -> None:
        for b in self.units:
            b.dev.reg_write(reg, value)

    def reg_write64(self, name: str, value: int) -> None:
        self.reg_write(f"{name}_LO", value & 0xFFFF_FFFF)
        self.reg_write(f"{name}_HI", value >> 32)

    def run_until_idle(self, max_cycles: int) -> None:
        for b in self.units:
            b.port.run_until_idle(max_cycles)

    def close(self) -> None:
        for b in self.units:
            b.close()

    # -- checks ------------------------------------------------------------------------------
    def compare_backends(self, findings: list[Finding]) -> None:
        """``rtl``: the same registers and the same memory as the model, bit for bit, and no
        more lines written."""
        if self.rtl is None:
            return
        mine, model = self.rtl.registers(), self.model.registers()
        for name in model:
            if mine[name] != model[name]:
                findings.append(Finding(Kind.WRONG, f"register {name}: rtl {mine[name]:#x}, "
                                                    f"model {model[name]:#x}"))
        written = {a: v for a, v in self.model.mem.written().items()
                   if a + LINE_BYTES <= self.mem_bytes}  # beyond memory: the model's check
        mine_lines = self.rtl.read_lines(list(written))
        for addr, want in written.items():
            got = mine_lines[addr]
            if got != want:
                findings.append(Finding(Kind.WRONG, f"memory line {addr:#x}: rtl "
                                                    f"{(got or b'').hex()[:32]}..., model "
                                                    f"{want.hex()[:32]}..."))
                break
        rtl_lines, model_lines = self.rtl.line_count(), self.model.line_count()
        if rtl_lines > model_lines:
            findings.append(Finding(Kind.OUTSIDE, f"rtl wrote {rtl_lines} memory lines, the "
                                                  f"model {model_lines}: "
                                                  f"{rtl_lines - model_lines} where the model "
                                                  "wrote nothing"))


def on_fresh_bench(backend: str, wall_s: float,
                   run: Callable[[Bench, list[Finding]], None]) -> list[Finding]:
    """``run`` on fresh devices of ``backend``; its findings (empty when every oracle holds),
    a failure to build the devices among them."""
    if backend == "rtl":
        build_rtl()
    findings: list[Finding] = []
    bench = None
    with guarded(findings, wall_s, "setup"):
        bench = Bench(backend)
    if bench is None:
        return findings
    try:
        run(bench, findings)
    finally:
        bench.close()
    return findings
