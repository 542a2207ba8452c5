"""What a serving researcher keeps after a run (issue 44, items 1-4): the resolved configuration
beside the results and no run silently replacing another; per-request records; the metrics of
`vllm bench serve` (ITL, E2EL, throughputs, chosen percentiles, goodput under a given SLO),
ratios that say their direction, overload said; sweeps keyed by their resolved configuration
and merged by key; decode's configuration beside its results."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from nelssa.cli import main
from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.serving.config import MetricsConfig, ServingConfig
from nelssa.emu.serving.itl import expand, timed_replay
from nelssa.emu.serving.metrics import summarize
from nelssa.emu.serving.report import comparison_line, run_line
from nelssa.emu.serving.sim import ServingSim, admit
from nelssa.emu.serving.workload import TraceRequest, load_trace, poisson
from nelssa.provenance import config_hash, run_config
from nelssa.sweep.run import point_keys, run_sweep
from nelssa.sweep.spec import load_spec

TRACE = Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl"
LINE = '{"timestamp": %s, "input_length": %s, "output_length": %s}'


def _pnm(bw: float) -> str:
    """A hardware file redefining the prototype PNM entry with bandwidth ``bw``."""
    return ('{"pnm": {"prototype": {"t_base_us": 1.0, "t_dev_us": 0.15, "t_host_us": 0.4, '
            f'"bw_eff_gbs": {bw}, "capacity_gb": 64}}}}}}')


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse
        return int(e.code or 0)


@pytest.fixture(scope="module")
def lm() -> LatencyModel:
    cat = HardwareCatalog.load()
    return LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                        cat.get("models", "llama-3-8b"), link=cat.get("links", "roce-400g"))


def _serve(tmp_path: Path, out: str, *extra: str, limit: int = 40) -> int:
    return _main(["serve-sim", "--trace", str(TRACE), "--limit", str(limit), "--rate", "2",
                  "--out", str(tmp_path / out), *extra])


# -- 1. provenance ---------------------------------------------------------------------------
def test_serve_sim_writes_its_resolved_configuration(tmp_path: Path, capsys) -> None:
    hw = tmp_path / "hw.json"
    hw.write_text(_pnm(100))
    assert _serve(tmp_path, "a", "--hardware", str(hw), "--mode", "nelssa") == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "a/config.json").read_text())
    assert doc["command"] == "serve-sim"
    assert doc["trace"]["path"] == str(TRACE) and len(doc["trace"]["sha256"]) == 64
    assert doc["trace"]["rate"] == 2.0 and doc["trace"]["seed"] == 0
    assert doc["hardware"]["pnm"]["bw_eff_gbs"] == 100  # the value, not only the preset's name
    assert doc["hardware"]["gpu"]["hbm_gbs"] > 0 and doc["hardware"]["model"]["layers"] == 32
    assert doc["hardware"]["files"][0]["path"] == str(hw.resolve())
    assert doc["serving"]["nelssa"]["scheduler"] == "ours"
    assert doc["metrics"]["percentiles"] == [50, 90, 95, 99]
    assert doc["nelssa"]["version"] and doc["nelssa"]["commit"]  # a sha, or "unknown"
    assert {"config.json", "results.json", "requests.csv", "tpot.png"} <= set(doc["outputs"])
    assert doc["config_hash"] == config_hash(doc)
    assert doc["config_hash"][:12] in out
    res = json.loads((tmp_path / "a/results.json").read_text())
    assert res["config_hash"] == doc["config_hash"]
    # the same inputs: the same hash; another bandwidth under the same name: another
    assert _serve(tmp_path, "b", "--hardware", str(hw), "--mode", "nelssa") == 0
    assert json.loads((tmp_path / "b/config.json").read_text())["config_hash"] == \
        doc["config_hash"]
    hw.write_text(_pnm(120))
    assert _serve(tmp_path, "c", "--hardware", str(hw), "--mode", "nelssa") == 0
    assert json.loads((tmp_path / "c/config.json").read_text())["config_hash"] != \
        doc["config_hash"]


def test_a_second_run_does_not_replace_the_first(tmp_path: Path, capsys) -> None:
    assert _serve(tmp_path, "o", "--mode", "gpu") == 0
    first = (tmp_path / "o/results.json").read_text()
    capsys.readouterr()
    assert _serve(tmp_path, "o", "--mode", "nelssa") == 2
    err = capsys.readouterr().err
    assert "--out" in err and "earlier run" in err and "--overwrite" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "o/results.json").read_text() == first
    assert _serve(tmp_path, "o", "--mode", "nelssa", "--overwrite") == 0
    res = json.loads((tmp_path / "o/results.json").read_text())
    assert list(k for k in res if k != "config_hash") == ["nelssa"]


def test_run_config_hash_leaves_out_when_and_how() -> None:
    a = run_config("x", ["--a"], {"v": 1})
    b = run_config("x", ["--b"], {"v": 1})
    assert a["config_hash"] == b["config_hash"] != run_config("x", [], {"v": 2})["config_hash"]


# -- 2. per-request records ----------------------------------------------------------------------
def test_requests_csv_holds_every_request(tmp_path: Path, capsys) -> None:
    assert _serve(tmp_path, "r", "--percentiles", "50,99.9") == 0
    with (tmp_path / "r/requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 80 and {r["mode"] for r in rows} == {"gpu", "nelssa"}
    assert {"itl_p50_s", "itl_p99.9_s", "itl_p95_s", "e2el_s", "preemptions", "migrations",
            "tier", "instance", "arrival_s"} <= set(rows[0])
    for r in rows:
        assert r["status"] == "finished"
        e2el = float(r["finish_s"]) - float(r["arrival_s"])
        assert float(r["e2el_s"]) == pytest.approx(e2el)
        if int(r["output_tokens"]) > 1:  # a request's mean ITL is its TPOT
            assert float(r["itl_mean_s"]) == pytest.approx(float(r["tpot_s"]), rel=1e-9)
            assert float(r["itl_max_s"]) >= float(r["itl_p50_s"]) > 0


@pytest.mark.parametrize("cfg", [
    ServingConfig(mode="gpu", max_running=8),
    ServingConfig(mode="nelssa", t_input=3000, migration=True, devices=2),
    ServingConfig(mode="nelssa", prefill="disaggregated", prefill_gpus=2, preemption="swap",
                  max_running=16),
])
def test_inter_token_gaps_add_up_to_each_request(lm: LatencyModel, cfg: ServingConfig) -> None:
    """Every request has output_len - 1 gaps, adding up to its time from first to last token,
    whether the replay took its steps one at a time or many at once."""
    reqs = poisson(load_trace(TRACE, 120, hash_ids=True), 6.0, 3)
    sim = ServingSim(lm, cfg)
    fast, slow = timed_replay(sim, reqs), timed_replay(sim, reqs, fast=False)
    assert fast.token_gaps is not None and slow.token_gaps is not None
    for r in fast.results:
        gaps = expand([fast.token_gaps[r.rid]]) if r.rid in fast.token_gaps else np.empty(0)
        assert len(gaps) == r.output_len - 1 and (gaps >= 0).all()
        assert gaps.sum() == pytest.approx(r.finish_s - r.first_token_s, abs=1e-9)
        assert np.allclose(gaps, expand([slow.token_gaps[r.rid]]) if len(gaps) else gaps,
                           rtol=0, atol=1e-9)


# -- 3. metrics ------------------------------------------------------------------------------
def test_the_summary_has_vllm_bench_metrics(lm: LatencyModel) -> None:
    reqs = poisson(load_trace(TRACE, 80, hash_ids=True), 2.0, 0)
    run = ServingSim(lm, ServingConfig(mode="nelssa")).run(reqs)
    s = summarize(run, MetricsConfig(percentiles=(90.0,), goodput_ttft_s=0.5,
                                     goodput_tpot_s=None))
    assert set(s["itl_s"]) == set(s["e2el_s"]) == {"mean", "p50", "p90", "p95", "p99"}
    out_tokens = sum(r.output_len for r in run.results)
    assert s["output_throughput_tps"] == pytest.approx(out_tokens / run.end_s)
    assert s["request_throughput_rps"] == pytest.approx(80 / run.end_s)
    assert s["total_token_throughput_tps"] == pytest.approx(
        s["input_throughput_tps"] + s["output_throughput_tps"])
    met = sum(r.ttft_s <= 0.5 for r in run.results)  # only the SLO given is checked
    assert s["goodput"]["met"] == met and s["goodput"]["slo"]["tpot_s"] is None
    all_gaps = expand(list(run.token_gaps.values()))
    assert s["itl_s"]["p90"] == pytest.approx(float(np.percentile(all_gaps, 90)))


def test_percentiles_and_goodput_options(tmp_path: Path, capsys) -> None:
    assert _serve(tmp_path, "g", "--mode", "gpu", "--percentiles", "50,90,99",
                  "--goodput", "ttft:2000", "tpot:100", "e2el:60000") == 0
    out = capsys.readouterr().out
    assert "latency p50/p90/p99:" in out and "ITL" in out and "E2EL" in out
    assert "meet TTFT <= 2000 ms and TPOT <= 100 ms and E2EL <= 60000 ms" in out
    s = json.loads((tmp_path / "g/results.json").read_text())["gpu"]["summary"]
    assert s["goodput"]["slo"] == {"ttft_s": 2.0, "tpot_s": 0.1, "e2el_s": 60.0}
    assert s["percentiles"] == [50, 90, 99]
    for bad, words in ((["--goodput", "ttft=5"], "KEY:MS"),
                       (["--goodput", "ttft:-1"], "ttft"),
                       (["--goodput", "itl:5"], "KEY:MS"),
                       (["--percentiles", "50,101"], "'101'"),
                       (["--percentiles", "50,,9"], "--percentiles")):
        assert _serve(tmp_path, "bad", *bad) == 2, bad
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err and bad[0] in err, (bad, err)


def test_ratios_say_their_direction_and_gpu_only_has_no_t_input(lm: LatencyModel) -> None:
    reqs = poisson(load_trace(TRACE, 60, hash_ids=True), 2.0, 0)
    g = summarize(ServingSim(lm, ServingConfig(mode="gpu")).run(reqs))
    n = summarize(ServingSim(lm, ServingConfig(mode="nelssa", t_input=3000)).run(reqs))
    line = comparison_line(g, n)
    want = n["tpot_s"]["p95"] / g["tpot_s"]["p95"]
    assert f"its TPOT P95 is {want:.2f}x GPU-only's" in line and "(lower is better)" in line
    assert "decode throughput is" in line and "(higher is better)" in line
    assert "None" not in run_line(g, 1.0) and "GPU only" in run_line(g, 1.0)
    assert "T_input 3,000 tokens" in run_line(n, 1.0)


def test_an_overloaded_run_says_so(lm: LatencyModel) -> None:
    reqs = load_trace(TRACE, 300, hash_ids=True)
    light = summarize(ServingSim(lm, ServingConfig(mode="gpu")).run(poisson(reqs, 0.5, 0)))
    heavy = summarize(ServingSim(lm, ServingConfig(mode="gpu")).run(poisson(reqs, 8.0, 0)))
    assert light["overload"]["overloaded"] is False
    o = heavy["overload"]
    assert o["overloaded"] is True and o["completion_rps"] < o["arrival_rps"]
    assert o["queue_growth"] > 0.1 * o["arrived"]
    assert "OVERLOADED" in run_line(heavy, 1.0) and "OVERLOADED" not in run_line(light, 1.0)
    burst = [TraceRequest(i, 0.0, 1000, 10) for i in range(30)]  # all at once: cannot tell
    run = ServingSim(lm, ServingConfig(mode="gpu", prefix_caching=False)).run(burst)
    assert summarize(run)["overload"]["overloaded"] is None


# -- 4. rejections ---------------------------------------------------------------------------
def test_admit_rejects_what_no_tier_holds_and_max_model_len(lm: LatencyModel) -> None:
    reqs = [TraceRequest(0, 0.0, 100, 10, line=1), TraceRequest(1, 1.0, 5_000_000, 10, line=2),
            TraceRequest(2, 2.0, 3000, 10, line=3)]
    ok, rejected = admit(reqs, [ServingSim(lm, ServingConfig(mode="gpu"))])
    assert [r.rid for r in ok] == [0, 2] and "trace line 2" in rejected[0].reason
    sim = ServingSim(lm, ServingConfig(mode="gpu", max_model_len=2000, prefix_caching=False))
    run, rejected = sim.run_admitted(reqs)
    assert [r.rid for r in run.results] == [0] and run.rejected == 2
    assert "exceed --max-model-len 2000" in rejected[1].reason
    assert summarize(run)["goodput"]["attainment"] <= 1 / 3
    with pytest.raises(ValueError, match="max_model_len"):
        ServingConfig(max_model_len=0)


# -- sweeps ----------------------------------------------------------------------------------
def _spec(tmp_path: Path, body: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(f'trace = "{TRACE}"\nlimit = 30\nrate = 1.0\n{body}')
    return path


def test_a_second_spec_keeps_the_first_specs_rows(tmp_path: Path) -> None:
    a = load_spec(_spec(tmp_path, "[grid]\ndevices = [2, 4]\n", "a.toml"))
    b = load_spec(_spec(tmp_path, "[grid]\ndevices = [8]\n", "b.toml"))
    out = tmp_path / "out"
    run_sweep(a, out)
    done = run_sweep(b, out)
    assert done.ran == 1
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["devices"] for r in rows) == ["2", "4", "8"]
    configs = [json.loads(x) for x in (out / "configs.jsonl").read_text().splitlines()]
    assert {c["key"] for c in configs} == {r["key"] for r in rows}
    assert all(c["hardware"]["pnm"]["bw_eff_gbs"] > 0 and c["nelssa"]["version"]
               for c in configs)
    assert run_sweep(a, out).ran == 0  # resumed: nothing left


def test_a_changed_hardware_value_under_the_same_name_runs_again(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, "[grid]\ndevices = [2]\n", "s.toml"))
    hw = tmp_path / "hw.json"
    hw.write_text(_pnm(100))
    out = tmp_path / "out"
    first = run_sweep(spec, out, hardware=(str(hw),))
    hw.write_text(_pnm(50))
    from nelssa.sweep.run import _catalog

    _catalog.cache_clear()  # (a new process would read the file anew)
    again = run_sweep(spec, out, hardware=(str(hw),))
    assert first.ran == 1 and again.ran == 1
    assert point_keys(spec, (str(hw),)) != [r["key"] for r in first.rows]
    tpot = {r["key"]: float(r["tpot_p50_s"]) for r in (*first.rows, *again.rows)}
    assert len(tpot) == 2 and len(set(tpot.values())) == 2  # slower devices, other figures


# -- decode ----------------------------------------------------------------------------------
def test_decode_writes_its_configuration_and_keeps_an_earlier_run(tmp_path: Path) -> None:
    from cli_helpers import run_cli

    args = ["decode", "--backend", "model", "--devices", "1", "--short", "1", "--long", "0",
            "--steps", "1", "--no-accuracy", "--trace", str(tmp_path / "run.json"), "--plot",
            str(tmp_path / "run.png")]
    done = run_cli(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "run.config.json").read_text())
    assert doc["command"] == "decode" and doc["hardware"]["pnm"]["name"]
    assert doc["model"]["shape"]["num_hidden_layers"] > 0 and doc["requests"]["seed"] == 0
    assert doc["decode"]["selection"] > 0 and doc["nelssa"]["commit"]
    again = run_cli(*args)
    assert again.returncode == 2 and "earlier run" in again.stderr
    assert "--overwrite" in again.stderr and "Traceback" not in again.stderr



def test_requests_parquet_where_pyarrow_is_installed(tmp_path: Path, capsys) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(LINE % (t, n, 5) + "\n" for t, n in ((0, 100), (1, 9_000_000),
                                                                   (2, 300))))
    assert _main(["serve-sim", "--trace", str(trace), "--prefix-caching", "off", "--mode",
                  "gpu", "--out", str(tmp_path / "o")]) == 0
    table = pq.read_table(tmp_path / "o/requests.parquet").to_pylist()
    assert [(r["trace_line"], r["status"]) for r in table] == [
        (1, "finished"), (2, "rejected"), (3, "finished")]
    assert table[1]["ttft_s"] is None and table[0]["ttft_s"] > 0


def test_csv_cells_write_each_cell_as_a_records_cell() -> None:
    """``csv_cells`` (a streamed run's row a request, ``_cell`` inlined) writes what ``_cell``
    writes: no value and non-finite floats empty, floats rounded to 9 places, others as
    they are."""
    from nelssa.emu.serving.records import _cell, csv_cells

    values = [None, math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, 1 / 3, 1e-12, 123456.789e9,
              np.float64(0.1 + 0.2), 7, True, "pnm", ""]
    row = {f"c{i}": v for i, v in enumerate(values)}
    cols = [*row, "missing"]
    assert csv_cells(row, cols) == [_cell(row.get(c)) for c in cols]


@pytest.mark.parametrize("gaps", [None, [], [0.02], [0.01, 0.03, 0.02, math.inf, 0.5, 1e-9]])
@pytest.mark.parametrize("output_len", [1, 2, 40])
def test_a_streamed_row_is_the_records_row(gaps, output_len: int) -> None:
    """``finished_cells`` (a streamed run's row, built without the dict between) writes
    what ``csv_cells(finished_row(...))`` writes, ITL figures from ``itl_stats`` as
    ``request_itl`` gives them: with and without gaps, one gap, a non-finite one; TPOT of a
    request of one output token (None)."""
    from array import array

    from nelssa.emu.serving.itl import itl_stats, request_itl
    from nelssa.emu.serving.records import columns, csv_cells, finished_cells, finished_row
    from nelssa.emu.serving.results import RequestResult

    pct = MetricsConfig(percentiles=(90.0, 99.9)).all_percentiles
    g = None if gaps is None else array("d", gaps)
    for r in (RequestResult(7, 1000, output_len, "pnm", 1.25, 1.5, 3.0 + 1 / 3, 2, True),
              RequestResult(8, 10, output_len, "gpu", 0.0, 0.0, 0.0, 0)):
        for line in ("", 12):
            want = csv_cells(finished_row("nelssa", "i-0", r, line, request_itl(g, pct), pct),
                             columns(pct))
            got = finished_cells("nelssa", "i-0", r, line, itl_stats(g, pct), len(pct))
            assert got == want


def test_a_float_cell_is_repr_of_round_to_nine_decimals() -> None:
    """requests.csv's fast float cell (records.float_cell) writes what ``repr(round(v, 9))``
    writes, over the range it formats itself, its edges and beyond, both signs: random doubles
    of every decade, the doubles beside 1e-4 and 1e6, and halfway cases of the ninth decimal."""
    from nelssa.emu.serving.records import float_cell

    rng = np.random.default_rng(7)
    values = (10.0 ** rng.uniform(-6, 8, 200_000)).tolist()  # Python floats, as the rows hold
    values += [k * 1e-9 for k in rng.integers(1, 10**9, 20_000).tolist()]
    values += [(k + 0.5) * 1e-9 for k in rng.integers(1, 10**6, 20_000).tolist()]
    for edge in (1e-4, 1e6, 999999.9999999996, 0.5, 1.0):
        x = edge
        for _ in range(4):
            values += [x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)]
            x = math.nextafter(x, math.inf)
    values += [0.0, -0.0]
    values += [-v for v in values]
    wrong = [v for v in values if float_cell(v) != repr(round(v, 9))]
    assert not wrong, wrong[:5]
