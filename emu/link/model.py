"""Timing and fault models of a link (DESIGN.md: Links).

One ``LinkDirection`` per direction of a connection: a message that starts at emulated time t
waits until the wire is free (serialization queueing), occupies it for its bytes on the wire over
the bandwidth, and arrives one base latency after its last bit left. Bytes on the wire include
the framing of the technology: RoCEv2 packets of 4096-byte MTU with 82 bytes of Ethernet, IP,
UDP, BTH, ICRC, preamble and inter-frame gap each; CXL 68-byte flits carrying 64 bytes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

PS_PER_NS = 1000


@dataclass(frozen=True)
class LinkSpec:
    """One link technology."""

    name: str
    """Preset name (``roce-400g``, ``cxl-pcie5-x16``, ...)."""
    latency_ns: float
    """One-way base latency: first bit sent to first bit received, including the endpoints'
    NIC or controller pipeline."""
    bandwidth_gbps: float
    """Line rate in Gb/s per direction (bits on the wire, framing included)."""
    packet_payload: int
    """Payload bytes per packet or flit."""
    packet_overhead: int
    """Framing bytes added to each packet or flit on the wire."""

    def __post_init__(self) -> None:
        if self.latency_ns < 0:
            raise ValueError(f"latency_ns must be >= 0, got {self.latency_ns}")
        if self.bandwidth_gbps <= 0:
            raise ValueError(f"bandwidth_gbps must be > 0, got {self.bandwidth_gbps}")
        if self.packet_payload < 1 or self.packet_overhead < 0:
            raise ValueError(f"packet_payload must be >= 1 and packet_overhead >= 0, got "
                             f"{self.packet_payload}, {self.packet_overhead}")

    def wire_bytes(self, nbytes: int) -> int:
        """Bytes on the wire for a message of ``nbytes`` (at least one packet)."""
        packets = max(1, -(-nbytes // self.packet_payload))
        return max(nbytes, 1) + packets * self.packet_overhead

    def serialization_ps(self, nbytes: int) -> int:
        return round(self.wire_bytes(nbytes) * 8 * PS_PER_NS / self.bandwidth_gbps)

    def transfer_ps(self, nbytes: int) -> int:
        """Unloaded time of one message: serialization plus base latency."""
        return self.serialization_ps(nbytes) + round(self.latency_ns * PS_PER_NS)


_ROCE_OVERHEAD = 82  # Eth 14 + FCS 4 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + preamble/IFG 20
PRESETS: dict[str, LinkSpec] = {
    **{f"roce-{g}g": LinkSpec(f"roce-{g}g", 1500.0, float(g), 4096, _ROCE_OVERHEAD)
       for g in (100, 200, 400, 800)},
    # PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b: 63.0 GB/s per direction; CXL 68-byte flits
    "cxl-pcie5-x16": LinkSpec("cxl-pcie5-x16", 200.0, 32 * 16 * 128 / 130, 64, 4),
}
"""RoCEv2 GPU node <-> PNM node (1-2 us one way, DESIGN.md) and CXL host <-> device: the one
table of link technologies (the latency model reads its GPU node <-> PNM node entries)."""
GPU_PNM_LINKS = tuple(name for name in PRESETS if name.startswith("roce-"))
"""The presets that join a GPU node to a PNM node."""
DEFAULT_GPU_PNM_LINK = "roce-400g"
"""The GPU node <-> PNM node link where none is chosen."""


def link_preset(name: str) -> LinkSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown link preset {name!r}; choose one of {sorted(PRESETS)}"
                         ) from None


class LinkDirection:
    """Emulated time of one direction of a connection."""

    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        self.busy_until_ps = 0
        self.messages = 0
        self.bytes = 0

    def arrival(self, send_ps: int, nbytes: int) -> tuple[int, int]:
        """(arrival time, the wire's busy-until after it) of a message handed to the wire at
        ``send_ps``, changing nothing: a receiver that may refuse the message commits it only
        once it is accepted (``commit``), so a refused one leaves the link as it was."""
        busy = max(send_ps, self.busy_until_ps) + self.spec.serialization_ps(nbytes)
        return busy + round(self.spec.latency_ns * PS_PER_NS), busy

    def commit(self, busy_until_ps: int, nbytes: int) -> None:
        """Take a message ``arrival`` was asked about onto the wire."""
        self.busy_until_ps = max(self.busy_until_ps, busy_until_ps)
        self.messages += 1
        self.bytes += nbytes

    def deliver(self, send_ps: int, nbytes: int) -> int:
        """Arrival time of a message handed to the wire at ``send_ps`` (committed at once)."""
        arrive, busy = self.arrival(send_ps, nbytes)
        self.commit(busy, nbytes)
        return arrive


@dataclass(frozen=True)
class LinkFaults:
    """Faults injected into the frames of one connection, for tests and robustness studies.
    The end given them applies them to both directions: to each frame as it sends it, and to
    each frame as it receives it, before any check (so a server's replies are faulted even
    when only its client is told)."""

    drop: float = 0.0
    """Probability that a frame is lost."""
    duplicate: float = 0.0
    """Probability that a frame arrives twice."""
    corrupt: float = 0.0
    """Probability that one byte of a frame (header or payload, after the checksum was
    computed) is changed."""
    late: float = 0.0
    """Probability that a frame is held back for ``late_ms`` of wall time, so frames sent after
    it overtake it."""
    late_ms: float = 5.0
    """How long a late frame is held (wall clock)."""
    delay_ns: float = 0.0
    """Emulated delay added to every frame's arrival (a client stamps it on its send time; a
    server's replies carry its completion time, so a server delays only what it receives)."""
    seed: int = 0
    """Seed of the fault decisions, so a faulty run repeats."""

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "corrupt", "late"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p}")
        for name in ("delay_ns", "late_ms"):
            if not 0.0 <= getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be >= 0 and finite, got {getattr(self, name)}")

    @property
    def active(self) -> bool:
        return bool(self.drop or self.duplicate or self.corrupt or self.late or self.delay_ns)


class FaultInjector:
    """Applies ``LinkFaults`` to the frames of one direction: ``apply`` returns the copies to
    deliver now (0, 1 or 2); a late frame comes back from ``due`` once its time has come.
    Counters count frames as they are delivered, so ``corrupted`` is exactly the number of
    damaged frames the receiving side must have refused."""

    COUNTS = ("dropped", "duplicated", "corrupted", "delayed")

    def __init__(self, faults: LinkFaults, stream: int = 0) -> None:
        self.faults = faults
        self._rng = random.Random(faults.seed * 2 + stream)
        self._held: list[tuple[float, list[bytes], bool, object]] = []
        self.dropped = self.duplicated = self.corrupted = self.delayed = 0

    def apply(self, parts: list[bytes], ctx: object = None) -> list[list[bytes]]:
        """The copies of ``parts`` to deliver now; ``ctx`` travels with a held copy (``due``)."""
        f, rng = self.faults, self._rng
        if f.drop and rng.random() < f.drop:
            self.dropped += 1
            return []
        damaged = False
        if f.corrupt and parts and rng.random() < f.corrupt:
            damaged = True
            sizes = [len(p) for p in parts]
            pos = rng.randrange(max(1, sum(sizes)))
            which = 0
            while which < len(parts) - 1 and pos >= sizes[which]:
                pos -= sizes[which]
                which += 1
            data = bytearray(parts[which]) or bytearray(1)
            data[min(pos, len(data) - 1)] ^= rng.randrange(1, 256)
            parts = [*parts[:which], bytes(data), *parts[which + 1:]]
        copies = [parts]
        if f.duplicate and rng.random() < f.duplicate:
            self.duplicated += 1
            copies = [parts, parts]
        now = []
        for c in copies:
            if f.late and rng.random() < f.late:
                self.delayed += 1
                self._held.append((time.monotonic() + f.late_ms / 1000, c, damaged, ctx))
            else:
                self.corrupted += damaged
                now.append(c)
        return now

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTS}

    def next_due(self) -> float | None:
        """Monotonic time the first held copy is due, or None."""
        return min((h[0] for h in self._held), default=None)

    def due(self, everything: bool = False) -> list[tuple[list[bytes], object]]:
        """Held copies whose time has come (all of them with ``everything``), with their
        ``ctx``."""
        if not self._held:
            return []
        now = time.monotonic()
        out = [h for h in self._held if everything or h[0] <= now]
        self._held = [h for h in self._held if not (everything or h[0] <= now)]
        self.corrupted += sum(h[2] for h in out)
        return [(h[1], h[3]) for h in out]
