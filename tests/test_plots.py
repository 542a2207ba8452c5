"""The plots say what ran (issue 44, item 7): titles with the configuration, serve-sim's TTFT
distribution and batch/KV use over time, decode's backend and migrations with the legend off
the bars, Figure 10's panels on one batch axis, the crossover's curves up to --max-devices.
Checked on matplotlib's objects, not pixels."""

from __future__ import annotations

from pathlib import Path

import pytest

from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel, Sparsity


@pytest.fixture
def figures(monkeypatch):
    """Each figure a plot closes, kept for the test to read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept = []
    close = plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    close("all")


def _lm(model: str = "llama-3-8b") -> LatencyModel:
    cat = HardwareCatalog.load()
    return LatencyModel(cat.get("gpus", "h100-nvl"), next(iter(cat.pnm.values())),
                        cat.get("models", model), Sparsity(), next(iter(cat.links.values())))


def test_serve_sim_plots_carry_the_configuration_ttft_and_batch_kv(tmp_path: Path,
                                                                   figures) -> None:
    from nelssa.emu.serving.report import PLOTS, plot_runs

    series = {"t_s": [1.0, 2.0, 3.0], "throughput_tps": [10.0, 20.0, 30.0],
              "running": [1, 3, 2], "waiting": [0, 1, 0], "gpu_kv_used": [0.1, 0.5, 0.4],
              "pnm_running": [0, 1, 1]}
    tpot = {"p50": 0.01, "p95": 0.02, "p99": 0.03}
    results = {m: {"series": series, "summary": {"tpot_s": tpot}} for m in ("gpu", "nelssa")}
    plot_runs(results, tmp_path, "serve-sim: 3 requests of t.jsonl", {"gpu": [0.1, 0.2, 0.5],
                                                                     "nelssa": [0.1, 0.3]})
    assert all((tmp_path / p).exists() for p in PLOTS)
    assert [f._suptitle.get_text() for f in figures] == ["serve-sim: 3 requests of t.jsonl"] * 4
    ttft, batch_kv = figures[2].axes[0], figures[3].axes
    assert ttft.get_xlabel() == "TTFT (s)" and len(ttft.lines) == 2
    assert list(ttft.lines[0].get_ydata())[-1] == 1.0  # a CDF
    assert batch_kv[0].get_ylabel().startswith("running batch")
    assert list(batch_kv[1].lines[1].get_ydata()) == [10.0, 50.0, 40.0]  # KV use in %


def test_figure10_panels_share_the_batch_axis_and_name_contexts_past_the_model(
        tmp_path: Path, figures) -> None:
    from nelssa.emu.serving import sweeps
    from nelssa.emu.serving.sim import ServingConfig

    lm = _lm("mistral-7b")  # 32K context: every Figure-10 context is past it
    data = sweeps.context_batch({"h100-nvl": lm}, ServingConfig())
    assert all(rows[c] == {} for rows in data.values() for c in sweeps.CONTEXTS)
    sweeps.plot_context_batch(data, tmp_path / "f10.png", "Figure 10: m", lm.model.max_context)
    axes = figures[0].axes
    assert all(ax.get_xlim()[0] < 1 and ax.get_xlim()[1] > 256 for ax in axes)
    assert "past the model's" in axes[-1].texts[0].get_text()
    assert figures[0]._suptitle.get_text() == "Figure 10: m"
    full = sweeps.context_batch({"h100-nvl": _lm()}, ServingConfig())
    sweeps.plot_context_batch(full, tmp_path / "f10b.png")
    assert figures[1].axes[-1].get_xlim()[1] > 256  # the 1024K panel spans every batch


def test_the_crossover_draws_every_power_of_two_and_names_counts_without_one(
        tmp_path: Path, figures) -> None:
    from nelssa.emu.latency.plot import crossover_rows, curve_devices, plot_crossover

    assert curve_devices(16) == [1, 2, 4, 8, 16] and curve_devices(12) == [1, 2, 4, 8, 12]
    assert len(curve_devices(1024)) <= 6 and curve_devices(1024)[-1] == 1024
    lm = _lm()
    rows = crossover_rows(lm, 16)
    rows[0]["t_input"] = rows[1]["t_input"] = None
    plot_crossover(lm, rows, tmp_path / "c.png")
    a, b = figures[0].axes
    assert [t.get_text() for t in a.get_legend().get_texts()][-1] == "PNM x16"
    assert "N = 1-2" in b.texts[0].get_text()


def test_decode_plot_names_the_backend_marks_migrations_and_keeps_the_legend_off(
        tmp_path: Path, figures) -> None:
    from nelssa.host.gpu.report import StepReport, plot_steps

    reports = [StepReport(2, 1, step_ps=10**6, others_ps=8 * 10**5, tokens=3)
               for _ in range(4)]
    reports[2].migrating = [1]
    plot_steps(reports, tmp_path / "d.png", "NELSSA decode: 2 model devices")
    ax = figures[0].axes[0]
    assert ax.get_title() == "NELSSA decode: 2 model devices"
    legend = ax.get_legend()
    assert "KV migrating" in [t.get_text() for t in legend.get_texts()]
    assert legend.get_bbox_to_anchor().y1 < ax.get_window_extent().y0 + 1  # below the axes
