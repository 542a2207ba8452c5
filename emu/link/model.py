"""Timing and fault models of a link (DESIGN.md: Links).

One ``LinkDirection`` per direction of a connection: a message that starts at emulated time t
waits until the wire is free (serialization queueing), occupies it for its bytes on the wire over
the bandwidth, and arrives one base latency after its last bit left. Bytes on the wire include
the framing of the technology: RoCEv2 packets of 4096-byte MTU with 82 bytes of Ethernet, IP,
UDP, BTH, ICRC, preamble and inter-frame gap each; CXL 68-byte flits carrying 64 bytes.
"""

from __future__ import annotations

import random
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
"""RoCEv2 GPU node <-> PNM node (1-2 us one way, DESIGN.md) and CXL host <-> device."""


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

    def deliver(self, send_ps: int, nbytes: int) -> int:
        """Arrival time of a message handed to the wire at ``send_ps``."""
        start = max(send_ps, self.busy_until_ps)
        self.busy_until_ps = start + self.spec.serialization_ps(nbytes)
        self.messages += 1
        self.bytes += nbytes
        return self.busy_until_ps + round(self.spec.latency_ns * PS_PER_NS)


@dataclass(frozen=True)
class LinkFaults:
    """Faults a sender injects into the frames it sends (for tests and robustness studies)."""

    drop: float = 0.0
    """Probability that a frame is not sent at all."""
    duplicate: float = 0.0
    """Probability that a frame is sent twice."""
    corrupt: float = 0.0
    """Probability that one payload byte (or a header byte of an empty payload) is flipped
    after the checksum was computed."""
    delay_ns: float = 0.0
    """Emulated delay added to every frame's send time."""
    seed: int = 0
    """Seed of the fault decisions, so a faulty run repeats."""

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "corrupt"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p}")
        if self.delay_ns < 0:
            raise ValueError(f"delay_ns must be >= 0, got {self.delay_ns}")

    @property
    def active(self) -> bool:
        return bool(self.drop or self.duplicate or self.corrupt or self.delay_ns)


class FaultInjector:
    """Applies ``LinkFaults`` to encoded frames: returns the part lists to send (0, 1 or 2)."""

    def __init__(self, faults: LinkFaults) -> None:
        self.faults = faults
        self._rng = random.Random(faults.seed)
        self.dropped = self.duplicated = self.corrupted = 0

    def apply(self, parts: list[bytes]) -> list[list[bytes]]:
        f = self.faults
        if f.drop and self._rng.random() < f.drop:
            self.dropped += 1
            return []
        if f.corrupt and self._rng.random() < f.corrupt:
            self.corrupted += 1
            which = 1 if parts[1] else 0
            data = bytearray(parts[which])
            pos = self._rng.randrange(len(data)) if which else 16  # header: emulated time
            data[pos] ^= 0x5A
            parts = [bytes(data), parts[1]] if which == 0 else [parts[0], bytes(data)]
        if f.duplicate and self._rng.random() < f.duplicate:
            self.duplicated += 1
            return [parts, parts]
        return [parts]
