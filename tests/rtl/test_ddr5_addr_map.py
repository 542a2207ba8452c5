"""nelssa_ddr5_addr_map against hw/model/ddr5_addr.py for every map, and out-of-range errors."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest
from cocotb.triggers import Timer

from nelssa.hw.model.ddr5_addr import ADDRESS_MAPS, DeviceGeometry, decode
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON
from nelssa.hw.sim.verilator import RTL_ROOT

GEO = DeviceGeometry(DDR5_6400_MICRON)


@cocotb.test()
async def matches_the_model(dut):
    amap = ADDRESS_MAPS[int(dut.AddressMap.value)]
    rng = np.random.default_rng(5)
    addrs = np.concatenate([rng.integers(0, GEO.capacity_bytes, 3000),
                            [0, 63, GEO.capacity_bytes - 1, 4096, 8191]]).astype(np.int64)
    d = decode(addrs, GEO, amap)
    for i, a in enumerate(addrs.tolist()):
        dut.addr_i.value = a
        await Timer(1, "ns")
        got = (int(dut.sub_o.value), int(dut.bg_o.value), int(dut.bank_o.value),
               int(dut.row_o.value), int(dut.col_o.value), int(dut.err_o.value))
        want = (int(d.subchannel[i]), int(d.bank_group[i]), int(d.bank[i]), int(d.row[i]),
                int(d.column[i]), 0)
        assert got == want, f"{amap} {a:#x}: rtl {got} model {want}"


@cocotb.test()
async def out_of_range_is_an_error(dut):
    for a in (GEO.capacity_bytes, GEO.capacity_bytes + 64, (1 << 40) - 1):
        dut.addr_i.value = a
        await Timer(1, "ns")
        assert dut.err_o.value == 1, f"{a:#x} must raise err_o"


@pytest.mark.rtl
@pytest.mark.parametrize("amap", range(len(ADDRESS_MAPS)), ids=ADDRESS_MAPS)
def test_ddr5_addr_map(amap):
    from cocotb_runner import run_cocotb

    run_cocotb("nelssa_ddr5_addr_map", "test_ddr5_addr_map",
               parameters={"AddressMap": amap},
               sources=[RTL_ROOT / "mem" / "nelssa_ddr5_addr_map.sv"])
