"""Port messages, descriptors, completions and the register map: literal bytes both ways, and the
generated SV package agrees with them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from construct import ConstError, EnumIntegerString, StreamError

from nelssa import gen
from nelssa.driver import cxl, formats, regs


def test_mem_rd_bytes():
    raw = bytes.fromhex("00" "01" "3412" "4000000000000000")
    assert cxl.mem_rd(0x1234, 0x40) == raw
    m = cxl.MESSAGE.parse(raw)
    assert int(m.channel) == cxl.Channel.M2S_REQ and m.body.tag == 0x1234 and m.body.addr == 0x40


def test_partial_write_bytes():
    data = bytes(range(64))
    raw = bytes.fromhex("01" "02" "0700" "8000000000000000" "0f00000000000000") + data
    assert cxl.mem_wr(7, 0x80, data, 0xF) == raw
    body = cxl.MESSAGE.parse(raw).body
    assert int(body.opcode) == cxl.M2SRwDOpcode.MEM_WR_PTL and body.byte_enable == 0xF
    # all enables set: a full-line write
    assert cxl.mem_wr(7, 0x80, data)[1] == cxl.M2SRwDOpcode.MEM_WR


def test_responses_and_mmio_bytes():
    ndr = bytes.fromhex("02" "00" "0900" "01")
    m = cxl.MESSAGE.parse(ndr)
    assert int(m.body.status) == cxl.RspStatus.ADDR_ERROR and m.body.tag == 9
    assert cxl.MESSAGE.build({"channel": cxl.Channel.S2M_NDR, "body": {
        "opcode": cxl.S2MNdrOpcode.CMP, "tag": 9, "status": cxl.RspStatus.ADDR_ERROR}}) == ndr
    assert cxl.mmio_wr(2, 0x4C, 5) == bytes.fromhex("04" "01" "0200" "4c000000" "05000000")
    rsp = bytes.fromhex("05" "0300" "00" "efbeadde")
    assert cxl.MESSAGE.parse(rsp).body.value == 0xDEADBEEF
    assert cxl.mmio_rsp(3, 0xDEADBEEF) == rsp


def test_opcode_error_responses_bytes():
    """The answers to requests with undefined opcodes (issue 20, defect 7)."""
    assert cxl.mmio_rsp(0x72, 0xFFFF_FFFF, cxl.RspStatus.OPCODE_ERROR) == bytes.fromhex(
        "05" "7200" "02" "ffffffff")
    ndr = bytes.fromhex("02" "00" "0302" "02")
    assert int(cxl.MESSAGE.parse(ndr).body.status) == cxl.RspStatus.OPCODE_ERROR
    assert cxl.build_message(cxl.Channel.S2M_NDR, {
        "opcode": cxl.S2MNdrOpcode.CMP, "tag": 0x203, "status": cxl.RspStatus.OPCODE_ERROR}) == ndr
    drs = bytes.fromhex("03" "00" "ff01" "02") + bytes(64)
    body = cxl.parse_message(drs).body
    assert (body.tag, body.status, body.data) == (0x1FF, cxl.RspStatus.OPCODE_ERROR, bytes(64))
    assert cxl.MESSAGE.build(cxl.MESSAGE.parse(drs)) == drs
    # which opcodes each request channel defines
    assert [op for op in range(256) if cxl.opcode_defined(cxl.Channel.MMIO_REQ, op)] == [0, 1]
    assert [op for op in range(256) if cxl.opcode_defined(cxl.Channel.M2S_REQ, op)] == [1]
    assert [op for op in range(256) if cxl.opcode_defined(cxl.Channel.M2S_RWD, op)] == [1, 2]
    assert not cxl.opcode_defined(cxl.Channel.S2M_NDR, 0)


def test_truncated_message_is_rejected():
    with pytest.raises(StreamError):
        cxl.MESSAGE.parse(bytes.fromhex("00" "01" "3412" "40"))
    with pytest.raises(StreamError, match="port message of 5 bytes on channel M2S_REQ"):
        cxl.parse_message(bytes.fromhex("00" "01" "3412" "40"))
    with pytest.raises(StreamError, match="unknown channel 9"):
        cxl.parse_message(bytes.fromhex("09" "01" "3412" "40"))


def test_compiled_path_equals_the_struct():
    for raw in (cxl.mem_rd(0x1234, 0x40), cxl.mem_wr(7, 0x80, bytes(range(64)), 0xF0),
                cxl.mmio_rd(3, 0x10), cxl.mmio_wr(4, 0x14, 0xDEADBEEF),
                bytes.fromhex("02" "00" "0500" "01"), bytes.fromhex("05" "0900" "02" "78563412")):
        slow, fast = cxl.MESSAGE.parse(raw), cxl.parse_message(raw)
        assert int(slow.channel) == int(fast.channel)
        assert {k: int(v) if isinstance(v, EnumIntegerString) else v
                for k, v in slow.body.items() if k != "_io"} == dict(fast.body)
        assert cxl.MESSAGE.build(slow) == raw
        assert cxl.build_message(cxl.Channel(fast.channel), fast.body) == raw
    rng = np.random.default_rng(1)
    for _ in range(200):  # random field values: both paths give the same bytes
        body = {"opcode": 1, "tag": int(rng.integers(0, 1 << 16)),
                "addr": int(rng.integers(0, 1 << 63)), "byte_enable": int(rng.integers(0, 1 << 63)),
                "data": rng.bytes(64)}
        assert (cxl.build_message(cxl.Channel.M2S_RWD, body)
                == cxl.MESSAGE.build({"channel": cxl.Channel.M2S_RWD, "body": body}))


def test_descriptor_bytes():
    raw = bytes.fromhex(
        "01" "00" "8000" "04" "00" "0300" "2a000000" "10000000"
        "0010000000000000" "0020000000000000" "0030000000000000" "0040000000000000"
        "f304353e" + "00" * 12)
    d = formats.DESCRIPTOR.parse(raw)
    assert (d.opcode, d.head_dim, d.q_heads, d.num_ids, d.desc_id) == (1, 128, 4, 3, 42)
    assert (d.num_clusters, d.q_addr, d.dir_addr, d.ids_addr, d.out_addr) == (
        16, 0x1000, 0x2000, 0x3000, 0x4000)
    assert d.scale == 0x3E3504F3  # fp32 1/sqrt(8)
    assert formats.DESCRIPTOR.build(d) == raw


def test_completion_and_cluster_entry_bytes():
    raw = bytes.fromhex("04030201" "05" "01" "0b0a" + "00" * 8)
    c = formats.COMPLETION.parse(raw)
    assert (c.desc_id, c.status, c.phase, c.sq_head) == (0x01020304, 5, 1, 0x0A0B)
    assert formats.COMPLETION.build(c) == raw
    with pytest.raises(ConstError):
        formats.COMPLETION.parse(raw[:8] + b"\x01" + raw[9:])  # reserved must be zero
    e = bytes.fromhex("0010000000000000" "1000" + "00" * 6)
    assert formats.CLUSTER_ENTRY.build({"kv_addr": 0x1000, "tokens": 16}) == e
    rec = np.zeros(2, formats.CLUSTER_ENTRY_DTYPE)
    rec["kv_addr"], rec["tokens"] = [0x1000, 0xFFFF_FFFF_FFC0], [16, 64]
    assert rec.tobytes() == e + formats.CLUSTER_ENTRY.build({"kv_addr": 0xFFFF_FFFF_FFC0,
                                                             "tokens": 64})


def test_register_map():
    assert regs.offset("SQ_TAIL") == 0x4C
    with pytest.raises(KeyError, match="NOPE"):
        regs.offset("NOPE")
    caps = regs.pack_caps(4, 8, (64, 128), 64)
    assert regs.unpack_caps(caps) == {"engines": 4, "max_qheads": 8, "head_dims": (64, 128),
                                      "max_cluster_tokens": 64}
    for r in regs.REGISTERS:
        if r.name.endswith("_LO"):
            assert regs.BY_NAME[r.name[:-3] + "_HI"].offset == r.offset + 4


def test_sv_package_carries_the_map():
    text = gen.DEV_PKG_PATH.read_text()
    for r in regs.REGISTERS:
        assert f"REG_{r.name} = 12'h{r.offset:03X};" in text
    for s in formats.DescStatus:
        assert f"DESC_{s.name} = 8'd{s.value}" in text
    assert "DESC_SCALE_OFF = 48;" in text


def test_ring_problem_names_the_first_bad_register():
    good = {"REGION_BASE": 1 << 20, "REGION_LIMIT": 1 << 40, "SQ_BASE": 1 << 20,
            "SQ_SIZE": 16, "CQ_BASE": (1 << 20) + 1024, "CQ_SIZE": 65536}
    mem = 1 << 36
    assert regs.ring_problem(good, mem) is None  # the limit beyond memory: memory ends it
    for change, message in (
            ({"SQ_SIZE": 0}, "SQ_SIZE 0 is not a power of two in 2..65536"),
            ({"CQ_SIZE": 1 << 17}, "CQ_SIZE 131072 is not a power of two"),
            ({"CQ_SIZE": 24}, "CQ_SIZE 24"),
            ({"SQ_BASE": (1 << 20) + 8}, "SQ_BASE 0x100008 is not 64-byte aligned"),
            ({"CQ_BASE": mem - 64}, r"CQ ring \[0xfffffffc0, 0x10000fffc0\) is not inside"),
            ({"SQ_BASE": (1 << 64) - 512}, "SQ ring"),  # its end wraps 64 bits
            ({"REGION_BASE": (1 << 20) + 64}, r"SQ ring .* region \[0x100040,"),
            ({"REGION_LIMIT": 1 << 20}, "SQ ring")):
        problem = regs.ring_problem({**good, **change}, mem)
        assert problem is not None and re.search(message, problem), (change, problem)
