"""Builds of the RTL device that several tests share, so that `make test` compiles each once
(the cache key is the sources and the parameters): the smallest device, one unit at -O0 with
waveform support and pipelined arithmetic units, serves the waveform test (memory traffic:
the units' latencies do not matter to it) and the pipelined device's scoreboard."""

from __future__ import annotations

from nelssa.hw.model.engine import FpLatency

SMALL_LATENCY = FpLatency(add=3, mul=2, exp2=1, recip=2)
SMALL_PIPELINED = {"units": 1, "waves": True, "optimize": False, "latency": SMALL_LATENCY}
"""RtlDevice's arguments: one unit builds faster, and at -O0 (2.5 times less compile time)."""
