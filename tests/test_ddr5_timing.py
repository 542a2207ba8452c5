"""DDR5 presets and the timing-rule checker: every rule fails one tCK early and passes on time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nelssa.hw.model.ddr5_checker import DDR5TimingChecker, DramCmd, TimingViolationError
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON, DDR5_6400AN_RAMULATOR2, preset

T = DDR5_6400_MICRON
ACT, RD, WR, PRE, PREA, REF = (DramCmd.ACT, DramCmd.RD, DramCmd.WR, DramCmd.PRE,
                               DramCmd.PREA, DramCmd.REF)


def test_reference_figures():
    assert T.burst_bytes == 64 and T.burst_cycles == 8 and T.banks == 32
    assert T.peak_bytes_per_s == pytest.approx(25.6e9)
    assert T.refresh_efficiency == pytest.approx(0.924, abs=5e-4)
    assert (DDR5_6400AN_RAMULATOR2.nRRD_S, DDR5_6400AN_RAMULATOR2.nFAW) == (16, 64)
    assert preset("ddr5-6400an") is DDR5_6400AN_RAMULATOR2
    with pytest.raises(KeyError, match="known: ddr5-6400, ddr5-6400an"):
        preset("ddr4")


@pytest.mark.parametrize(("change", "field"), [
    ({"nRC": 100}, "nRC"), ({"nCL": 0}, "nCL"), ({"nCCD_L": 4}, "nCCD_L"),
    ({"row_bytes": 100}, "row_bytes"), ({"name": ""}, "name")])
def test_validation_names_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        replace(T, **change)


# Each case: commands before the checked one, then the checked command at `base + gap`.
# (rule, setup [(cycle, cmd, bg, bank)], checked (cmd, bg, bank), base, gap)
CASES = [
    ("tRCD", [(0, ACT, 0, 0)], (RD, 0, 0), 0, T.nRCD),
    ("tRAS", [(0, ACT, 0, 0)], (PRE, 0, 0), 0, T.nRAS),
    ("tRP", [(0, ACT, 0, 0), (T.nRAS, PRE, 0, 0)], (ACT, 0, 0), T.nRAS, max(T.nRP, T.nRC - T.nRAS)),
    ("tRC", [(0, ACT, 0, 0), (T.nRAS, PRE, 0, 0)], (ACT, 0, 0), 0, T.nRC + 11),
    ("tRRD_S", [(0, ACT, 0, 0)], (ACT, 1, 0), 0, T.nRRD_S),
    ("tRRD_L", [(0, ACT, 0, 0)], (ACT, 0, 1), 0, T.nRRD_L),
    ("tFAW", [(0, ACT, 0, 0), (4, ACT, 1, 0), (8, ACT, 2, 0), (12, ACT, 3, 0)], (ACT, 4, 0), 0,
     T.nFAW),
    ("tCCD_S", [(0, ACT, 0, 0), (8, ACT, 1, 0), (100, RD, 0, 0)], (RD, 1, 0), 100, T.nCCD_S),
    ("tCCD_L", [(0, ACT, 0, 0), (16, ACT, 0, 1), (100, RD, 0, 0)], (RD, 0, 1), 100, T.nCCD_L),
    ("tCCD_L_WR", [(0, ACT, 0, 0), (16, ACT, 0, 1), (100, WR, 0, 0)], (WR, 0, 1), 100,
     T.nCCD_L_WR),
    ("tWTR_S", [(0, ACT, 0, 0), (8, ACT, 1, 0), (100, WR, 0, 0)], (RD, 1, 0), 100,
     T.write_to_read(False)),
    ("tWTR_L", [(0, ACT, 0, 0), (16, ACT, 0, 1), (100, WR, 0, 0)], (RD, 0, 1), 100,
     T.write_to_read(True)),
    ("tRTW", [(0, ACT, 0, 0), (8, ACT, 1, 0), (100, RD, 0, 0)], (WR, 1, 0), 100, T.read_to_write),
    ("tRTP", [(0, ACT, 0, 0), (200, RD, 0, 0)], (PRE, 0, 0), 200, T.nRTP),
    ("tWR", [(0, ACT, 0, 0), (200, WR, 0, 0)], (PRE, 0, 0), 200, T.write_to_precharge),
    ("tRFC", [(0, REF, 0, 0)], (ACT, 3, 2), 0, T.nRFC),
    ("CA", [(0, ACT, 0, 0)], (ACT, 1, 0), 0, 2),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_fails_one_cycle_early_and_passes_on_time(case):
    rule, setup, (cmd, bg, bank), base, gap = case
    # Both presets have nFAW = 4 nRRD_S and nRC = nRAS + nRP, so tFAW and tRC never bind alone
    # with them; those two cases use a timing where they do.
    t = {"CA": replace(T, nRRD_S=1), "tFAW": replace(T, nRRD_S=4),
         "tRC": replace(T, nRC=T.nRC + 11)}.get(rule, T)

    def run(at):
        chk = DDR5TimingChecker(t)
        for cycle, c, g, k in setup:
            chk.issue(cycle, c, g, k)
        chk.issue(at, cmd, bg, bank)

    run(base + gap)
    with pytest.raises(TimingViolationError) as err:
        run(base + gap - 1)
    assert err.value.violation.rule == rule
    assert f"bank group {bg} bank {bank}" in str(err.value) or rule in ("tRFC",)
    assert f"cycle {base + gap - 1}" in str(err.value)


def test_state_rules():
    chk = DDR5TimingChecker(T, strict=False)
    chk.issue(0, RD, 2, 3)  # column command to a precharged bank
    chk.issue(10, ACT, 2, 3, row=7)
    chk.issue(200, ACT, 2, 3, row=8)  # ACT to an open bank
    chk.issue(400, REF)  # REF with a bank open
    assert [v.rule for v in chk.violations] == ["state", "state", "state"]
    assert "row 7 open" in chk.violations[1].detail


def test_refresh_interval():
    chk = DDR5TimingChecker(T)
    limit = (T.max_postponed_refresh + 1) * T.nREFI
    chk.issue(limit, REF)
    with pytest.raises(TimingViolationError, match="tREFI"):
        chk.issue(2 * limit + 1, REF)
    assert DDR5TimingChecker(T, strict=False).finish(limit + 1)[0].rule == "tREFI"


def test_precharge_all_and_bad_input():
    chk = DDR5TimingChecker(T)
    chk.issue(0, ACT, 0, 0)
    chk.issue(8, ACT, 5, 2)
    chk.issue(T.nRAS + 8, PREA)
    assert all(r is None for r in chk.open_row)
    with pytest.raises(ValueError, match="out of order"):
        chk.issue(5, ACT, 1, 1)
    with pytest.raises(ValueError, match="bank group 8"):
        chk.issue(1000, ACT, 8, 0)
