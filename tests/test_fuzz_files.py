"""Short runs of the file fuzzers (emu/fuzz/files.py): traces through load_trace and a replay,
hardware descriptions through HardwareCatalog.load and the latency model."""

from __future__ import annotations

from hypothesis import given

from nelssa.emu.fuzz import files
from nelssa.emu.fuzz.oracle import Kind, explain
from nelssa.emu.fuzz.targets import short_settings


@short_settings(100)
@given(files.trace_cases())
def test_traces_through_their_loader(case: files.TraceCase) -> None:
    findings = files.run_trace_case(case)
    assert not findings, explain(findings)


@short_settings(150)
@given(files.hardware_cases())
def test_hardware_files_through_their_loader(case: files.HardwareCase) -> None:
    findings = files.run_hardware_case(case)
    assert not findings, explain(findings)


def test_a_bad_file_accepted_is_caught() -> None:
    """The reference's verdicts are what the oracle holds the loaders to."""
    nan = files.TraceLine(b'{"timestamp": NaN, "input_length": 5, "output_length": 2}',
                          files.BAD)
    good = files.TraceLine(b'{"timestamp": 1, "input_length": 5, "output_length": 2}', None,
                           (1.0, 5, 2))
    assert files.run_trace_case(files.TraceCase((good,), False)) == []
    assert files.run_trace_case(files.TraceCase((good, nan), False)) == []
    lying = files.TraceLine(good.text, files.BAD)  # a good line the reference calls bad
    found = files.run_trace_case(files.TraceCase((lying,), False))
    assert [f.kind for f in found] == [Kind.WRONG] and "accepted" in found[0].what
    bad = files.HardwareCase(b'{"links": {"x": {"gbps": true, "latency_us": 1}}}', files.BAD)
    assert files.run_hardware_case(bad) == []
