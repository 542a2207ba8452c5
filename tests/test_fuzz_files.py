"""Short runs of the file fuzzers (tests/fuzz/files.py): traces through load_trace and a replay,
hardware descriptions through HardwareCatalog.load and the latency model."""

from __future__ import annotations

import pytest
from hypothesis import given

from tests.fuzz import files
from tests.fuzz.oracle import Kind, explain
from tests.fuzz.targets import short_settings


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


def test_campaign_pages_are_made_from_the_runs_raw_tallies(tmp_path, capsys) -> None:
    """The fuzz campaign (tests/fuzz/campaign.py, scripts/fuzz.py its command line): two short
    campaigns' --json, one page from both (--page), each row with its run; a file that is not a
    campaign's is refused in one line, exit 2."""
    from tests.fuzz import campaign

    runs = []
    for i, target in enumerate(("traces:20", "hardware:20")):
        raw = tmp_path / f"{i}.json"
        assert campaign.main(["--target", target, "--seed", "3", "--json", str(raw), "--out",
                              "-"]) == 0, capsys.readouterr().err[-2000:]
        runs.append(str(raw))
    page = tmp_path / "fuzz.md"
    assert campaign.main(["--page", *runs, "--out", str(page)]) == 0
    text = page.read_text()
    assert "Run 1: command: `python scripts/fuzz.py --target traces:20" in text
    assert "Run 2: command: `python scripts/fuzz.py --target hardware:20" in text
    rows = [r for r in text.splitlines() if r.startswith("| traces") or r.startswith("| hardware")]
    assert len(rows) == 2 and rows[0].endswith("| 1 |") and rows[1].endswith("| 2 |")
    assert rows[0].split("|")[2].strip().startswith(("20 ", "21 ", "22 "))
    (tmp_path / "bad.json").write_text("[1, 2]")
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        campaign.main(["--page", str(tmp_path / "bad.json")])
    assert bad.value.code == 2 and "--page" in capsys.readouterr().err
