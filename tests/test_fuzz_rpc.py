"""Short run of the device-call fuzzer (tests/fuzz/rpc.py) against a real `nelssa device serve`
process, held to a model device in this process that gets the same accepted calls."""

from __future__ import annotations

import pytest
from hypothesis import given

from nelssa.driver.remote import RpcOp
from tests.fuzz import rpc
from tests.fuzz.oracle import Kind, explain
from tests.fuzz.targets import quiet, short_settings


@pytest.fixture(scope="module")
def server():
    s = rpc.DeviceServer()
    yield s
    s.close()


@short_settings(60)
@given(rpc.rpc_cases())
def test_device_calls_against_a_device_server(server: rpc.DeviceServer,
                                              case: rpc.RpcCase) -> None:
    with quiet():
        findings = rpc.run_rpc_case(case, server)
    assert not findings, explain(findings)


def test_a_served_device_that_disagrees_with_the_model_is_caught(server: rpc.DeviceServer,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(rpc, "_local", lambda model, call: (12345, []))
    found = rpc.run_rpc_case(rpc.RpcCase((rpc.Call(RpcOp.CYCLE, 0, ()),)), server)
    assert [f.kind for f in found] == [Kind.WRONG]
