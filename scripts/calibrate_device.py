"""Fit the model device's timing to the RTL device.

``--cycle``: the cycle model's few cycle counts (hw/model/device_cycle.py CycleTiming): the
workloads of SHARING_SEEDS at CYCLE_PHASES points of the refresh period each on the RTL, the
model's inputs recorded once and replayed under each candidate (coordinate descent over
CYCLE_SEARCH, squared relative error). Writes the ``cycle_model`` part of
hw/model/device_calibration.json. About 10 minutes.

Without it, the fluid schedule's unit timing (hw/model/device_timing.py; used where no C++
compiler builds the cycle model), in three steps: the refresh window as a unit meets it (its
stall, the descriptor tail it spares, the fetch before a unit starts: one shape swept over the
phases of nREFI); the unit's cost (one ATTN descriptor at a time over a grid of shapes and
random ones, each measurement freed of the refreshes it met, least squares against the
features); the sharing terms (batches over the units, with and without host traffic). Writes
hw/model/device_calibration.json with the fit's errors.

    .venv/bin/python scripts/calibrate_device.py [--sharing-only | --cycle]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

import numpy as np

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import DESCRIPTOR
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.ddr5_addr import DeviceGeometry
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_cycle import CycleTiming, replay
from nelssa.hw.model.device_timing import (
    CALIBRATION_FILE,
    FEATURES,
    Refresh,
    Schedule,
    UnitTiming,
    features,
)
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload, start_at_phase
from nelssa.hw.sim.device import RtlDevice

SHAPES = [  # head_dim, query heads, selected clusters, tokens per cluster
    (64, 1, 1, 4), (64, 2, 8, 16), (64, 8, 40, 16), (64, 4, 120, 8),
    (128, 1, 1, 64), (128, 4, 16, 16), (128, 8, 30, 32), (128, 4, 100, 16),
    (128, 2, 200, 4), (128, 4, 60, 64), (64, 1, 250, 1), (128, 8, 8, 64),
]


RANDOM_SHAPES = 60
"""Shapes drawn at random beside the grid (head_dim, query heads 1-8, 1-199 clusters of 1-64
tokens), so that no feature is fitted on a handful of points."""


def shapes(seed: int = 7) -> list[tuple[int, int, int, int]]:
    rng = np.random.default_rng(seed)
    drawn = [(int(rng.choice([64, 128])), int(rng.integers(1, 9)), int(rng.integers(1, 200)),
              int(rng.integers(1, 65))) for _ in range(RANDOM_SHAPES)]
    return [*SHAPES, *drawn]


def bf16(rng: np.random.Generator, shape) -> np.ndarray:
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def measure(dev: Device, mem: MemoryApi, cq: CommandQueue, shape, rng, session: int,
            phase: int | None = None, copies: int = 1) -> tuple[np.ndarray, int, int]:
    """One descriptor of ``shape`` alone (or ``copies`` of it in one batch): its features, the
    RTL's busy cycles, and the cycle its submission ended at (started at ``phase`` of the
    refresh period when given)."""
    hd, heads, n_sel, tokens = shape
    region = mem.alloc_kv(session, 0, 0, hd, n_sel, n_sel * tokens)
    mem.write_clusters(region, [bf16(rng, (tokens, hd))] * n_sel,
                       [bf16(rng, (tokens, hd))] * n_sel)
    busy0, bytes0 = dev.reg_read64("PERF_BUSY"), dev.reg_read64("PERF_BYTES_READ")
    if phase is not None:
        dev.port.advance(int(phase - dev.port.cycle) % int(REFRESH_PERIOD))
    ids = cq.submit([AttnRequest(region, bf16(rng, (heads, hd)), list(range(n_sel)))] * copies)
    started = dev.port.cycle
    cq.wait(ids)
    busy = dev.reg_read64("PERF_BUSY") - busy0
    lines = (dev.reg_read64("PERF_BYTES_READ") - bytes0) // 64
    d = DESCRIPTOR.parse(DESCRIPTOR.build({
        "opcode": 1, "flags": 0, "head_dim": hd, "q_heads": heads, "reserved0": 0,
        "num_ids": n_sel, "desc_id": 0, "num_clusters": n_sel, "q_addr": 0, "dir_addr": 0,
        "ids_addr": 0, "out_addr": 0, "scale": 0, "reserved1": bytes(12)}))
    mem.free_kv(region)
    return features(d, lines), busy, started


MEMORY = PRESETS[DeviceConfig().preset]
FLUID = DeviceConfig(timer="fluid")
"""The model devices whose unit timing this fits: the fluid timer's."""
REFRESH_PERIOD = Refresh.of(MEMORY, UnitTiming()).period
REFRESH_SHAPES = [(128, 4, 16, 16), (64, 1, 32, 16)]
"""Shapes swept over the refresh period: about 2,250 cycles each, so that a window meets them
at every point of their run in one sweep."""
REFRESH_PHASES = 26


def model_busy(unit_cycles: float, started: int, timing: UnitTiming, copies: int = 1) -> float:
    """Busy cycles of ``copies`` descriptors of ``unit_cycles`` each, rung in at ``started``
    (no memory limit: fewer than the units can stream together)."""
    schedule = Schedule(DeviceConfig().engines, timing, Refresh.of(MEMORY, timing))
    schedule.now = float(started)
    for i in range(copies):
        schedule.add(i, unit_cycles, 0.0)
    schedule.sync(math.inf)
    return schedule.busy


def unit_cycles(busy: int, started: int, timing: UnitTiming) -> float:
    """The unit time whose run from ``started`` takes ``busy`` cycles with the refreshes it
    meets (the measurement freed of them)."""
    lo, hi = 1.0, float(busy)
    for _ in range(30):
        mid = (lo + hi) / 2
        if model_busy(mid, started, timing) < busy:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit_refresh(dev, mem, cq, rng) -> tuple[UnitTiming, float]:
    """The command queue's ring reads and the refresh window as a unit meets it: the read of
    one descriptor from two in a batch against one alone (away from refresh); then stall,
    spared tail and the doorbell's latency where the model's busy cycles over a sweep of
    refresh phases match the RTL's best (least squares). The worst error left, in cycles."""
    reads = []
    for k, shape in enumerate(REFRESH_SHAPES):
        _, one, _ = measure(dev, mem, cq, shape, rng, 900 + k, phase=300)
        _, two, _ = measure(dev, mem, cq, shape, rng, 900 + k, phase=300, copies=2)
        reads.append(two - one)
    fetch = float(np.median(reads))
    runs = []
    for k, shape in enumerate(REFRESH_SHAPES):
        for i in range(REFRESH_PHASES):
            phase = int(i * REFRESH_PERIOD / REFRESH_PHASES)
            _, busy, started = measure(dev, mem, cq, shape, rng, 1000 + k, phase)
            runs.append((k, busy, started))
    base = {k: min(b for j, b, _ in runs if j == k) for k in range(len(REFRESH_SHAPES))}
    best = None
    for stall in np.arange(200.0, 284.0, 4.0):
        for tail in np.arange(40.0, 200.0, 8.0):
            for doorbell in np.arange(0.0, 64.0, 4.0):
                t = UnitTiming(refresh_stall=float(stall), refresh_tail=float(tail),
                               doorbell_cycles=float(doorbell), fetch_cycles=fetch)
                # the shape's unit time: its busy cycles where no refresh met it
                err = [model_busy(base[k], st, t) - b for k, b, st in runs]
                cost = float(np.sum(np.square(err)))
                if best is None or cost < best[0]:
                    best = (cost, t, float(np.max(np.abs(err))))
    _, timing, worst = best
    print(f"ring read {fetch} cycles (two against one: {reads}); refresh: stall "
          f"{timing.refresh_stall}, tail {timing.refresh_tail}, doorbell "
          f"{timing.doorbell_cycles} cycles; worst busy error over {len(runs)} runs {worst:.0f}")
    return timing, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sharing-only", action="store_true",
                      help="keep the stored unit cost and refresh fit, refit only the sharing "
                           "terms (about 5 minutes instead of 12)")
    mode.add_argument("--cycle", action="store_true",
                      help="fit the cycle model's cycle counts instead (about 10 minutes)")
    args = parser.parse_args()
    port = RtlDevice()
    if args.cycle:
        timing, errors = fit_cycle(record_cycle_runs(port))
        data = json.loads(CALIBRATION_FILE.read_text())
        data["cycle_model"] = {**timing.as_dict(), "errors_percent": errors}
        CALIBRATION_FILE.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {CALIBRATION_FILE}")
        port.close()
        return
    if args.sharing_only:
        data = json.loads(CALIBRATION_FILE.read_text())
        # from the terms' defaults, as the whole calibration fits them: the fit is then the
        # same whatever the file held before
        base = UnitTiming()
        timing, spread = fit_sharing(port, replace(
            UnitTiming.load(), softness=base.softness, cluster_wait=base.cluster_wait,
            host_line_memory=base.host_line_memory))
        data.update(_sharing(timing, spread))
        CALIBRATION_FILE.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {CALIBRATION_FILE}")
        port.close()
        return
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 32)
    cq = CommandQueue(mem, entries=16)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    refresh, refresh_worst = fit_refresh(dev, mem, cq, rng)
    rows, cycles = [], []
    grid = shapes()
    for i, shape in enumerate(grid):
        x, busy, started = measure(dev, mem, cq, shape, rng, i)
        rows.append(x)
        cycles.append(unit_cycles(busy, started, refresh))
    # least squares on relative error: small descriptors count as much as large ones
    x, y = np.array(rows), np.array(cycles, dtype=np.float64)
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    errors = {}
    for shape, x, busy in zip(grid, rows, cycles, strict=True):
        est = float(np.dot(x, coef))
        hd, heads, n_sel, tokens = shape
        errors[f"hd {hd}, {heads} heads, {n_sel} clusters x {tokens} tokens"] = round(
            (est - busy) / busy * 100, 2)
        print(f"{shape}: RTL {busy:.0f} unit cycles, fit {est:.0f} "
              f"({(est - busy) / busy * 100:+.2f} %)")
    worst = max(abs(e) for e in errors.values())
    median = float(np.median([abs(e) for e in errors.values()]))
    fitted = dict(zip(FEATURES, np.round(coef, 4).tolist(), strict=True))
    print(f"median |error| {median:.2f} %; coefficients {fitted}, "
          f"worst error {worst:.2f} %, {time.perf_counter() - t0:.0f} s")
    fitted_timing, spread = fit_sharing(port, replace(refresh, coefficients=tuple(coef.tolist())))
    CALIBRATION_FILE.write_text(json.dumps({
        "features": list(FEATURES), "coefficients": coef.tolist(), "error_percent": errors,
        "worst_error_percent": worst, "median_error_percent": round(median, 2),
        **_sharing(fitted_timing, spread),
        "refresh_stall": fitted_timing.refresh_stall,
        "refresh_tail": fitted_timing.refresh_tail,
        "doorbell_cycles": fitted_timing.doorbell_cycles,
        "fetch_cycles": fitted_timing.fetch_cycles,
        "refresh_worst_error_cycles": round(refresh_worst, 1)}, indent=1) + "\n")
    print(f"wrote {CALIBRATION_FILE}")
    port.close()


def _sharing(timing: UnitTiming, spread: dict[str, list[float]]) -> dict:
    """The calibration file's fields that ``fit_sharing`` fits, and its errors."""
    return {"softness": timing.softness, "cluster_wait": timing.cluster_wait,
            "host_line_memory": timing.host_line_memory, "sharing_errors_percent": spread}


SHARING_SEEDS = range(60)
"""Workloads (hw/model/timing_workloads.py) the sharing terms are fitted on; the check
(scripts/device_timing_check.py, tests/test_device_timing.py) draws others."""


SOFTNESS_GRID = tuple(round(0.02 * i, 2) for i in range(16))


def _bisect(errors, lo: float, hi: float) -> float:
    """Where the mean of ``errors(x)`` (growing with x) crosses zero."""
    for _ in range(12):
        mid = (lo + hi) / 2
        if np.mean(errors(mid)) < 0:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def fit_sharing(port, timing: UnitTiming) -> tuple[UnitTiming, dict[str, list[float]]]:
    """How the units slow as together they near DDR5's rate (fitted on the workloads without
    host traffic: the softness closest in squared error, then the clusters' wait where the
    mean error is zero), then the DDR5 cost of a host line (on those with, mean error zero);
    the errors there."""
    loads = [TimingWorkload.draw(s, min_selected=32, min_tokens=16) for s in SHARING_SEEDS]
    rtl = [run_workload(port, w) for w in loads]

    def errors(t: UnitTiming, traffic: bool) -> list[float]:
        return [(run_workload(ModelDevice(FLUID, timing=t), w, start_at=r["started"])["cycles"]
                 - r["cycles"]) / r["cycles"] * 100
                for w, r in zip(loads, rtl, strict=True) if bool(w.traffic_bytes) == traffic]

    # the softness where the workloads without traffic come closest (squared error): a
    # refresh met or missed near a window's edge makes single errors jump, so not the mean
    softness = min(SOFTNESS_GRID, key=lambda c: float(np.sum(np.square(
        errors(replace(timing, softness=c), False)))))
    timing = replace(timing, softness=softness)
    # then the clusters' wait at full load, where those workloads' mean error is zero
    wait = _bisect(lambda c: errors(replace(timing, cluster_wait=c), False), 0.0, 8.0)
    timing = replace(timing, cluster_wait=wait)
    host = _bisect(lambda h: errors(replace(timing, host_line_memory=h), True), 0.0, 4.0)
    timing = replace(timing, host_line_memory=host)
    spread = {"without traffic": [round(e, 2) for e in errors(timing, False)],
              "with traffic": [round(e, 2) for e in errors(timing, True)]}
    print(f"softness {softness}, cluster wait {wait}, host line {host} DDR5 cycles: errors "
          f"{spread}")
    return timing, spread


CYCLE_PHASES = 4
"""Points of the refresh period each workload of the cycle fit starts at."""
CYCLE_SEARCH = {"read_latency": range(0, 9), "kv_turn": range(1, 5),
                "cluster_gap": range(0, 3), "final": range(0, 4), "out_beat": range(0, 3),
                "start": range(0, 5), "doorbell": range(0, 40, 4)}
"""The values tried of each CycleTiming field."""


def record_cycle_runs(port) -> list[tuple[int, list]]:
    """Per workload and phase: the RTL's busy cycles and the model's recorded inputs."""
    runs = []
    for seed in SHARING_SEEDS:
        w = TimingWorkload.draw(seed, min_selected=32, min_tokens=16)
        for i in range(CYCLE_PHASES):
            phase = (i + 0.5 * (seed % 2)) / CYCLE_PHASES
            r = run_workload(port, w, start_at=start_at_phase(port.cycle, phase,
                                                              REFRESH_PERIOD))
            model = ModelDevice()
            model.schedule.recording = []
            run_workload(model, w, start_at=r["started"])
            runs.append((r["cycles"], model.schedule.recording))
    return runs


def fit_cycle(runs: list[tuple[int, list]]) -> tuple[CycleTiming, list[float]]:
    """Coordinate descent from CycleTiming's defaults, twice over the fields; the errors (per
    cent) of the fit."""
    geometry = DeviceGeometry(MEMORY)

    def errors(t: CycleTiming) -> list[float]:
        return [(replay(rec, t, geometry) - rtl) / rtl * 100 for rtl, rec in runs]

    costs: dict[CycleTiming, float] = {}

    def cost(t: CycleTiming) -> float:
        if t not in costs:
            costs[t] = float(np.mean(np.square(errors(t))))
        return costs[t]

    timing = CycleTiming()
    for _ in range(2):
        for name, values in CYCLE_SEARCH.items():
            best = min(values, key=lambda v: cost(replace(timing, **{name: v})))
            timing = replace(timing, **{name: best})
    found = [round(e, 2) for e in errors(timing)]
    e = np.abs(found)
    print(f"cycle model {timing}: |error| median {np.median(e):.2f} %, worst {e.max():.2f} %, "
          f"within 5 %: {(e <= 5).sum()} of {len(e)}")
    return timing, found


if __name__ == "__main__":
    main()
