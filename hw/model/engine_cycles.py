"""Cycles of the RTL attention engine (rtl/core/nelssa_attn_engine.sv) for one command, from its
shape and the engine's parameters, the arithmetic units' latencies (EngineParams.latency)
included: the schedule the RTL runs when its stream never gaps, its cluster entries are there
when it takes them and its results are taken as offered. tests/rtl/test_attn_engine.py measures
the RTL's cycles against it, at latency 0 and pipelined.

Phases (cycles), with D the dot product's depth (bf16 mul + log2(32) adds), F the row fold's
((HeadDim/32 - 1) adds), A, M, E, G, R the adder's, multiplier's, exp2's, log2's and
reciprocal's latencies and bpr = head_dim/32 beats per row:

* Q rows: q_heads * bpr; the first cluster's entry: 1;
* per cluster of n tokens: K n * bpr; the turn 1 + D + F + M (the last score) + A + E + 1
  (alpha and the first weight); V (n - 1) * max(bpr, A) + bpr (o and l are loop-carried once
  a row: an adder slower than a row makes the engine wait);
* after the last V beat: M + A (its o and l), q_heads (one finalisation issue per head),
  max(R, G + A + M) (the last LSE and 1/l);
* results: q_heads * 2 * bpr + 1 beats, plus M + 1 with pipelined multipliers (the result
  FIFO's fill); the done cycle: 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from nelssa.driver.status import ENGINE_LANES
from nelssa.hw.model.engine import EngineParams, FpLatency

DOT_LEVELS = (ENGINE_LANES - 1).bit_length()
"""Adder levels of a beat's dot product tree (log2 of the lanes)."""


@dataclass(frozen=True)
class EngineTiming:
    """The engine's phase lengths that do not depend on the command's data, in cycles."""

    kv_turn: int
    """From a cluster's last K beat to its first V beat, less one (the stall cycles)."""
    drain: int
    """From the last V beat until finalisation starts, less one."""
    final_wait: int
    """After the last head's finalisation issue until the output starts."""
    out_fill: int
    """Cycles the result FIFO adds once (0 with combinational multipliers)."""
    row_period: tuple[int, int]
    """Cycles a V row takes at head_dim 64 and at 128."""

    @classmethod
    def of(cls, params: EngineParams) -> EngineTiming:
        lat: FpLatency = params.latency
        a, m = lat.add, lat.mul
        dot = lat.bf16_mul + DOT_LEVELS * a
        fold = (params.head_dim // ENGINE_LANES - 1) * a
        return cls(kv_turn=(1 + dot + fold + m) + (a + lat.exp2 + 1),
                   drain=m + a,
                   final_wait=max(lat.recip, lat.log2 + a + m),
                   out_fill=m + 1 if m else 0,
                   row_period=(max(2, a), max(4, a)))

    def row(self, head_dim: int) -> int:
        """Cycles a V row of ``head_dim`` takes."""
        return self.row_period[head_dim == 128]

    def over_combinational(self, params: EngineParams) -> LatencyCost:
        """What these phases take beyond the same engine's with combinational units."""
        base = EngineTiming.of(replace(params, latency=FpLatency()))
        return LatencyCost(
            kv_turn=self.kv_turn - base.kv_turn,
            tail=(self.drain - base.drain) + (self.final_wait - base.final_wait)
            + (self.out_fill - base.out_fill),
            row=tuple(a - b for a, b in zip(self.row_period, base.row_period, strict=True)))


@dataclass(frozen=True)
class LatencyCost:
    """The cycles pipelined units add to a command, beside the combinational engine's."""

    kv_turn: int
    """At each cluster's K->V turn."""
    tail: int
    """Once, after the last V beat (o and l, finalisation, the result FIFO)."""
    row: tuple[int, int]
    """At each V row but a cluster's last, at head_dim 64 and 128."""

    def cycles(self, head_dim: int, clusters: int, tokens: int) -> int:
        """For a command of ``clusters`` clusters of ``tokens`` tokens in all."""
        return (clusters * self.kv_turn + self.tail
                + (tokens - clusters) * self.row[head_dim == 128])


def command_cycles(params: EngineParams, head_dim: int, num_qheads: int,
                   cluster_lens: Sequence[int]) -> int:
    """Cycles from the engine taking a well-formed command to its done_o (both counted as
    the testbench counts them: the taking cycle is 0, the done cycle the count)."""
    t = EngineTiming.of(params)
    bpr = head_dim // ENGINE_LANES
    cycles = num_qheads * bpr + 1
    for n in cluster_lens:
        cycles += n * bpr + t.kv_turn + (n - 1) * t.row(head_dim) + bpr
    cycles += t.drain + num_qheads + t.final_wait
    cycles += num_qheads * 2 * bpr + 1 + t.out_fill
    return cycles + 1
