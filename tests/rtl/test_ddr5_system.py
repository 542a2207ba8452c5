"""A device's whole memory (front end + 8 sub-channels with data and checkers): four ports of
random reads and writes over the whole 64 GiB address space, each read checked against a Python
memory in acceptance order; out-of-range addresses complete with an error and touch nothing."""

from __future__ import annotations

from dataclasses import dataclass

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from nelssa.hw.model.ddr5_addr import DeviceGeometry, decode
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON
from nelssa.hw.sim.rtl_sources import DDR5_STORE_CPP, DDR5_SYSTEM, DDR5_VERILATOR_ARGS

PORTS = 4
LINE = 64
GEO = DeviceGeometry(DDR5_6400_MICRON)
FULL = (1 << 64) - 1
MASK512 = (1 << 512) - 1
MEMORY: dict[int, int] = {}
"""line -> data, in acceptance order; the backing store outlives a test, and so does this"""


@dataclass
class Req:
    write: bool
    addr: int
    tag: int
    data: int = 0
    strobe: int = 0


def strobe_mask(strobe: int) -> int:
    return sum(0xFF << (8 * b) for b in range(64) if strobe >> b & 1)


class TB:
    """Clock, reset, four request-port drivers and a scoreboard of the responses."""

    def __init__(self, dut) -> None:
        self.dut = dut
        self.memory = MEMORY
        cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())

    async def reset(self) -> None:
        self.dut.req_valid_i.value = 0
        self.dut.rst_ni.value = 0
        for _ in range(2):
            await RisingEdge(self.dut.clk_i)
        self.dut.rst_ni.value = 1

    async def play(self, streams: list[list[Req]], max_cycles: int = 50_000) -> dict[str, int]:
        """Offer each port its stream in order; check every response. Returns counts."""
        d = self.dut
        pos = [0] * PORTS
        want_read: dict[tuple[int, int], int] = {}   # (port, tag) -> expected data
        want_cpl: dict[tuple[int, int], bool] = {}   # (port, tag) -> expects err
        counts = {"reads": 0, "writes": 0, "errors": 0}
        total = sum(len(s) for s in streams)
        done = cycles = 0
        while done < total:
            assert cycles < max_cycles, f"stuck after {done} of {total} responses"
            valid = addr = write = tag = wdata = wstrb = 0
            for p in range(PORTS):
                if pos[p] < len(streams[p]):
                    r = streams[p][pos[p]]
                    valid |= 1 << p
                    addr |= r.addr << (40 * p)
                    write |= int(r.write) << p
                    tag |= r.tag << (16 * p)
                    wdata |= r.data << (512 * p)
                    wstrb |= r.strobe << (64 * p)
            d.req_valid_i.value = valid
            d.req_addr_i.value = addr
            d.req_write_i.value = write
            d.req_tag_i.value = tag
            d.req_wdata_i.value = wdata
            d.req_wstrb_i.value = wstrb
            await ReadOnly()
            ready = int(d.req_ready_o.value)
            # responses of this cycle (for requests accepted in earlier cycles)
            cpl = int(d.cpl_valid_o.value)
            for p in range(PORTS):
                if cpl >> p & 1:
                    t = int(d.cpl_tag_o.value) >> (16 * p) & 0xFFFF
                    err = bool(int(d.cpl_err_o.value) >> p & 1)
                    assert (p, t) in want_cpl, f"port {p}: unexpected completion for tag {t}"
                    assert want_cpl.pop((p, t)) == err, f"port {p} tag {t}: err={err}"
                    counts["errors" if err else "writes"] += 1
                    done += 1
            rd = int(d.rd_valid_o.value)
            if rd:
                ports, tags = int(d.rd_port_o.value), int(d.rd_tag_o.value)
                data = int(d.rd_data_o.value)
                for s in range(8):
                    if rd >> s & 1:
                        key = (ports >> (2 * s) & 3, tags >> (16 * s) & 0xFFFF)
                        assert key in want_read, f"sub-channel {s}: unexpected read data {key}"
                        got = data >> (512 * s) & MASK512
                        assert got == want_read.pop(key), f"read {key}: wrong data"
                        counts["reads"] += 1
                        done += 1
            # what was accepted this cycle, in port order (one port per line per cycle)
            for p in range(PORTS):
                if valid >> p & 1 and ready >> p & 1:
                    r = streams[p][pos[p]]
                    pos[p] += 1
                    line = r.addr // LINE
                    if r.addr >= GEO.capacity_bytes:
                        want_cpl[(p, r.tag)] = True
                    elif r.write:
                        m = strobe_mask(r.strobe)
                        old = self.memory.get(line, 0)
                        self.memory[line] = (r.data & m) | (old & ~m & MASK512)
                        want_cpl[(p, r.tag)] = False
                    else:
                        want_read[(p, r.tag)] = self.memory.get(line, 0)
            await RisingEdge(d.clk_i)
            cycles += 1
        assert not want_read and not want_cpl
        assert int(d.violations_o.value) == 0
        counts["cycles"] = cycles
        return counts


def random_streams(rng: np.random.Generator, n: int, lines: np.ndarray, bad: float,
                   write: float) -> list[list[Req]]:
    streams = []
    for _ in range(PORTS):
        s = []
        for t in range(n):
            addr = int(lines[rng.integers(0, len(lines))]) * LINE + int(rng.integers(0, 64))
            if rng.random() < bad:  # the same line k x 64 GiB higher: a wrap would alias it
                addr += GEO.capacity_bytes * int(rng.integers(1, 16))
            w = bool(rng.random() < write)
            strobe = FULL if rng.random() < 0.5 else int(rng.integers(0, 1 << 63))
            s.append(Req(w, addr, t, int.from_bytes(rng.bytes(64), "little") if w else 0,
                         strobe if w else 0))
        streams.append(s)
    return streams


@cocotb.test()
async def random_reads_and_writes_over_the_device(dut):
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(11)
    # a few hundred lines spread over the whole device, the last line among them
    lines = np.unique(np.append(rng.integers(0, GEO.capacity_bytes // LINE, 300),
                                GEO.capacity_bytes // LINE - 1))
    counts = await tb.play(random_streams(rng, 400, lines, bad=0.0, write=0.4))
    assert counts["reads"] > 500 and counts["writes"] > 400
    # the lines really landed on every sub-channel
    assert len(set(decode(lines * LINE, GEO).subchannel.tolist())) == 8


@cocotb.test()
async def out_of_range_addresses_complete_with_an_error(dut):
    """Bad addresses mixed into traffic on few lines: each gets an error completion, and every
    read of the good lines still returns the right data (nothing wrapped onto them)."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(12)
    lines = rng.integers(0, 16, 12)  # low lines: a wrapped bad address would land here
    counts = await tb.play(random_streams(rng, 300, lines, bad=0.2, write=0.5))
    assert counts["errors"] > 150
    assert counts["reads"] > 300


@cocotb.test()
async def streaming_reads_keep_the_sub_channels_busy(dut):
    """Four ports streaming consecutive lines: the front end keeps up (close to 4 per cycle)."""
    tb = TB(dut)
    await tb.reset()
    n = 2000
    streams = [[Req(False, (4 * i + p) * LINE, i) for i in range(n)] for p in range(PORTS)]
    counts = await tb.play(streams)
    assert counts["reads"] == PORTS * n
    # 4 lines per cycle at most; refresh and the tail cost some
    assert counts["cycles"] < 1.25 * n + 200, counts


@pytest.mark.rtl
def test_ddr5_system():
    from cocotb_runner import run_cocotb

    # -O0: eight sub-channels make a long build, the runs are short against it (cold, 44 s of
    # CPU against 64 at -Os); as one C++ file (run_cocotb's
    # single_compile): 36 s against 50
    run_cocotb("nelssa_ddr5_system", "test_ddr5_system", sources=DDR5_SYSTEM,
               build_extra=[str(DDR5_STORE_CPP), *DDR5_VERILATOR_ARGS], unoptimized=True)
