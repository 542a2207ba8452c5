"""Short runs of the port-message fuzzer (tests/fuzz/cxl_mem.py): CXL.mem and MMIO requests of
any channel, opcode, tag, address, byte enables and length, on ``model`` and on ``rtl``."""

from __future__ import annotations

import pytest
from hypothesis import given

from nelssa.driver import cxl
from tests.fuzz import cxl_mem
from tests.fuzz.oracle import Kind, explain
from tests.fuzz.targets import short_settings

pytestmark = pytest.mark.usefixtures("fuzz_quiet")


@short_settings(100)
@given(cxl_mem.message_cases())
def test_port_messages_on_model(case: cxl_mem.MessageCase) -> None:
    findings = cxl_mem.run_message_case(case, "model")
    assert not findings, explain(findings)


@pytest.mark.rtl
@short_settings(40, deadline_s=300)
@given(cxl_mem.message_cases(max_messages=12))
def test_port_messages_on_rtl_match_the_reference_and_the_model(
        rtl_built, case: cxl_mem.MessageCase) -> None:
    findings = cxl_mem.run_message_case(case, "rtl")
    assert not findings, explain(findings)


def test_a_write_of_an_undefined_opcode_served_is_caught(monkeypatch) -> None:
    """The oracle holds the device to the reference: an RwD of opcode 7 must be refused."""
    monkeypatch.setattr(cxl, "opcode_defined", lambda channel, opcode: True)
    msg = cxl.build_message(cxl.Channel.M2S_RWD, {"opcode": 7, "tag": 1, "addr": 0x4000,
                                                  "byte_enable": cxl.FULL_LINE,
                                                  "data": b"\x55" * 64})
    found = cxl_mem.run_message_case(cxl_mem.MessageCase((msg,)), "model")
    assert Kind.WRONG in {f.kind for f in found}
    assert any("answer to message 0" in f.what for f in found)
