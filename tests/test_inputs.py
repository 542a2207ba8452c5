"""Bad input from files and command lines (issue 20, defect 9): every refusal is one line on
stderr naming the file and line, the field or the option and what is wrong, exit status 2, no
traceback, and nothing left behind; the trace and hardware loaders take any bytes and either
refuse them or give values the emulator can compute with."""

from __future__ import annotations

import csv
import itertools
import json
import math
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nelssa.cli import main
from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog, LinkHw, ModelHw, PnmHw
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.serving.workload import TraceError, load_trace

LINE = '{"timestamp": %s, "input_length": %s, "output_length": %s}'
OK = LINE % (0, 100, 10)


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse
        return int(e.code or 0)


def _listing(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def _refused(capsys: pytest.CaptureFixture[str], work: Path, argv: list[str],
             *words: str) -> str:
    """Run the command line; it must refuse with one line holding ``words``, exit status 2,
    and leave nothing behind."""
    before = _listing(work)
    rc = _main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, (rc, err)
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Traceback" not in err
    assert _listing(work) == before, _listing(work) - before
    return lines[0]


def _trace(work: Path, *lines: str | bytes, name: str = "t.jsonl") -> Path:
    p = work / name
    p.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n"
                           for x in lines))
    return p


SMALL_DECODE = ["decode", "--backend", "model", "--devices", "1", "--short", "1", "--long", "0",
                "--steps", "1"]
"""A decode that is quick even where it is not refused."""
SERVE = ["serve-sim", "--prefix-caching", "off", "--out", "out", "--mode", "gpu"]


# -- traces ----------------------------------------------------------------------------------
@pytest.mark.parametrize("lines, words", [
    ([LINE % ("NaN", 100, 10)], ["t.jsonl:1:", "timestamp must be a finite number >= 0"]),
    ([OK, LINE % ("Infinity", 100, 10)], ["t.jsonl:2:", "timestamp"]),
    ([LINE % ("1" + "0" * 400, 100, 10)], ["t.jsonl:1:", "timestamp must be at most"]),
    ([LINE % ("1e300", 100, 10)], ["t.jsonl:1:", "timestamp must be at most"]),
    ([OK, b'{"timestamp": 0, "input_length": \xff}'], ["t.jsonl:2:", "not UTF-8"]),
    (['{"timestamp": 0, "timestamp": 5, "input_length": 1, "output_length": 1}'],
     ["t.jsonl:1:", "duplicate key 'timestamp'"]),
    (["[" * 100000], ["t.jsonl:1:", "not JSON"]),
    ([LINE % (0, "1" * 5000, 10)], ["t.jsonl:1:", "not JSON"]),
    ([LINE % (0, 100, "1" + "0" * 30)], ["t.jsonl:1:", "output_length must be at most"]),
    ([LINE % (0, 100, 0)], ["t.jsonl:1:", "output_length must be a positive integer, got 0"]),
    ([LINE % (0, 100, "true")], ["t.jsonl:1:", "output_length", "got True"]),
    ([OK, "", "  "], None),
])
def test_trace_lines_are_checked(work: Path, lines: list[str | bytes],
                                 words: list[str] | None) -> None:
    p = _trace(work, *lines)
    if words is None:
        assert len(load_trace(p)) == 1
        return
    with pytest.raises(TraceError) as e:
        load_trace(p)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_trace_files_that_are_not_files(work: Path) -> None:
    with pytest.raises(TraceError, match="is a folder"):
        load_trace(work)
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(work / "nothing.jsonl")
    bom = _trace(work, "\ufeff" + OK, name="bom.jsonl")  # an editor's byte-order mark
    assert load_trace(bom)[0].input_len == 100


@pytest.mark.parametrize("lines, extra, words", [
    ([LINE % ("NaN", 100, 10)], [], ["t.jsonl:1:", "timestamp"]),
    ([LINE % ("Infinity", 100, 10)], [], ["t.jsonl:1:", "timestamp"]),
    ([LINE % ("1e300", 100, 10)], [], ["t.jsonl:1:", "timestamp"]),
    ([LINE % ("1" + "0" * 400, 100, 10)], [], ["t.jsonl:1:", "timestamp"]),
    ([OK, b"\xff\xfe"], [], ["t.jsonl:2:", "not UTF-8"]),
    (["[" * 100000], [], ["t.jsonl:1:", "not JSON"]),
    ([LINE % (0, "1" * 5000, 10)], [], ["t.jsonl:1:", "not JSON"]),
    ([LINE % (0, 2_000_000, 10)], [], ["t.jsonl:1:", "exceed the GPU's KV capacity"]),
    ([OK], ["--limit", "0"], ["--limit", "must be a positive integer, got 0"]),
    ([OK], ["--t-input", "-5"], ["--t-input", "got -5"]),
    ([OK], ["--t-input", "1.5"], ["--t-input", "got '1.5'"]),
    ([OK], ["--burst", "1", "-2", "100", "10"], ["--burst", "COUNT"]),
    ([OK], ["--burst", "-1", "2", "100", "10"], ["--burst", "AT_S"]),
    ([OK], ["--burst", "1e300", "2", "100", "10"], ["--burst", "AT_S must be at most"]),
    ([OK], ["--burst", "1", "1000000000000", "100", "10"], ["--burst", "COUNT must be at most"]),
    ([OK], ["--burst", "1", "2", "100", "1.5"], ["--burst", "OUTPUT"]),
    ([OK], ["--rate", "nan"], ["--rate", "got nan"]),
    ([OK, OK], ["--rate", "1e-300"], ["--rate", "past the 1e+09 s"]),
    ([OK], ["--devices", "0"], ["--devices", "got 0"]),
    ([OK], ["--devices", "1000000000"], ["--devices", "1..1024"]),
    ([OK], ["--selection", "2"], ["--selection", "in (0, 1]"]),
    ([OK], ["--migrate-at", "5"], ["--migrate-at", "in (0, 1]"]),
    ([OK], ["--max-running", "0"], ["--max-running", "got 0"]),
    ([OK], ["--prefill-gpus", "-1"], ["--prefill-gpus", "got -1"]),
    ([OK], ["--seed", "-1"], ["--seed", "got -1"]),
    ([OK], ["--gpu", "x900"], ["--gpu", "unknown gpu 'x900'"]),
    ([OK], ["--hardware", "missing.json"], ["--hardware", "missing.json"]),
    ([OK], ["--out", "t.jsonl"], ["--out", "t.jsonl", "not a folder"]),
])
def test_serve_sim_refusals(capsys: pytest.CaptureFixture[str], work: Path,
                            lines: list[str | bytes], extra: list[str],
                            words: list[str]) -> None:
    trace = _trace(work, *lines)
    _refused(capsys, work, [*SERVE, "--trace", str(trace), *extra], *words)


def test_serve_sim_of_a_folder_or_no_file(capsys: pytest.CaptureFixture[str],
                                          work: Path) -> None:
    (work / "d").mkdir()
    _refused(capsys, work, [*SERVE, "--trace", "d"], "--trace", "d", "folder")
    _refused(capsys, work, [*SERVE, "--trace", "none.jsonl"], "--trace", "none.jsonl")


def test_one_token_outputs_give_undefined_tpot(capsys: pytest.CaptureFixture[str],
                                               work: Path) -> None:
    """Valid input: every output is its first token, so no TPOT exists; both modes run and
    say so, and results.json stays strict JSON (null, not NaN)."""
    trace = _trace(work, LINE % (0, 100, 1), LINE % (10, 200, 1))
    rc = _main(["serve-sim", "--prefix-caching", "off", "--out", "out", "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "TPOT undefined (no request has a second output token)" in out
    assert "ITL undefined (no request has a second output token)" in out
    assert "decode throughput is undefined GPU-only's" in out and "Traceback" not in err

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in results.json")

    res = json.loads((work / "out/results.json").read_text(), parse_constant=refuse)
    for mode in ("gpu", "nelssa"):
        assert res[mode]["summary"]["tpot_s"]["p99"] is None
        assert res[mode]["summary"]["requests"] == 2


def test_serve_sim_leaves_no_output_folder_when_the_run_is_refused(
        capsys: pytest.CaptureFixture[str], work: Path) -> None:
    trace = _trace(work, LINE % (5, 3_000_000, 10))  # its only request: nothing left to run
    _refused(capsys, work, [*SERVE, "--trace", str(trace)], "t.jsonl:1", "KV capacity")
    assert not (work / "out").exists()


def test_one_oversized_request_is_rejected_and_the_run_goes_on(
        capsys: pytest.CaptureFixture[str], work: Path) -> None:
    """Issue 44, item 4: a request no tier can hold is rejected and counted, as vLLM rejects
    it, and the others run (it used to end the run with an error); --max-model-len rejects
    what is longer, as vLLM's option does."""
    trace = _trace(work, OK, LINE % (5, 3_000_000, 10), LINE % (6, 2000, 10),
                   LINE % (7, 100, 10))
    rc = _main([*SERVE, "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "1 requests rejected before the run" in out
    assert "t.jsonl:2: 3000010 tokens exceed the GPU's KV capacity" in out
    summary = json.loads((work / "out/results.json").read_text())["gpu"]["summary"]
    assert summary["requests"] == 3 and summary["rejected"] == 1
    assert summary["goodput"]["attainment"] <= 0.75  # the rejected request missed the SLO
    rc = _main([*SERVE, "--trace", str(trace), "--max-model-len", "1000", "--out", "capped"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "t.jsonl:3: 2010 tokens (prompt 2000 + output 10) exceed --max-model-len 1000" in out
    with (work / "capped/requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["trace_line"], r["status"]) for r in rows] == [
        ("1", "finished"), ("2", "rejected"), ("3", "rejected"), ("4", "finished")]
    assert "exceed --max-model-len 1000" in rows[1]["error"]
    assert float(rows[0]["e2el_s"]) > float(rows[0]["ttft_s"]) > 0


# -- hardware files ---------------------------------------------------------------------------
LINK = '{"links": {"x": {"gbps": %s, "latency_us": 1}}}'


@pytest.mark.parametrize("text, words", [
    (LINK % "true", ["links", "x", "gbps must be a positive number, got True"]),
    (LINK % "NaN", ["gbps must be a positive number, got nan"]),
    (LINK % "Infinity", ["gbps must be a positive number, got inf"]),
    (LINK % "1e-320", ["gbps must be at least"]),
    (LINK % "1e300", ["gbps must be at most"]),
    (LINK % ("1" + "0" * 400), ["gbps must be at most"]),
    (LINK % ("1" * 5000), ["not valid JSON"]),
    ('{"models": {"x": {"layers": 32.0, "kv_heads": 8, "q_heads": 32, "head_dim": 128, '
     '"params_b": 8, "max_context": 1000}}}', ["layers must be a positive integer, got 32.0"]),
    ('{"links": [1, 2]}', ["section 'links' must be an object", "list"]),
    ('{"links": "x"}', ["section 'links' must be an object", "str"]),
    ('{"links": {"x": [1]}}', ["x must be an object, got list"]),
    ('[1]', ["top level must be an object"]),
    ('{"links": {"x": {"gbps": 1, "gbps": 2, "latency_us": 1}}}', ["duplicate key 'gbps'"]),
    ("[" * 100000, ["not valid JSON"]),
    ("", ["not valid JSON"]),
    ('{"links": {"": {"gbps": 1, "latency_us": 1}}}', ["name must be a non-empty string"]),
])
def test_hardware_file_refusals(capsys: pytest.CaptureFixture[str], work: Path, text: str,
                                words: list[str]) -> None:
    f = work / "hw.json"
    f.write_text(text)
    _refused(capsys, work, ["crossover", "--hardware", str(f)], str(f), *words)


def test_hardware_files_that_are_not_files(capsys: pytest.CaptureFixture[str],
                                           work: Path) -> None:
    (work / "b.json").write_bytes(b'{"links": \xff}')
    _refused(capsys, work, ["crossover", "--hardware", "b.json"], "b.json", "not UTF-8")
    (work / "d").mkdir()
    _refused(capsys, work, ["crossover", "--hardware", "d"], "--hardware", "d", "folder")
    with pytest.raises(ValueError, match="is a folder"):
        HardwareCatalog.load(work / "d")


# -- options of every command -----------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["crossover", "--max-devices", "0"], ["--max-devices", "got 0"]),
    (["crossover", "--max-devices", "100000000"], ["--max-devices", "1..1024"]),
    (["crossover", "--plot", "no/such/folder/c.png"], ["--plot", "no/such/folder"]),
    (["crossover", "--json", "no/such/c.json"], ["--json", "no/such"]),
    (["crossover", "--plot", "."], ["--plot", "is a folder"]),
    (["crossover", "--compression", "nan"], ["--compression", "got nan"]),
    (["crossover", "--compression", "1"], ["--compression", "got 1"]),
    (["crossover", "--selection", "0"], ["--selection", "in (0, 1]"]),
    (["crossover", "--link", "nope"], ["--link", "unknown link 'nope'"]),
    (["decode", "--t-input", "-5"], ["--t-input", "got -5"]),
    (["decode", "--t-input", "10"], ["--t-input", "must exceed"]),
    (["decode", "--chunk", "0"], ["--chunk", "got 0"]),
    (["decode", "--timeout", "nan"], ["--timeout", "got nan"]),
    (["decode", "--timeout", "-1"], ["--timeout", "got -1"]),
    (["decode", "--steps", "0"], ["--steps", "got 0"]),
    (["decode", "--devices", "0"], ["--devices", "got 0"]),
    (["decode", "--selection", "nan"], ["--selection", "got nan"]),
    (["decode", "--short-len", "0..5"], ["--short-len", "'0..5'"]),
    (["decode", "--gpu", "x900"], ["--gpu", "x900"]),
    (["decode", "--model", "no/such/model"], ["--model", "no/such/model"]),
    ([*SMALL_DECODE, "--trace", "no/such/t.json"], ["--trace", "no/such"]),
    ([*SMALL_DECODE, "--plot", "no/such/p.png"], ["--plot", "no/such"]),
    (["decode", "--node", "garbage"], ["--node", "'garbage'", "ipc://"]),
    ([*SMALL_DECODE, "--node", "ipc:///no/such/node", "--timeout", "2"],
     ["--node", "ipc:///no/such/node", "nothing is listening"]),
    (["decode", "--seed", "-1"], ["--seed", "got -1"]),
    (["node", "status", "--endpoint", "garbage"], ["--endpoint", "'garbage'"]),
    (["node", "status", "--endpoint", "tcp://127.0.0.1:99999"], ["--endpoint", "port"]),
    (["node", "status", "--timeout", "nan"], ["--timeout", "got nan"]),
    (["node", "status", "--timeout", "0"], ["--timeout", "got 0"]),
    (["node", "status", "--endpoint", "ipc:///no/such/node", "--timeout", "1"],
     ["ipc:///no/such/node", "nothing is listening"]),
    (["node", "stop", "--endpoint", "ipc:///no/such/node", "--timeout", "1"],
     ["ipc:///no/such/node", "nothing is listening"]),
    (["node", "status", "--curve-server-key", "no.key"], ["--curve-server-key", "no.key"]),
    (["node", "up", "--devices", "0"], ["--devices", "got 0"]),
    (["node", "up", "--engines", "0"], ["--engines", "got 0"]),
    (["node", "up", "--backend", "rtl", "--engines", "9"], ["--engines", "1..6"]),
    (["node", "up", "--preset", "nope"], ["--preset", "'nope'"]),
    (["node", "up", "--device-timeout", "inf"], ["--device-timeout", "got inf"]),
    (["node", "up", "--endpoint", "garbage"], ["--endpoint", "'garbage'"]),
    (["node", "up", "--attach", "garbage"], ["--attach", "'garbage'"]),
    (["node", "keygen", "t.jsonl"], ["t.jsonl", "not a folder"]),
    (["node", "keygen", "keys", "--name", "../x"], ["--name", "'../x'"]),
    (["device", "serve", "--engines", "0"], ["--engines", "got 0"]),
    (["device", "serve", "--preset", "nope"], ["--preset", "'nope'"]),
    (["device", "serve", "--endpoint", "garbage"], ["--endpoint", "'garbage'"]),
    (["device", "serve", "--endpoint", "ipc:///no/such/dev"],
     ["--endpoint", "/no/such", "folder"]),
    (["device", "serve", "--parent-pid", "0"], ["--parent-pid", "got 0"]),
    (["device", "demo", "--clusters", "4", "--selected", "9"], ["--selected", "1..4, got 9"]),
    (["device", "demo", "--seed", "-1"], ["--seed", "got -1"]),
    (["demo", "--seed", "-1"], ["--seed", "got -1"]),
    (["demo", "--qheads", "9"], ["--qheads", "got 9"]),
    (["fpga", "fake", "boards", "--boards", "0"], ["--boards", "got 0"]),
    (["fpga", "fake", "boards", "--engines", "16"], ["--engines", "got 16"]),
    (["fpga", "manifest", "--board", "b", "--part", "p", "--build-id", "1", "--mem-bytes",
      "0", "-o", "m.json"], ["--mem-bytes", "got 0"]),
    (["fpga", "manifest", "--board", "b", "--part", "p", "--build-id", "1", "-o",
      "no/such/m.json"], ["--out", "no/such"]),
    (["fpga", "manifest", "--board", "b", "--part", "p", "--build-id", "1", "--bitstream",
      "no/such.bit", "-o", "m.json"], ["--bitstream", "no/such.bit"]),
    (["fpga", "plan", "--board", "alveo-u250", "--vivado", "t.jsonl"],
     ["--vivado", "not a folder"]),
    (["serve-sim"], ["--trace"]),
    (["nope"], ["invalid choice: 'nope'"]),
])
def test_option_refusals(capsys: pytest.CaptureFixture[str], work: Path, argv: list[str],
                         words: list[str]) -> None:
    (work / "t.jsonl").write_text(OK + "\n")
    _refused(capsys, work, argv, *words)


def test_a_second_keygen_keeps_the_first_keys(capsys: pytest.CaptureFixture[str],
                                              work: Path) -> None:
    assert _main(["node", "keygen", "keys"]) == 0
    secret = (work / "keys/node.key_secret").read_bytes()
    capsys.readouterr()
    _refused(capsys, work, ["node", "keygen", "keys"], "keys/node.key", "exists")
    assert (work / "keys/node.key_secret").read_bytes() == secret


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv, words", [
    (["--endpoint", "tcp://0.0.0.0:PORT"], ["not a loopback address"]),
    (["--backend", "rtl", "--endpoint", "tcp://0.0.0.0:PORT"], ["not a loopback address"]),
    (["--endpoint", "ipc:///no/such/folder/node"], ["--endpoint", "/no/such/folder"]),
    (["--curve-secret", "none.key_secret"], ["--curve-secret", "none.key_secret"]),
    (["--curve-secret", "t.jsonl", "--endpoint", "tcp://0.0.0.0:PORT"],
     ["t.jsonl", "not a ZeroMQ certificate"]),
    (["--attach", "ipc:///no/such/device", "--device-timeout", "1", "--endpoint",
      "ipc://WORK/node"], ["--attach", "nothing is listening"]),
    (["--endpoint", "tcp://127.0.0.1:BUSY"], ["--endpoint", "in use"]),
])
def test_node_up_refuses_before_starting_devices(
        capsys: pytest.CaptureFixture[str], work: Path, monkeypatch: pytest.MonkeyPatch,
        argv: list[str], words: list[str]) -> None:
    """Every check `node up` can make comes before it builds or starts a device."""
    import nelssa.emu.launcher
    import nelssa.hw.sim.device

    def started(*_: object, **__: object) -> None:
        raise AssertionError("a device was built or started before the refusal")

    monkeypatch.setattr(nelssa.emu.launcher, "DeviceProcesses", started)
    monkeypatch.setattr(nelssa.hw.sim.device, "build_library", started)
    (work / "t.jsonl").write_text(OK + "\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(_free_port())
        argv = [a.replace("PORT", port).replace("BUSY", str(busy.getsockname()[1]))
                .replace("WORK", str(work)) for a in argv]
        _refused(capsys, work, ["node", "up", "--devices", "1", *argv], *words)


# -- the loaders take anything ----------------------------------------------------------------
NUMBERS = (st.integers() | st.floats() | st.booleans() | st.none()
           | st.sampled_from([0, 1, -1, 1e-320, 1e308, 10 ** 30, 2 ** 63, 0.5, 8.0]))
JSONISH = st.recursive(NUMBERS | st.text(max_size=5),
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(
                           st.text(max_size=4), c, max_size=3), max_leaves=8)
TRACE_LINE = st.fixed_dictionaries(
    {}, optional={"timestamp": NUMBERS | JSONISH, "input_length": NUMBERS | JSONISH,
                  "output_length": NUMBERS | JSONISH,
                  "hash_ids": st.lists(NUMBERS, max_size=4) | JSONISH})


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(TRACE_LINE.map(lambda d: json.dumps(d).encode()) | JSONISH.map(
    lambda d: json.dumps(d).encode()) | st.binary(max_size=20), max_size=5),
       hash_ids=st.booleans(), limit=st.none() | st.integers(1, 3))
def test_trace_loader_takes_any_bytes(fuzz_dir: Path, lines: list[bytes], hash_ids: bool,
                                      limit: int | None) -> None:
    p = fuzz_dir / "fuzz.jsonl"
    p.write_bytes(b"\n".join(lines))
    try:
        reqs = load_trace(p, limit, hash_ids=hash_ids)
    except TraceError as e:
        assert str(e).startswith((f"{p}:", f"trace {p}")), str(e)
        return
    assert 1 <= len(reqs) <= (limit or len(lines))
    last = 0.0
    for r in reqs:
        assert math.isfinite(r.arrival_s) and last <= r.arrival_s <= 1e9
        assert type(r.input_len) is int and type(r.output_len) is int
        assert 1 <= r.input_len < 2 ** 31 and 1 <= r.output_len < 2 ** 31
        last = r.arrival_s
        if hash_ids:
            assert r.hash_ids is not None and all(type(h) is int and 0 <= h < 2 ** 63
                                                  for h in r.hash_ids)


KINDS = {"gpus": GpuHw, "pnm": PnmHw, "links": LinkHw, "models": ModelHw}
ENTRY = st.sampled_from(list(KINDS)).flatmap(lambda k: st.tuples(st.just(k), st.dictionaries(
    st.sampled_from([f.name for f in KINDS[k].__dataclass_fields__.values()
                     if f.name != "name"] + ["other"]), NUMBERS | JSONISH, max_size=9)))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=st.lists(ENTRY, max_size=3), junk=JSONISH, section=st.sampled_from(list(KINDS)))
def test_hardware_loader_takes_anything(fuzz_dir: Path, entries: list[tuple[str, dict]],
                                        junk: object, section: str) -> None:
    """Any file is refused naming it, or loads into descriptions whose latency model gives
    finite times and a finite threshold for every device count."""
    doc: dict[str, dict] = {}
    for kind, entry in entries:
        doc.setdefault(kind, {})[f"e{len(doc.get(kind, {}))}"] = entry
    p = fuzz_dir / "hw.json"
    for text in (json.dumps(doc), json.dumps(junk), json.dumps({section: junk})):
        p.write_text(text)
        try:
            cat = HardwareCatalog.load(p)
        except ValueError as e:
            assert str(p) in str(e), str(e)
            continue
        def loaded(table: dict, preset: str) -> list:  # what the file added, else a preset
            return [v for k, v in table.items() if k.startswith("e")] or [table[preset]]

        for gpu, pnm, model, link in itertools.product(
                loaded(cat.gpus, "h100-nvl"), loaded(cat.pnm, "prototype"),
                loaded(cat.models, "llama-3-8b"), loaded(cat.links, "roce-400g")):
            lm = LatencyModel(gpu, pnm, model, Sparsity(), link)
            for n in (1, 8):
                x = lm.t_input(n)
                assert x is None or (type(x) is int and x >= 1)
                assert math.isfinite(lm.t_comm(n)) and math.isfinite(lm.t_pnm(1 << 20, n))
            assert math.isfinite(lm.t_gpu(1 << 20))
