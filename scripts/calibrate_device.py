"""Fit the model device's unit timing (hw/model/device_timing.py) to the RTL device: one ATTN
descriptor at a time over a grid of shapes and random ones, the RTL's busy cycles against the
features, least squares; writes hw/model/device_calibration.json with the fit's error per shape.

    .venv/bin/python scripts/calibrate_device.py
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import DESCRIPTOR
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model import fp
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.model.device_timing import CALIBRATION_FILE, FEATURES, UnitTiming, features
from nelssa.hw.model.timing_workloads import TimingWorkload, run_workload
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


def measure(dev: Device, mem: MemoryApi, cq: CommandQueue, shape, rng, session: int
            ) -> tuple[np.ndarray, int]:
    hd, heads, n_sel, tokens = shape
    region = mem.alloc_kv(session, 0, 0, hd, n_sel, n_sel * tokens)
    mem.write_clusters(region, [bf16(rng, (tokens, hd))] * n_sel,
                       [bf16(rng, (tokens, hd))] * n_sel)
    busy0, bytes0 = dev.reg_read64("PERF_BUSY"), dev.reg_read64("PERF_BYTES_READ")
    ids = cq.submit([AttnRequest(region, bf16(rng, (heads, hd)), list(range(n_sel)))])
    cq.wait(ids)
    busy = dev.reg_read64("PERF_BUSY") - busy0
    lines = (dev.reg_read64("PERF_BYTES_READ") - bytes0) // 64
    d = DESCRIPTOR.parse(DESCRIPTOR.build({
        "opcode": 1, "flags": 0, "head_dim": hd, "q_heads": heads, "reserved0": 0,
        "num_ids": n_sel, "desc_id": 0, "num_clusters": n_sel, "q_addr": 0, "dir_addr": 0,
        "ids_addr": 0, "out_addr": 0, "scale": 0, "reserved1": bytes(12)}))
    mem.free_kv(region)
    return features(d, lines), busy


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    port = RtlDevice()
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 32)
    cq = CommandQueue(mem, entries=16)
    rng = np.random.default_rng(0)
    rows, cycles = [], []
    t0 = time.perf_counter()
    grid = shapes()
    for i, shape in enumerate(grid):
        x, busy = measure(dev, mem, cq, shape, rng, i)
        rows.append(x)
        cycles.append(busy)
    # least squares on relative error: small descriptors count as much as large ones
    x, y = np.array(rows), np.array(cycles, dtype=np.float64)
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    errors = {}
    for shape, x, busy in zip(grid, rows, cycles, strict=True):
        est = float(np.dot(x, coef))
        hd, heads, n_sel, tokens = shape
        errors[f"hd {hd}, {heads} heads, {n_sel} clusters x {tokens} tokens"] = round(
            (est - busy) / busy * 100, 2)
        print(f"{shape}: RTL {busy} cycles, fit {est:.0f} ({(est - busy) / busy * 100:+.2f} %)")
    worst = max(abs(e) for e in errors.values())
    median = float(np.median([abs(e) for e in errors.values()]))
    fitted = dict(zip(FEATURES, np.round(coef, 4).tolist(), strict=True))
    print(f"median |error| {median:.2f} %; coefficients {fitted}, "
          f"worst error {worst:.2f} %, {time.perf_counter() - t0:.0f} s")
    fitted_timing, spread = fit_sharing(port, UnitTiming(tuple(coef.tolist())))
    CALIBRATION_FILE.write_text(json.dumps({
        "features": list(FEATURES), "coefficients": coef.tolist(), "error_percent": errors,
        "worst_error_percent": worst, "median_error_percent": round(median, 2),
        "contention": fitted_timing.contention,
        "host_line_memory": fitted_timing.host_line_memory,
        "sharing_errors_percent": spread}, indent=1) + "\n")
    print(f"wrote {CALIBRATION_FILE}")
    port.close()


SHARING_SEEDS = range(16)
"""Workloads (hw/model/timing_workloads.py) the sharing terms are fitted on; the check
(scripts/device_timing_check.py, tests/test_device_timing.py) draws others."""


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
    """The contention among descriptors in flight together (fitted on the workloads without
    host traffic), then the DDR5 cost of a host line (on those with), each where the model's
    cycles match the RTL's on average; the errors there."""
    loads = [TimingWorkload.draw(s, min_selected=32, min_tokens=16) for s in SHARING_SEEDS]
    rtl = [run_workload(port, w)["cycles"] for w in loads]

    def errors(t: UnitTiming, traffic: bool) -> list[float]:
        return [(run_workload(ModelDevice(timing=t), w)["cycles"] - r) / r * 100
                for w, r in zip(loads, rtl, strict=True) if bool(w.traffic_bytes) == traffic]

    contention = _bisect(lambda c: errors(replace(timing, contention=c), False), 0.0, 0.5)
    timing = replace(timing, contention=contention)
    host = _bisect(lambda h: errors(replace(timing, host_line_memory=h), True), 0.0, 4.0)
    timing = replace(timing, host_line_memory=host)
    spread = {"without traffic": [round(e, 2) for e in errors(timing, False)],
              "with traffic": [round(e, 2) for e in errors(timing, True)]}
    print(f"contention {contention}, host line {host} DDR5 cycles: errors {spread}")
    return timing, spread


if __name__ == "__main__":
    main()
