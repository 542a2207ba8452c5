"""DRAMPower's formats (hw/model/drampower.py): a replay's command trace written as DRAMPower's CLI
CSV and read back to the same commands, the JSON memspec with every field DRAMPower 5's DDR5
schema (DRAMUtils MemSpecDDR5) requires, and the refusals of malformed traces and of the
``--command-trace`` option (scripts/ddr5_energy.py): a clear message, exit status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nelssa.experiments.ddr5_energy import main
from nelssa.hw.model import ddr5_replay as replay
from nelssa.hw.model import drampower
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_checker import DramCmd
from nelssa.hw.model.ddr5_device import TraceFormatError, write_loadstore_trace
from nelssa.hw.model.ddr5_energy import energy_of_counts, energy_of_trace
from nelssa.hw.model.ddr5_power import power_spec
from nelssa.hw.model.ddr5_timing import PRESETS

# DRAMUtils::Config::MemSpecDDR5's fields (github.com/tukl-msd/DRAMUtils,
# src/memspec/DRAMUtils/memspec/standards/MemSpecDDR5.h), the non-optional ones
SCHEMA = {
    "memarchitecturespec": "nbrOfChannels nbrOfDevices nbrOfRanks nbrOfDIMMRanks "
    "nbrOfPhysicalRanks nbrOfLogicalRanks nbrOfBanks nbrOfBankGroups nbrOfRows nbrOfColumns "
    "burstLength dataRate width cmdMode refMode RAAIMT RAAMMT RAADEC",
    "memtimingspec": "tCK RAS RCD RTP WL WR RP RFCsb RFC1 RFC2 PPD RL RPRE RPST RDDQS WPRE WPST "
    "CCD_L_slr CCD_L_WR_slr CCD_L_WR2_slr CCD_M_slr CCD_M_WR_slr CCD_S_slr CCD_S_WR_slr CCD_dlr "
    "CCD_WR_dlr CCD_WR_dpr RRD_L_slr RRD_S_slr RRD_dlr FAW_slr FAW_dlr WTR_L WTR_M WTR_S "
    "RFC1_slr RFC2_slr RFC1_dlr RFC2_dlr RFC1_dpr RFC2_dpr RFCsb_slr RFCsb_dlr REFI1 REFI2 "
    "REFISB REFSBRD_slr REFSBRD_dlr RTRS CPDED PD XP ACTPDEN PRPDEN REFPDEN",
    "mempowerspec": "vdd idd0 idd2n idd3n idd4r idd4w idd5c idd6n idd2p idd3p vpp ipp0 ipp2n "
    "ipp3n ipp4r ipp4w ipp5c ipp6n ipp2p ipp3p idd5b idd5f ipp5b ipp5f vddq",
    "memimpedancespec": "C_total_cb C_total_ck C_total_dqs C_total_rb C_total_wb R_eq_cb R_eq_ck "
    "R_eq_dqs R_eq_rb R_eq_wb",
}


def _run(tmp_path, subchannels=1):
    timing = PRESETS["ddr5-6400"]
    geo = DeviceGeometry(timing, subchannels)
    rng = np.random.default_rng(2)
    addrs = rng.integers(0, geo.capacity_bytes // 64, 2500) * 64
    writes = rng.random(addrs.size) < 0.3
    runs = replay.replay_device_runs(addrs, writes, geo, "mop4clxor", log=True)
    out = tmp_path / "cmds.csv"
    wrote = drampower.write_run(out, power_spec("ddr5-6400"), timing,
                                [(r.log.tolist(), sum(r.residency.values()) * 4) for r in runs])
    return timing, runs, out, wrote


def test_a_command_trace_reads_back_to_its_commands(tmp_path):
    timing, (run,), out, wrote = _run(tmp_path)
    assert wrote[0] == out and wrote[1].name == "cmds.memspec.json"
    commands, end = drampower.read_trace(out)
    assert end == sum(run.residency.values()) * 4
    # time order (a cycle's row command may precede its column command), the same commands
    want = sorted((tuple(r) for r in run.log.tolist()), key=lambda c: c[0])
    assert [tuple(int(x) for x in c) for c in commands] == want
    text = out.read_text().splitlines()
    rd = next(line for line in text if ",RD," in line).split(",")
    assert len(rd) == 8 and rd[2] == "0" and len(rd[7]) == 2 * timing.burst_bytes
    assert any(",REFA," in line for line in text) and text[-1].split(",")[1] == "END"
    # read back, it carries the run's energy
    spec = power_spec("ddr5-6400")
    back = energy_of_trace(spec, timing, [c[:4] for c in commands], end)
    counted = energy_of_counts(spec, timing, run.commands, run.residency)
    assert back.total == pytest.approx(counted.total, rel=0.02)


def test_a_device_run_writes_one_trace_per_subchannel(tmp_path):
    _, runs, _, wrote = _run(tmp_path, subchannels=8)
    traces = [p for p in wrote if p.suffix == ".csv"]
    assert [p.name for p in traces] == [f"cmds-sub{s}.csv" for s in range(8)]
    for p, r in zip(traces, runs, strict=True):
        assert len(drampower.read_trace(p)[0]) == sum(r.commands.values())


def test_the_memspec_has_drampowers_ddr5_fields(tmp_path):
    timing, _, _, wrote = _run(tmp_path)
    doc = json.loads(wrote[1].read_text())
    spec = doc["memspec"]
    assert spec["memoryType"] == "DDR5"
    for section, names in SCHEMA.items():
        assert set(names.split()) <= set(spec[section]), section
    arch, power, t = spec["memarchitecturespec"], spec["mempowerspec"], spec["memtimingspec"]
    # a 32-bit sub-channel of four x8 dies, 1 KiB pages, BL16
    assert (arch["nbrOfDevices"], arch["width"], arch["burstLength"]) == (4, 8, 16)
    assert arch["nbrOfColumns"] * arch["width"] // 8 * arch["nbrOfDevices"] == timing.row_bytes
    assert (arch["nbrOfBanks"], arch["nbrOfBankGroups"]) == (32, 8)
    assert t["tCK"] == pytest.approx(312.5e-12) and t["RFC1"] == timing.nRFC
    assert power["idd0"] == power_spec("ddr5-6400").idd0 and power["vpp"] == 1.8
    assert "idd0" in doc["nelssa_sources"]
    cfg = json.loads(wrote[2].read_text())
    assert cfg["useToggleRate"] is True


@pytest.mark.parametrize("line, why", [
    ("5,ACT,0,1,2", "5 fields"),
    ("5,FOO,0,1,2,3,0", "command 'FOO'"),
    ("x,ACT,0,1,2,3,0", "not a whole number"),
    ("5,RD,0,1,2,3,0", "RD needs its data"),
    ("5,RD,0,1,2,3,0,0g", "RD needs its data"),
    ("5,ACT,0,-1,2,3,0", "negative"),
])
def test_a_bad_trace_line_is_named(tmp_path, line, why):
    p = tmp_path / "bad.csv"
    p.write_text(f"1,PRE,0,0,0,0,0\n{line}\n9,END,0,0,0,0,0\n")
    with pytest.raises(TraceFormatError, match=rf"bad.csv:2: .*{why}"):
        drampower.read_trace(p)
    p.write_text("1,PRE,0,0,0,0,0\n")
    with pytest.raises(TraceFormatError, match="no END"):
        drampower.read_trace(p)
    p.write_text("9,PRE,0,0,0,0,0\n5,PRE,0,0,0,0,0\n9,END,0,0,0,0,0\n")
    with pytest.raises(TraceFormatError, match=r":2: timestamp 5 before"):
        drampower.read_trace(p)


def test_the_replay_command_writes_drampowers_files(tmp_path, capsys):
    trace = tmp_path / "ls.trace"
    write_loadstore_trace(trace, np.arange(600) * 64, np.arange(600) % 5 == 0)
    out = tmp_path / "run.csv"
    assert main(["--trace", str(trace), "--command-trace", str(out)]) == 0
    said = capsys.readouterr().out
    assert "600 requests" in said and "pJ per bit read" in said and str(out) in said
    commands, _ = drampower.read_trace(out)
    assert sum(c[1] in (DramCmd.RD, DramCmd.WR) for c in commands) == 600
    assert (tmp_path / "run.memspec.json").exists() and (tmp_path / "run.drampower.json").exists()


@pytest.mark.parametrize("argv, why", [
    (["--command-trace", "{tmp}/x.csv"], "--command-trace needs --trace"),
    (["--trace", "{trace}", "--command-trace", "{tmp}/no/such/x.csv"], "does not exist"),
    (["--trace", "{trace}", "--command-trace", "{tmp}"], "is a folder"),
    (["--trace", "{tmp}/missing.trace"], "missing.trace"),
    (["--trace", "{bad}"], r"bad.trace:1: expected 'LD <addr>'"),
    (["--requests", "0"], "--requests"),
])
def test_bad_options_and_files_exit_2_with_a_message(tmp_path, capsys, argv, why):
    trace = tmp_path / "ok.trace"
    write_loadstore_trace(trace, np.arange(8) * 64)
    bad = tmp_path / "bad.trace"
    bad.write_text("LOAD 12\n")
    args = [a.format(tmp=tmp_path, trace=trace, bad=bad) for a in argv]
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert why.replace("\\", "") in err or pytest.importorskip("re").search(why, err), err
    assert "Traceback" not in err


def test_a_trace_is_read_with_bounds(tmp_path):
    p = tmp_path / "long.csv"
    p.write_text("1,PRE,0,0,0,0,0," + "0" * 5000 + "\n9,END,0,0,0,0,0\n")
    with pytest.raises(TraceFormatError, match=r"long.csv:1: line longer than 1024"):
        drampower.read_trace(p)
    p.write_text("1,PRE,0,0,0,0,0\n" * 3 + "9,END,0,0,0,0,0\n")
    with pytest.raises(TraceFormatError, match="more than 2 lines"):
        drampower.read_trace(p, max_lines=2)
