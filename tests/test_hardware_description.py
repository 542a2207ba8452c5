"""Each hardware number lives once and every reader takes it from there (issue 22, Build 3)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from nelssa.driver import regs
from nelssa.hw.model.device import DeviceConfig
from nelssa.hw.sim.device import RTL_MAX_UNITS, build_library

ROOT = Path(__file__).resolve().parents[1]


def _help(*words: str) -> str:
    return subprocess.run([sys.executable, "-m", "nelssa.cli", *words, "--help"],
                          capture_output=True, text=True, check=True).stdout


def test_engine_limits_come_from_the_register_map_and_the_rtl():
    """CAPS [3:0] bounds the model and a board; the RTL's own check bounds the rtl backend."""
    assert regs.unpack_caps(regs.pack_caps(regs.CAPS_MAX_ENGINES, 8, (128,), 64))["engines"] \
        == regs.CAPS_MAX_ENGINES
    DeviceConfig(engines=regs.CAPS_MAX_ENGINES)
    with pytest.raises(ValueError, match=f"engines must be 1..{regs.CAPS_MAX_ENGINES}"):
        DeviceConfig(engines=regs.CAPS_MAX_ENGINES + 1)
    with pytest.raises(ValueError, match=f"units must be 1..{RTL_MAX_UNITS}"):
        build_library(units=RTL_MAX_UNITS + 1)
    sv = (ROOT / "rtl" / "top" / "nelssa_device.sv").read_text()
    assert re.search(r"NumUnits < 1 \|\| NumUnits > (\d+)", sv).group(1) == str(RTL_MAX_UNITS)
    limits = f"1..{regs.CAPS_MAX_ENGINES}; rtl: 1..{RTL_MAX_UNITS}"
    for words in (("node", "up"), ("device", "serve")):
        assert limits in " ".join(_help(*words).split()), words


def test_core_clock_is_the_dram_clock_over_the_controller_ratio():
    from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE
    from nelssa.hw.model.ddr5_timing import PRESETS
    from nelssa.hw.model.device import SIM_CLOCK_HZ

    for name in PRESETS:
        assert DeviceConfig(preset=name).clock_hz == round(
            1e12 / (PRESETS[name].tck_ps * TCK_PER_CYCLE))
    clocks = {name: DeviceConfig(preset=name).clock_hz / 1e6 for name in PRESETS}
    assert clocks == {"ddr5-6400": 800, "ddr5-6400an": 800, "ddr5-4800": 600,
                      "ddr5-5600": 700, "ddr5-8000": 1000}
    assert DeviceConfig().clock_hz == SIM_CLOCK_HZ


def test_link_presets_are_the_link_layers_table():
    from nelssa.emu.latency.hardware import PRESETS_FILE, HardwareCatalog
    from nelssa.emu.link.model import GPU_PNM_LINKS, PRESETS

    assert "links" not in PRESETS_FILE.read_text()
    links = HardwareCatalog.load().links
    assert sorted(links) == sorted(GPU_PNM_LINKS) and "roce-400g" in links
    for name, hw in links.items():
        assert (hw.gbps, hw.latency_us * 1000) == (PRESETS[name].bandwidth_gbps,
                                                   PRESETS[name].latency_ns)


def test_cosim_gpu_timing_reads_the_latency_models_gpu_description(tmp_path):
    """Same presets, same fields: a user file changes the co-simulation's GPU as it changes the
    latency model's."""
    import json

    from nelssa.emu.latency.hardware import HardwareCatalog
    from nelssa.host.gpu.timing import GPUS, gpu_preset

    cat = HardwareCatalog.load()
    assert cat.gpus == GPUS
    g = cat.gpus["h100-nvl"]
    t = gpu_preset("h100-nvl")
    assert t.hw is GPUS["h100-nvl"]
    assert t.op_ps(3.9e9 * 0.8) == round(1e12 * 3.9e9 * 0.8 / (g.hbm_gbs * 1e9 * g.mem_efficiency))
    assert t.op_ps(0, 2e12) == round(1e12 * 2e12 / (g.bf16_tflops * 1e12 * g.linear_efficiency))
    assert t.step_overhead_ps == round(g.kernel_us * 1e6)
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"gpus": {"h100-nvl": {"hbm_gbs": 1000, "memory_gb": 94,
                                                   "bf16_tflops": 835, "kernel_us": 3,
                                                   "mem_efficiency": 1}}}))
    mine = gpu_preset("h100-nvl", HardwareCatalog.load(f))
    assert mine.op_ps(1e9) == 1_000_000_000 and mine.step_overhead_ps == 3_000_000
    with pytest.raises(ValueError, match="unknown GPU 'x'"):
        gpu_preset("x")


def test_clustering_and_window_defaults_are_the_sparsity_settings():
    from nelssa.emu.latency.model import Sparsity
    from nelssa.host.gpu.clustering import ClusterConfig
    from nelssa.host.gpu.request import DecodeConfig
    from nelssa.hw.model.engine import EngineParams

    s, c, d = Sparsity(), ClusterConfig(), DecodeConfig()
    assert (c.tokens_per_cluster, c.segment_tokens, c.iterations) == (
        s.compression, s.segment_tokens, s.kmeans_iterations) == (16, 8192, 10)
    assert (d.selection, d.sink, d.recent, d.chunk) == (
        s.selection, s.sink_tokens, s.recent_tokens, s.chunk_tokens) == (0.04, 4, 64, 1024)
    assert s.window_tokens == 4 + 64 + 1024
    caps = regs.unpack_caps(DeviceConfig().caps)
    assert c.max_cluster_tokens == caps["max_cluster_tokens"] == EngineParams().max_cluster_tokens
    with pytest.raises(ValueError, match="chunk_tokens must be a positive integer, got 0"):
        Sparsity(chunk_tokens=0)


def test_serving_emulator_reads_the_same_window_and_link():
    from dataclasses import replace

    from nelssa.emu.latency.hardware import HardwareCatalog
    from nelssa.emu.latency.model import LatencyModel, Sparsity
    from nelssa.emu.link.model import link_preset
    from nelssa.emu.serving.config import ServingConfig
    from nelssa.emu.serving.cost import CostModel

    cfg = ServingConfig()
    assert cfg.window_tokens == Sparsity().window_tokens
    assert cfg.link_gbs == link_preset("roce-400g").bandwidth_gbps / 8
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.gpus["h100-nvl"], cat.pnm["prototype"], cat.models["llama-3-8b"])
    few = replace(lm, sparsity=Sparsity(kmeans_iterations=1, sink_tokens=0, recent_tokens=0))
    args = (4, cfg.window_tokens, cfg.pcie_gbs, cfg.link_gbs)
    assert CostModel(few, *args).migration_s(1000) < CostModel(lm, *args).migration_s(1000)
    assert CostModel(few, *args).pnm_resident_tokens(10_000) + 68 == \
        CostModel(lm, *args).pnm_resident_tokens(10_000)


def test_cli_defaults_and_help_come_from_the_config_dataclasses():
    """`crossover` and `serve-sim` restate no default: each option's default and help text are
    its field's (nelssa.config_args)."""
    from dataclasses import fields

    from nelssa.cli import build_parser
    from nelssa.cli_latency import SPARSITY_OPTIONS
    from nelssa.cli_serving import SERVING_OPTIONS
    from nelssa.config_args import field_docs
    from nelssa.emu.latency.model import Sparsity
    from nelssa.emu.serving.config import ServingConfig

    trace = ROOT / "tests" / "data"
    trace = next(trace.glob("*.jsonl"), None) or Path(__file__)
    parser = build_parser()
    crossover = parser.parse_args(["crossover"])
    serve = parser.parse_args(["serve-sim", "--trace", str(trace)])
    for cls, names, args in ((Sparsity, SPARSITY_OPTIONS, crossover),
                             (Sparsity, ("selection",), serve),
                             (ServingConfig, SERVING_OPTIONS, serve)):
        defaults = {f.name: f.default for f in fields(cls)}
        for name in names:
            assert getattr(args, name) == defaults[name], (cls.__name__, name)
    text = " ".join(_help("serve-sim").split())
    for name in ("devices", "max_running", "migrate_at"):
        assert field_docs(ServingConfig)[name] in text, name
    assert field_docs(Sparsity)["selection"] in " ".join(_help("crossover").split())
    with pytest.raises(SystemExit):
        parser.parse_args(["serve-sim", "--trace", str(trace), "--migrate-at", "2"])


def test_the_gpu_node_takes_the_devices_facts_from_their_registers() -> None:
    """DecodeEngine reads the node's STATUS: each device's CAPS and the core clock. Clusters
    are cut to the shortest limit of the devices up, and a model they cannot run (head_dim,
    query heads per KV head) is refused naming the limit, before any KV is written."""
    from dataclasses import replace as _replace

    from nelssa.driver.regs import unpack_caps
    from nelssa.host.gpu.config import LlamaConfig
    from nelssa.host.gpu.executor import fit_to_devices
    from nelssa.host.gpu.request import DecodeConfig
    from nelssa.host.pnm_node.client import DeviceInfo, NodeStatus

    def status(*words: int, alive: bool = True) -> NodeStatus:
        devs = [DeviceInfo(i, alive, "e", "model", 1, 0, 0, 0, 0, 0, unpack_caps(w), "")
                for i, w in enumerate(words)]
        return NodeStatus("v", "roce-400g", 0, 0, 0, 300e6, 0, 0, 0, 0, devs)

    c = LlamaConfig()
    cfg = DecodeConfig()
    full = 0x0040_0376  # 64-token clusters, 8 query heads, head_dim 64 and 128, 6 engines
    short = (full & 0xFFFF) | 32 << 16
    got, clock = fit_to_devices(c, cfg, status(full, short))
    assert got.cluster.max_cluster_tokens == min(32, cfg.cluster.max_cluster_tokens)
    assert clock == 300e6
    assert fit_to_devices(c, cfg, status(full))[0] == cfg
    no_dim = full & ~(0b11 << 8)
    with pytest.raises(ValueError, match=f"head_dim {c.head_dim}: the node's devices take"):
        fit_to_devices(c, cfg, status(no_dim))
    few = full & ~(0xF << 4)  # one query head per KV head
    with pytest.raises(ValueError, match="query heads per KV head: the node's devices take"):
        fit_to_devices(_replace(c), cfg, status(few))
    with pytest.raises(ValueError, match="no device up"):
        fit_to_devices(c, cfg, status(full, alive=False))
