"""`nelssa sweep` (issue 26, item 3): a spec's points (grid and random search), each a
serving-emulator replay; the same rows from a process pool and from Ray; an interrupted sweep
resumes where it stopped; a point that fails is recorded and the sweep goes on; a bad spec is
refused naming the parameter, exit 2."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from nelssa.sweep import run as sweep_run
from nelssa.sweep.plot import frontier
from nelssa.sweep.run import COLUMNS, read_rows, run_sweep
from nelssa.sweep.spec import PARAMS, SpecError, load_spec

TRACE = Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl"
CLI = [sys.executable, "-m", "nelssa.cli"]


def _spec(tmp_path: Path, body: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'trace = "{TRACE}"\nlimit = 60\n{body}')
    return path


SMALL = """rate = 0.5
[grid]
devices = [2, 4]
link = ["roce-200g", "roce-400g"]
[random]
points = 2
selection = {min = 0.02, max = 0.06}
"""


def _same(a: list[dict[str, str]], b: list[dict[str, str]]) -> bool:
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in a]
    return strip == [{k: v for k, v in r.items() if k != "wall_s"} for r in b]


def test_a_grid_and_random_draws_make_the_points(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, SMALL + 'gpu = ["h100-nvl"]\n'))
    assert len(spec.points) == 2 * 2 * 2
    assert {p["devices"] for p in spec.points} == {2, 4}
    assert all(0.02 <= p["selection"] <= 0.06 and p["gpu"] == "h100-nvl" and p["rate"] == 0.5
               for p in spec.points)
    assert set(spec.points[0]) == set(PARAMS)  # defaults fill what the spec leaves out
    again = load_spec(_spec(tmp_path, SMALL + 'gpu = ["h100-nvl"]\n'))
    assert [spec.key(p) for p in spec.points] == [again.key(p) for p in again.points]
    assert len({spec.key(p) for p in spec.points}) == len(spec.points)


@pytest.mark.parametrize("body, words", [
    ("[grid]\ndevicez = [1]\n", "[grid]: unknown parameter 'devicez'"),
    ("[grid]\ndevices = []\n", "[grid] devices: an empty range"),
    ("[grid]\ndevices = [0, 2]\n", "[grid] devices: must be an integer in 1..1024, got 0"),
    ("[grid]\ndevices = [true]\n", "[grid] devices: must be an integer in 1..1024, got True"),
    ("[grid]\nselection = [1.5]\n", "[grid] selection: must be in (0, 1], got 1.5"),
    ("rate = nan\n", "top level rate: must be 'trace' or > 0 requests/s"),
    ("[grid]\nt_input = [2.5]\n", "[grid] t_input: must be 'crossover' or 'adaptive' or an "
                                  "integer"),
    ("[grid]\nmode = [\"cpu\"]\n", "[grid] mode: must be one of 'nelssa', 'gpu', got 'cpu'"),
    ("[random]\npoints = 0\n", "[random]: points must be an integer in 1..100000, got 0"),
    ("[random]\npoints = 2\ndevices = {min = 8, max = 2}\n", "[random] devices: an empty "
                                                             "range"),
    ("[random]\npoints = 2\nmode = {min = 1, max = 2}\n", "[random] mode: must be a list"),
    ("devices = 2\n[grid]\ndevices = [4]\n", "devices: given both fixed"),
    ("colour = 1\n", "top level: unknown key 'colour'"),
    ("[slo]\nttft_s = -1\n", "[slo]: ttft_s must be a finite number of seconds > 0"),
    ("[grid\n", "not valid TOML"),
])
def test_a_bad_spec_is_refused_naming_what_is_wrong(tmp_path: Path, body: str,
                                                    words: str) -> None:
    path = _spec(tmp_path, body)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert words in str(e.value) and str(path) in str(e.value)


def test_the_command_refuses_in_one_line(tmp_path: Path) -> None:
    bad = _spec(tmp_path, "[grid]\ndevices = [0]\n")
    out = subprocess.run([*CLI, "sweep", str(bad), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "[grid] devices" in out.stderr
    unknown = _spec(tmp_path, '[grid]\ngpu = ["h900"]\n', "g.toml")
    out = subprocess.run([*CLI, "sweep", str(unknown)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "gpu" in out.stderr and "h900" in out.stderr


def test_an_interrupted_sweep_resumes_and_a_failed_point_is_kept(tmp_path: Path,
                                                                 monkeypatch) -> None:
    spec = load_spec(_spec(tmp_path, SMALL))
    whole = run_sweep(spec, tmp_path / "whole", workers=1)
    assert whole.ran == 8 and whole.failed == 0
    assert all(r["status"] == "ok" and float(r["goodput_rps"]) >= 0 for r in whole.rows)
    # cut the file as an interruption would: three rows and half of a fourth
    cut = tmp_path / "cut"
    cut.mkdir()
    lines = (tmp_path / "whole" / "results.csv").read_text().splitlines(keepends=True)
    (cut / "results.csv").write_text("".join(lines[:4]) + lines[4][:20])
    assert len(read_rows(cut / "results.csv")) == 3
    failing = sweep_run.point_keys(spec)[5]
    real = sweep_run._measure

    def measure(job):
        if job.key == failing:
            raise ValueError("a request no tier can hold")
        return real(job)

    monkeypatch.setattr(sweep_run, "_measure", measure)
    resumed = run_sweep(spec, cut, workers=1)
    assert resumed.ran == 5 and resumed.failed == 1
    bad = [r for r in resumed.rows if r["status"] == "failed"]
    assert [r["key"] for r in bad] == [failing]
    assert bad[0]["error"] == "ValueError: a request no tier can hold"
    good = [r for r in resumed.rows if r["key"] != failing]
    assert _same(good, [r for r in whole.rows if r["key"] != failing])
    monkeypatch.setattr(sweep_run, "_measure", real)
    again = run_sweep(spec, cut, workers=1)  # only the failed point runs again
    assert again.ran == 1 and again.failed == 0 and _same(again.rows, whole.rows)
    with (cut / "results.csv").open() as f:
        assert tuple(next(csv.reader(f))) == COLUMNS


def test_a_process_pool_and_ray_give_the_same_rows(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    spec = load_spec(_spec(tmp_path, SMALL))
    pool = run_sweep(spec, tmp_path / "pool", workers=2)
    ray = run_sweep(spec, tmp_path / "ray", workers=2, ray_address="local")
    assert pool.failed == 0 and ray.ran == 8 and _same(pool.rows, ray.rows)


def test_the_orchestrators_knobs_are_swept(tmp_path: Path) -> None:
    """The token budget and shedding (emu/policy/budget.py, shed.py) as sweep parameters: at
    8/s the 60 requests queue past the TTFT SLO; shedding drops some and more meet the SLO (a
    count: goodput per second also gains from the shorter run)."""
    spec = load_spec(_spec(tmp_path, "rate = 8.0\n[grid]\nshed_late = [false, true]\n"
                                     "tpot_budget = [false, true]\n"))
    rows = {(r["shed_late"], r["tpot_budget"]): r
            for r in run_sweep(spec, tmp_path / "out", workers=1).rows}
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows.values())
    for budget in ("False", "True"):
        plain, shed = rows["False", budget], rows["True", budget]
        assert int(plain["shed"]) == 0 < int(shed["shed"])
        assert int(shed["requests"]) + int(shed["shed"]) == int(plain["requests"]) == 60
        assert int(shed["slo_met"]) > int(plain["slo_met"])
    with pytest.raises(SpecError, match=r"\[grid\] shed_late: must be true or false, got 1"):
        load_spec(_spec(tmp_path, "[grid]\nshed_late = [1]\n", "bad.toml"))


def test_the_pareto_frontier() -> None:
    pts = [(0, 1.0), (2, 3.0), (2, 2.0), (4, 2.5), (4, 5.0), (8, 4.0), (8, 6.0)]
    assert frontier(pts) == [(0, 1.0), (2, 3.0), (4, 5.0), (8, 6.0)]
    assert frontier([]) == []


def test_each_metric_has_its_direction_and_the_front_follows_it() -> None:
    from nelssa.sweep.metrics import LOWER, METRICS, RANKED, TABLE, axis_label

    assert set(METRICS) <= set(COLUMNS) and set(RANKED) <= set(TABLE)
    assert TABLE["tpot_p99_s"].better == LOWER and TABLE["goodput_rps"].better == "higher"
    assert "lower is better" in axis_label("tpot_p99_s")
    pts = [(0, 0.30), (2, 0.10), (2, 0.20), (4, 0.15), (4, 0.05), (8, 0.40)]
    assert frontier(pts, LOWER) == [(0, 0.30), (2, 0.10), (4, 0.05)]  # not through the worst


def test_the_pareto_plot_labels_points_and_keeps_a_sensible_span(tmp_path: Path,
                                                                 monkeypatch) -> None:
    import matplotlib.pyplot as plt

    from nelssa.sweep import plot

    seen = {}
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig))
    rows = [{"status": "ok", "cost_devices": str(n), "goodput_rps": str(1.0 + 0.001 * n),
             **{p: "x" for p in PARAMS}, "devices": str(n)} for n in (1, 2, 4)]
    assert plot.pareto_plot(rows, "goodput_rps", tmp_path / "p.png", "sweep s.toml") == 3
    ax = seen["fig"].axes[0]
    assert ax.get_title() == "sweep s.toml" and "higher is better" in ax.get_ylabel()
    assert sorted(t.get_text() for t in ax.texts) == ["devices=1", "devices=2", "devices=4"]
    lo, hi = ax.get_ylim()
    assert hi - lo >= 0.05 * 1.004  # a 0.3 % spread is not magnified
    assert (tmp_path / "p.png").exists()


def test_a_resume_with_nothing_left_says_so() -> None:
    from nelssa.cli_sweep import pace

    assert pace(0, 0.0) == " (nothing left to run)" and "nan" not in pace(0, 0.01)
    assert pace(6, 30.0) == ", in 30.0 s: 12.0 points/min"


def test_ray_is_told_its_auth_mode_so_it_prints_no_token_notice(tmp_path: Path) -> None:
    from nelssa.sweep.run import ray_auth_mode

    assert ray_auth_mode("local", {}, tmp_path) == "token"  # what Ray would pick, stated
    assert ray_auth_mode("local", {"RAY_AUTH_MODE": "disabled"}, tmp_path) == "disabled"
    assert ray_auth_mode("10.0.0.1:6379", {}, tmp_path) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    assert ray_auth_mode("10.0.0.1:6379", {}, tmp_path) == "token"
