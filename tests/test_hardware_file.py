"""One hardware description for every command (issue 41 item 4): files in JSON, YAML or TOML,
PNM entries whose bandwidth is measured on their device, model shapes from config.json files,
the use section, DDR5 speed grades, and the Done-when run of docs/examples/b200-ddr5-8000.yaml."""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import fields, replace
from pathlib import Path

import pytest
from cli_helpers import run_cli

from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel
from nelssa.hw.model.bandwidth import Workload, measure
from nelssa.hw.model.ddr5_timing import (
    DDR5_6400_MICRON,
    PRESETS,
    jedec_grade,
    with_overrides,
)
from nelssa.hw.model.device import DeviceConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "b200-ddr5-8000.yaml"
TRACE = ROOT / "tests" / "data" / "mooncake_conversation_head.jsonl"


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*words, cwd=ROOT)


def test_ddr5_grades_keep_6400_and_take_overrides():
    """jedec_grade(6400, CL46) is the DDR5-6400 preset field for field; the other grades
    scale its nanoseconds; overrides are checked by name."""
    g = jedec_grade(6400, 46)
    assert replace(g, name=DDR5_6400_MICRON.name) == DDR5_6400_MICRON
    t = PRESETS["ddr5-8000"]
    assert (t.tck_ps, t.nCL, t.nRCD, t.nCWL, t.nREFI) == (250, 56, 56, 54, 15600)
    assert t.peak_bytes_per_s == pytest.approx(32e9)
    assert list(PRESETS)[:2] == ["ddr5-6400", "ddr5-6400an"]  # the RTL's PresetId
    assert with_overrides(t, {"nRRD_S": 16}).nRRD_S == 16
    with pytest.raises(ValueError, match="unknown DDR5 timing field 'nXYZ'"):
        with_overrides(t, {"nXYZ": 1})
    with pytest.raises(ValueError, match="nRC"):
        with_overrides(t, {"nRC": 10})
    cfg = DeviceConfig(preset="ddr5-8000", ddr5_overrides=(("nFAW", 64),), engines=6)
    assert cfg.timing.nFAW == 64 and cfg.clock_hz == 1_000_000_000


def test_the_prototypes_device_measures_what_the_rtl_measured():
    """The cycle model at the workload point of scripts/calibrate_latency.py: within 1 % of the
    RTL's 177.2 GB/s the prototype states (the model's cycles are 0.4 % short of the RTL's)."""
    cat = HardwareCatalog.load()
    proto = cat.pnm["prototype"]
    m = measure(proto.device_config(), Workload())
    assert m.gbs == pytest.approx(proto.bw_eff_gbs, rel=0.01)
    assert m.timer == "cycle model" and "177.2" not in m.provenance()
    assert "24,339 cycles" in proto.bw_source  # the RTL run it was taken from
    lm = LatencyModel(cat.gpus["h100-nvl"], cat.pnm["ddr5-6400-4u"], cat.models["llama-3-8b"])
    assert lm.pnm.bw_eff_gbs == round(m.gbs, 2)  # the same point, from the cache
    assert "measured by the cycle model" in lm.pnm.bw_source


def test_one_description_in_json_yaml_and_toml(tmp_path):
    """The same entries in three formats load the same; errors name the file and field."""
    doc = {"pnm": {"p": {"device": {"units": 6, "ddr5": "ddr5-8000"}, "t_base_us": 1,
                         "t_dev_us": 0.15, "t_host_us": 0.4}},
           "models": {"m": {"preset": "llama-3-70b", "layers": 2}},
           "use": {"gpu": "b200", "pnm": "p", "model": "m"}}
    (tmp_path / "h.json").write_text(json.dumps(doc))
    (tmp_path / "h.yaml").write_text(
        "pnm:\n  p:\n    device: {units: 6, ddr5: ddr5-8000}\n    t_base_us: 1\n"
        "    t_dev_us: 0.15\n    t_host_us: 0.4\nmodels:\n  m: {preset: llama-3-70b, layers: 2}\n"
        "use: {gpu: b200, pnm: p, model: m}\n")
    (tmp_path / "h.toml").write_text(
        '[pnm.p]\ndevice = {units = 6, ddr5 = "ddr5-8000"}\nt_base_us = 1\nt_dev_us = 0.15\n'
        't_host_us = 0.4\n[models.m]\npreset = "llama-3-70b"\nlayers = 2\n'
        '[use]\ngpu = "b200"\npnm = "p"\nmodel = "m"\n')
    cats = [HardwareCatalog.load(tmp_path / f"h.{s}") for s in ("json", "yaml", "toml")]
    for c in cats:
        assert c.use == {"gpus": "b200", "pnm": "p", "models": "m"}
        assert c.pnm["p"] == cats[0].pnm["p"] and c.pnm["p"].device == cats[0].pnm["p"].device
        assert c.models["m"] == cats[0].models["m"]
    m = cats[0].models["m"]
    assert (m.layers, m.q_heads, m.kv_heads, m.head_dim, m.hf["hidden_size"]) == (
        2, 64, 8, 128, 8192)
    assert cats[0].pnm["p"].measured and cats[0].pnm["p"].capacity_gb == 68.72
    bad = tmp_path / "bad.yaml"
    for text, words in [
            ("pnm:\n  p: {device: {units: 7}, t_base_us: 1, t_dev_us: 1, t_host_us: 1}\n",
             ["[pnm]", "p", "device.units", "less than or equal to 6"]),
            ("pnm:\n  p: {device: {ddr5: ddr5-9999}, t_base_us: 1, t_dev_us: 1, t_host_us: 1}\n",
             ["device.ddr5", "unknown DDR5 grade 'ddr5-9999'"]),
            ("pnm:\n  p: {device: {ddr5_overrides: {nQQ: 3}}, t_base_us: 1, t_dev_us: 1, "
             "t_host_us: 1}\n", ["device.ddr5_overrides", "unknown DDR5 timing field 'nQQ'"]),
            ("pnm:\n  p: {t_base_us: 1, t_dev_us: 1, t_host_us: 1}\n",
             ["p: missing field 'bw_eff_gbs'"]),
            ("models:\n  m: {config: qwen2.5-7b, layers: 0}\n", ["[models]", "m", "layers"]),
            ("models:\n  m: {hf: {model_type: gpt2}}\n", ["model_type 'gpt2'"]),
            ("models:\n  m: {preset: mistral-7b, layers: 33}\n",
             ["layers 33: the shape has 32"]),
            ("models:\n  m: {preset: nope}\n", ["preset: 'nope' is not a model entry"]),
            ("use: {gpu: x900}\n", ["[use]", "gpu", "unknown gpu 'x900'"]),
            ("use: {cpu: x}\n", ["[use]", "cpu"]),
            ("pnm: [1\n", ["not valid YAML"])]:
        bad.write_text(text)
        with pytest.raises(ValueError) as e:
            HardwareCatalog.load(bad)
        assert str(bad) in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_commands_read_the_file_and_name_the_presets(tmp_path):
    """--help of each command lists the preset names; node up takes the PNM entry's device
    for what its options leave out; a broken file is one line naming it, exit 2."""
    from nelssa.cli import build_parser
    from nelssa.cli_node import resolve_device

    for words in (["decode"], ["crossover"], ["serve-sim"], ["node", "up"]):
        text = " ".join(_cli(*words, "--help").stdout.split())
        assert "ddr5-8000-6u" in text and "--hardware" in text, words
        if words != ["node", "up"]:
            assert "b200" in text and "llama-3-70b" in text, words
    parser = build_parser()
    args = parser.parse_args(["node", "up", "--hardware", str(EXAMPLE)])
    resolve_device(parser, args)
    assert (args.engines, args.preset, args.subchannels) == (6, "ddr5-8000", None)
    args = parser.parse_args(["node", "up", "--hardware", str(EXAMPLE), "--engines", "2",
                              "--pnm", "prototype"])
    resolve_device(parser, args)
    assert (args.engines, args.preset) == (2, "ddr5-6400")
    out = _cli("presets", "--no-sources").stdout
    cat = HardwareCatalog.load()
    for section in ("gpus", "pnm", "links", "models"):
        for name in getattr(cat, section):
            assert f" {name} " in out, name
    for name in PRESETS:
        assert f"ddr5  {name} " in out
    bad = tmp_path / "h.yaml"
    bad.write_text("gpus:\n  g: {hbm_gbs: 0, memory_gb: 1, bf16_tflops: 1}\n")
    for words in (["crossover"], ["decode"]):
        proc = _cli(*words, "--hardware", str(bad))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert str(bad) in proc.stderr and "hbm_gbs must be a positive number" in proc.stderr


def test_the_old_model_name_is_an_alias(caplog):
    from nelssa.host.gpu.config import PRESETS as SHAPES
    from nelssa.host.gpu.config import preset_name

    with caplog.at_level(logging.WARNING):
        assert preset_name("llama3-8b") == "llama-3-8b"
    assert "deprecated" in caplog.text and "llama3-8b" not in SHAPES


def test_serve_sim_uses_the_bandwidth_the_device_measured(tmp_path):
    """Done when: serve-sim with the example file gives (and prints) the PNM bandwidth the
    six-unit DDR5-8000 device's cycle model measures at the workload point."""
    cat = HardwareCatalog.load(EXAMPLE)
    pnm, model = cat.pnm[cat.use["pnm"]], cat.models[cat.use["models"]]
    assert pnm.device == {"units": 6, "ddr5": "ddr5-8000", "ddr5_overrides": {},
                          "subchannels": 8, "fp_latency": {}, "compute_lanes": 32}
    assert (cat.use["gpus"], model.layers, model.hf["num_hidden_layers"]) == ("b200", 2, 2)
    m = measure(DeviceConfig(engines=6, preset="ddr5-8000"), Workload(q_heads=8))
    proc = _cli("serve-sim", "--hardware", str(EXAMPLE), "--trace", str(TRACE), "--limit",
                "20", "--mode", "nelssa", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert f"PNM bandwidth {round(m.gbs, 2):g} GB/s per device: measured by the cycle model " \
           "on a model device (6 units, DDR5-8000" in proc.stdout, proc.stdout
    assert "llama-3-70b-2l on b200" in proc.stdout
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["nelssa"]["summary"]["requests"] == 20


def test_decode_runs_the_example_file(tmp_path):
    """Done when: `nelssa decode --hardware FILE` on model devices: a B200, a PNM device of 6
    units on DDR5-8000 (its 1 GHz clock from the grade), Llama-3-70B's widths cut to 2 layers
    (random weights, one set shared by both layers; prompts from the emulated prefill node)."""
    proc = _cli("decode", "--hardware", str(EXAMPLE), "--backend", "model", "--devices", "1",
                "--short", "1", "--long", "1", "--short-len", "8", "--long-len", "100",
                "--t-input", "90", "--steps", "2", "--weight-sets", "1", "--prefill",
                "emulated", "--no-accuracy", "--trace", str(tmp_path / "t.json"), "--plot",
                str(tmp_path / "p.png"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert ("llama 2 layers, 64 query / 8 KV heads x 128, hidden 8192, MLP 28672, vocabulary "
            "32000") in out and "GPU model b200" in out
    assert "'units': 6, 'ddr5': 'ddr5-8000'" in out and "link roce-400g" in out
    assert "-> PNM tier" in out and "total: " in out
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace


def test_every_field_is_documented():
    """Each field of the description's pydantic models says what it is (with its unit in
    its name or text), and the latency model's dataclasses document theirs."""
    from nelssa.config_args import field_docs
    from nelssa.emu.latency.description import ModelEntry, PnmDevice, Selection
    from nelssa.emu.latency.hardware import GpuHw, LinkHw, ModelHw, PnmHw

    for cls in (PnmDevice, ModelEntry, Selection):
        for name, f in cls.model_fields.items():
            assert f.description, (cls.__name__, name)
    for cls in (GpuHw, PnmHw, LinkHw, ModelHw):
        docs = field_docs(cls)
        for f in fields(cls):
            assert docs.get(f.name), (cls.__name__, f.name)


def test_decode_takes_any_gpu_entry_and_the_files_choices(tmp_path, monkeypatch):
    """A GPU of a --hardware file times the co-simulation (registered by name); the PNM entry
    it picks is what the node boots; the model entry is the decoder's shape."""
    from nelssa.cli import build_parser
    from nelssa.decode_hardware import gpu_pnm_link, model_config, node_device_args
    from nelssa.host.gpu import timing
    from nelssa.host.gpu.request import DecodeConfig
    from nelssa.host.gpu.timing import gpu_preset

    # the file's GPU is registered in the process-wide table: gone again after this test
    # (test_hardware_description holds the table to the catalog's presets)
    monkeypatch.setattr(timing, "GPUS", dict(timing.GPUS))

    f = tmp_path / "h.toml"
    f.write_text('[gpus.mine]\nhbm_gbs = 1000\nmemory_gb = 10\nbf16_tflops = 100\n'
                 '[models.q]\npreset = "qwen2.5-7b"\nlayers = 1\nvocab_size = 64\n'
                 '[use]\ngpu = "mine"\npnm = "ddr5-5600-4u"\nmodel = "q"\n')
    args = build_parser().parse_args(["decode", "--hardware", str(f)])
    _, gpu, pnm, link = gpu_pnm_link(args)
    assert (gpu, pnm.name, link) == ("mine", "ddr5-5600-4u", "roce-400g")
    assert gpu_preset(DecodeConfig(gpu=gpu).gpu).hw.hbm_gbs == 1000
    assert node_device_args(pnm) == ["--engines", "4", "--preset", "ddr5-5600",
                                      "--subchannels", "8"]
    c = model_config(args)
    assert (c.model_type, c.attention_bias, c.num_hidden_layers, c.vocab_size) == (
        "qwen2", True, 1, 64)
    args = build_parser().parse_args(["decode", "--hardware", str(f), "--model", "llama3-8b",
                                      "--layers", "1"])
    assert model_config(args).vocab_size == 32000  # the decoder's own llama-3-8b, as before


def test_sweep_reads_the_files_choices(tmp_path):
    """A sweep's points take the hardware file's use section where the spec names nothing."""
    import csv

    spec = tmp_path / "spec.toml"
    spec.write_text(f'trace = "{TRACE}"\nlimit = 10\n[grid]\ndevices = [1, 2]\n')
    proc = _cli("sweep", str(spec), "--hardware", str(EXAMPLE), "--workers", "1", "--out",
                str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert [(r["gpu"], r["pnm"], r["model"], r["devices"], r["status"]) for r in rows] == [
        ("b200", "six-unit-ddr5-8000", "llama-3-70b-2l", d, "ok") for d in ("1", "2")]


def test_a_pnm_entry_with_pipelined_units_boots_with_them(tmp_path, monkeypatch):
    """A description's fp_latency reaches `node up` (from the PNM entry, to every device
    process and rtl twin as `device serve --fp-latency`) and the devices it opens: the model
    device times the same latencies (CycleTiming.for_engine), the rtl device is built with
    them (tests/test_rtl_device_latency.py). Bad values name the option, exit 2."""
    from nelssa.cli import build_parser
    from nelssa.cli_node import _device_args, _device_config, resolve_device
    from nelssa.emu.latency.description import pnm_device
    from nelssa.hw.model.device_cycle import CycleTiming
    from nelssa.hw.model.engine import EngineParams, FpLatency
    from nelssa.hw.ports import PortOptions, open_port

    dev = {"units": 2, "ddr5": "ddr5-6400", "fp_latency": {"add": 3, "mul": 2, "log2": 0}}
    assert pnm_device(dev).node_args()[-2:] == ["--fp-latency", "add=3,mul=2"]
    f = tmp_path / "hw.yaml"
    f.write_text(f"pnm:\n  p: {{device: {json.dumps(dev)}, t_base_us: 1, t_dev_us: 1, "
                 "t_host_us: 1, bw_eff_gbs: 100}\n")
    parser = build_parser()
    args = parser.parse_args(["node", "up", "--hardware", str(f), "--pnm", "p"])
    resolve_device(parser, args)
    lat = FpLatency(add=3, mul=2)
    assert _device_config(args).engine.latency == lat
    assert _device_args(args) == ("--fp-latency", "add=3,mul=2")
    args = parser.parse_args(["node", "up", "--hardware", str(f), "--pnm", "p",
                              "--fp-latency", "exp2=4"])
    resolve_device(parser, args)  # the option wins over the entry
    assert _device_config(args).engine.latency == FpLatency(exp2=4)
    port = open_port("model", PortOptions(engines=2, fp_latency=(("add", 3), ("mul", 2))))
    assert port.config.engine.latency == lat
    assert port.schedule.timing == CycleTiming.load().for_engine(EngineParams(latency=lat))
    assert port.schedule.timing != CycleTiming.load()
    built = {}  # the rtl opener builds its device with them (no build here: recorded)
    monkeypatch.setattr("nelssa.hw.sim.device.RtlDevice", lambda *a, **kw: built.update(kw))
    open_port("rtl", PortOptions(engines=1, fp_latency=(("add", 3), ("mul", 2))))
    assert built == {"units": 1, "engine": EngineParams(latency=lat)}
    for bad, words in (("add=16", "fp latency add: an integer in 0..15"),
                       ("adder=1", "unknown unit kind 'adder'"), ("add=x", "KIND=N"),
                       ("add=1,add=2", "add given twice")):
        proc = _cli("device", "serve", "--fp-latency", bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "argument --fp-latency" in proc.stderr and words in proc.stderr, proc.stderr


def test_a_pnm_entry_with_narrow_engines_boots_and_measures_with_them(tmp_path, monkeypatch):
    """A description's compute_lanes reaches `node up` (as `device serve --compute-lanes`), the
    devices it opens (the model times the narrow datapath, the rtl device is built with it) and
    the bandwidth its cycle model measures: one lane a cycle cannot keep up with DDR5. Bad values
    name the option or the field, exit 2."""
    from nelssa.cli import build_parser
    from nelssa.cli_node import _device_args, _device_config, resolve_device
    from nelssa.emu.latency.description import DescriptionError, pnm_device
    from nelssa.hw.model.device_cycle import CycleTiming
    from nelssa.hw.model.engine import EngineParams
    from nelssa.hw.ports import PortOptions, open_port

    dev = {"units": 1, "ddr5": "ddr5-6400", "compute_lanes": 4}
    assert pnm_device(dev).node_args()[-2:] == ["--compute-lanes", "4"]
    assert "--compute-lanes" not in pnm_device({"units": 1}).node_args()
    f = tmp_path / "hw.yaml"
    f.write_text(f"pnm:\n  p: {{device: {json.dumps(dev)}, t_base_us: 1, t_dev_us: 1, "
                 "t_host_us: 1}\n")
    parser = build_parser()
    args = parser.parse_args(["node", "up", "--hardware", str(f), "--pnm", "p"])
    resolve_device(parser, args)
    assert _device_config(args).engine == EngineParams(compute_lanes=4)
    assert _device_args(args) == ("--compute-lanes", "4")
    args = parser.parse_args(["node", "up", "--hardware", str(f), "--pnm", "p",
                              "--compute-lanes", "32"])
    resolve_device(parser, args)  # the option wins over the entry
    assert _device_config(args).engine == EngineParams() and _device_args(args) == ()
    port = open_port("model", PortOptions(engines=1, compute_lanes=4))
    assert port.schedule.timing == CycleTiming.load().for_engine(EngineParams(compute_lanes=4))
    assert port.schedule.timing != CycleTiming.load()
    built = {}  # the rtl opener builds its device with them (no build here: recorded)
    monkeypatch.setattr("nelssa.hw.sim.device.RtlDevice", lambda *a, **kw: built.update(kw))
    open_port("rtl", PortOptions(engines=1, compute_lanes=4))
    assert built == {"units": 1, "engine": EngineParams(compute_lanes=4)}
    # the entry's bandwidth is measured on its narrow device
    cat = HardwareCatalog.load(f)
    wide = measure(DeviceConfig(engines=1), Workload()).gbs
    narrow = measure(cat.get("pnm", "p").device_config(), Workload()).gbs
    assert narrow < wide / 2, (narrow, wide)
    for bad in ("3", "64", "x"):
        proc = _cli("device", "serve", "--compute-lanes", bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "argument --compute-lanes: must be one of 1, 2, 4, 8, 16, 32" in proc.stderr
    with pytest.raises(DescriptionError, match=r"device\.compute_lanes: must be one of"):
        pnm_device({"compute_lanes": 3})
