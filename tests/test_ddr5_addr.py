"""Device address maps: bijective, the locality each promises, and no silent wrap."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model.ddr5_addr import ALL_ADDRESS_MAPS, DeviceGeometry, decode, encode
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON

GEO = DeviceGeometry(DDR5_6400_MICRON)


def test_capacity_is_64_gib():
    assert GEO.capacity_bytes == 64 * 2**30


@pytest.mark.parametrize("amap", ALL_ADDRESS_MAPS)
def test_round_trip(amap):
    rng = np.random.default_rng(1)
    lines = rng.integers(0, GEO.capacity_bytes // 64, 200_000) * 64
    d = decode(lines, GEO, amap)
    assert np.array_equal(encode(d, GEO, amap), lines)
    assert d.subchannel.max() < 8 and d.bank_group.max() < 8 and d.bank.max() < 4
    assert d.column.max() < 64 and d.row.max() < 65536


@pytest.mark.parametrize("amap", ALL_ADDRESS_MAPS)
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


# Ramulator 2's MOP4CLXOR, coordinates worked out by hand from its formula (linear_mappers.cpp):
# line = addr >> 6; col = line[1:0]; then channel, bank group, bank, col[5:2], row; then each
# level that has bits is XORed with the next of the column's bits, lowest first.
# One sub-channel (Ramulator's one-channel runs): bg = line[4:2], bank = line[6:5],
# col[5:2] = line[10:7], row = line >> 11; bg ^= col[2:0], bank ^= col[4:3], row ^= col[5].
MOP4CLXOR_ONE_SUBCHANNEL = {  # addr: (sub-channel, bank group, bank, row, column)
    0x0: (0, 0, 0, 0, 0),
    0x40: (0, 1, 0, 0, 1),        # col0 -> bg0
    0x80: (0, 2, 0, 0, 2),        # col1 -> bg1
    0x100: (0, 1, 0, 0, 0),       # bank-group bit itself, column 0: no XOR
    0x2000: (0, 4, 0, 0, 4),      # col2 -> bg2
    0x4000: (0, 0, 1, 0, 8),      # col3 -> bank0
    0x8000: (0, 0, 2, 0, 16),     # col4 -> bank1
    0x10000: (0, 0, 0, 1, 32),    # col5 -> row0
    0x800: (0, 0, 1, 0, 0),       # bank bit itself, column 0: no XOR
    # line 7638 = row 3 | col[5:2] 1011 | bank 10 | bg 101 | col[1:0] 10: col 46 (101110),
    # bg 101 ^ 110 = 011, bank 10 ^ 01 = 11, row 11 ^ 1 = 10
    0x77580: (0, 3, 3, 2, 46),
    0x1FFFE0000: (0, 0, 0, 0xFFFF, 0),
    0x1FFFF0000: (0, 0, 0, 0xFFFE, 32),
}
# Eight sub-channels: sc = line[4:2], bg = line[7:5], bank = line[9:8], col[5:2] = line[13:10],
# row = line >> 14; sc ^= col[2:0], bg ^= col[5:3]; bank and row keep theirs (no column bits
# left for them).
MOP4CLXOR_EIGHT_SUBCHANNELS = {
    0x40: (1, 0, 0, 0, 1),        # col0 -> sc0
    0x80: (2, 0, 0, 0, 2),        # col1 -> sc1
    0x10000: (4, 0, 0, 0, 4),     # col2 -> sc2
    0x20000: (0, 1, 0, 0, 8),     # col3 -> bg0
    0x40000: (0, 2, 0, 0, 16),    # col4 -> bg1
    0x80000: (0, 4, 0, 0, 32),    # col5 -> bg2
    0x4000: (0, 0, 1, 0, 0),      # bank bit: no XOR
    0x4: (0, 0, 0, 0, 0),         # inside a line
    # line 88925 = row 5 | col[5:2] 0110 | bank 11 | bg 010 | sc 111 | col[1:0] 01: col 25
    # (011001), sc 111 ^ 001 = 110, bg 010 ^ 011 = 001
    0x56D740: (6, 1, 3, 5, 25),
}


@pytest.mark.parametrize(("subchannels", "table"), [(1, MOP4CLXOR_ONE_SUBCHANNEL),
                                                    (8, MOP4CLXOR_EIGHT_SUBCHANNELS)])
def test_mop4clxor_is_ramulators_map_on_literal_addresses(subchannels, table):
    geo = DeviceGeometry(DDR5_6400_MICRON, subchannels)
    addrs = np.array(list(table), dtype=np.int64)
    d = decode(addrs, geo, "mop4clxor")
    got = list(zip(*(x.tolist() for x in (d.subchannel, d.bank_group, d.bank, d.row,
                                           d.column)), strict=True))
    assert dict(zip(table, got, strict=True)) == table
    assert np.array_equal(encode(d, geo, "mop4clxor"), addrs & ~63)


def test_mop4clxor_is_not_mop4():
    """The two maps agree on few random lines (issue 23: the comparison ran on different maps)."""
    rng = np.random.default_rng(3)
    lines = rng.integers(0, GEO.capacity_bytes // 64, 20_000) * 64
    a, b = decode(lines, GEO, "mop4"), decode(lines, GEO, "mop4clxor")
    same = np.ones(lines.size, bool)
    for f in ("subchannel", "bank_group", "bank", "row", "column"):
        same &= getattr(a, f) == getattr(b, f)
    assert same.mean() < 0.05


def test_out_of_range_is_an_error_not_a_wrap():
    with pytest.raises(ValueError, match="address 0x1000000000 outside the device"):
        decode([0, GEO.capacity_bytes], GEO)
    with pytest.raises(ValueError, match="outside the device"):
        decode([-64], GEO)
    with pytest.raises(ValueError, match="unknown address map 'xor'"):
        decode([0], GEO, "xor")
