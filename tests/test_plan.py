"""`nelssa plan`: the capacity search, the point store (resume, keys), the cost arithmetic, the
Pareto front, bad input, and one tiny run end to end."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from nelssa.cli import main
from nelssa.plan import report
from nelssa.plan.prices import (
    HOURS_PER_YEAR,
    Prices,
    PricesError,
    TierPower,
    cost,
    energy_cost,
    load_prices,
)
from nelssa.plan.run import PlanSpace, read_store, run_plan
from nelssa.plan.search import (
    Mix,
    PlanSettings,
    PlanSlo,
    PointResult,
    Probe,
    capacity,
    point_key,
    resolved,
)

TRACE_LINES = [{"timestamp": 10 * i, "input_length": 500 + 300 * (i % 5),
                "output_length": 20 + i % 7, "hash_ids": [10 * i + k for k in range(4)]}
               for i in range(30)]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in TRACE_LINES))
    return p


# -- the capacity search --------------------------------------------------------------------------
@pytest.mark.parametrize("threshold,start", [(3.7, 1.0), (3.7, 20.0), (0.05, 1.0), (123.0, 0.5)])
def test_the_search_finds_a_known_threshold(threshold: float, start: float) -> None:
    rate, probes = capacity(lambda r: r <= threshold, start, 0.02, 40, 1e4)
    assert rate <= threshold and rate >= threshold / 1.02  # within the granularity below it
    assert all(ok == (r <= threshold) for r, ok in probes)
    assert len(probes) < 20


def test_the_search_gives_zero_when_nothing_holds_and_the_cap_when_all_does() -> None:
    rate, probes = capacity(lambda r: False, 1.0, 0.05, 40, 100.0, least=1 / 32)
    assert rate == 0.0 and [r for r, _ in probes] == [1, 0.5, 0.25, 0.125, 0.0625, 0.03125]
    rate, probes = capacity(lambda r: True, 1.0, 0.05, 40, 100.0)
    assert rate == 100.0 and probes[-1] == (100.0, True)
    rate, probes = capacity(lambda r: r < 50, 1.0, 0.05, 4, 100.0)  # out of probes: the last held
    assert rate == 8.0 and len(probes) == 4


# -- the point store ------------------------------------------------------------------------------
def _settings(trace: Path, **kw: object) -> PlanSettings:
    return PlanSettings(str(trace), "sha", **kw)  # type: ignore[arg-type]


def _fake_search(calls: list[Mix]):
    def search(key: str, mix: Mix, settings: PlanSettings) -> PointResult:
        calls.append(mix)
        rate = float(mix.decode + mix.nodes)
        power = TierPower(100.0 * mix.decode, 0.0, 10.0 * mix.nodes, ("decode_gpus",), "fake")
        return PointResult(key, mix, rate, (Probe(rate, True, 1.0, 1.0, 0.01, False, 10.0,
                                                   0.5, power),), rate * 10, 0.5, 0.6, power)
    return search


def _serial(jobs, fn):
    return map(fn, jobs)


def test_a_rerun_skips_the_stored_points_and_reruns_a_failed_one(
        trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nelssa.plan.run as run

    calls: list[Mix] = []
    monkeypatch.setattr(run, "search_point", _fake_search(calls))
    mixes = PlanSpace(decode=(1, 2), nodes=(0, 1), devices=(4,), policies=("crossover",)).mixes()
    s = _settings(trace)
    first = run_plan(s, mixes, tmp_path / "o", _serial)
    assert first.ran == 4 and len(calls) == 4 and [p.mix for p in first.points] == mixes
    again = run_plan(s, mixes, tmp_path / "o", _serial)
    assert again.ran == 0 and len(calls) == 4  # nothing searched again
    assert again.points == first.points  # read back from the store whole, power included
    assert again.points[3].power == TierPower(200.0, 0.0, 10.0, ("decode_gpus",), "fake")
    stored = read_store(tmp_path / "o" / "points.jsonl")
    assert all(d["config"]["mix"] == dataclasses.asdict(d_mix) for d, d_mix in
               zip(stored.values(), mixes, strict=True))
    assert all(point_key(d["config"]) == k for k, d in stored.items())  # the hash of the config
    # a failed point and a torn line: the failed one is searched again, the rest kept
    key = next(iter(stored))
    with (tmp_path / "o" / "points.jsonl").open("a") as f:
        f.write(json.dumps({"key": key, "config": {}, "error": "boom"}) + "\n{\"key\": ")
    third = run_plan(s, mixes, tmp_path / "o", _serial)
    assert third.ran == 1 and len(calls) == 5
    # a point that met a rate but holds no measured power (stored before points were priced
    # from the fleet's energy model) is searched again, not priced at zero watts
    doc = dict(read_store(tmp_path / "o" / "points.jsonl")[key], power=None)
    with (tmp_path / "o" / "points.jsonl").open("a") as f:
        f.write(json.dumps(doc) + "\n")
    fourth = run_plan(s, mixes, tmp_path / "o", _serial)
    assert fourth.ran == 1 and len(calls) == 6 and all(p.power for p in fourth.points)
    # another setting: every point is new
    run_plan(_settings(trace, requests=99), mixes, tmp_path / "o", _serial)
    assert len(calls) == 10


def _altered(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 0.01
    if isinstance(value, str):
        return value + "x" if value not in ("h100-nvl", "prototype", "llama-3-8b", "roce-400g",
                                            "round-robin") else None
    if value is None:
        return 0.5
    if isinstance(value, tuple):
        return (*value, "extra.json")
    return None


def test_the_key_changes_with_every_field_of_the_configuration(trace: Path) -> None:
    base_s, base_m = _settings(trace, long_share=0.1), Mix(2, 1, 1, 4, "crossover")
    base = point_key(resolved(base_s, base_m))
    assert point_key(resolved(_settings(trace, long_share=0.1), Mix(2, 1, 1, 4, "crossover"))
                     ) == base  # the same configuration, the same key
    alternatives = {"gpu": "h200", "pnm": "projection-512g", "model": "llama-3-70b",
                    "link": "roce-100g", "dispatch": "least-work",
                    "hardware": None, "slo": PlanSlo(percentile=99.0, goodput=None)}
    changed = 0
    for f in dataclasses.fields(PlanSettings):
        value = alternatives.get(f.name, _altered(getattr(base_s, f.name)))
        if value is None:
            continue  # a hardware file is checked below (it must exist)
        other = dataclasses.replace(base_s, **{f.name: value})
        assert point_key(resolved(other, base_m)) != base, f.name
        changed += 1
    assert changed == len(dataclasses.fields(PlanSettings)) - 1
    for f in dataclasses.fields(Mix):
        value = "fleet-adaptive" if f.name == "policy" else _altered(getattr(base_m, f.name))
        assert point_key(resolved(base_s, dataclasses.replace(base_m, **{f.name: value}))
                         ) != base, f.name
    for f in dataclasses.fields(PlanSlo):
        slo = dataclasses.replace(PlanSlo(), **{f.name: 0.5}) if f.name != "percentile" else \
            PlanSlo(goodput=None, percentile=90.0)
        assert point_key(resolved(dataclasses.replace(base_s, slo=slo), base_m)) != base
    hw = trace.parent / "hw.json"  # an entry's values changed under the same name
    hw.write_text(json.dumps({"gpus": {"h100-nvl": {"hbm_gbs": 3000, "memory_gb": 94,
                                                    "bf16_tflops": 835}}}))
    other = dataclasses.replace(base_s, hardware=(str(hw),))
    assert point_key(resolved(other, base_m)) != base


# -- cost arithmetic and the front ---------------------------------------------------------------
PRICES = Prices(gpu_per_hour=2.0, pnm_device_per_hour=0.5, pnm_node_per_hour=1.0,
                electricity_per_kwh=0.1, pue=1.5)
POWER = TierPower(800.0, 0.0, 180.0, ("decode_gpus", "prefill_gpus", "pnm_nodes"), "test")


def _point(mix: Mix, rate: float, tps: float, power: TierPower | None = None) -> PointResult:
    return PointResult("k", mix, rate, (), tps, 0.0, 0.0, power)


def _drawing(mix: Mix, rate: float, tps: float) -> PointResult:
    """A point whose fleet drew 400 W a GPU, 20 W a device and 100 W a node's host."""
    parts = mix.parts
    power = TierPower(400.0 * parts.decode_gpus, 400.0 * parts.prefill_gpus,
                      20.0 * parts.pnm_devices + 100.0 * parts.pnm_nodes, POWER.counted, "test")
    return _point(mix, rate, tps, power if rate > 0 else None)


def test_cost_by_hand() -> None:
    p = _point(Mix(2, 0, 1, 4, "crossover"), 3.0, 1000.0, POWER)
    c = cost(p, p.output_tps, PRICES)
    assert c.capital_per_hour == pytest.approx(2 * 2.0 + 4 * 0.5 + 1 * 1.0)  # 7 $/hour
    assert c.watts == pytest.approx(800 + 180)  # the fleet's measured power, 980 W
    assert c.energy_per_hour == pytest.approx(0.980 * 1.5 * 0.1)  # 0.147 $/hour
    assert c.per_million_tokens == pytest.approx(7.147 / (1000 * 3600) * 1e6)
    assert c.joules_per_token == pytest.approx(0.98)
    assert c.power_counted == POWER.counted
    bought = dataclasses.replace(PRICES, gpu_capital=4 * HOURS_PER_YEAR * 3.0, lifetime_years=4)
    assert bought.hourly("gpu") == pytest.approx(3.0)
    other = _point(p.mix, 3.0, 1000.0, TierPower(500.0, 0.0, 60.0, POWER.counted, "test"))
    assert energy_cost(other, PRICES)[0] == pytest.approx(0.560 * 1.5 * 0.1)
    # no rate met: nothing measured, nothing served
    none = cost(_point(p.mix, 0.0, 0.0), 0.0, PRICES)
    assert none.watts == 0.0 and math.isinf(none.per_million_tokens)


def test_pareto_front_and_cheapest_on_hand_data() -> None:
    pts = [_drawing(Mix(1), 1.0, 100.0), _drawing(Mix(2), 2.5, 250.0),
           _drawing(Mix(4), 2.0, 200.0), _drawing(Mix(1, 0, 1, 2, "crossover"), 2.0, 200.0),
           _drawing(Mix(2, 0, 1, 4, "crossover"), 4.0, 400.0), _drawing(Mix(8), 0.0, 0.0)]
    rs = report.rows(pts, PRICES)
    # $/hour (capital + W x 1.5 x 0.1 / 1000): 1d 2.06, 2d 4.12, 4d 8.24, 1d 1x2 4.081,
    # 2d 1x4 7.147; $/M tokens: 5.722, 4.578, 11.44, 5.668, 4.963
    by = {r.label: r.cost.per_million_tokens for r in rs}
    assert by["2d"] == pytest.approx(4.12 / 0.9) and by["1d 1x2 crossover"] == pytest.approx(
        4.081 / 0.72)
    front = [r.label for r in report.pareto(rs)]
    assert front == ["1d", "1d 1x2 crossover", "2d", "2d 1x4 crossover"]  # 4d: dearer, slower
    assert report.cheapest(rs, True).label == "2d"  # type: ignore[union-attr]
    best = report.cheapest(rs, False)
    assert best is not None and best.label == "2d 1x4 crossover"
    # break-even device price: the NELSSA fleet at that price costs what the GPU-only does
    be = report.break_even_device_price(rs, PRICES)
    assert be is not None
    at = dataclasses.replace(PRICES, pnm_device_per_hour=be)
    rs_at = report.rows(pts, at)
    assert report.cheapest(rs_at, False).cost.per_million_tokens == pytest.approx(  # type: ignore[union-attr]
        report.cheapest(rs_at, True).cost.per_million_tokens)  # type: ignore[union-attr]


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra,says", [
    (["--slo", "ttft:abc"], "ttft must be"),
    (["--slo", "ttft:100", "goodput:99", "pct:90"], "goodput or a percentile"),
    (["--slo", "latency:5"], "KEY one of"),
    (["--policies", "sometimes"], "a policy is"),
    (["--decode", "0"], "integers in 1..256"),
    (["--gpu-per-hour", "-1"], "must be a finite number >= 0"),
    (["--pue", "0.5"], "power usage effectiveness"),
    (["--gpu", "no-such-gpu"], "--gpu"),
])
def test_bad_options_are_refused_by_name(trace: Path, tmp_path: Path, extra: list[str],
                                         says: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--trace", str(trace), "--out", str(tmp_path / "o"), *extra]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize("body,says", [
    ('{"gpu_per_hour": 2, "gpu_wats": 3}', "unknown field 'gpu_wats'"),
    ('{"pue": "high"}', "pue must be a power usage effectiveness"),
    ('[1, 2]', "must be an object of prices"),
    ('{"gpu_per_hour": ', "not"),
])
def test_a_bad_prices_file_is_refused_naming_file_and_field(
        trace: Path, tmp_path: Path, body: str, says: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text(body)
    with pytest.raises(PricesError, match=says):
        load_prices(bad)
    assert main(["plan", "--trace", str(trace), "--prices", str(bad), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and says.split()[0] in err


def test_a_prices_file_and_options_combine(tmp_path: Path) -> None:
    from nelssa.cli import build_parser
    from nelssa.cli_plan import prices_of

    f = tmp_path / "p.toml"
    f.write_text("gpu_per_hour = 3.5\npnm_device_per_hour = 0.25\n")
    args = build_parser().parse_args(["plan", "--trace", str(f), "--prices", str(f),
                                      "--pue", "1.2"])
    p = prices_of(args)
    assert (p.gpu_per_hour, p.pnm_device_per_hour, p.pue) == (3.5, 0.25, 1.2)
    assert p.electricity_per_kwh == Prices().electricity_per_kwh


# -- end to end -----------------------------------------------------------------------------------
def test_a_tiny_plan_end_to_end(trace: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    argv = ["plan", "--trace", str(trace), "--requests", "30", "--decode", "1", "--nodes",
            "0,1", "--devices", "2", "--policies", "crossover", "--workers", "1",
            "--slo", "ttft:5000", "tpot:200", "pct:90", "--granularity", "0.25",
            "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "2 mixes searched now" in text and "cheapest GPU-only: 1d:" in text
    stored = read_store(out / "points.jsonl")
    assert len(stored) == 2
    for doc in stored.values():
        assert doc["rate"] > 0 and doc["probes"] and doc["config"]["settings"]["requests"] == 30
        held = [p["rate"] for p in doc["probes"] if p["passed"]]
        assert max(held) == doc["rate"]
    lines = (out / "plan.csv").read_text().splitlines()
    assert len(lines) == 3 and (out / "plan.png").stat().st_size > 0
    assert main(argv) == 0
    assert "0 mixes searched now (2 from the store)" in capsys.readouterr().out


def test_ray_dispatch_and_a_missing_ray_named(trace: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    import nelssa.sweep.run as sweep_run
    from nelssa.plan.run import executor, run_job

    seen: list[tuple[str, int]] = []

    def fake_ray(jobs, address, workers, fn):
        seen.append((address, workers))
        return map(fn, jobs)

    monkeypatch.setattr(sweep_run, "ray_map", fake_ray)
    mapper = executor(3, "10.0.0.1:6379")
    assert list(mapper([], run_job)) == [] and seen == [("10.0.0.1:6379", 3)]
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed: named, exit 2
    assert main(["plan", "--trace", str(trace), "--requests", "30", "--decode", "1",
                 "--nodes", "0", "--ray", "local", "--out", str(tmp_path / "o")]) == 2
    assert "--ray needs Ray (pip install ray" in capsys.readouterr().err
