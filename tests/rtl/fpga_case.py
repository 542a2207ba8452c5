"""The workload both FPGA-top testbenches replay (test_fpga_top.py through AXI, test_fpga_pcie.py
through a PCIe root complex): attention requests run on the ``model`` device first, giving the
memory image before the doorbell, the image after it (results and completion entries) and the
ring registers the driver programmed. And the one build of the top both run on."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from buses import ReorderingAxiMemory

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.sim.rtl_sources import FP_GATED_ARGS, FPGA_TOP

CHANNELS = 4
CHAN_ADDR_W = 28
MEM_BYTES = CHANNELS << CHAN_ADDR_W  # 1 GiB
BUILD_ID = 0x0B17_D1D0
PORT_W = 2  # $clog2(NumUnits + 2)
# two units (the top's arbitration between them) of a small engine: the top's own logic does
# not depend on the engine's size, which test_attn_engine_full and the RTL device's tests
# cover at the device's (a quarter of the build time, the C++ at -O0). Four channels (the
# interleaving of lines over them), and 4 reads and writes in flight per port and channel
# (the default is 32): the ports reach that limit and wait.
TOP_PARAMS = {"NumUnits": 2, "NumChannels": CHANNELS, "ChanAddrW": CHAN_ADDR_W, "HeadDim": 64,
              "NumQHeads": 2, "MaxClusterTokens": 16, "MemBytes": f"64'd{MEM_BYTES}",
              "BuildId": f"32'h{BUILD_ID:08X}", "Outstanding": 4}
"""The FPGA top of both testbenches: one build (it is most of their cost), shared."""

# the registers CommandQueue programs, in its order
RING_REGS = ("REGION_BASE_LO", "REGION_BASE_HI", "REGION_LIMIT_LO", "REGION_LIMIT_HI",
             "SQ_BASE_LO", "SQ_BASE_HI", "SQ_SIZE", "CQ_BASE_LO", "CQ_BASE_HI", "CQ_SIZE")
SHAPES = ((128, 4, 12, 5), (64, 2, 6, 6), (128, 8, 9, 4), (64, 1, 3, 1))
"""Each request's head_dim, query heads, clusters and clusters selected."""


@dataclass
class Case:
    image_before: dict[int, bytes]
    image_after: dict[int, bytes]
    ring: dict[str, int]
    sq_tail: int
    descriptors: int


def model_case(seed: int, shapes=SHAPES, max_tokens: int = 32) -> Case:
    """A workload run on the model device: the memory before the doorbell, after it, and the
    ring registers the driver programmed; ``shapes`` as SHAPES, clusters of 1..``max_tokens``
    tokens."""
    port = ModelDevice()
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 26)
    rng = np.random.default_rng(seed)
    reqs = []
    for head, (hd, heads, n, sel) in enumerate(shapes):
        tokens = rng.integers(1, max_tokens + 1, n)
        ks = [fp.f32_to_bf16_bits(rng.standard_normal((t, hd)).astype(np.float32))
              for t in tokens]
        vs = [fp.f32_to_bf16_bits(rng.standard_normal((t, hd)).astype(np.float32))
              for t in tokens]
        region = mem.alloc_kv(0, 0, head, hd, n, int(tokens.sum()))
        mem.write_clusters(region, ks, vs)
        q = fp.f32_to_bf16_bits(rng.standard_normal((heads, hd)).astype(np.float32))
        reqs.append(AttnRequest(region, q, rng.choice(n, sel, replace=False).tolist()))
    cq = CommandQueue(mem, entries=8)
    dev.reg_write("CONTROL", 0)  # hold the model: the image before any descriptor runs
    ids = cq.submit(reqs)
    before = port.mem.image()
    ring = {name: dev.reg_read(name) for name in RING_REGS}
    sq_tail = dev.reg_read("SQ_TAIL")
    dev.reg_write("CONTROL", 1)
    cq.wait(ids)
    return Case(before, port.mem.image(), ring, sq_tail, len(ids))


def channel_memory(dut, rng: random.Random) -> ReorderingAxiMemory:
    """The memory models behind the top's channels (TOP_PARAMS)."""
    return ReorderingAxiMemory(dut, dut.clk_i, CHANNELS, PORT_W, CHAN_ADDR_W, rng)


def run_top(test_module: str) -> None:
    """``test_module``'s cocotb tests on the shared build of the FPGA top (TOP_PARAMS)."""
    from cocotb_runner import run_cocotb

    # -O0 (its runs are short), as one C++ file (run_cocotb's single_compile): the two
    # files' CPU 110 s -> 80 s, cold
    run_cocotb("nelssa_fpga_top", test_module, parameters=TOP_PARAMS, sources=FPGA_TOP,
               build_extra=FP_GATED_ARGS, unoptimized=True)
