"""Energy (issue 43, points 2 and 3): the figures of the hardware description and their
refusals, the energy model's arithmetic by hand at small scale, the GPU power fit on synthetic
samples, the co-simulation's step energy and the serving emulator's energy by tier."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from nelssa.emu.energy import (
    EnergyError,
    EnergySplit,
    EngineOps,
    TierEnergy,
    energy_entry,
    gpu_split,
    pnm_split,
)
from nelssa.emu.latency.hardware import EnergyHw, GpuHw, HardwareCatalog, HardwareError
from nelssa.experiments.gpu_power import PowerPoint, fit_power
from nelssa.host.gpu.report import StepReport, step_energy

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "mooncake_conversation_head.jsonl"
GPU = GpuHw("g", hbm_gbs=1000.0, memory_gb=80.0, bf16_tflops=500.0, tdp_w=400.0, idle_w=60.0,
            pj_per_flop=0.5, pj_per_hbm_byte=30.0, power_source="test figures")
ONES = EnergyHw("ones", **{f.name: 1.0 for f in fields(EnergyHw)
                           if f.name not in ("name", "sources")},
                sources={f.name: "test" for f in fields(EnergyHw)
                         if f.name not in ("name", "sources")})


def test_presets_carry_power_figures_and_an_energy_entry_with_sources() -> None:
    cat = HardwareCatalog.load()
    for g in cat.gpus.values():
        assert g.has_power and g.power_source and g.idle_w < g.tdp_w, g.name
    assert cat.gpus["h100-nvl"].tdp_w == 400 and cat.gpus["h100-sxm"].tdp_w == 700
    e = energy_entry(cat)
    figures = [f.name for f in fields(e) if f.name not in ("name", "sources")]
    assert set(e.sources) == set(figures)
    assert "Horowitz" in e.sources["engine_pj_fp32_add"]
    assert "estimate" in e.sources["roce_pj_per_bit"]


@pytest.mark.parametrize(("text", "says"), [
    ('{"energy": {"default": {"engine_pj_fp32_add": -1}}}',
     "engine_pj_fp32_add must be a non-negative number, got -1"),
    ('{"energy": {"x": {"nope": 1}}}', "x: unknown field 'nope'"),
    ('{"gpus": {"g": {"hbm_gbs": 1, "memory_gb": 1, "bf16_tflops": 1, "tdp_w": 300}}}',
     "tdp_w is given but idle_w is not"),
    ('{"gpus": {"g": {"hbm_gbs": 1, "memory_gb": 1, "bf16_tflops": 1, "tdp_w": 300, '
     '"idle_w": 30, "pj_per_flop": 1, "pj_per_hbm_byte": 1}}}', "need a power_source"),
    ('{"gpus": {"g": {"hbm_gbs": 1, "memory_gb": 1, "bf16_tflops": 1, "tdp_w": 300, '
     '"idle_w": 300, "pj_per_flop": 1, "pj_per_hbm_byte": 1, "power_source": "s"}}}',
     "idle_w (300) must be below tdp_w (300)"),
    ('{"gpus": {"g": {"hbm_gbs": 1, "memory_gb": 1, "bf16_tflops": 1, "tdp_w": true}}}',
     "tdp_w must be a positive number, got True"),
])
def test_bad_energy_fields_are_refused_naming_file_entry_and_field(
        tmp_path: Path, text: str, says: str) -> None:
    if '"energy"' in text and '"nope"' not in text:  # a whole entry but for the bad field
        entry = {f.name: 1.0 for f in fields(EnergyHw) if f.name not in ("name", "sources")}
        entry["engine_pj_fp32_add"] = -1
        entry["sources"] = {k: "s" for k in entry if k != "sources"}
        text = json.dumps({"energy": {"default": entry}})
    p = tmp_path / "h.json"
    p.write_text(text)
    with pytest.raises(HardwareError) as e:
        HardwareCatalog.load(p)
    assert str(p) in str(e.value) and says in str(e.value)


def test_an_energy_entry_needs_a_source_for_every_figure(tmp_path: Path) -> None:
    entry = {f.name: 1.0 for f in fields(EnergyHw) if f.name not in ("name", "sources")}
    entry["sources"] = {k: "s" for k in entry if k != "cxl_pj_per_bit"}
    p = tmp_path / "h.json"
    p.write_text(json.dumps({"energy": {"default": entry}}))
    with pytest.raises(HardwareError, match="no source for 'cxl_pj_per_bit'"):
        HardwareCatalog.load(p)
    entry["sources"]["cxl_pj_per_bit"] = "mine"
    p.write_text(json.dumps({"energy": {"default": entry}}))
    assert energy_entry(HardwareCatalog.load(p)).cxl_pj_per_bit == 1.0  # replaces the preset


def test_a_bad_energy_field_is_one_line_and_exit_2_on_the_command_line(tmp_path: Path) -> None:
    p = tmp_path / "h.json"
    p.write_text('{"gpus": {"g": {"hbm_gbs": 1, "memory_gb": 1, "bf16_tflops": 1, '
                 '"pj_per_flop": 1}}}')
    proc = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--hardware",
                           str(p), "--trace", str(TRACE), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(p) in proc.stderr and "pj_per_flop is given but tdp_w is not" in proc.stderr


def test_gpu_energy_by_hand() -> None:
    """2 s, busy 1 s, 1e14 FLOPs and 1e12 bytes: 0.5 pJ x 1e14 = 50 J, 30 pJ x 1e12 = 30 J,
    60 W x 2 s = 120 J idle; ten times the FLOPs (530 J) passes the cap (400 - 60) W x 1 s =
    340 J: both parts shrink to it in proportion."""
    s = gpu_split(GPU, 2.0, 1.0, 1e14, 1e12)
    assert (s.gpu_compute_j, s.gpu_memory_j, s.gpu_idle_j) == pytest.approx((50, 30, 120))
    capped = gpu_split(GPU, 2.0, 1.0, 1e15, 1e12)
    assert capped.gpu_compute_j + capped.gpu_memory_j == pytest.approx(340)
    assert capped.gpu_compute_j / capped.gpu_memory_j == pytest.approx(500 / 30)
    two = gpu_split(GPU, 2.0, 1.0, 1e14, 1e12, count=2)
    assert two.gpu_idle_j == pytest.approx(240)
    with pytest.raises(EnergyError, match="GPU 'bare' has no power figures"):
        gpu_split(GpuHw("bare", hbm_gbs=1.0, memory_gb=1.0, bf16_tflops=1.0), 1, 1, 1, 1)


def test_engine_ops_and_pnm_energy_by_hand() -> None:
    """10 KV head-tokens in 2 clusters, 1 command, 2 query heads per KV head, head width 4:
    per query head 20 tokens, 4 clusters, 2 commands. bf16 products 20 x 4 = 80; fp32
    multiplies (4 + 1) x (20 + 4 + 2) = 130; fp32 adds 20 x 10 + 4 + 2 = 206; exp2 20 + 4;
    log2 and recip 2 each; 160 bytes buffered."""
    ops = EngineOps.of(10, 2, 1, group=2, head_dim=4, kv_bytes=160)
    assert (ops.bf16_mul, ops.fp32_mul, ops.fp32_add, ops.exp2, ops.log2, ops.recip,
            ops.sram_bytes) == (80, 130, 206, 24, 2, 2, 160)
    assert ops.energy_j(ONES) == pytest.approx((80 + 130 + 206 + 24 + 2 + 2 + 160) * 1e-12)
    # 2 s, 2 devices on 1 node, 1000 DDR5 bytes, 100 bytes each link, all figures 1
    s = pnm_split(ONES, 2.0, ops, 1000, devices=2, nodes=1, cxl_bytes=100, roce_bytes=100)
    assert s.ddr5_j == pytest.approx(1000e-12 + 1.0 * 2 * 2)  # reads + background
    assert s.cxl_j == s.roce_j == pytest.approx(800e-12)
    assert s.pnm_static_j == pytest.approx((1.0 + 1.0 * 2) * 2)
    counted = pnm_split(ONES, 2.0, ops, 1000, 2, 1, 100, 100, ddr5_counted_j=0.25)
    assert counted.ddr5_j == 0.25 and counted.cxl_j == s.cxl_j  # the count replaces it


def test_tiers_add_up_and_average_power_is_energy_over_time() -> None:
    d = EnergySplit(gpu_compute_j=10, gpu_idle_j=20)
    p = EnergySplit(gpu_memory_j=5)
    n = EnergySplit(pnm_engine_j=1, ddr5_j=2, cxl_j=3, roce_j=4, pnm_static_j=5)
    t = TierEnergy.of(10.0, 7, (2, d), (1, p), (1, 4, n))
    assert (t.decode_gpu_j, t.prefill_gpu_j, t.pnm_node_j) == (30, 5, 15)
    assert (t.decode_gpu_w, t.prefill_gpu_w, t.pnm_node_w, t.total_w) == (3, 0.5, 1.5, 5)
    assert t.total_j == t.split.total_j == 50 and t.j_per_output_token == pytest.approx(50 / 7)
    assert sum(t.split.figure11().values()) == pytest.approx(50)
    assert t.split.figure11()["links"] == 7 and t.split.figure11()["idle"] == 25
    assert json.dumps(t.as_dict())  # plain figures


def test_power_fit_recovers_known_coefficients() -> None:
    """Points from P = 50 W + 0.6 pJ/FLOP + 25 pJ/byte (with +-1 W of noise), one at the limit
    (left out): the fit gives the coefficients back."""
    import numpy as np

    rng = np.random.default_rng(0)
    pts = []
    for f, b in [(0, 0), (0, 3e12), (2e14, 1e11), (4e14, 2e11), (1e14, 1e12), (3e14, 5e11),
                 (5e14, 1e12)]:
        w = 50 + 0.6e-12 * f + 25e-12 * b + rng.normal(0, 1.0)
        pts.append(PowerPoint(f"{f:g}/{b:g}", f, b, min(w, 400)))
    pts.append(PowerPoint("at the limit", 9e14, 1e12, 400.0))
    fit = fit_power(pts, 400.0)
    assert fit.used == 7
    assert fit.idle_w == pytest.approx(50, abs=2)
    assert fit.pj_per_flop == pytest.approx(0.6, rel=0.02)
    assert fit.pj_per_hbm_byte == pytest.approx(25, rel=0.05)
    with pytest.raises(ValueError, match="at least 3"):
        fit_power(pts[:2], 400.0)
    with pytest.raises(ValueError, match="do not separate"):
        fit_power([PowerPoint("x", k * 1e14, k * 1e11, 60 + k) for k in range(4)], 400.0)


def test_step_energy_by_hand() -> None:
    """A co-simulation step of 2 us, waiting 0.5 us for the node: the GPU busy 1.5 us; its
    FLOPs and bytes, the node's KV bytes, clusters, commands and link bytes, all figures 1."""
    rep = StepReport(1, 1, step_ps=2_000_000, wait_ps=500_000, kv_bytes=1024, clusters=2,
                     node_commands=1, link_bytes=100, gpu_flops=1e6, hbm_bytes=1e4)
    s = step_energy(rep, GPU, ONES, group=2, head_dim=4, devices=2)
    assert s.gpu_compute_j == pytest.approx(1e6 * 0.5e-12)
    assert s.gpu_idle_j == pytest.approx(60 * 2e-6)
    ops = EngineOps.of(1024 / 16, 2, 1, 2, 4, 1024)  # a KV head-token: 2 x 4 bf16 = 16 bytes
    assert s.pnm_engine_j == pytest.approx(ops.energy_j(ONES))
    assert s.ddr5_j == pytest.approx(1024e-12 + 2 * 2e-6)
    assert s.roce_j == s.cxl_j == pytest.approx(800e-12)
    big = StepReport(1, 1, step_ps=2_000_000, wait_ps=500_000, gpu_flops=1e12)
    assert gpu_split(GPU, 2e-6, 1.5e-6, 1e12, 0).gpu_compute_j == pytest.approx(340 * 1.5e-6)
    assert step_energy(big, GPU, ONES, 2, 4, 2).gpu_compute_j == pytest.approx(340 * 1.5e-6)


def test_step_ddr5_from_counted_commands() -> None:
    """A step of 10 us at 800 MHz (8,000 cycles) on 2 devices of one sub-channel: device 0
    ran 3,000 cycles (its counters), device 1 nothing; the step's DDR5 is their counters by
    energy_of_counts plus 5,000 + 8,000 idle cycles (a REF each nREFI = 3,120 cycles: 4,
    nRFC each; precharged the rest),
    and replaces the average in the split. A reply from a device that does not count, or no
    reply, leaves the average."""
    from nelssa.host.gpu.report import Ddr5Meter
    from nelssa.hw.model.ddr5_energy import energy_of_counts
    from nelssa.hw.model.ddr5_subchannel import BankState
    from nelssa.hw.model.device import DeviceConfig

    meter = Ddr5Meter.of(DeviceConfig(subchannels=1))
    t, spec = meter.timing, meter.spec
    assert meter.clock_hz == 800_000_000 and t.nREFI == 12480
    row = [10, 9, 1, 40, 5, 0, 2500, 500, 0]  # ACT PRE PREA RD WR REF, active precharged refresh
    rep = StepReport(0, 1, step_ps=10_000_000, ddr5_counts={0: row}, kv_bytes=1 << 20)
    work = energy_of_counts(spec, t, {"ACT": 10, "PRE": 9, "PREA": 1, "RD": 40, "WR": 5},
                            {BankState.ACTIVE: 2500, BankState.PRECHARGED: 500}).total
    refreshing = 4 * t.nRFC // 4  # 13,000 idle cycles = 52,000 tCK: four REFs
    idle = energy_of_counts(spec, t, {"REF": 4}, {BankState.PRECHARGED: 13_000 - refreshing,
                                                  BankState.REFRESH: refreshing}).total
    j = meter.step_j(rep, devices=2)
    assert rep.ddr5_idle_cycles == 13_000
    assert j == pytest.approx(work + idle, rel=1e-12)
    s = step_energy(rep, GPU, ONES, group=2, head_dim=4, devices=2, ddr5_counted_j=j)
    assert s.ddr5_j == j and s.ddr5_j != step_energy(rep, GPU, ONES, 2, 4, 2).ddr5_j
    assert meter.step_j(StepReport(0, 1, step_ps=10_000_000, ddr5_counts={0: row},
                                   ddr5_uncounted=1), 2) is None
    assert meter.step_j(StepReport(1, 0, step_ps=10_000_000), 2) is None


@pytest.mark.parametrize("mode", ["gpu", "nelssa"])
def test_serving_energy_parts_add_up(cat, lm, mode: str) -> None:
    """A serve-sim run: every tier's parts add up to its total, power is energy over the run,
    joules per output token is the total over the tokens; GPU-only has no PNM tier."""
    from nelssa.emu.serving.config import ServingConfig
    from nelssa.emu.serving.power import run_energy
    from nelssa.emu.serving.sim import ServingSim
    from nelssa.emu.serving.workload import load_trace

    sim = ServingSim(lm, ServingConfig(mode=mode, t_input=4000, prefill="disaggregated",
                                       prefill_gpus=2))
    reqs = load_trace(TRACE, 40, hash_ids=True)
    run = sim.run(reqs)
    t = run_energy(run, sim.cost, energy_entry(cat))
    assert t.output_tokens == sum(r.output_len for r in run.results) > 0
    assert t.total_j == pytest.approx(t.decode_gpu_j + t.prefill_gpu_j + t.pnm_node_j)
    assert t.total_j == pytest.approx(t.split.total_j)
    assert t.total_w == pytest.approx(t.total_j / run.end_s)
    assert t.j_per_output_token == pytest.approx(t.total_j / t.output_tokens)
    assert t.prefill_gpus == 2 and t.prefill_gpu_j > 0 and t.decode_gpu_j > 0
    # the decode GPU never above its limit on average, never below idle
    assert lm.gpu.idle_w <= t.decode_gpu_w <= lm.gpu.tdp_w
    assert 0 < run.activity.busy_s <= run.end_s
    if mode == "gpu":
        assert t.pnm_nodes == 0 and t.pnm_node_j == 0
    else:
        assert t.pnm_nodes == 1 and t.pnm_devices == sim.cfg.devices
        assert run.activity.pnm_decodes > 0
        assert t.split.pnm_engine_j > 0 and t.split.roce_j > 0 and t.split.ddr5_j > 0


def test_calibrate_power_without_a_gpu_says_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    import torch

    from nelssa.experiments.calibrate_gpu import main

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: --power would measure it")
    with pytest.raises(SystemExit) as e:
        main(["--power", "--out", str(tmp_path / "g.json")])
    assert e.value.code == 2
    assert "--power: NVML samples a CUDA GPU's power, and there is none here" in (
        capsys.readouterr().err)
