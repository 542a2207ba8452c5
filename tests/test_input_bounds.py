"""Issue 44's input defects: files read with a bound (13), derived times that must be finite
(16), numeric options checked against what the code below takes (17), and the refusals of
item 19. Each refusal is one line naming the option, file or field, exit status 2, nothing left
behind (``_refused`` of test_inputs)."""

from __future__ import annotations

import argparse
import json
import os
import threading
from pathlib import Path

import pytest
from test_inputs import OK, SERVE, _refused, _trace

from nelssa.cli import build_parser
from nelssa.emu.files import InputFileError, read_bytes, read_lines
from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.serving.workload import TraceError, load_trace
from nelssa.host.gpu.request import DecodeConfig

CAPPED_S = 20
"""A refusal of an endless or huge file comes at once; a hang would take far longer."""


def _bounded_run(fn, *args):
    """Run ``fn`` in a thread and fail if it does not end in CAPPED_S (a hang, not a refusal)."""
    out: dict = {}

    def go() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(CAPPED_S)
    assert not t.is_alive(), f"{fn.__name__}{args} did not end in {CAPPED_S} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


# -- 13: unbounded reads ----------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    ([*SERVE, "--trace", "/dev/zero", "--limit", "5"], ["--trace", "/dev/zero",
                                                         "character device"]),
    ([*SERVE, "--trace", "t.jsonl", "--hardware", "/dev/zero"],
     ["--hardware", "/dev/zero", "character device"]),
    (["crossover", "--hardware", "/dev/zero"], ["--hardware", "/dev/zero", "character device"]),
    (["sweep", "/dev/zero"], ["spec", "/dev/zero", "character device"]),
    (["node", "status", "--curve-server-key", "/dev/zero"], ["--curve-server-key",
                                                             "character device"]),
    (["fpga", "probe", "--bar", "b", "--manifest", "/dev/zero"],
     ["--manifest", "character device"]),
])
def test_character_devices_are_refused_by_option(capsys, work: Path, argv, words) -> None:
    (work / "t.jsonl").write_text(OK + "\n")
    _bounded_run(_refused, capsys, work, argv, *words)


def test_a_fifo_is_refused_without_waiting_for_a_writer(capsys, work: Path) -> None:
    os.mkfifo(work / "f.jsonl")
    _bounded_run(_refused, capsys, work, [*SERVE, "--trace", "f.jsonl"], "--trace", "FIFO")
    with pytest.raises(TraceError, match="FIFO"):
        _bounded_run(load_trace, work / "f.jsonl")


def test_the_loaders_refuse_devices_themselves(work: Path) -> None:
    """A path that reaches a loader without the option's check (a sweep spec's trace, a
    model entry's config) is refused by the loader."""
    with pytest.raises(TraceError, match="/dev/zero is a character device"):
        _bounded_run(load_trace, "/dev/zero", 5)
    with pytest.raises(ValueError, match="/dev/zero is a character device"):
        _bounded_run(HardwareCatalog.load, "/dev/zero")
    (work / "hw.json").write_text(json.dumps({"models": {"m": {"config": "/dev/zero"}}}))
    with pytest.raises(ValueError, match="/dev/zero is a character device"):
        _bounded_run(HardwareCatalog.load, work / "hw.json")


def test_a_huge_sparse_file_is_refused_by_size(work: Path) -> None:
    big = work / "big.jsonl"
    with big.open("wb") as f:
        f.truncate(2 << 30)  # 2 GiB of holes: no disk, and no memory when refused by size
    with pytest.raises(TraceError, match=r"big.jsonl is 2048 MiB, more than the 1024 MiB"):
        _bounded_run(load_trace, big)
    hw = work / "big.json"
    os.link(big, hw)
    with pytest.raises(ValueError, match=r"big.json is 2048 MiB, more than the 16 MiB"):
        _bounded_run(HardwareCatalog.load, hw)


def test_an_endless_line_is_refused_by_its_number(work: Path) -> None:
    p = _trace(work, OK, b"{" + b" " * (2 << 20) + b"}")
    with pytest.raises(TraceError, match=r"t.jsonl:2: the line is longer than 1 MiB"):
        load_trace(p)


def test_the_reader_bounds_what_it_holds(tmp_path: Path) -> None:
    p = tmp_path / "x"
    p.write_bytes(b"a\n" * 10)
    assert read_bytes(p, "x", 20) == b"a\n" * 10
    with pytest.raises(InputFileError, match=r"x .*x is 20 bytes, more than the 19 bytes"):
        read_bytes(p, "x", 19)
    assert [n for n, _ in read_lines(p, "x", 20, 1)] == list(range(1, 11))
    p.write_bytes(b"ab\n")
    with pytest.raises(InputFileError, match=":1: the line is longer than 1 bytes"):
        list(read_lines(p, "x", 20, 1))
    # /proc files say size 0: the read itself is bounded
    with pytest.raises(InputFileError, match="more than the 4 bytes"):
        read_bytes("/proc/self/status", "status", 4)


# -- 16: derived times must be finite ---------------------------------------------------------
GPU = {"hbm_gbs": 1000, "memory_gb": 80, "bf16_tflops": 500}


@pytest.mark.parametrize("field, value, derived", [
    ("attn_efficiency", 5e-324, "bf16_tflops x attn_efficiency"),
    ("linear_efficiency", 5e-324, "bf16_tflops x linear_efficiency"),
    ("mem_efficiency", 5e-324, "hbm_gbs x mem_efficiency"),
    ("mem_efficiency", 1e-7, "hbm_gbs x mem_efficiency"),
])
def test_efficiencies_that_make_times_infinite_are_refused(capsys, work: Path, field: str,
                                                           value: float, derived: str) -> None:
    (work / "hw.json").write_text(json.dumps({"gpus": {"g": {**GPU, field: value}},
                                              "use": {"gpu": "g"}}))
    trace = _trace(work, OK, OK)
    _refused(capsys, work, [*SERVE, "--trace", str(trace), "--hardware", "hw.json"],
             "hw.json [gpus]", "g", field, derived, "at least 0.001")


def test_rates_below_their_floor_are_refused(capsys, work: Path) -> None:
    (work / "hw.json").write_text(json.dumps({"gpus": {"g": {**GPU, "hbm_gbs": 5e-324}}}))
    _refused(capsys, work, ["crossover", "--hardware", "hw.json"], "hw.json [gpus]", "g",
             "hbm_gbs must be at least 0.001")


# -- 17 and 19: options checked against what the code below takes, at parse time -------------
@pytest.mark.parametrize("argv, words", [
    (["node", "up", "--rtl-layers", "65536"], ["--rtl-layers", "0..65535", "65536"]),
    (["node", "up", "--rtl-layers", "-1"], ["--rtl-layers", "0..65535"]),
    (["node", "up", "--max-write-kv-bytes", str(1 << 40)], ["--max-write-kv-bytes",
                                                             "at most"]),
    (["node", "up", "--max-sessions", str(1 << 40)], ["--max-sessions", "at most"]),
    (["node", "up", "--device-timeout", "1e-300"], ["--device-timeout", "at least 0.001"]),
    (["node", "status", "--timeout", "1e-300"], ["--timeout", "at least 0.001"]),
    (["decode", "--timeout", "1e-300"], ["--timeout", "at least 0.001"]),
    ([*SERVE, "--trace", "t.jsonl", "--devices", "\u0663"], ["--devices", "'\u0663'"]),
    ([*SERVE, "--trace", "t.jsonl", "--limit", "\u0663"], ["--limit", "'\u0663'"]),
    ([*SERVE, "--trace", "t.jsonl", "--rate", "\u0661.5"], ["--rate", "'\u0661.5'"]),
    ([*SERVE, "--trace", "t.jsonl", "--out", "/proc/x"], ["--out", "/proc", "cannot write"]),
    (["crossover", "--plot", "/proc/x.png"], ["--plot", "/proc", "cannot write"]),
    (["crossover", "--json", "/proc/x.json"], ["--json", "/proc", "cannot write"]),
    (["sweep", "t.jsonl", "--out", "/proc/x/y"], ["--out", "/proc", "cannot write"]),
    (["node", "keygen", "/proc/nelssa-keys"], ["/proc", "cannot write"]),
    (["fpga", "fake", "/proc/boards"], ["/proc", "cannot write"]),
])
def test_option_ranges_and_outputs_at_parse_time(capsys, work: Path, argv, words) -> None:
    (work / "t.jsonl").write_text(OK + "\n")
    _refused(capsys, work, argv, *words)


def test_a_rate_too_low_says_what_is_wrong_with_it(capsys, work: Path) -> None:
    trace = _trace(work, OK, OK)
    line = _refused(capsys, work, [*SERVE, "--trace", str(trace), "--rate", "1e-320"],
                    "--rate", "requests/s is too low", "at least 1e-09 requests/s")
    assert "nan" not in line


# -- 8: small things --------------------------------------------------------------------------
def _parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_help_shows_the_options_defaults() -> None:
    missing = []
    checked = 0
    for parser in _parsers(build_parser()):
        text = "".join(parser.format_help().split())  # wrapping may break at hyphens
        for action in parser._actions:
            if (not action.option_strings or action.help == argparse.SUPPRESS
                    or action.default in (None, False, argparse.SUPPRESS, [])):
                continue
            checked += 1
            shown = parser._get_formatter()._expand_help(action)
            if "default" not in shown or "".join(shown.split()) not in text:
                missing.append(f"{parser.prog} {action.option_strings[0]}")
    assert checked > 50
    assert not missing, missing


def test_decode_chunk_is_the_serving_sides() -> None:
    args = build_parser().parse_args(["decode"])
    assert args.chunk == Sparsity().chunk_tokens == DecodeConfig().chunk == 1024
