"""Shared testbench pieces for the combinational arithmetic units: a TB that applies vectors and
a scoreboard that compares output bits with the Python model (hw/model/fp.py), and the one build
all seven units' tests share (rtl/sim/nelssa_fp_units_top.sv: every unit side by side, its ports
named <unit>_<port>, and beside each unit with a latency parameter a pipelined instance,
<unit>_pipe_<output>, at PIPE_LATENCY; each test file drives its own unit)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from cocotb.triggers import Timer

from nelssa.hw.sim.rtl_sources import FP_UNITS, FP_UNITS_TOP, PACKAGES

UNITS_TOP = FP_UNITS_TOP.stem
PIPE_LATENCY = {"bf16_mul": 1, "fp32_add": 3, "fp32_mul": 2, "fp32_exp2": 4, "fp32_log2": 5,
                "fp32_recip": 2}
"""Latency of each pipelined instance in the units' build (given to it as parameters)."""
PIPE_PARAMS = {"Bf16MulPipeLatency": PIPE_LATENCY["bf16_mul"],
               "AddPipeLatency": PIPE_LATENCY["fp32_add"],
               "MulPipeLatency": PIPE_LATENCY["fp32_mul"],
               "Exp2PipeLatency": PIPE_LATENCY["fp32_exp2"],
               "Log2PipeLatency": PIPE_LATENCY["fp32_log2"],
               "RecipPipeLatency": PIPE_LATENCY["fp32_recip"]}

SPECIALS32 = np.array(
    [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000,
     0xFFC00001, 0x7F800001, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF,
     0xFF7FFFFF, 0x3F7FFFFF, 0x40000000, 0x34000000, 0x00FFFFFF, 0x42FE0000, 0xC2FC0000,
     0x43000000, 0xC3000000, 0x3F000000, 0xB3800000],
    dtype=np.uint32,
)
"""Zeros, ones, infinities, NaNs, subnormals, extremes and range-reduction edges."""


def random_f32_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    """A mix: uniformly random bit patterns, specials, and values of moderate magnitude."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    moderate = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    pick = rng.integers(0, 8, n)
    out = np.where(pick < 3, bits, moderate.view(np.uint32))
    out = np.where(pick == 7, rng.choice(SPECIALS32, n), out)
    return out.astype(np.uint32)


def pipe_vectors(seed: int, arity: int) -> list[np.ndarray]:
    """The pipelined instance's vectors: the specials (every pair of them for a two-input
    unit), then random operands."""
    rng = np.random.default_rng(seed)
    if arity == 1:
        return [np.concatenate([SPECIALS32, random_f32_bits(rng, 1500)])]
    grid = np.meshgrid(SPECIALS32, SPECIALS32)
    return [np.concatenate([g.ravel(), random_f32_bits(rng, 1500)]) for g in grid]


class CombTB:
    """Drives a combinational unit's inputs and reads its output, one vector at a time."""

    def __init__(self, dut, unit: str, inputs: Sequence[str], output: str) -> None:
        """``unit``: the module under test, ``nelssa_<unit>``; ``inputs`` and ``output``: its
        port names (the top's are these prefixed with ``<unit>_``)."""
        self.dut = dut
        self.unit = unit
        self.inputs = [getattr(dut, f"{unit}_{name}") for name in inputs]
        self.output = getattr(dut, f"{unit}_{output}")
        self.pipe_output = getattr(dut, f"{unit}_pipe_{output}", None)
        dut.en_i.value = 1  # the result is used (a gated simulation computes it only then)
        dut.rst_ni.value = 1
        dut.clk_i.value = 0

    async def apply(self, *values: int) -> int:
        for sig, v in zip(self.inputs, values, strict=True):
            sig.value = int(v)
        await Timer(1, "ns")
        return int(self.output.value)

    async def check(
        self, model: Callable[..., np.ndarray], *columns: np.ndarray, label: str = ""
    ) -> int:
        """Apply every vector; assert the RTL's bits equal the model's. Returns the count."""
        expected = np.asarray(model(*columns), dtype=np.uint32)
        mismatches = []
        for i in range(len(expected)):
            got = await self.apply(*(int(c[i]) for c in columns))
            if got != int(expected[i]):
                mismatches.append(
                    f"in={[hex(int(c[i])) for c in columns]} rtl={got:#010x} "
                    f"model={int(expected[i]):#010x}"
                )
        assert not mismatches, (
            f"{label}: {len(mismatches)} of {len(expected)} vectors differ, first: "
            + "; ".join(mismatches[:5])
        )
        return len(expected)


    async def check_pipelined(self, model: Callable[..., np.ndarray], *columns: np.ndarray,
                              label: str = "") -> int:
        """One vector a clock cycle into the pipelined instance: the output in the cycle
        PIPE_LATENCY after a vector's must be the model's result of it, bit for bit (and what
        it shows before the first result is not checked). Returns the count."""
        assert self.pipe_output is not None, f"{self.unit} has no pipelined instance"
        lat = PIPE_LATENCY[self.unit]
        d = self.dut
        d.rst_ni.value = 0
        await Timer(1, "ns")
        d.rst_ni.value = 1
        expected = np.asarray(model(*columns), dtype=np.uint32)
        mismatches = []
        n = len(expected)
        for i in range(n + lat):
            for sig, c in zip(self.inputs, columns, strict=True):
                sig.value = int(c[min(i, n - 1)])
            d.clk_i.value = 0
            await Timer(1, "ns")
            got = int(self.pipe_output.value)
            if i >= lat and got != int(expected[i - lat]):
                mismatches.append(f"in={[hex(int(c[i - lat])) for c in columns]} "
                                  f"rtl={got:#010x} model={int(expected[i - lat]):#010x}")
            d.clk_i.value = 1
            await Timer(1, "ns")
        assert not mismatches, (
            f"{label} (latency {lat}): {len(mismatches)} of {n} vectors differ, first: "
            + "; ".join(mismatches[:5]))
        return n


def run_unit_tests(test_module: str) -> None:
    """Run ``test_module``'s cocotb tests on the units' shared build. At -O0: a file's run is
    some 10,000 vectors, each a cocotb round trip far dearer than the model's evaluation (about
    2 s of CPU a file), while the build is most of the cost (one build of all seven, -O0: about
    15 s of CPU; seven of one unit each, -O3: 16 to 20 s each)."""
    from cocotb_runner import run_cocotb

    run_cocotb(UNITS_TOP, test_module, parameters=PIPE_PARAMS,
               sources=[*PACKAGES, *FP_UNITS, FP_UNITS_TOP], unoptimized=True)
