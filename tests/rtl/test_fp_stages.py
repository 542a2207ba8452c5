"""The staged fp32 units (nelssa_fp32_{add,mul}_staged: registers between the stage functions
of rtl/core/nelssa_fp_pkg.sv) at Latency 0 to 3, bit for bit: against the model hw/model/fp.py
(fadd, fmul) on specials, cancellation, alignment and random vectors driven from Python, and
against nelssa_fp_pkg's fp32_add / fp32_mul (the same steps without registers, so this checks
the staging) on 2^18 generated pairs (every exponent pair twice with four kinds of
significand, near-cancelling pairs, random bits), compared inside the simulation
(rtl/sim/nelssa_fp_stages_top.sv)."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from nelssa.hw.model import fp
from nelssa.hw.sim.rtl_sources import FP_STAGES_TOP, PACKAGES

from fpunit import SPECIALS32, random_f32_bits

TOP = FP_STAGES_TOP.stem
MASK = (1 << 32) - 1
GENERATED = 1 << 18
"""Generated pairs: every exponent pair twice, 2^16 near-cancelling and 2^16 random pairs (the
generator of rtl/sim/nelssa_fp_stages_top.sv)."""


def _vectors() -> tuple[np.ndarray, np.ndarray]:
    """Every pair of specials, near-cancelling pairs, exponent gaps 0..30, random operands."""
    rng = np.random.default_rng(46)
    sa, sb = (x.ravel() for x in np.meshgrid(SPECIALS32, SPECIALS32))
    a = random_f32_bits(rng, 1500).astype(np.int64)
    ca = a
    cb = ((a + rng.integers(-4, 5, a.size)) & 0x7FFFFFFF) | ((~a) & 0x80000000)
    n = 1500
    ea = rng.integers(30, 220, n)
    eb = np.clip(ea - rng.integers(0, 31, n), 1, 254)
    aa = (rng.integers(0, 2, n) << 31) | (ea << 23) | rng.integers(0, 2**23, n)
    ab = (rng.integers(0, 2, n) << 31) | (eb << 23) | rng.integers(0, 2**23, n)
    ra, rb = random_f32_bits(rng, 3000), random_f32_bits(rng, 3000)
    cat = [sa, ca, aa, ra], [sb, cb, ab, rb]
    return tuple(np.concatenate([x.astype(np.uint32) for x in c]) for c in cat)


class TB:
    """Clock, reset, the operand driver and the per-latency monitors of the staged units."""

    def __init__(self, dut) -> None:
        self.dut = dut
        self.max_latency = int(dut.MaxLatency.value)

    async def reset(self, generate: bool) -> None:
        d = self.dut
        cocotb.start_soon(Clock(d.clk_i, 10, unit="ns").start())
        d.gen_i.value = int(generate)
        d.inject_i.value = 0
        d.a_i.value = 0
        d.b_i.value = 0
        d.rst_ni.value = 0
        await ClockCycles(d.clk_i, 2)
        d.rst_ni.value = 1
        await RisingEdge(d.clk_i)

    def words(self, sig) -> list[int]:
        """A [MaxLatency:0][31:0] output as its words, index = latency."""
        v = int(sig.value)
        return [(v >> (32 * n)) & MASK for n in range(self.max_latency + 1)]

    async def drive(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply one pair a cycle, then MaxLatency idle cycles; the sums and products seen,
        [latency, cycle]."""
        d = self.dut
        n = len(a) + self.max_latency
        sums = np.zeros((self.max_latency + 1, n), dtype=np.uint32)
        prods = np.zeros_like(sums)
        for t in range(n):
            if t < len(a):
                d.a_i.value, d.b_i.value = int(a[t]), int(b[t])
            await ReadOnly()
            sums[:, t] = self.words(d.add_o)
            prods[:, t] = self.words(d.mul_o)
            await RisingEdge(d.clk_i)
        return sums, prods

    def score(self, a: np.ndarray, b: np.ndarray, seen: np.ndarray, model, what: str) -> None:
        """Latency l's output at cycle t + l is the model's result of pair t, bit for bit."""
        want = model(a, b)
        for lat in range(self.max_latency + 1):
            got = seen[lat, lat:lat + len(a)]
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (
                f"{what} at Latency {lat}: {bad.size} of {len(a)} differ, first "
                + "; ".join(f"{int(a[i]):#010x},{int(b[i]):#010x}: rtl {int(got[i]):#010x} "
                            f"model {int(want[i]):#010x}" for i in bad[:3]))


@cocotb.test()
async def matches_the_model(dut):
    """Specials, cancellation, alignment and random pairs at every latency, against fp.py."""
    tb = TB(dut)
    await tb.reset(generate=False)
    a, b = _vectors()
    before = int(dut.mismatches_o.value)
    sums, prods = await tb.drive(a, b)
    tb.score(a, b, sums, fp.fadd, "add")
    tb.score(a, b, prods, fp.fmul, "mul")
    await ReadOnly()
    assert int(dut.mismatches_o.value) == before == 0  # and the functions agree in the RTL


@cocotb.test()
async def matches_the_functions_on_generated_pairs(dut):
    """The generator's pairs (every exponent pair twice, cancellation, random bits):
    each staged result equals fp32_add / fp32_mul of its operands; the first cycles' operands
    and results also against the model."""
    tb = TB(dut)
    await tb.reset(generate=True)
    a, b, s0, p0 = [], [], [], []
    for _ in range(2000):
        await ReadOnly()
        a.append(int(dut.a_o.value))
        b.append(int(dut.b_o.value))
        s0.append(tb.words(dut.add_o)[0])
        p0.append(tb.words(dut.mul_o)[0])
        await RisingEdge(dut.clk_i)
    a, b = np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)
    assert np.array_equal(np.array(s0, dtype=np.uint32), fp.fadd(a, b))
    assert np.array_equal(np.array(p0, dtype=np.uint32), fp.fmul(a, b))
    assert len(set(zip(a.tolist(), b.tolist(), strict=True))) > 0.95 * len(a)  # they change
    await ReadOnly()
    checked = int(dut.checked_o.value)
    await RisingEdge(dut.clk_i)
    await ClockCycles(dut.clk_i, GENERATED - 1)
    await ReadOnly()
    per_cycle = 2 * (tb.max_latency + 1)
    assert int(dut.checked_o.value) - checked == per_cycle * GENERATED
    assert int(dut.mismatches_o.value) == 0


@cocotb.test()
async def the_mismatch_count_counts(dut):
    """A reference off by one bit for five cycles is counted five times."""
    tb = TB(dut)
    await tb.reset(generate=True)
    await ClockCycles(dut.clk_i, 10)
    dut.inject_i.value = 1
    await ClockCycles(dut.clk_i, 5)
    dut.inject_i.value = 0
    await ClockCycles(dut.clk_i, 5)
    await ReadOnly()
    assert int(dut.mismatches_o.value) == 5


@pytest.mark.rtl
def test_fp_stages():
    from cocotb_runner import run_cocotb

    run_cocotb(TOP, "test_fp_stages", sources=[*PACKAGES, FP_STAGES_TOP], unoptimized=True)


@pytest.mark.rtl
@pytest.mark.parametrize("latency", [1, 2])
def test_pipe3_needs_two_registers(latency):
    """nelssa_pipe3 (the staged exp2, log2 and reciprocal's registers) refuses a latency below
    2 at elaboration, naming it; 2 elaborates clean."""
    import subprocess

    from nelssa.hw.sim.rtl_sources import lint_command
    from nelssa.hw.sim.verilator import setup_environment

    setup_environment()
    proc = subprocess.run(lint_command("nelssa_pipe3", PACKAGES, {"Latency": latency}),
                          capture_output=True, text=True, timeout=120)
    if latency < 2:
        assert proc.returncode != 0
        assert "nelssa_pipe3: Latency must be 2 or more" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
