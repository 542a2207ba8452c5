"""DDR5 energy (hw/model/ddr5_energy.py) from the memory specifications (ddr5_power.py): the
arithmetic by hand at small scale, a run's counted energy against the energy of its command
stream followed tCK by tCK (the issue's 2 %), on the open-loop replay and on the model device's
cycle model; and the specifications' checks and sources. (tests/rtl/test_ddr5_ctrl.py holds the
RTL controller's counters to the cycle model's.)"""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.hw.model import ddr5_replay as replay
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_checker import DramCmd
from nelssa.hw.model.ddr5_energy import (
    EnergyPart,
    command_energies,
    energy_of_counts,
    energy_of_trace,
)
from nelssa.hw.model.ddr5_patterns import benchmark_patterns, random_blocks
from nelssa.hw.model.ddr5_power import ESTIMATE, POWER_SPECS, DDR5PowerSpec, power_spec
from nelssa.hw.model.ddr5_subchannel import BankState
from nelssa.hw.model.ddr5_timing import PRESETS, DDR5Timing

# a small part with round numbers: 1 ns tCK, two dies
TINY_T = DDR5Timing(name="tiny", tck_ps=1000.0, nRAS=10, nRP=5, nRC=15, nRFC=20, nRCD=5, nCL=5,
                    nCWL=5)
TINY = DDR5PowerSpec(name="tiny", vdd=1.0, vpp=2.0, vddq=1.0, idd0=0.05, idd2n=0.02,
                     idd3n=0.03, idd4r=0.13, idd4w=0.11, idd5b=0.23, ipp0=0.004, ipp2n=0.001,
                     ipp3n=0.002, ipp4r=0.002, ipp4w=0.003, ipp5b=0.012, r_on_ohm=30,
                     r_tt_ohm=20, devices=2)


def test_the_arithmetic_by_hand():
    """3 ACT, 2 PRE, 1 PREA, 4 RD, 2 WR, 1 REF; 10 cycles active, 5 precharged, 6 refreshing
    (4 tCK a cycle), every product written out in nanoseconds, amperes and volts (nJ)."""
    counts = {"ACT": 3, "PRE": 2, "PREA": 1, "RD": 4, "WR": 2, "REF": 1}
    residency = {BankState.ACTIVE: 10, BankState.PRECHARGED: 5, BankState.REFRESH: 6}
    e = energy_of_counts(TINY, TINY_T, counts, residency)
    # per die, VDD 1 V and VPP 2 V; nJ = V x A x ns
    act = 1 * (0.05 - 0.03) * 10 + 2 * (0.004 - 0.002) * 10      # 0.24
    pre = 1 * (0.05 - 0.02) * 5 + 2 * (0.004 - 0.001) * 5        # 0.18
    rd = 1 * (0.13 - 0.03) * 8 + 2 * (0.002 - 0.002) * 8         # 0.8 (a burst: 8 tCK)
    wr = 1 * (0.11 - 0.03) * 8 + 2 * (0.003 - 0.002) * 8         # 0.656
    ref = 1 * (0.23 - 0.03) * 20 + 2 * (0.012 - 0.002) * 20      # 4.4
    busy = (10 + 6) * 4 * (1 * 0.03 + 2 * 0.002)                 # 2.176
    idle = 5 * 4 * (1 * 0.02 + 2 * 0.001)                        # 0.44
    io_bit = 0.5 * 1.0 ** 2 / (30 + 20) * 0.5                    # nJ: half of 1 ns a bit
    want = {EnergyPart.ACT_PRE: 2 * (3 * act + 3 * pre), EnergyPart.READ: 2 * 4 * rd,
            EnergyPart.WRITE: 2 * 2 * wr, EnergyPart.BACKGROUND: 2 * (busy + idle),
            EnergyPart.REFRESH: 2 * ref, EnergyPart.IO: 6 * 64 * 8 * io_bit}
    for part, nj in want.items():
        assert e.parts[part] * 1e9 == pytest.approx(nj, rel=1e-9), part
    assert e.total * 1e9 == pytest.approx(sum(want.values()), rel=1e-9)
    assert e.per_bit_read_pj() == pytest.approx(sum(want.values()) * 1e3 / (4 * 64 * 8))
    # the energies the page quotes per command are the same numbers
    ce = command_energies(TINY, TINY_T)
    assert (ce.act + ce.pre) * 1e9 == pytest.approx(2 * (act + pre))


def test_the_trace_walk_counts_what_the_commands_say():
    """One bank opened at 0 and closed at 40, a REF at 60 (nRFC 20), the run ends at 100: 40 tCK
    active, 20 refreshing, 40 precharged."""
    cmds = [(0, DramCmd.ACT, 1, 2), (20, DramCmd.RD, 1, 2), (40, DramCmd.PRE, 1, 2),
            (60, DramCmd.REF, 0, 0)]
    e = energy_of_trace(TINY, TINY_T, cmds, 100)
    assert e.residency_tck == {BankState.ACTIVE: 40, BankState.REFRESH: 20,
                               BankState.PRECHARGED: 40}
    assert e.commands == {"ACT": 1, "PRE": 1, "PREA": 0, "RD": 1, "WR": 0, "REF": 1}
    # the same counts, in cycles of 4 tCK, give the same energy
    counted = energy_of_counts(TINY, TINY_T, e.commands, {s: n // 4 for s, n in
                                                          e.residency_tck.items()})
    assert counted.total == pytest.approx(e.total, rel=1e-12)


@pytest.mark.parametrize("pattern", ["sequential", "random 64 B", "random 4 KB"])
def test_a_runs_counted_energy_is_its_command_streams(pattern):
    """The issue's check: the energy of a DDR5 run (its command stream, bank states followed
    tCK by tCK) equals within 2 % its counted commands and residencies times the spec's
    energies; with reads and writes, refresh included (3,000 requests, several nREFI)."""
    timing = PRESETS["ddr5-6400"]
    geo = DeviceGeometry(timing, 1)
    rng = np.random.default_rng(4)
    addrs = benchmark_patterns(3000, geo, rng)[pattern]
    writes = rng.random(addrs.size) < 0.3
    run = replay.replay_device_runs(addrs, writes, geo, "mop4clxor", lines_per_cycle=1,
                                    log=True)[0]
    assert run.commands["REF"] >= 1 and run.commands["WR"] > 0
    spec = power_spec("ddr5-6400")
    counted = energy_of_counts(spec, timing, run.commands, run.residency)
    end = sum(run.residency.values()) * 4
    walked = energy_of_trace(spec, timing, [tuple(r[:4]) for r in run.log], end)
    assert walked.commands == {**run.commands, "PREA": 0}
    assert counted.total == pytest.approx(walked.total, rel=0.02)
    for part in EnergyPart:
        assert counted.parts[part] == pytest.approx(walked.parts[part], rel=0.02, abs=1e-12)


def test_the_model_devices_counters_match_its_commands():
    """The device's cycle model (eight controllers beside the units, idle stretches skipped):
    its counters equal its logged commands, and their energies agree within 2 %."""
    from nelssa.hw.model.device import ModelDevice
    from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload

    model = ModelDevice()
    model.schedule.log_commands()
    w = TimingWorkload(seed=1, head_dim=128, q_heads=2, requests=1, clusters=40, selected=40,
                       max_tokens=64, traffic_bytes=1 << 14)
    run_workload(model, w, start_at=20_000)  # an idle stretch first: refresh while skipped
    now = model.schedule.now
    spec = power_spec(model.config.preset)
    timing = model.geometry.timing
    refreshes = 0
    for sub, (commands, residency) in enumerate(model.schedule.ddr5_counts()):
        assert sum(residency.values()) == now
        log = model.schedule.take_commands(sub)
        assert {c.name: int((log[:, 1] == int(c)).sum()) for c in DramCmd if c.name in
                commands} == commands
        walked = energy_of_trace(spec, timing, [tuple(r[:4]) for r in log], now * 4)
        counted = energy_of_counts(spec, timing, commands, residency)
        assert counted.total == pytest.approx(walked.total, rel=0.02)
        refreshes += commands["REF"]
    assert refreshes >= 8  # every sub-channel refreshed during the skipped idle cycles
    assert model.schedule.take_commands(0).shape == (0, 5)  # taken: gone


def test_every_preset_has_a_sourced_power_spec():
    assert set(POWER_SPECS) == set(PRESETS)
    for name, spec in POWER_SPECS.items():
        numeric = {f for f in spec.__dataclass_fields__ if f not in ("name", "source")}
        assert numeric <= set(spec.sources()), name
        assert all(spec.sources()[f] for f in numeric)
    # the voltages are JEDEC's, the currents are marked estimates
    s = POWER_SPECS["ddr5-6400"]
    assert "JESD79-5" in s.sources()["vdd"] and ESTIMATE in s.sources()["idd0"]
    # a faster grade: more burst current, the same burst energy; the background unchanged
    slow, fast = POWER_SPECS["ddr5-4800"], POWER_SPECS["ddr5-8000"]
    assert fast.idd4r > slow.idd4r and fast.idd3n == slow.idd3n
    e_slow = command_energies(slow, PRESETS["ddr5-4800"]).rd
    e_fast = command_energies(fast, PRESETS["ddr5-8000"]).rd
    assert e_fast == pytest.approx(e_slow, rel=0.02)
    with pytest.raises(KeyError, match=r"ddr5-9999.*ddr5-6400"):
        power_spec("ddr5-9999")


def test_a_spec_refuses_impossible_currents():
    with pytest.raises(ValueError, match="idd2n must not exceed idd3n"):
        DDR5PowerSpec(name="bad", idd2n=0.07, idd3n=0.06)
    with pytest.raises(ValueError, match="vdd must be positive"):
        DDR5PowerSpec(name="bad", vdd=0)


def test_more_row_misses_cost_more_per_bit():
    """Energy follows the ACT count: random lines (an ACT each) cost more per bit read than
    2 KiB blocks, which cost about what sequential reads do."""
    timing = PRESETS["ddr5-6400"]
    geo = DeviceGeometry(timing, 1)
    spec = power_spec("ddr5-6400")
    rng = np.random.default_rng(1)
    pats = benchmark_patterns(4000, geo, rng)
    pats["2 KiB blocks"] = random_blocks(4000, 2048, geo, rng)

    def pj(addrs):
        run = replay.replay_device_runs(addrs, None, geo, "mop4clxor")[0]
        return energy_of_counts(spec, timing, run.commands, run.residency).per_bit_read_pj()

    got = {k: pj(pats[k]) for k in ("sequential", "random 64 B", "2 KiB blocks")}
    assert got["random 64 B"] > 1.15 * got["2 KiB blocks"]
    assert got["2 KiB blocks"] < 1.15 * got["sequential"]
