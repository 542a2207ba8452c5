"""Short run of the link-frame fuzzer (emu/fuzz/frames.py) against a real LinkServer: damaged
and well-formed frames of every kind, duplicates, gaps, floors, far-future times."""

from __future__ import annotations

import pytest
from hypothesis import given

from nelssa.emu.fuzz import frames
from nelssa.emu.fuzz.oracle import Kind, explain
from nelssa.emu.fuzz.targets import quiet, short_settings
from nelssa.emu.link.frame import FrameKind


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
