"""The command line: the device demo and decode end to end, serve-sim and crossover, and argument
checks."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_helpers import run_cli

from nelssa.cli import COMMANDS, build_parser, main


@pytest.mark.rtl
def test_device_demo_passes():
    proc = run_cli("device", "demo", "--clusters", "12", "--selected", "5", "--qheads", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "O and LSE bit-identical" in proc.stdout and "PASS" in proc.stdout


def test_device_demo_rejects_bad_counts(capsys):
    with pytest.raises(SystemExit):
        main(["device", "demo", "--clusters", "4", "--selected", "9"])
    assert "--selected must be in 1..4, got 9" in capsys.readouterr().err


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory):
    """One `decode` on model devices, in this process (the node and its devices are processes
    of their own), with a temporary folder of its own to find what it leaves there: its
    output, its output folder and what it left (both tests below read this one run)."""
    folder = tmp_path_factory.mktemp("decode")
    tmp = Path(tempfile.mkdtemp(prefix="dt-", dir="/tmp"))  # short: socket paths are limited
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TMPDIR", str(tmp))  # the node's and the devices' (children's)
            mp.setattr(tempfile, "tempdir", str(tmp))  # this process's
            # short prompts of 16..64 tokens (default 64..512): they stay on the GPU tier
            # either way; only their prefill costs less
            proc = run_cli("decode", "--backend", "model", "--devices", "2", "--short", "2",
                           "--short-len", "16..64", "--long", "1", "--long-len", "1100",
                           "--t-input", "1024", "--steps", "3", "--trace",
                           str(folder / "t.json"), "--command-trace", str(folder / "c.csv"),
                           "--plot", str(folder / "p.png"), "--json", str(folder / "run.json"))
        left = list(tmp.rglob("*"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return proc, folder, left


def test_decode_end_to_end_on_model_devices(decode_run):
    """...and leaves nothing in the temporary folder (the node it booted, its socket, its
    devices' folder)."""
    proc, tmp_path, left = decode_run
    trace, plot, run = tmp_path / "t.json", tmp_path / "p.png", tmp_path / "run.json"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert left == []
    out = proc.stdout
    assert "request 2: prompt   1100 tokens -> PNM tier" in out
    assert "request 0: prompt" in out and "GPU tier" in out
    assert "Figure-11 breakdown" in out and "tokens/s" in out
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"GPU node", "link", "PNM node", "device 0", "device 1"} <= tracks
    assert sum(e["ph"] == "X" for e in events) > 20
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --command-trace: each model device's DDR5 commands, per sub-channel, in DRAMPower's CSV,
    # and the part's memspec (tests/test_drampower.py holds the formats)
    from nelssa.hw.model.drampower import read_trace

    for dev in range(2):
        reads = sum(sum(c[1] == 1 for c in read_trace(tmp_path / f"c-dev{dev}-sub{s}.csv")[0])
                    for s in range(8))
        assert reads > 100, dev  # the KV the device served
        assert json.loads((tmp_path / f"c-dev{dev}.memspec.json").read_text())["memspec"]
    _check_counted_ddr5(json.loads(run.read_text())["steps"], tmp_path, 2)
    assert "DDR5 from counted commands in 3 of 3 steps" in out


def _check_counted_ddr5(steps: list[dict], folder: Path, devices: int) -> None:
    """Each step's DDR5 energy is counted: the devices' counters of the step (from the node's
    replies) priced by energy_of_counts, plus the step's idle sub-channel cycles; the counters
    over the steps are each device's own command log (--command-trace), and priced within
    2 % of its command stream walked tCK by tCK."""
    from nelssa.driver.port import DDR5_COUNTERS
    from nelssa.hw.model.ddr5_energy import counts_of_row, energy_of_counts, energy_of_trace
    from nelssa.hw.model.ddr5_power import power_spec
    from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE, BankState
    from nelssa.hw.model.ddr5_timing import PRESETS
    from nelssa.hw.model.drampower import read_trace

    spec, timing = power_spec("ddr5-6400"), PRESETS["ddr5-6400"]  # the default PNM device
    clock_hz = round(1e12 / (timing.tck_ps * TCK_PER_CYCLE))
    totals = {d: [0] * len(DDR5_COUNTERS) for d in range(devices)}
    for step in steps:
        assert step["ddr5_counted"] is True and step["ddr5_uncounted"] == 0
        counted = 0.0
        ran = 0
        for d, row in step["ddr5_counts"].items():
            totals[int(d)] = [a + b for a, b in zip(totals[int(d)], row, strict=True)]
            counted += energy_of_counts(spec, timing, *counts_of_row(row)).total
            ran += sum(row[6:])
        wall = round(step["step_ps"] * 1e-12 * clock_hz)
        idle = step["ddr5_idle_cycles"]
        assert idle == devices * 8 * wall - ran > 0  # no device ran past the step
        refs = idle // 8 * TCK_PER_CYCLE // timing.nREFI * 8
        refreshing = refs * timing.nRFC // TCK_PER_CYCLE
        counted += energy_of_counts(spec, timing, {"REF": refs},
                                    {BankState.PRECHARGED: idle - refreshing,
                                     BankState.REFRESH: refreshing}).total
        assert step["energy"]["ddr5_j"] == pytest.approx(counted, rel=1e-9)
    for d in range(devices):
        logs = [read_trace(folder / f"c-dev{d}-sub{s}.csv") for s in range(8)]
        commands = {c: sum(sum(x[1].name == c for x in cmds) for cmds, _ in logs)
                    for c in DDR5_COUNTERS[:6]}
        assert commands == dict(zip(DDR5_COUNTERS[:6], totals[d][:6], strict=True)), d
        assert sum(totals[d][6:]) == sum(end for _, end in logs) // TCK_PER_CYCLE
        walked = sum((energy_of_trace(spec, timing, [c[:4] for c in cmds], end).total
                      for cmds, end in logs), 0.0)
        assert energy_of_counts(spec, timing, *counts_of_row(totals[d])).total == \
            pytest.approx(walked, rel=0.02)


def test_decode_grow_shows_a_migration(tmp_path):
    # the two short requests of 16..64 tokens (default 64..512): still beside the growing one
    # on the GPU, so its migration still jitters them; only their prefill costs less
    proc = run_cli("decode", "--backend", "model", "--devices", "2", "--short", "2",
                   "--short-len", "16..64", "--long", "0", "--steps", "7", "--grow",
                   "--t-input", "1024", "--trace", str(tmp_path / "t.json"), "--plot",
                   str(tmp_path / "p.png"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "migrating request 2" in out and "migration of request 2 complete" in out
    assert "request 2: migrated while decoding" in out and "the jitter other requests saw" in out
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e["ph"] == "X" and e["name"] == "req 2 KV" for e in events)


@pytest.mark.parametrize("argv, words", [
    (["decode", "--short", "0", "--long", "0"], "nothing to decode"),
    (["decode", "--long-len", "9..3"], "argument --long-len: must be N or LO..HI"),
    (["decode", "--selection", "0"], "argument --selection: must be in (0, 1]"),
    (["decode", "--backend", "rtl", "--command-trace", "/tmp/c.csv"],
     "--command-trace: the model devices of a node this run boots"),
    (["decode", "--backend", "model", "--command-trace", "/no/such/folder/c.csv"],
     "argument --command-trace: folder /no/such/folder does not exist: /no/such/folder/c.csv"),
    (["node", "up", "--attach", "ipc:///tmp/x", "--command-trace", "/tmp/c.csv"],
     "--command-trace: model devices the node starts"),
])
def test_decode_argument_checks(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert words in capsys.readouterr().err


def test_device_serve_command_trace_needs_the_model(capsys, tmp_path):
    assert main(["device", "serve", "--backend", "rtl", "--endpoint",
                 f"ipc://{tmp_path}/d", "--command-trace", str(tmp_path / "c.csv")]) == 2
    assert "--command-trace goes with --backend model" in capsys.readouterr().err


def test_crossover_command(tmp_path):
    proc = run_cli("crossover", "--plot", str(tmp_path / "c.png"), "--json",
                   str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "c.json").read_text())
    assert [r["devices"] for r in rows] == list(range(1, 9))
    assert "L_crossover" in proc.stdout
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    bad = tmp_path / "hw.json"
    bad.write_text('{"pnm": {"prototype": {"bw_eff_gbs": 0}}}')
    proc = run_cli("crossover", "--hardware", str(bad))
    assert proc.returncode == 2 and "missing field 'capacity_gb'" in proc.stderr


def test_serve_sim_command(tmp_path):
    trace = tmp_path / "t.jsonl"
    lines = [json.dumps({"timestamp": i * 200, "input_length": 500 + (i * 997) % 60000,
                         "output_length": 50 + i % 200}) for i in range(300)]
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = run_cli("serve-sim", "--trace", str(trace), "--t-input", "32000", "--out", str(out),
                   "--sweeps", "--prefix-caching", "off")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    lf = res["sweeps"]["long_fraction"]
    assert list(lf) == ["0.0", "0.04", "0.08", "0.12", "0.16", "0.2", "0.24"]
    cb = res["sweeps"]["context_batch"]
    # GPU-only holds 3 requests of 128K on one H100 NVL; throughput grows with batch
    gpu128 = cb["gpu/h100-nvl"]["131072"]
    assert list(gpu128) == ["1", "2", "3"]
    assert gpu128["1"] < gpu128["2"] < gpu128["3"]
    assert cb["gpu/h100-nvl"]["524288"] == {}  # does not fit at all
    assert res["gpu"]["summary"]["requests"] == 300 == res["nelssa"]["summary"]["requests"]
    assert res["nelssa"]["summary"]["pnm_requests"] == sum(
        json.loads(x)["input_length"] >= 32000 for x in lines)
    assert "NELSSA against GPU-only: NELSSA's decode throughput is" in proc.stdout
    assert "(higher is better)" in proc.stdout and "(lower is better)" in proc.stdout
    for png in ("throughput_queue.png", "tpot.png", "ttft.png", "batch_kv.png",
                "fig10_context_batch.png", "fig16_long_fraction.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    trace.write_text(lines[1] + "\n" + lines[0] + "\n")
    proc = run_cli("serve-sim", "--trace", str(trace), "--out", str(out), "--prefix-caching",
                   "off")
    assert proc.returncode == 2 and "t.jsonl:2: timestamp 0 is before" in proc.stderr
    # prefix caching is on by default (as vLLM's) and reads the hash ids
    trace.write_text(lines[0] + "\n")
    proc = run_cli("serve-sim", "--trace", str(trace), "--out", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "t.jsonl:1: missing field 'hash_ids'" in proc.stderr, proc.stderr
    for bad in (["--limit", "0"], ["--t-input", "-5"], ["--rate", "nan"],
                ["--burst", "1", "-2", "100", "10"], ["--devices", "0"]):
        proc = run_cli("serve-sim", "--trace", str(trace), "--out", str(out), *bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (bad, proc.stderr)
        assert bad[0] in proc.stderr, (bad, proc.stderr)


def test_serve_sim_adaptive_options(tmp_path, capsys):
    """--tpot-budget and --adaptive reach the replay (emu/policy): under a backlog of long
    prompts the held budget takes smaller prefill chunks, so decoding requests' steps are
    shorter; the summary reports goodput against the SLO and where T_input went."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 200, "output_length": 300,
                                         "input_length": 60000 if i % 4 == 0 else 2000}) + "\n"
                             for i in range(40)))
    runs = {}
    for name, extra in (("static", []), ("held", ["--tpot-budget", "--adaptive"])):
        out = tmp_path / name
        assert main(["serve-sim", "--trace", str(trace), "--mode", "nelssa", "--out", str(out),
                     "--prefix-caching", "off", *extra]) == 0
        runs[name] = json.loads((out / "results.json").read_text())["nelssa"]["summary"]
        assert "goodput" in capsys.readouterr().out
    static, held = runs["static"], runs["held"]
    assert held["tpot_s"]["p50"] < 0.95 * static["tpot_s"]["p50"]
    assert static["t_input_moves"] == 0 and static["t_input_range"] == [static["t_input"]] * 2
    for s in runs.values():
        g = s["goodput"]
        assert 0 <= g["attainment"] <= 1
        assert g["goodput_rps"] == pytest.approx(g["attainment"] * s["requests"] / s["duration_s"])


def test_decode_json_is_machine_readable(decode_run):
    """`decode --json`: each step's report, each request's tier and outcome, the totals (of
    the run above: two short requests and a long one, three steps)."""
    proc, folder, _ = decode_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = folder / "run.json"
    run = json.loads(out.read_text())
    assert [r["tier"] for r in run["requests"]] == ["gpu", "gpu", "pnm"]
    assert all(r["status"] == "done" and r["generated"] == 4 for r in run["requests"]), run
    assert len(run["steps"]) == 3 and run["steps"][0]["step_ps"] > 0
    assert run["total"]["tokens"] == sum(s["tokens"] for s in run["steps"])
    # each step's energy by component (emu/energy.py); the parts add up to the run's total
    parts = {"gpu_compute_j", "gpu_memory_j", "gpu_idle_j", "pnm_engine_j", "ddr5_j", "cxl_j",
             "roce_j", "pnm_static_j"}
    for step in run["steps"]:
        assert set(step["energy"]) == parts
        assert step["energy"]["pnm_engine_j"] > 0 and step["energy"]["gpu_compute_j"] > 0
        assert step["link_bytes"] > 0 and step["gpu_flops"] > 0
    total = sum(sum(s["energy"].values()) for s in run["steps"])
    assert run["total"]["energy_j"] == pytest.approx(total)
    assert run["total"]["j_per_token"] == pytest.approx(total / run["total"]["tokens"])


def _helps(parser) -> dict[str, str]:
    """Each subcommand's (and sub-subcommand's) --help text, by its words."""
    out = {}
    todo = [((), parser)]
    while todo:
        words, p = todo.pop()
        out[" ".join(words)] = p.format_help()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [((*words, name), sub) for name, sub in action.choices.items()]
    return out


def test_one_command_parser_is_the_whole_ones_part():
    """A process builds only the subcommand it runs (so imports only its modules): that
    subcommand's every --help is the whole parser's, and the top level's refusals (during the
    parse: from the whole parser; after: the commands' checks) are its one-line ones."""
    whole = _helps(build_parser())
    for name in COMMANDS:
        one = _helps(build_parser(name))
        assert set(one) - {""} == {w for w in whole if w.split(" ")[0] == name}
        assert all(one[w] == whole[w] for w in one if w), name
    for argv, err in ((["node", "status", "--bogus"], "unrecognized arguments: --bogus"),
                      (["decode", "--short", "0", "--long", "0"],  # a check after parsing
                       "--short and --long are both 0: nothing to decode")):
        proc = run_cli(*argv)
        assert (proc.returncode, proc.stderr) == (2, f"nelssa: error: {err}\n"), argv


def test_device_serve_and_node_help_import_no_pydantic():
    """`device serve` (each node's device processes) runs without the hardware description's
    pydantic, the serving records or the planner; `node --help` without the decode command's
    modules (it lists the PNM presets, so it reads the description)."""
    probe = ("import sys\nfrom nelssa.cli import main\ntry:\n    main(sys.argv[1:])\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in ('pydantic', 'torch', 'nelssa.emu.serving.records', "
             "'nelssa.plan.search', 'nelssa.cli_decode') if m in sys.modules), file=sys.stderr)")
    gone = subprocess.Popen(["true"])  # the device serves until its parent is not this pid
    gone.wait()
    folder = Path(tempfile.mkdtemp(prefix="cli-", dir="/tmp"))  # short: a socket path
    try:
        serve = ["device", "serve", "--endpoint", f"ipc://{folder}/dev", "--parent-pid",
                 str(gone.pid)]
        for argv, heavy in ((serve, "[]"), (["node", "--help"], "['pydantic']")):
            proc = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True,
                                  text=True, check=True, timeout=120)
            assert proc.stderr.splitlines()[-1] == heavy, (argv, proc.stderr)
            assert argv != serve or "is gone; device exits" in proc.stderr  # it served
    finally:
        shutil.rmtree(folder, ignore_errors=True)
