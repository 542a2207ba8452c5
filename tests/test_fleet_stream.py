"""Streamed fleet runs (issue 42 item 7): the resampler, the quantile sketch's bound, a streamed
run's figures equal to the same requests run as a list, its records written as requests
finish, an out-of-order stream refused, `serve-sim --fleet F --requests N`."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from nelssa.emu.latency.fleet_description import FleetSpec
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.fleet import FleetSim
from nelssa.emu.serving.stream import QuantileSketch, RecordSink
from nelssa.emu.serving.workload import TraceRequest, load_trace, resample
from nelssa.experiments.fleet_scale import WindowMeter, fleet_work

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/data/mooncake_conversation_head.jsonl"
SPEC = FleetSpec(instances=[{"count": 3}], pnm_nodes=[{"name": "n", "count": 2, "devices": 2}],
                 dispatch="least-work")


def test_resample_draws_requests_from_the_trace_as_a_poisson_process() -> None:
    src = load_trace(TRACE, hash_ids=True)
    reqs = list(resample(src, 5000, 50.0, seed=3))
    assert [r.rid for r in reqs] == list(range(5000))
    t = np.array([r.arrival_s for r in reqs])
    assert t[0] == 0 and np.all(np.diff(t) >= 0)
    assert abs(4999 / t[-1] - 50.0) < 3.0  # the rate, within sampling error
    shapes = {(r.input_len, r.output_len, r.hash_ids) for r in src}
    assert all((r.input_len, r.output_len, r.hash_ids) in shapes for r in reqs)
    assert len({r.line for r in reqs}) > 150  # draws over the whole source
    assert [r.arrival_s for r in resample(src, 10, 50.0, 3)] == list(t[:10])  # seeded
    with pytest.raises(ValueError, match="rate"):
        next(resample(src, 10, 0.0))


def test_sketch_quantiles_are_within_their_relative_accuracy() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.lognormal(-3, 1.5, 20_000), np.zeros(50)])
    one, many = QuantileSketch(0.005), QuantileSketch(0.005)
    for v in values[:5000]:
        one.add(float(v))
    one.add_many(values[5000:])
    many.add_many(values)
    s = np.sort(values)
    for q in (0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
        rank = q * (len(s) - 1)
        lo, hi = s[math.floor(rank)], s[math.ceil(rank)]
        for sk in (one, many):
            x = sk.quantile(q)
            assert lo * (1 - 0.005) - 1e-300 <= x <= hi * (1 + 0.005), (q, x, lo, hi)
    assert one.count == many.count == len(values)
    assert math.isclose(one.stats()["mean"], float(values.mean()), rel_tol=1e-9)
    assert len(many.buckets) < 2000  # bounded by the values' range, not their count
    with pytest.raises(ValueError, match="finite"):
        many.add(float("nan"))


def test_a_streamed_run_gives_the_list_runs_figures(tmp_path, cat, lm) -> None:
    src = load_trace(TRACE, hash_ids=True)
    reqs = list(resample(src, 400, 12.0, seed=5))
    cfg = ServingConfig(mode="nelssa", devices=2)
    whole = FleetSim(SPEC, cat, lm, cfg).run(list(reqs)).merged()
    fleet = FleetSim(SPEC, cat, lm, cfg)
    # the fleet_scale page's meter, reading the fleet's work as the stream is taken
    meter = WindowMeter(150, reference=lambda: 0.0, counters=partial(fleet_work, fleet))
    with RecordSink(tmp_path) as sink:
        streamed = fleet.run(meter.meter(iter(reqs)), sink=sink, total=len(reqs))
    assert all(not run.results and not run.samples for _, run in streamed.instances)  # dropped
    total = fleet_work(fleet)
    assert total["steps"] == whole.steps and total["preemptions"] == whole.preemptions
    assert len(meter.windows) == 2 and all(w["work"]["steps"] > 0 for w in meter.windows)
    # the windows' work adds up to the work done by the time the last window closed
    assert sum(w["work"]["steps"] for w in meter.windows) < whole.steps
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert len(rows) == sink.requests == len(whole.results) == len(reqs)
    by_id = {int(r["request_id"]): r for r in rows}
    for r in whole.results:
        row = by_id[r.rid]
        assert row["status"] == "finished" and row["tier"] == r.tier
        assert float(row["first_token_s"]) == pytest.approx(r.first_token_s, abs=1e-9)
        assert float(row["finish_s"]) == pytest.approx(r.finish_s, abs=1e-9)
    assert streamed.merged().steps == whole.steps
    ttft = np.sort([r.ttft_s for r in whole.results])
    p99 = ttft[math.floor(0.99 * (len(ttft) - 1))], ttft[math.ceil(0.99 * (len(ttft) - 1))]
    assert p99[0] * 0.995 <= sink.ttft.quantile(0.99) <= p99[1] * 1.005
    samples = list(csv.DictReader((tmp_path / "samples.csv").open()))
    assert samples and {s["instance"] for s in samples} == {"i0", "i1", "i2"}


def test_a_stream_out_of_arrival_order_is_refused(cat, lm) -> None:
    reqs = [TraceRequest(0, 1.0, 100, 10, 1), TraceRequest(1, 0.5, 100, 10, 2)]
    with pytest.raises(ValueError, match=r"trace line 2\) arrives at 0.5 s, before"):
        FleetSim(SPEC, cat, lm, ServingConfig(mode="nelssa")).run(iter(reqs))


def test_serve_sim_streams_a_resampling_through_a_fleet(tmp_path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace", str(TRACE), "--mode",
           "nelssa", "--fleet", str(ROOT / "docs/examples/fleet.yaml"), "--requests", "600",
           "--rate", "10", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "600 requests (0 rejected)" in proc.stdout
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert len(rows) == 600 and {r["status"] for r in rows} == {"finished"}
    assert (out / "results.json").exists() and (out / "config.json").exists()
    bad = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                          str(TRACE), "--requests", "10", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--requests" in bad.stderr and "Traceback" not in bad.stderr


def test_window_meter_passes_the_stream_unchanged_and_counts_collections_by_window() -> None:
    """The fleet_scale script's meter of a long run (CPU by window, garbage collections by
    generation): the run sees the same requests; each whole window is measured; a collection
    made inside a window is counted there; its callback is gone afterwards."""
    import gc

    from nelssa.experiments.fleet_scale import WindowMeter

    src = load_trace(TRACE, hash_ids=True)
    reqs = list(resample(src, 25, 10.0, seed=1))
    meter = WindowMeter(10, reference=lambda: 0.25)
    seen = []
    for k, r in enumerate(meter.meter(iter(reqs))):
        if k == 12:  # inside the second window
            gc.collect(2)
        seen.append(r)
    assert seen == reqs
    assert len(meter.windows) == 2  # 0..9, 10..19 (the last five are no whole window)
    assert all(w["cpu_s"] >= 0 and w["load1"] >= 0 and w["ref_s"] == 0.25
               for w in meter.windows)
    assert meter.ref0_s == 0.25
    assert meter.windows[1]["gc_n"][2] >= 1 and meter.windows[1]["gc_s"][2] >= 0
    assert meter._on_gc not in gc.callbacks
    with pytest.raises(ValueError, match="at least one"):
        WindowMeter(0)


def test_the_page_says_which_windows_ran_beside_other_work() -> None:
    """The fleet_scale page's note on the windows follows their load averages: busy windows
    are named, and only an idle run calls its growth its own."""
    from nelssa.experiments.fleet_scale import _load_note

    w = {"cpu_s": 10.0, "ref_s": 0.05}
    idle = [{**w, "load1": 1.0}, {**w, "load1": 1.2, "cpu_s": 12.0, "ref_s": 0.06}]
    note = _load_note(idle, 1000)
    # the second window cost 20 % more and so did the reference work: no growth of its own
    assert "otherwise idle in every window" in note and "50 to 60 ms (+20%" in note
    assert "differ by up to 0%" in note
    busy = _load_note([{**w, "load1": 1.0}, {**w, "load1": 2.3, "cpu_s": 13.0},
                       {**w, "load1": 1.9}], 1000)
    assert "during windows 2, 3" in busy and "idle" not in busy and "up to 30%" in busy
    assert _load_note([], 1000) == ""
    worked = _load_note([{**w, "load1": 1.0, "work": {"steps": 100}},
                         {**w, "load1": 1.0, "cpu_s": 12.0, "work": {"steps": 110}}], 1000)
    assert "work itself moved by 10.0%" in worked
    assert "+20% from the first third of the windows to the last: the run's own growth" in worked
    # costs that jump about without a trend (as on a VM whose speed moves): not called growth
    jumpy = _load_note([{**w, "load1": 1.0, "cpu_s": c} for c in (10, 12.4, 7.3, 11, 9.9, 10)],
                       1000)
    assert "up to 70%" in jumpy and "-11% from the first third" in jumpy
    assert "more spread than trend" in jumpy and "the run's own growth," not in jumpy


def test_the_reference_work_takes_cpu_time() -> None:
    """The fleet_scale meter's yardstick of the machine's speed does its work (some tens of
    milliseconds of CPU, not nothing)."""
    from nelssa.experiments.fleet_scale import reference_work

    assert 0.005 < reference_work() < 5.0
