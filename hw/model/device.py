"""Transaction-level model of a PNM device behind the port (the ``model`` backend): registers,
sparse device memory, submission and completion rings, descriptor checks, and the bit-exact
engine model for the arithmetic. A descriptor's result is computed when it is fetched; when its
completion is written comes from the timer its configuration names (hw/model/device_timers.py:
``cycle``, the cycle model of the RTL's memory side, by default; ``fluid``, the fluid
schedule).

What a descriptor may do is checked before any memory is touched (driver/formats.py lists the
statuses); a bad descriptor completes with its error status and changes nothing else.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from construct import StreamError

from nelssa.driver import cxl, regs
from nelssa.driver.formats import (
    COMPLETION,
    COMPLETION_BYTES,
    DESC_BYTES,
    DESCRIPTOR,
    LINE_BYTES,
    DescStatus,
)
from nelssa.driver.iface import interface_hash32
from nelssa.driver.port import DevicePort
from nelssa.driver.status import SUPPORTED_HEAD_DIMS
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_energy import counter_row
from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
from nelssa.hw.model.ddr5_timing import PRESETS, DDR5Timing, with_overrides
from nelssa.hw.model.device_cycle import CycleSchedule, CycleTiming
from nelssa.hw.model.device_exec import QueueBounds, run_descriptor
from nelssa.hw.model.device_timers import (
    TIMERS,
    UNKNOWN,
    DeviceTimer,
    TimerSetup,
    check_timer,
    default_timer,
)
from nelssa.hw.model.device_timing import Schedule, UnitTiming
from nelssa.hw.model.engine import EngineParams
from nelssa.hw.model.sparse_memory import SparseMemory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceConfig:
    """What a device is built with."""

    engines: int = 4
    """Attention engines working in parallel (the RTL device's NumUnits): four, each streaming
    one 64-byte beat per cycle, consume the DDR5 peak (8 sub-channels x 25.6 GB/s = 204.8 GB/s
    at the 800 MHz core clock)."""
    engine: EngineParams = field(default_factory=EngineParams)
    """Each engine's parameters (largest head_dim, GQA group, cluster)."""
    preset: str = "ddr5-6400"
    """DDR5 timing preset (hw/model/ddr5_timing.PRESETS)."""
    build_id: int = 0
    """What the BUILD_ID register reads (a bitstream's build id; 0 in simulation)."""
    order_depth: int = 8
    """Descriptors the command queue holds in flight (read from the ring, not yet completed):
    the RTL's nelssa_cmdq OrderDepth."""
    timer: str = ""
    """What times the descriptors, by name (hw/model/device_timers.TIMERS): ``cycle``, the
    cycle model of the RTL's memory side, or ``fluid``, the fluid schedule. Empty: ``cycle``
    for the RTL's unit counts (1..6), ``fluid`` for more."""
    ddr5_overrides: tuple[tuple[str, int], ...] = ()
    """(field, value) pairs replacing fields of the preset (ddr5_timing.with_overrides)."""
    subchannels: int = 8
    """DDR5 sub-channels sharing the address space (4 channels x 2 in the RTL device)."""

    def __post_init__(self) -> None:
        if not 1 <= self.engines <= regs.CAPS_MAX_ENGINES:
            raise ValueError(f"engines must be 1..{regs.CAPS_MAX_ENGINES}, got {self.engines}")
        if not self.timer:
            object.__setattr__(self, "timer", default_timer(self.engines))
        check_timer(self.timer, self.engines)
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        if not 0 <= self.build_id <= 0xFFFF_FFFF:
            raise ValueError(f"build_id must fit 32 bits, got {self.build_id:#x}")
        if self.subchannels not in (1, 2, 4, 8):
            raise ValueError(f"subchannels must be 1, 2, 4 or 8 (the cycle model's and the "
                             f"RTL's most), got {self.subchannels}")
        self.geometry  # noqa: B018 - the overrides checked now, naming the field

    @property
    def timing(self) -> DDR5Timing:
        """The DDR5 timing of one sub-channel: the preset with the overrides."""
        return with_overrides(PRESETS[self.preset], dict(self.ddr5_overrides))

    @property
    def geometry(self) -> DeviceGeometry:
        return DeviceGeometry(self.timing, self.subchannels)

    @property
    def mem_bytes(self) -> int:
        return self.geometry.capacity_bytes

    @property
    def caps(self) -> int:
        dims = tuple(d for d in SUPPORTED_HEAD_DIMS if d <= self.engine.head_dim)
        return regs.pack_caps(self.engines, self.engine.num_qheads, dims,
                              self.engine.max_cluster_tokens)

    @property
    def clock_hz(self) -> int:
        """Core clock: the controllers run at 1:TCK_PER_CYCLE of the DRAM clock (DESIGN.md,
        Device: 800 MHz for DDR5-6400's 3.2 GHz)."""
        return round(1e12 / (self.timing.tck_ps * TCK_PER_CYCLE))


SIM_CLOCK_HZ = DeviceConfig().clock_hz
"""Core clock of the simulated devices (``model`` and ``rtl``) at the default preset: what a
device cycle lasts wherever no board manifest says otherwise."""


@dataclass
class _InFlight:
    done_cycle: int
    desc_id: int
    status: DescStatus
    sq_head: int
    writes: list[tuple[int, bytes]]


class ModelDevice(DevicePort):
    """The ``model`` backend."""

    def __init__(self, config: DeviceConfig | None = None,
                 memory: SparseMemory | None = None, timing: UnitTiming | None = None,
                 cycle_timing: CycleTiming | None = None) -> None:
        """``memory``: where device memory lives (a fake FPGA board passes its memory BAR
        file); a fresh :class:`SparseMemory` when None. ``timing``: the fluid timer's unit
        timing, ``cycle_timing`` the cycle timer's (both calibrated,
        ``device_calibration.json``, when None)."""
        self.config = config or DeviceConfig()
        self.timing = self.config.timing
        self.geometry = self.config.geometry
        self.mem = memory if memory is not None else SparseMemory(self.config.mem_bytes)
        if self.mem.size != self.config.mem_bytes:
            raise ValueError(f"memory has {self.mem.size} bytes, the device "
                             f"{self.config.mem_bytes}")
        self.regs = {r.offset: r.reset for r in regs.REGISTERS}
        self._set("CAPS", self.config.caps)
        self._set("IFACE_HASH", interface_hash32())
        self._set("BUILD_ID", self.config.build_id)
        self._set("MEM_SIZE_LO", self.config.mem_bytes & 0xFFFF_FFFF)
        self._set("MEM_SIZE_HI", self.config.mem_bytes >> 32)
        self._out: list[bytes] = []
        self._now = 0
        self._timer: DeviceTimer = TIMERS[self.config.timer].make(TimerSetup(
            self.geometry, self.config.engines, self.config.order_depth,
            (timing or UnitTiming.load()).for_engine(self.config.engine),
            (cycle_timing or CycleTiming.load()).for_engine(self.config.engine),
            self._out_append))
        # in fetch order; done cycles never decrease along it, so the head completes first
        self._inflight: deque[_InFlight] = deque()
        self._completed = 0  # completions written since CQ_SIZE was (their phase)
        self._fetched = 0  # descriptors fetched since SQ_SIZE was (mod 2^16): their sq_head
        self._ring_error = False  # the last enable was refused (STATUS[2])
        self._latch: tuple[int, int] | None = None  # (HI offset, value) from the last LO read

    # -- registers -------------------------------------------------------------------------------
    def _get(self, name: str) -> int:
        return self.regs[regs.offset(name)]

    def _set(self, name: str, value: int) -> None:
        self.regs[regs.offset(name)] = value & 0xFFFF_FFFF

    def _get64(self, name: str) -> int:
        return self._get(f"{name}_LO") | self._get(f"{name}_HI") << 32

    def _set64(self, name: str, value: int) -> None:
        self._set(f"{name}_LO", value)
        self._set(f"{name}_HI", value >> 32)

    def _bump(self, name: str, by: int = 1) -> None:
        self._set(name, self._get(name) + by)

    def _mmio(self, body) -> None:
        op = int(body.opcode)
        if op == cxl.MmioOpcode.WRITE:
            self._mmio_write(body.offset, body.value)
        elif op == cxl.MmioOpcode.READ:
            self._out.append(cxl.mmio_rsp(body.tag, self._mmio_read(body.offset)))
        else:
            self._bump("ERR_OPCODE")
            self._out.append(cxl.mmio_rsp(body.tag, regs.UNMAPPED_VALUE,
                                          cxl.RspStatus.OPCODE_ERROR))

    def _mmio_read(self, off: int) -> int:
        reg = regs.BY_OFFSET.get(off)
        if reg is None:
            self._bump("ERR_UNMAPPED")
            return regs.UNMAPPED_VALUE
        if self._latch is not None and self._latch[0] == off:
            value = self._latch[1]
            self._latch = None
            return value
        self._update_perf()
        hi = regs.BY_NAME.get(reg.name[:-3] + "_HI") if reg.name.endswith("_LO") else None
        if hi is not None:
            self._latch = (hi.offset, self.regs[hi.offset])
        return self.regs[off]

    def _mmio_write(self, off: int, value: int) -> None:
        reg = regs.BY_OFFSET.get(off)
        if reg is None:
            self._bump("ERR_UNMAPPED")
        elif reg.access == regs.Access.RO:
            self._bump("ERR_RO_WRITE")
        elif reg.access == regs.Access.DOORBELL:
            self._doorbell(value)
        elif reg.access == regs.Access.RING:
            if self._get("CONTROL") & 1 or self._inflight:  # the rings must not move now
                self._bump("ERR_RING")
                log.warning("%s write refused: the device is enabled or busy", reg.name)
                return
            self.regs[off] = value
            if reg.name == "SQ_SIZE":  # a new ring starts empty
                self._set("SQ_HEAD", 0)
                self._set("SQ_TAIL", 0)
                self._fetched = 0
            elif reg.name == "CQ_SIZE":
                self._set("CQ_HEAD", 0)
                self._set("CQ_TAIL", 0)
                self._completed = 0
        elif reg.name == "CQ_HEAD":
            if value >= self._get("CQ_SIZE"):
                self._bump("ERR_DOORBELL")
                log.warning("CQ_HEAD %d ignored (ring of %d)", value, self._get("CQ_SIZE"))
                return
            self.regs[off] = value
        else:
            assert reg.name == "CONTROL", reg.name
            self._control(value)

    def _control(self, value: int) -> None:
        if value & 1:
            rings = {n: self._get64(n) if n.endswith("BASE") or n.endswith("LIMIT")
                     else self._get(n) for n in regs.RING_REGISTERS}
            problem = regs.ring_problem(rings, self.mem.size)
            if problem is not None:
                self._bump("ERR_RING")
                self._ring_error = True
                self._status()
                log.warning("enable refused: %s", problem)
                return
        self._ring_error = False
        self._set("CONTROL", value)
        self._status()
        self._fetch()

    def _status(self) -> None:
        self._set("STATUS", int(not self._inflight) | (self._get("CONTROL") & 1) << 1
                  | int(self._ring_error) << 2)

    def _doorbell(self, tail: int) -> None:
        size = self._get("SQ_SIZE")
        if tail >= size:
            self._bump("ERR_DOORBELL")
            log.warning("doorbell %d ignored (ring of %d)", tail, size)
            return
        self._set("SQ_TAIL", tail)
        self._fetch()

    def _out_append(self, message: bytes) -> None:
        self._out.append(message)

    def register_file(self) -> dict[int, int]:
        """Every register's value now, by offset (what a board's BAR would read)."""
        self._update_perf()
        return self.regs

    @property
    def timer(self) -> DeviceTimer:
        """What times the descriptors (``config.timer``)."""
        return self._timer

    @property
    def schedule(self) -> Schedule | CycleSchedule:
        """The timer's model: the cycle model, or the fluid schedule."""
        return self._timer.schedule

    def ddr5_counts(self) -> list[tuple[int, ...]] | None:
        """The cycle model's DDR5 counters per sub-channel (the RTL's perf_o); None under the
        fluid timer, which does not step the controllers."""
        counts = getattr(self.schedule, "ddr5_counts", None)
        if counts is None:
            return None
        return [counter_row(c, r) for c, r in counts()[:self.config.subchannels]]

    @property
    def has_work(self) -> bool:
        """A descriptor is running or would be fetched, or a host line waits for the memory."""
        return bool(self._inflight) or self._pending() or self._timer.holds_host_lines

    def next_completion(self) -> int | None:
        """Cycle at which the oldest running descriptor completes; None when none runs."""
        if not self._inflight:
            self._timer.plan(self._inflight, self._now)
            return None
        return self._timer.next_completion(self._inflight, self._now)

    def _update_perf(self) -> None:
        self._set64("PERF_CYCLES", self._now)
        self._sync(self._now)
        self._set64("PERF_BUSY", round(self._timer.busy))

    def _sync(self, t: int) -> None:
        """The timer run to cycle ``t`` (the done cycles it learns go to the in-flight
        descriptors)."""
        self._timer.sync(t, self._inflight)

    # -- memory ----------------------------------------------------------------------------------
    def _mem_req(self, channel: cxl.Channel, body) -> None:
        in_range = body.addr + LINE_BYTES <= self.mem.size  # u64: never negative
        aligned = body.addr % LINE_BYTES == 0
        if not cxl.opcode_defined(channel, body.opcode):
            status = cxl.RspStatus.OPCODE_ERROR
            self._bump("ERR_OPCODE")
        elif in_range and aligned:
            status = cxl.RspStatus.OK
        else:
            status = cxl.RspStatus.ADDR_ERROR
            self._bump("ERR_MEM")
        if channel == cxl.Channel.M2S_REQ:
            data = self.mem.read(body.addr, LINE_BYTES) if status == cxl.RspStatus.OK else bytes(64)
            rsp = cxl.build_message(cxl.Channel.S2M_DRS, {
                "opcode": cxl.S2MDrsOpcode.MEM_DATA, "tag": body.tag, "status": status,
                "data": data})
        else:
            if status == cxl.RspStatus.OK:
                self.mem.write_line(body.addr, body.data, body.byte_enable)
            rsp = cxl.build_message(cxl.Channel.S2M_NDR, {
                "opcode": cxl.S2MNdrOpcode.CMP, "tag": body.tag, "status": status})
        if status == cxl.RspStatus.OK and self._inflight:  # it takes DDR5 from the units
            self._timer.host_line(body.addr, channel == cxl.Channel.M2S_RWD, rsp)
            return
        self._out.append(rsp)

    # -- port ------------------------------------------------------------------------------------
    def dma_write(self, addr: int, data: bytes) -> bool:
        """Write device memory directly (the backdoor: no device cycle passes; the caller
        charges the time the CXL.mem writes would take)."""
        self._check_backdoor(addr, len(data))
        self.mem.write(addr, data)
        return True

    def dma_read(self, addr: int, n: int) -> bytes:
        """Read device memory directly (the backdoor)."""
        self._check_backdoor(addr, n)
        return self.mem.read(addr, n)

    def _check_backdoor(self, addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > self.config.mem_bytes:
            raise ValueError(f"backdoor access of {n} bytes at {addr:#x} outside device memory "
                             f"(0..{self.config.mem_bytes:#x})")

    def send(self, message: bytes) -> None:
        try:
            msg = cxl.parse_message(message)
        except StreamError as e:
            raise ValueError(f"not a host-to-device message: {e}") from None
        ch = cxl.Channel(int(msg.channel))
        if ch == cxl.Channel.MMIO_REQ:
            self._mmio(msg.body)
        elif ch in (cxl.Channel.M2S_REQ, cxl.Channel.M2S_RWD):
            self._mem_req(ch, msg.body)
        else:
            raise ValueError(f"{ch.name} is a device-to-host channel")

    def receive(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    @property
    def cycle(self) -> int:
        return self._now

    @property
    def clock_hz(self) -> int:
        return self.config.clock_hz

    def advance(self, cycles: int) -> None:
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, got {cycles}")
        self._timer.before_advance(self._inflight, self._now, self._now + cycles)
        self._retire(self._now + cycles)
        self._now += cycles
        self._sync(self._now)
        self._fetch()

    def run_until_idle(self, max_cycles: int) -> int:
        start = self._now
        while self.has_work:
            if self._now - start >= max_cycles:
                raise TimeoutError(f"device still busy after {max_cycles} cycles")
            self._timer.run_to_next_completion(self._inflight, self._now, start + max_cycles)
            target = self._inflight[0].done_cycle if self._inflight else self._now + 1
            self.advance(max(1, min(target - self._now, start + max_cycles - self._now)))
        return self._now - start

    # -- rings -----------------------------------------------------------------------------------
    # Enabled means the ring registers passed regs.ring_problem, and they cannot change until
    # the device is disabled and idle again: sizes are powers of two, both rings in the region.
    def _pending(self) -> bool:
        if not self._get("CONTROL") & 1:
            return False
        return self._get("SQ_HEAD") != self._get("SQ_TAIL") and not self._cq_full()

    def _cq_full(self) -> bool:
        size = self._get("CQ_SIZE")
        used = (self._get("CQ_TAIL") - self._get("CQ_HEAD")) % size + len(self._inflight)
        return used >= size - 1

    def _fetch(self) -> None:
        while self._pending():
            size, head = self._get("SQ_SIZE"), self._get("SQ_HEAD")
            ring_addr = self._get64("SQ_BASE") + head * DESC_BYTES
            raw = self.mem.read(ring_addr, DESC_BYTES)
            self._set("SQ_HEAD", (head + 1) % size)
            self._fetched = (self._fetched + 1) & 0xFFFF
            self._execute(raw, ring_addr)
        self._status()

    def _retire(self, until: int) -> None:
        while self._inflight and self._inflight[0].done_cycle <= until:
            job = self._inflight.popleft()
            for addr, data in job.writes:
                self.mem.write(addr, data)
            size, tail = self._get("CQ_SIZE"), self._get("CQ_TAIL")
            phase = 1 - (self._completed // size) % 2
            self.mem.write(self._get64("CQ_BASE") + tail * COMPLETION_BYTES, COMPLETION.build(
                {"desc_id": job.desc_id, "status": job.status, "phase": phase,
                 "sq_head": job.sq_head}))
            self._completed += 1
            self._set("CQ_TAIL", (tail + 1) % size)
            self._bump("PERF_DESC_DONE")
        self._status()

    def _execute(self, raw: bytes, ring_addr: int) -> None:
        d = DESCRIPTOR.parse(raw)
        region = QueueBounds(self._get64("REGION_BASE"), self._get64("REGION_LIMIT"), (
            (self._get64("SQ_BASE"), self._get("SQ_SIZE") * DESC_BYTES),
            (self._get64("CQ_BASE"), self._get("CQ_SIZE") * COMPLETION_BYTES)))
        status, writes, lines = run_descriptor(d, self.mem, region, self.config)
        if status != DescStatus.OK:
            self._bump("ERR_DESC")
        if lines:
            self._bump64("PERF_BYTES_READ", len(lines) * LINE_BYTES)
        job = _InFlight(UNKNOWN, d.desc_id, status, self._fetched, writes)
        self._sync(self._now)
        cq = self._get64("CQ_BASE") + (self._get("CQ_TAIL") + len(self._inflight)) % \
            self._get("CQ_SIZE") * COMPLETION_BYTES
        self._timer.add(id(job), d, status, lines, writes, ring_addr, cq, self.mem)
        self._inflight.append(job)

    def _bump64(self, name: str, by: int) -> None:
        self._set64(name, self._get64(name) + by)

