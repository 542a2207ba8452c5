"""The counted bounds of the timing estimate (``estimate_device(method="counted")``: its
fallback where the compiled replay cannot be built): their counts on hand-made streams, and
their cycles against the cycle model (command-identical to the RTL) on patterns they were not
fitted on. Every test here runs the counted bounds (``_counted_bounds`` makes them the default
in this module, whatever the machine); the replay, estimate_device's default where g++ is at
hand, is held to the cycle model exactly by tests/test_ddr5_replay.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nelssa.hw.model import ddr5_replay as replay
from nelssa.hw.model.ddr5_addr import ALL_ADDRESS_MAPS, Decoded, DeviceGeometry, encode
from nelssa.hw.model.ddr5_device import run_device
from nelssa.hw.model.ddr5_estimate import (
    CALIBRATION_FILE,
    calibrated_presets,
    coefficients_for,
    count_subchannels,
    estimate_device,
)
from nelssa.hw.model.ddr5_patterns import (
    PATTERN_KINDS,
    benchmark_patterns,
    calibration_patterns,
    generated_pattern,
    random_blocks,
)
from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON, PRESETS

CALIBRATED = calibrated_presets()
"""The grades the counted bounds are calibrated for (the others are timed by the replay)."""


@pytest.fixture(autouse=True, scope="module")
def _counted_bounds():
    """estimate_device's default ("auto") is the counted bounds in this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay, "available", lambda: False)
        yield


def _addrs(geo, sub, bg, bank, row, col):
    d = Decoded(*(np.asarray(x, dtype=np.int64) for x in (sub, bg, bank, row, col)))
    return encode(d, geo)


def test_counts_of_a_hand_made_stream():
    geo = DeviceGeometry(DDR5_6400_MICRON)
    # sub-channel 2: bank (0,0) rows 5,5,6,5 -> 3 activations; bank (1,3) row 9 twice -> 1
    # sub-channel 7: one write
    a = _addrs(geo, [2, 2, 2, 2, 2, 2, 7], [0, 0, 0, 1, 1, 0, 4], [0, 0, 0, 3, 3, 0, 1],
               [5, 5, 6, 9, 9, 5, 0], [0, 1, 2, 3, 4, 5, 6])
    w = np.array([0, 0, 1, 0, 0, 0, 1], bool)
    counts = count_subchannels(a, w, geo, lines_per_cycle=1)
    assert [i for i, c in enumerate(counts) if c] == [2, 7]
    c = counts[2]
    # the controller reorders within its window: bank (0,0) reads row 5 once (3 hits) and writes
    # row 6 once: 2 visits; bank (1,3): 1
    assert (c.requests, c.writes, c.activations) == (6, 1, 3)
    assert (c.busiest_group, c.busiest_bank_acts, c.last_arrival) == (4, 2, 5)
    assert c.switches == 2  # read, read, write, read, ...
    # bank group 0: 3 reads tCCD_L (16) apart and a write tCCD_L_WR (64): 112 tCK
    assert c.group_tck == 3 * 16 + 64
    # bank (0,0): row 5's visit 46 (tRCD) + 3 x 16 + 24 (tRTP) + 46 (tRP) - 16 = 148, row 6's
    # one write 46 + 148 (write to precharge: 44 + 8 + 96) + 46 = 240 (ACT, WRITE at tRCD, PRE
    # after the write recovery, tRP; was charged 288, a tCCD_L_WR less a tCCD_L too much)
    assert c.bank_tck == 148 + 240
    assert counts[7].writes == 1 and counts[7].last_arrival == 6


def test_k_and_v_in_one_bank_switch_rows_as_the_cycle_model_does():
    """K and V of a cluster in the same bank, other rows, a few lines of each in turn: with
    the other row waiting, a row closes as soon as the queue holds none of its requests, so it
    does not last into the next window (the estimate counted 216 ACTs where the cycle model
    issues 288 on 64-line clusters, and put their bandwidth 10 points high)."""
    geo = DeviceGeometry(DDR5_6400_MICRON, subchannels=1)
    space = geo.capacity_bytes // 64
    rng = np.random.default_rng(11)
    for per in (64, 16):
        k = rng.integers(0, space // 2 // per - 1, 1200 // (2 * per)) * per
        k = (k[:, None] + np.arange(per)).reshape(-1, per // 4, 4)
        addrs = np.stack([k, k + space // 2], axis=2).ravel() * 64
        model = run_device(addrs, None, geo, check=False).per_subchannel[0].commands["ACT"]
        est = count_subchannels(addrs, None, geo)[0].activations
        assert abs(est - model) <= 0.06 * model, f"{per}-line clusters: {est} ACTs, model {model}"


def test_the_counted_bounds_are_calibrated_for_the_ddr5_6400_grades():
    """The counted bounds (a study's tool) are calibrated for the DDR5-6400 grades; another
    grade is refused with the way out named, and the default method times it by the replay."""
    assert CALIBRATION_FILE.exists()
    assert {"ddr5-6400", "ddr5-6400an"} <= set(CALIBRATED)
    for name in CALIBRATED:
        assert np.any(coefficients_for(PRESETS[name]) != 0), name
    other = PRESETS["ddr5-8000"]
    with pytest.raises(ValueError, match=r"not calibrated for DDR5-8000.*replay"):
        coefficients_for(other)
    geo = DeviceGeometry(other, subchannels=1)
    addrs = np.arange(256, dtype=np.int64) * 64
    assert estimate_device(addrs, None, geo, method="replay").cycles > 0


@pytest.mark.parametrize("preset", CALIBRATED)
def test_benchmark_patterns_within_5_percent_of_the_cycle_model(preset):
    timing = PRESETS[preset]
    geo = DeviceGeometry(timing, subchannels=1)
    rng = np.random.default_rng(2024)  # not a calibration seed
    for name, addrs in benchmark_patterns(3000, geo, rng).items():
        model = run_device(addrs, None, geo, check=False).cycles
        est = estimate_device(addrs, None, geo).cycles
        assert abs(est - model) / model < 0.05, f"{name}: estimate {est}, model {model}"


def test_device_cluster_reads_within_5_percent_of_the_cycle_model():
    geo = DeviceGeometry(DDR5_6400_MICRON)
    rng = np.random.default_rng(7)
    for size in (4096, 8192):
        per = size // 64
        base = rng.integers(0, geo.capacity_bytes // size, 12_000 // per) * size
        addrs = (base[:, None] + np.arange(per)[None, :] * 64).ravel()
        model = run_device(addrs, None, geo, check=False).cycles
        est = estimate_device(addrs, None, geo).cycles
        assert abs(est - model) / model < 0.05, f"{size} B clusters: estimate {est}, model {model}"


def test_mixed_patterns_within_the_held_bounds():
    """Reads and writes, hot rows, 1-16 KB blocks: a wider net, fresh seed (was within 8 % of
    the cycle model's cycles; random 64 B with 50 % writes was 6.4 points off, is 4.5 now; the
    worst is random 4 KB with 50 % written blocks, 5.3 points)."""
    geo = DeviceGeometry(DDR5_6400_MICRON, subchannels=1)
    rng = np.random.default_rng(99)
    for name, (addrs, writes) in calibration_patterns(2000, geo, rng).items():
        model, est = _bandwidth_points(addrs, writes, geo)
        held = HELD_POINTS["mixed reads and writes" if writes is not None else "random blocks"]
        assert abs(est - model) <= held, f"{name}: estimate {est:.1f} %, model {model:.1f} %"


def _bandwidth_points(addrs, writes, geo):
    model = run_device(addrs, writes, geo, check=False).bandwidth_fraction(geo.timing, 1)
    est = estimate_device(addrs, writes, geo).bandwidth_fraction(geo.timing, 1)
    return model * 100, est * 100


@pytest.mark.parametrize("preset", CALIBRATED)
def test_streams_into_one_bank_keep_the_bank_level_bounds(preset):
    """Issue 23: a stream whose requests all fall in one bank (or bank group) was estimated at
    up to four times its cycle-model bandwidth (tCCD_L_WR, write recovery and the bank's row
    visits one after another were not bounds)."""
    geo = DeviceGeometry(PRESETS[preset], subchannels=1)
    i = np.arange(640)
    zero = np.zeros_like(i)
    streams = {
        "one row of one bank, writes": (_addrs(geo, zero, zero, zero, zero, i % 64), True),
        "one bank group, writes": (_addrs(geo, zero, zero, i % 4, zero, i // 4 % 64), True),
        "one bank, 16 hits a row, 4 rows": (_addrs(geo, zero, zero, zero, i // 16 % 4,
                                                   i % 64), False),
        "one bank, rows alternating": (_addrs(geo, zero, zero, zero, i % 2, i // 2 % 64), False),
    }
    for name, (addrs, write) in streams.items():
        model, est = _bandwidth_points(addrs, np.full(i.size, write), geo)
        assert abs(est - model) <= 3, f"{name}: estimate {est:.1f} %, cycle model {model:.1f} %"


def _queue_bound_streams(geo, rng):
    """Streams whose time the controller's 32-entry queue sets (issue 23, item 4)."""
    space = geo.capacity_bytes // 64
    base = rng.integers(0, space // 320, 3) * 320
    start = int(rng.integers(0, space))
    k = rng.integers(0, space // 2 // 16 - 1, 30) * 16
    k = (k[:, None] + np.arange(16)).reshape(30, 4, 4)
    blocks = rng.integers(0, space // 64, 15) * 64
    mixed = (blocks[:, None] + np.arange(64)).ravel()
    return {
        # row map: a 4 KB row is one bank group, and the queue holds only half of it
        "row map, 320-line blocks": ((base[:, None] + np.arange(320)).ravel() * 64, None,
                                     "row", 3),
        # 32 lines apart on mop4: 64 requests in a row in one bank group
        "mop4, stride 32 lines": (((start + np.arange(960) * 32) % space) * 64, None, "mop4", 3),
        # K and V of 16-line clusters 4 lines at a time, V in the same bank, another row
        "K and V, same bank": (np.stack([k, k + space // 2], axis=2).ravel() * 64, None,
                               "row", 3),
        # writes to the rows the reads opened find them open; each drain stops the ACTs
        "64-line blocks, 35 % writes": (mixed * 64, rng.random(mixed.size) < 0.35,
                                        "mop4clxor", 3),
    }


@pytest.mark.parametrize("preset", CALIBRATED)
def test_streams_the_queue_cannot_hide(preset):
    """Issue 23: the whole-stream bounds put these 10-19 points above the cycle model (row map
    +12.3, stride +10.1, K and V +19.5 on ddr5-6400) and mixed reads and writes 10.6 points
    below it; the queue's window bound and the open-page and drain terms bring them within 3
    (the mixed one within 3 since the writes are timed drain by drain: it was held at 5)."""
    geo = DeviceGeometry(PRESETS[preset], subchannels=1)
    for name, (addrs, writes, amap, held) in _queue_bound_streams(
            geo, np.random.default_rng(5)).items():
        model = run_device(addrs, writes, geo, amap, check=False).bandwidth_fraction(
            geo.timing, 1) * 100
        est = estimate_device(addrs, writes, geo, amap).bandwidth_fraction(geo.timing, 1) * 100
        assert abs(est - model) <= held, f"{name}: estimate {est:.1f} %, cycle model {model:.1f} %"


def test_short_cluster_reads_within_6_percent_of_the_cycle_model():
    """A descriptor's reads can be a few clusters: the queue's bound must not charge a
    resource's release (a bank's tRTP and tRP, tRC) as if it were the last column command
    (it put 128 lines of 8 KB clusters on 8 sub-channels 44 % above the cycle model)."""
    geo = DeviceGeometry(DDR5_6400_MICRON)
    for n in (128, 256):
        addrs = random_blocks(n, 8192, geo, np.random.default_rng(n))
        model = run_device(addrs, None, geo, check=False).cycles
        est = estimate_device(addrs, None, geo).cycles
        assert abs(est - model) / model < 0.06, f"{n} lines: estimate {est}, model {model}"


def test_read_path_times_what_the_counts_cannot():
    """Read-only streams whose rows switch often are served request by request (read_path):
    64 hot rows on the row map put 172 requests in 9 rows of one bank, and the counted visits
    of that bank were a bound 34 points below the cycle model (the queue fills with the bank's
    requests and serves more of them a visit); K and V of 4-line clusters, every request a row
    opening, were 8 points above it. Now +4.0 and +2.2 (the read path runs a little fast where
    the queue fills with one bank's requests)."""
    for preset in CALIBRATED:
        geo = DeviceGeometry(PRESETS[preset], subchannels=1)
        for kind, seed, held in (("hot rows", 95004, 5), ("K and V", 95007, 3)):
            rng = np.random.default_rng(seed)
            amap = ALL_ADDRESS_MAPS[int(rng.integers(0, len(ALL_ADDRESS_MAPS)))]
            (addrs, writes), params = generated_pattern(kind, 1200, geo, rng, amap)
            assert count_subchannels(addrs, writes, geo, amap)[0].read_path_tck > 0
            model = run_device(addrs, writes, geo, amap, check=False).bandwidth_fraction(
                geo.timing, 1) * 100
            est = estimate_device(addrs, writes, geo, amap).bandwidth_fraction(geo.timing, 1) * 100
            assert abs(est - model) <= held, f"{kind} ({params}, {amap}): {est:.1f} %, {model:.1f}"


def test_addresses_outside_the_device_are_rejected():
    geo = DeviceGeometry(DDR5_6400_MICRON)
    with pytest.raises(ValueError, match="outside the device"):
        estimate_device(np.array([0, geo.capacity_bytes]), None, geo)


GOAL_POINTS = 3.0
"""Issue 23, item 4: the estimate within 3 points of peak of the cycle model on every kind. The
replay (estimate_device's default where g++ builds it) meets it with no error at all
(tests/test_ddr5_replay.py); HELD_POINTS are the counted bounds', the fallback's."""
HELD_POINTS = {"one bank": GOAL_POINTS, "one bank group": GOAL_POINTS, "stride": 5.0,
               "hot rows": 6.0, "mixed reads and writes": 7.0, "random blocks": 4.0,
               "K and V": 7.0}
"""What the counted bounds hold per kind: the worst of `scripts/ddr5_estimate_check.py --cases 9`
(168 cases, seeds 0 to 6,999; docs/results/ddr5_estimate.md) and of this test's 24 draws,
rounded up (one bank -2.4, one bank group -1.1 and +1.4 on a draw of this test, stride +4.7,
hot rows +5.1, mixed reads and writes +6.6 and -6.1 on a draw, random blocks -3.4, K and V
+6.1); was 3, 6, 4, 5, 7, 4 and 11 before read-only streams whose rows switch often were timed
request by request (the read path: K and V -10.1 -> +2.7 on its worst case, one bank group +5.5
-> +1.4) and the loss factor was refit without them (stride +3.3 -> +4.7 and hot rows +4.2 ->
+5.1 on the check page's worst, both on the counted bounds). The fit uses other seeds
(scripts/calibrate_ddr5.py: from 50,000). One bank and one bank group meet the 3-point goal
(GOAL_POINTS); fresh seeds (90,000 on) find worse cases of the rest (K and V -10.1 on 128-line
clusters of the mop4clxor map, random blocks +8.8 on 8 sub-channels, hot rows -8.5 on
ddr5-6400an): what they miss is in docs/results/ddr5_estimate.md."""
MAPS_HELD = ALL_ADDRESS_MAPS
"""Every map, the row map (a 4 KB block in one bank) included: it was left out while the
estimate was 39 points off there (K and V)."""


@settings(max_examples=24, derandomize=True, deadline=None, database=None)
@given(kind=st.sampled_from(PATTERN_KINDS), preset=st.sampled_from(CALIBRATED),
       amap=st.sampled_from(MAPS_HELD), subchannels=st.sampled_from([1, 1, 8]),
       seed=st.integers(0, 2**32 - 1))
def test_generated_patterns_within_the_held_bounds(kind, preset, amap, subchannels, seed):
    """Every kind of pattern, both presets, the device's maps: estimate against the cycle
    model."""
    geo = DeviceGeometry(PRESETS[preset], subchannels)
    (addrs, writes), params = generated_pattern(kind, 400 * min(subchannels, 2), geo,
                                                np.random.default_rng(seed), amap)
    model = run_device(addrs, writes, geo, amap, check=False)
    est = estimate_device(addrs, writes, geo, amap)
    m, e = (x.bandwidth_fraction(geo.timing, subchannels) * 100 for x in (model, est))
    assert abs(e - m) <= HELD_POINTS[kind], (
        f"{kind} ({params}, {amap}, {subchannels} sub): estimate {e:.1f} %, cycle model "
        f"{m:.1f} %")


def test_this_module_holds_the_counted_bounds():
    """The fixture above is in force: the default here is the counted method."""
    geo = DeviceGeometry(DDR5_6400_MICRON)
    (addrs, writes), _ = generated_pattern("mixed reads and writes", 2000, geo,
                                           np.random.default_rng(3))
    assert estimate_device(addrs, writes, geo).per_subchannel_cycles == \
        estimate_device(addrs, writes, geo, method="counted").per_subchannel_cycles
