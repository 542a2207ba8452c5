"""nelssa_ddr5_addr_map against hw/model/ddr5_addr.py for every map, and out-of-range errors:
the three maps in one build (rtl/sim/nelssa_ddr5_addr_maps.sv: map m's decode in element m of
each output), each address decoded by all three at once."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest
from cocotb.triggers import Timer

from nelssa.hw.model.ddr5_addr import ADDRESS_MAPS, DeviceGeometry, decode
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON
from nelssa.hw.sim.rtl_sources import DDR5_ADDR_MAPS

GEO = DeviceGeometry(DDR5_6400_MICRON)
FIELDS = (("sub_o", 3), ("bg_o", 3), ("bank_o", 2), ("row_o", 16), ("col_o", 6), ("err_o", 1))
"""The wrapper's outputs and the width of each map's element in them"""


def decoded(dut) -> list[tuple[int, ...]]:
    """Each map's (sub-channel, bank group, bank, row, column, error), map 0 first."""
    raw = [(int(getattr(dut, name).value), w) for name, w in FIELDS]
    return [tuple(v >> (w * m) & ((1 << w) - 1) for v, w in raw) for m in range(len(ADDRESS_MAPS))]


@cocotb.test()
async def matches_the_model(dut):
    assert len(dut.err_o.value) == len(ADDRESS_MAPS), "a map of the model the wrapper lacks"
    rng = np.random.default_rng(5)
    addrs = np.concatenate([rng.integers(0, GEO.capacity_bytes, 3000),
                            [0, 63, GEO.capacity_bytes - 1, 4096, 8191]]).astype(np.int64)
    ds = [decode(addrs, GEO, amap) for amap in ADDRESS_MAPS]
    for i, a in enumerate(addrs.tolist()):
        dut.addr_i.value = a
        await Timer(1, "ns")
        for amap, d, got in zip(ADDRESS_MAPS, ds, decoded(dut), strict=True):
            want = (int(d.subchannel[i]), int(d.bank_group[i]), int(d.bank[i]), int(d.row[i]),
                    int(d.column[i]), 0)
            assert got == want, f"{amap} {a:#x}: rtl {got} model {want}"


@cocotb.test()
async def out_of_range_is_an_error(dut):
    for a in (GEO.capacity_bytes, GEO.capacity_bytes + 64, (1 << 40) - 1):
        dut.addr_i.value = a
        await Timer(1, "ns")
        for amap, got in zip(ADDRESS_MAPS, decoded(dut), strict=True):
            assert got[-1] == 1, f"{amap} {a:#x} must raise err_o"


@pytest.mark.rtl
def test_ddr5_addr_map():
    """Every map of the model, each against its instance in the wrapper."""
    from cocotb_runner import run_cocotb

    run_cocotb("nelssa_ddr5_addr_maps", "test_ddr5_addr_map", sources=DDR5_ADDR_MAPS,
               unoptimized=True)
