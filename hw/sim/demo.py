"""The two demos of the ``rtl`` backend against the bit-exact model: one attention command
through the Verilated engine, and KV plus attention descriptors through the Verilated device,
each compared bit for bit with the model and measured against a float64 reference. The command
line (``nelssa demo``, ``nelssa device demo``) prints what these return."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from nelssa.hw.model import fp
from nelssa.hw.model.device import SIM_CLOCK_HZ
from nelssa.hw.model.reference import attend_f64

O_BOUND = 1e-3
"""Largest |O - O64| accepted, as a share of max|V| (docs/numerics.md)."""
LSE_BOUND = 1e-3
"""Largest |LSE - LSE64| accepted."""


def bf16_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard-normal values as bf16 bits."""
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


@dataclass(frozen=True)
class EngineDemo:
    """One attention command on the RTL engine and on the model."""

    status: str
    """The RTL engine's completion status."""
    rtl_o: np.ndarray
    model_o: np.ndarray
    o64: np.ndarray
    rtl_lse: np.ndarray
    model_lse: np.ndarray
    lse64: np.ndarray
    same_o: bool
    same_lse: bool
    o_err: float
    """max |O - O64| of the RTL engine."""
    lse_err: float
    v_max: float
    """max |V|, the scale of ``o_err``'s bound."""
    cycles: int
    """Engine cycles from command to done."""
    kv_beats: int
    kv_span: int
    beats_per_cycle: float
    sim_cycles_per_s: float
    rtl_wall_s: float
    model_wall_s: float

    @property
    def device_us(self) -> float:
        return self.cycles / SIM_CLOCK_HZ * 1e6

    @property
    def ok(self) -> bool:
        return (self.status == "OK" and self.same_o and self.same_lse
                and self.o_err <= O_BOUND * self.v_max and self.lse_err <= LSE_BOUND)


def engine_demo(engine, head_dim: int, qheads: int, clusters: int, cluster_tokens: int,
                seed: int) -> EngineDemo:
    """Random bf16 Q, K and V (``seed``) through ``engine`` (an ``RtlEngine``) and the model."""
    from nelssa.hw.model.engine import attend

    rng = np.random.default_rng(seed)
    lens = [cluster_tokens] * clusters
    q = bf16_normal(rng, (qheads, head_dim))
    keys = [bf16_normal(rng, (n, head_dim)) for n in lens]
    values = [bf16_normal(rng, (n, head_dim)) for n in lens]
    scale = 1.0 / np.sqrt(head_dim)
    t0 = time.perf_counter()
    rtl = engine.attend(q, keys, values, scale)
    rtl_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = attend(engine.params, q, keys, values, scale)
    model_wall = time.perf_counter() - t0
    o64, lse64 = attend_f64(q, keys, values, np.float32(scale))
    r = rtl.result
    vmax = max(float(np.abs(fp.as_f32(fp.bf16_to_f32_bits(v))).max()) for v in values)
    return EngineDemo(
        status=r.status.name, rtl_o=fp.as_f32(r.o), model_o=fp.as_f32(model.o), o64=o64,
        rtl_lse=fp.as_f32(r.lse), model_lse=fp.as_f32(model.lse), lse64=lse64,
        same_o=bool(np.array_equal(r.o, model.o)), same_lse=bool(np.array_equal(r.lse, model.lse)),
        o_err=float(np.abs(fp.as_f32(r.o).astype(np.float64) - o64).max()),
        lse_err=float(np.abs(fp.as_f32(r.lse).astype(np.float64) - lse64).max()), v_max=vmax,
        cycles=rtl.cycles, kv_beats=rtl.kv_consumed, kv_span=rtl.kv_span,
        beats_per_cycle=rtl.beats_per_cycle, sim_cycles_per_s=rtl.total_cycles / rtl.sim_seconds,
        rtl_wall_s=rtl_wall, model_wall_s=model_wall)


@dataclass(frozen=True)
class BackendRun:
    """One backend's run of the device demo."""

    name: str
    cycles: int
    """PERF_BUSY cycles the descriptors took."""
    statuses: list[str]
    wall_s: float

    @property
    def device_us(self) -> float:
        return self.cycles / SIM_CLOCK_HZ * 1e6


@dataclass(frozen=True)
class DeviceDemo:
    runs: list[BackendRun]
    same: bool
    """rtl and model completions (O and LSE) bit-identical."""
    o_err: float
    """max |O - O64| of the rtl device."""

    @property
    def ok(self) -> bool:
        return self.same


def device_demo(kv_heads: int, qheads: int, clusters: int, selected: int, seed: int,
                on_run=None) -> DeviceDemo:
    """KV of ``clusters`` clusters (8-24 tokens) per KV head written through CXL.mem, one ATTN
    descriptor per KV head through the rings, on the Verilated device and on the model;
    ``on_run(BackendRun)`` is told as each backend finishes."""
    from nelssa.driver.command import AttnRequest, CommandQueue
    from nelssa.driver.device import Device
    from nelssa.driver.memory import MemoryApi
    from nelssa.hw.model.device import ModelDevice
    from nelssa.hw.sim.device import RtlDevice

    rng = np.random.default_rng(seed)
    hd = 128
    tokens = rng.integers(8, 25, clusters)
    keys = [bf16_normal(rng, (int(t), hd)) for t in tokens]
    values = [bf16_normal(rng, (int(t), hd)) for t in tokens]
    q = [bf16_normal(rng, (qheads, hd)) for _ in range(kv_heads)]
    sel = [np.sort(rng.choice(clusters, selected, replace=False)).tolist()
           for _ in range(kv_heads)]
    results, runs = {}, []
    for name, make in (("rtl", RtlDevice), ("model", ModelDevice)):
        t0 = time.perf_counter()
        port = make()
        dev = Device(port)
        mem = MemoryApi(dev, 1 << 20, 1 << 32)
        cq = CommandQueue(mem, entries=16)
        regions = []
        for h in range(kv_heads):
            region = mem.alloc_kv(0, 0, h, hd, clusters, int(tokens.sum()))
            mem.write_clusters(region, keys, values)
            regions.append(region)
        busy0 = dev.reg_read64("PERF_BUSY")
        ids = cq.submit([AttnRequest(r, q[h], sel[h]) for h, r in enumerate(regions)])
        out = cq.wait(ids)
        cycles = dev.reg_read64("PERF_BUSY") - busy0
        results[name] = [out[i] for i in ids]
        port.close()
        run = BackendRun(name, cycles, [o.status.name for o in results[name]],
                         time.perf_counter() - t0)
        runs.append(run)
        if on_run is not None:
            on_run(run)
    same = all(np.array_equal(a.o, b.o) and np.array_equal(a.lse, b.lse)
               for a, b in zip(results["rtl"], results["model"], strict=True))
    err = 0.0
    for h, o in enumerate(results["rtl"]):
        o64, _ = attend_f64(q[h], [keys[i] for i in sel[h]], [values[i] for i in sel[h]],
                            np.float32(1 / np.sqrt(hd)))
        err = max(err, float(np.abs(o.o.astype(np.float64) - o64).max()))
    return DeviceDemo(runs, same, err)
