"""Short run of the node-request fuzzer (tests/fuzz/node.py) against a real node (`nelssa node
up --backend model`, two device processes): an owner's session, a stranger on another
connection, spoiled payloads, far-future times, unknown operations."""

from __future__ import annotations

import pytest
from hypothesis import given

from nelssa.host.pnm_node.protocol import NodeOp
from tests.fuzz import node
from tests.fuzz.oracle import explain
from tests.fuzz.targets import quiet, short_settings


@pytest.fixture(scope="module")
def running():
    n = node.NodeUnderTest()
    yield n
    n.close()


@short_settings(25, deadline_s=120)
@given(node.node_cases())
def test_node_requests_from_an_owner_and_a_stranger(running: node.NodeUnderTest,
                                                    case: node.NodeCase) -> None:
    with quiet():
        findings = node.run_node_case(case, running)
    assert not findings, explain(findings)


def test_a_stranger_on_the_owners_session_is_refused(running: node.NodeUnderTest) -> None:
    w = node.Workload(3, 128, 4, (3, 5, 7, 9, 2, 1), (0, 2, 4))
    actions = tuple(node.Action("stranger", op, "victim", {"layer": 0})
                    for op in (NodeOp.ATTEND, NodeOp.WRITE_KV, NodeOp.FREE_KV,
                               NodeOp.CLOSE_SESSION))
    with quiet():
        assert node.run_node_case(node.NodeCase(w, actions), running) == []


def test_payload_reference() -> None:
    """What the oracle calls malformed: the protocol's structs, whole."""
    from nelssa.host.pnm_node import protocol as p

    good = p.SESSION_REQ.build({"session": 5})
    assert node.parses(NodeOp.CLOSE_SESSION, good)
    assert not node.parses(NodeOp.CLOSE_SESSION, good[:-1])
    assert not node.parses(NodeOp.CLOSE_SESSION, good + b"\x00")
