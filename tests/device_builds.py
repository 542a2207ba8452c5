"""Builds of the RTL device that several tests share, so that `make test` compiles each once
(the cache key is the sources and the parameters): the smallest device, one unit at -O0 with
waveform support and pipelined arithmetic units, serves the waveform test (memory traffic:
the units' latencies do not matter to it) and the pipelined device's scoreboard."""

from __future__ import annotations

from nelssa.hw.model.engine import EngineParams, FpLatency

SMALL_LATENCY = FpLatency(add=3, mul=2, exp2=1, recip=2)
SMALL_ENGINE = EngineParams(head_dim=128, num_qheads=2, max_cluster_tokens=16,
                            latency=SMALL_LATENCY)
"""The engine as large as test_rtl_device_latency.py's workload needs (head_dim 128, 2 query
heads, clusters up to 16 tokens), not the device's (8 heads, 64 tokens): the pipelined
engine's C++ grows with its query heads (a datapath each), and was most of the build (148 MB
of C++ with 8 heads, 62 with 2; cold CPU of the two tests 237 s -> 115 s). Its cycles do not
depend on these limits, only on what a command asks for (the same 4,624 cycles and bits)."""
SMALL_PIPELINED = {"units": 1, "waves": True, "optimize": False, "engine": SMALL_ENGINE}
"""RtlDevice's arguments: one unit builds faster, and at -O0 (2.5 times less compile time)."""
