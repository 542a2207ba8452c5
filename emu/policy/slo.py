"""The serving objective the emulator's goodput and the adaptive threshold are held to, in one
place: MLPerf Inference's server scenario for Llama 3.1 405B (TTFT <= 6 s, TPOT <= 175 ms), a
long-context benchmark of published serving systems."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Slo:
    """A request meets the SLO when both hold (DistServe's goodput counts those per second)."""

    ttft_s: float = 6.0
    """Arrival to first token."""
    tpot_s: float = 0.175
    """Time per output token after the first (the request's own mean)."""

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


MLPERF_SLO = Slo()
