"""Device address maps: bijective, the locality each promises, and no silent wrap."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.ddr5_addr import ADDRESS_MAPS, DeviceGeometry, decode, encode
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON

GEO = DeviceGeometry(DDR5_6400_MICRON)


def test_capacity_is_64_gib():
    assert GEO.capacity_bytes == 64 * 2**30


@pytest.mark.parametrize("amap", ADDRESS_MAPS)
def test_round_trip(amap):
    rng = np.random.default_rng(1)
    lines = rng.integers(0, GEO.capacity_bytes // 64, 200_000) * 64
    d = decode(lines, GEO, amap)
    assert np.array_equal(encode(d, GEO, amap), lines)
    assert d.subchannel.max() < 8 and d.bank_group.max() < 8 and d.bank.max() < 4
    assert d.column.max() < 64 and d.row.max() < 65536


@pytest.mark.parametrize("amap", ADDRESS_MAPS)
def test_bijective_on_a_window(amap):
    lines = np.arange(0, 1 << 22, dtype=np.int64) * 64
    d = decode(lines, GEO, amap)
    key = (((d.subchannel * 8 + d.bank_group) * 4 + d.bank) * 65536 + d.row) * 64 + d.column
    assert np.unique(key).size == lines.size


def test_cacheline_spreads_consecutive_lines():
    d = decode(np.arange(64) * 64, GEO, "cacheline")
    assert np.array_equal(d.subchannel[:8], np.arange(8))
    assert np.array_equal(d.bank_group[::8], np.arange(8))


def test_row_map_keeps_a_4kb_block_in_one_row():
    d = decode(8192 * 5 + np.arange(64) * 64, GEO, "row")
    assert len({(int(s), int(g), int(b), int(r)) for s, g, b, r in
                zip(d.subchannel, d.bank_group, d.bank, d.row, strict=True)}) == 1


def test_mop4_spreads_row_strides_over_banks():
    stride = 8 * 8 * 64 * 4 * 64  # one row step with everything else equal (cacheline map)
    d = decode(np.arange(32) * stride, GEO, "mop4")
    assert len(set(zip(d.bank_group.tolist(), d.bank.tolist(), strict=True))) == 32


def test_out_of_range_is_an_error_not_a_wrap():
    with pytest.raises(ValueError, match="address 0x1000000000 outside the device"):
        decode([0, GEO.capacity_bytes], GEO)
    with pytest.raises(ValueError, match="outside the device"):
        decode([-64], GEO)
    with pytest.raises(ValueError, match="unknown address map 'xor'"):
        decode([0], GEO, "xor")
