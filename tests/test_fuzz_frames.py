"""Short run of the link-frame fuzzer (tests/fuzz/frames.py) against a real LinkServer: damaged
and well-formed frames of every kind, duplicates, gaps, floors, far-future times."""

from __future__ import annotations

import pytest
from hypothesis import given

from nelssa.emu.link.frame import FrameKind
from tests.fuzz import frames
from tests.fuzz.oracle import Kind, explain
from tests.fuzz.targets import quiet, short_settings


@pytest.fixture(scope="module")
def server():
    with quiet():
        s = frames.FrameServer()
        yield s
        s.close()


@short_settings(120)
@given(frames.frame_cases())
def test_frames_against_a_link_server(server: frames.FrameServer,
                                      case: frames.FrameCase) -> None:
    with quiet():
        findings = frames.run_frame_case(case, server)
    assert not findings, explain(findings)


def test_a_request_run_twice_is_caught(server: frames.FrameServer, monkeypatch) -> None:
    """The oracle counts handler runs: a server that forgot duplicates would be caught."""
    one = frames.RawFrame(FrameKind.REQUEST, 1, 1, 0, 0, b"ab")
    ref = frames.Reference()
    assert [e.kind for e in ref.frame(one)] == [FrameKind.REPLY]
    assert ref.frame(one)[0].replay == 1 and ref.runs == 1
    monkeypatch.setattr(frames.Reference, "frame", lambda self, f: [])
    with quiet():
        found = frames.run_frame_case(frames.FrameCase((one,)), server)
    assert {f.kind for f in found} == {Kind.WRONG}


def test_a_refusal_naming_a_frame_that_ran_is_not_its_answer(server: frames.FrameServer) -> None:
    """A damaged frame that claims the sequence number of one that ran is refused with that
    number as its hint; a later duplicate must get the run's answer, not the refusal (found by
    a 100,000-frame campaign: 8 false findings)."""
    top = frames.SEQ_TOP - 1
    case = frames.FrameCase((
        frames.RawFrame(0, 1, top + 1, top + 1, 0, b""),  # unknown kind: refused
        frames.RawFrame(FrameKind.DATA, 1, top, top, 0, b""),  # runs
        frames.RawFrame(0, 1, top, 0, 0, b""),  # refused, hint: top
        frames.RawFrame(FrameKind.DATA, 1, top, top, 0, b""),  # duplicate: the run's answer
    ))
    with quiet():
        assert frames.run_frame_case(case, server) == []
