"""Cycles of the RTL attention engine (rtl/core/nelssa_attn_engine.sv) for one command, from its
shape and the engine's parameters, the arithmetic units' latencies (EngineParams.latency) and
its lanes (EngineParams.compute_lanes) included: the schedule the RTL runs when its stream never
gaps, its cluster entries are there when it takes them and its results are taken as offered.
tests/rtl/test_attn_engine.py measures the RTL's cycles against it, at latency 0, pipelined and
with a narrow datapath.

Phases (cycles), with D the dot product's depth (bf16 mul + log2(32) adds), F the row fold's
((HeadDim/32 - 1) adds), A, M, E, G, R the adder's, multiplier's, exp2's, log2's and
reciprocal's latencies, bpr = head_dim/32 beats per row, S = 32/compute_lanes cycles a K or V
beat takes (its chunks) and U = 16/min(compute_lanes, 16) cycles a result beat takes:

* Q rows: q_heads * bpr (a Q beat is stored, not computed: one a cycle); the first cluster's
  entry: 1;
* per cluster of n tokens: K n * bpr * S; the turn 1 + D + F + M (the last score, from the
  last K chunk) + A + E + 1 (alpha and the first weight); V (n - 1) * max(bpr * S, A) +
  bpr * S (o and l are loop-carried once a row: an adder slower than a row makes the engine
  wait);
* after the last V chunk: M + A (its o and l), q_heads (one finalisation issue per head),
  max(R, G + A + M) (the last LSE and 1/l);
* results: q_heads * 2 * bpr * U + 1, plus M + 1 through the result FIFO (pipelined
  multipliers or result beats in chunks); the done cycle: 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nelssa.driver.status import ENGINE_LANES
from nelssa.hw.model.engine import EngineParams, FpLatency

DOT_LEVELS = (ENGINE_LANES - 1).bit_length()
"""Adder levels of a beat's dot product tree (log2 of the lanes)."""
OUT_LANES = ENGINE_LANES // 2
"""fp32 values of a result beat."""


@dataclass(frozen=True)
class EngineTiming:
    """The engine's phase lengths that do not depend on the command's data, in cycles."""

    kv_turn: int
    """From a cluster's last K chunk to its first V beat, less one (the stall cycles)."""
    drain: int
    """From the last V beat's last chunk until finalisation starts, less one."""
    final_wait: int
    """After the last head's finalisation issue until the output starts."""
    out_fill: int
    """Cycles the result FIFO adds once (0 with combinational multipliers and whole beats)."""
    row_period: tuple[int, int]
    """Cycles a V row takes at head_dim 64 and at 128."""
    beat: int = 1
    """Cycles a K or V beat takes (its chunks)."""
    out_beat: int = 1
    """Cycles a result beat of O takes through the output multipliers."""

    @classmethod
    def of(cls, params: EngineParams) -> EngineTiming:
        lat: FpLatency = params.latency
        a, m = lat.add, lat.mul
        dot = lat.bf16_mul + DOT_LEVELS * a
        fold = (params.head_dim // ENGINE_LANES - 1) * a
        beat = ENGINE_LANES // params.compute_lanes
        out_beat = OUT_LANES // min(params.compute_lanes, OUT_LANES)
        return cls(kv_turn=(1 + dot + fold + m) + (a + lat.exp2 + 1),
                   drain=m + a,
                   final_wait=max(lat.recip, lat.log2 + a + m),
                   out_fill=m + 1 if m or out_beat > 1 else 0,
                   row_period=(max(2 * beat, a), max(4 * beat, a)),
                   beat=beat, out_beat=out_beat)

    def row(self, head_dim: int) -> int:
        """Cycles a V row of ``head_dim`` takes."""
        return self.row_period[head_dim == 128]

    def over_combinational(self, params: EngineParams) -> LatencyCost:
        """What these phases take beyond the engine the device models are fitted on: the same
        shape with combinational units and all 32 lanes."""
        base = EngineTiming.of(EngineParams(head_dim=params.head_dim,
                                            num_qheads=params.num_qheads,
                                            max_cluster_tokens=params.max_cluster_tokens))
        return LatencyCost(
            kv_turn=self.kv_turn - base.kv_turn,
            tail=(self.drain - base.drain) + (self.final_wait - base.final_wait)
            + (self.out_fill - base.out_fill),
            row=tuple(a - b for a, b in zip(self.row_period, base.row_period, strict=True)),
            beat=self.beat - base.beat, out_beat=self.out_beat - base.out_beat)


@dataclass(frozen=True)
class LatencyCost:
    """The cycles pipelined units and a narrow datapath add to a command, beside the
    combinational full-width engine's."""

    kv_turn: int
    """At each cluster's K->V turn."""
    tail: int
    """Once, after the last V beat (o and l, finalisation, the result FIFO)."""
    row: tuple[int, int]
    """At each V row but a cluster's last, at head_dim 64 and 128."""
    beat: int = 0
    """At each K beat and each beat of a cluster's last V row (its chunks after the first)."""
    out_beat: int = 0
    """At each result beat of O."""

    def cycles(self, head_dim: int, clusters: int, tokens: int, q_heads: int = 1) -> int:
        """For a command of ``clusters`` clusters of ``tokens`` tokens in all and ``q_heads``
        query heads."""
        bpr = head_dim // ENGINE_LANES
        return (clusters * self.kv_turn + self.tail
                + (tokens - clusters) * self.row[head_dim == 128]
                + (tokens + clusters) * bpr * self.beat + q_heads * 2 * bpr * self.out_beat)


def command_cycles(params: EngineParams, head_dim: int, num_qheads: int,
                   cluster_lens: Sequence[int]) -> int:
    """Cycles from the engine taking a well-formed command to its done_o (both counted as
    the testbench counts them: the taking cycle is 0, the done cycle the count)."""
    t = EngineTiming.of(params)
    bpr = head_dim // ENGINE_LANES
    cycles = num_qheads * bpr + 1
    for n in cluster_lens:
        cycles += n * bpr * t.beat + t.kv_turn + (n - 1) * t.row(head_dim) + bpr * t.beat
    cycles += t.drain + num_qheads + t.final_wait
    cycles += num_qheads * 2 * bpr * t.out_beat + 1 + t.out_fill
    return cycles + 1
