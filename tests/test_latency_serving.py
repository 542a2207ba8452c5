"""The latency model against hand-computed values, the crossover condition, hardware files,
traces, and the serving emulator's scheduler (capacity, preemption, conservation, routing,
determinism)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog, ModelHw, PnmHw
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.serving.metrics import summarize
from nelssa.emu.serving.sim import CapacityError, ServingConfig, ServingSim
from nelssa.emu.serving.workload import (
    TraceError,
    TraceRequest,
    inject_burst,
    load_trace,
    long_fraction_mix,
    poisson,
)

GPU = GpuHw("g", hbm_gbs=1000.0, memory_gb=80.0, bf16_tflops=500.0, kernel_us=0.0,
            mem_efficiency=1.0)
PNM = PnmHw("p", bw_eff_gbs=100.0, capacity_gb=64.0, t_base_us=4.0, t_dev_us=1.0,
            t_host_us=2.0)
MODEL = ModelHw("m", layers=32, kv_heads=8, q_heads=32, head_dim=128, params_b=8.0,
                max_context=1 << 20)


def test_formulas_by_hand() -> None:
    lm = LatencyModel(GPU, PNM, MODEL, Sparsity(0.04, 16.0))
    assert MODEL.kv_bytes_per_token == 131072  # 2 (K, V) x 32 x 8 x 128 x 2 bytes
    assert lm.t_gpu(10_000) == pytest.approx(10_000 * 131072 / 1e12)  # 1.31072 ms
    assert lm.t_comm(1) == pytest.approx(32 * 5e-6)  # per layer: base + 1 device, no host
    assert lm.t_comm(4) == pytest.approx(32 * (4 + 4 + 2) * 1e-6)
    # 10K tokens, 4 devices: centroids 1.31072 ms / 16, sparse 0.04 x 1.31072 GB / 400 GB/s
    assert lm.t_pnm(10_000, 4) == pytest.approx(
        1.31072e-3 / 16 + 0.04 * 10_000 * 131072 / 400e9 + 320e-6)
    # crossover: T_comm / (M_kv (15/16/BW_gpu - 0.04/(N BW_pnm)))
    n = 4
    slope = 15 / 16 / 1e12 - 0.04 / (n * 100e9)
    x = lm.crossover(n)
    assert x == pytest.approx(320e-6 / (131072 * slope))
    assert lm.t_gpu(x) == pytest.approx(lm.t_pnm(x, n))
    assert lm.t_input(n) == int(-(-x // 1))


def test_link_round_trip_per_layer() -> None:
    from nelssa.emu.latency.hardware import LinkHw

    link = LinkHw("l", gbps=100.0, latency_us=2.0)
    lm = LatencyModel(GPU, PNM, MODEL, Sparsity(), link)
    # query 32 x 128 x 2 B up, output 32 x (128 x 4 + 4) B down, 4 us of latency, per layer
    nbytes = 32 * 128 * 2 + 32 * 516
    assert lm.t_link == pytest.approx(4e-6 + nbytes * 8 / 100e9)
    assert lm.t_comm(1) == pytest.approx(32 * (5e-6 + lm.t_link))


def test_crossover_falls_with_devices_and_vanishes_past_the_condition() -> None:
    # with a fixed communication cost the crossover falls strictly as devices are added
    fixed = LatencyModel(GPU, replace(PNM, t_dev_us=0.0, t_host_us=0.0), MODEL)
    xs = [fixed.crossover(n) for n in range(1, 9)]
    assert all(x is not None for x in xs)  # 0.04/100e9 = 4e-13 < 15/16e-12 from N = 1
    assert all(b < a for a, b in itertools.pairwise(xs))
    # slower devices: no crossover until the sparse term is small enough, then it falls even
    # with per-device and host costs
    slowish = LatencyModel(GPU, replace(PNM, bw_eff_gbs=20.0, t_dev_us=0.2), MODEL)
    ys = [slowish.crossover(n) for n in range(1, 9)]
    assert ys[0] is None and ys[1] is None and all(y is not None for y in ys[2:])
    assert all(b < a for a, b in itertools.pairwise(ys[2:]))
    slow = replace(PNM, bw_eff_gbs=20.0)  # 0.04/(N 20e9) >= 15/16e-12 until N >= 3
    lm2 = LatencyModel(GPU, slow, MODEL, Sparsity(0.04, 16.0))
    assert lm2.crossover(1) is None and lm2.crossover(2) is None
    assert lm2.crossover(3) is not None


def test_hardware_files_are_validated(tmp_path: Path) -> None:
    cat = HardwareCatalog.load()
    assert {"h100-nvl", "2x-h100-nvl", "h200"} <= set(cat.gpus)
    assert {"prototype", "projection-512g"} <= set(cat.pnm)
    f = tmp_path / "hw.json"
    f.write_text(json.dumps({"gpus": {"x": {"hbm_gbs": -1, "memory_gb": 1, "bf16_tflops": 1}}}))
    with pytest.raises(ValueError, match="hbm_gbs must be a positive number, got -1"):
        HardwareCatalog.load(f)
    f.write_text(json.dumps({"pnm": {"x": {"bw_eff_gbs": 1}}}))
    with pytest.raises(ValueError, match=r"\[pnm\]: x: missing field 'capacity_gb'"):
        HardwareCatalog.load(f)
    f.write_text(json.dumps({"gpus": {"x": {"hbm_gb": 1}}}))
    with pytest.raises(ValueError, match="unknown field 'hbm_gb'"):
        HardwareCatalog.load(f)
    f.write_text(json.dumps({"gpu": {}}))
    with pytest.raises(ValueError, match="unknown section 'gpu'"):
        HardwareCatalog.load(f)
    f.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        HardwareCatalog.load(f)
    f.write_text(json.dumps({"gpus": {"h200": {"hbm_gbs": 9000, "memory_gb": 141,
                                               "bf16_tflops": 989}}}))
    assert HardwareCatalog.load(f).gpus["h200"].hbm_gbs == 9000  # a file overrides a preset
    with pytest.raises(ValueError, match="unknown gpu 'x900'"):
        cat.get("gpus", "x900")


def _trace(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("bad, words", [
    ('{"timestamp": 5, "input_length": 10}', "t.jsonl:2: missing field 'output_length'"),
    ('{"timestamp": 5, "input_length": -3, "output_length": 2}',
     "t.jsonl:2: input_length must be a positive integer, got -3"),
    ('{"timestamp": 1, "input_length": 3, "output_length": 2}',
     "t.jsonl:2: timestamp 1 is before the previous line's 2"),
    ('[1, 2]', "t.jsonl:2: a line must be a JSON object"),
    ('{"timestamp": 5', "t.jsonl:2: not JSON"),
    ('{"timestamp": NaN, "input_length": 3, "output_length": 2}',
     "t.jsonl:2: timestamp must be a finite number >= 0, got nan"),
    ('{"timestamp": Infinity, "input_length": 3, "output_length": 2}',
     "t.jsonl:2: timestamp must be a finite number >= 0, got inf"),
    ('{"timestamp": true, "input_length": 3, "output_length": 2}',
     "t.jsonl:2: timestamp must be a finite number >= 0, got True"),
    ('{"timestamp": 5, "input_length": 3.0, "output_length": 2}',
     "t.jsonl:2: input_length must be a positive integer, got 3.0"),
])
def test_bad_trace_lines_are_named(tmp_path: Path, bad: str, words: str) -> None:
    p = _trace(tmp_path, ['{"timestamp": 2, "input_length": 10, "output_length": 5}', bad])
    with pytest.raises(TraceError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_trace(p)


@pytest.mark.parametrize("bad, words", [
    ('{"timestamp": 5, "input_length": 600, "output_length": 2}',
     "t.jsonl:2: missing field 'hash_ids'"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1, 2.5]}',
     "t.jsonl:2: hash_ids must be a list of integers >= 0"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1, true]}',
     "t.jsonl:2: hash_ids must be a list of integers >= 0"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": "12"}',
     "t.jsonl:2: hash_ids must be a list of integers >= 0"),
    ('{"timestamp": 5, "input_length": 1100, "output_length": 2, "hash_ids": [1, 2]}',
     "t.jsonl:2: hash_ids has 2 ids, fewer than the 3 that 1100 prompt tokens need"),
])
def test_bad_hash_ids_are_named_when_prefix_caching_needs_them(tmp_path: Path, bad: str,
                                                               words: str) -> None:
    good = '{"timestamp": 2, "input_length": 10, "output_length": 5, "hash_ids": [7]}'
    p = _trace(tmp_path, [good, bad])
    with pytest.raises(TraceError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_trace(p, hash_ids=True)
    assert len(load_trace(p)) == 2  # without prefix caching they are not read
    reqs = load_trace(_trace(tmp_path, [good]), hash_ids=True)
    assert reqs[0].hash_ids == (7,)
    with pytest.raises(ValueError, match="trace line 1: prefix caching needs hash_ids"):
        ServingSim(_small_gpu(), ServingConfig()).run(load_trace(p, limit=1))
    with pytest.raises(TraceError, match="limit must be an integer >= 1, got 0"):
        load_trace(p, limit=0)


def test_workload_tools() -> None:
    base = [TraceRequest(i, 0.0, 100 if i % 4 else 50_000, 10) for i in range(40)]
    p = poisson(base, 2.0, seed=1)
    assert [r.rid for r in p] == list(range(40)) and p[0].arrival_s == 0.0
    assert all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(p))
    assert p == poisson(base, 2.0, seed=1)
    mix = long_fraction_mix(base, 0.2, 32_000, 50, seed=0)
    assert sum(r.input_len >= 32_000 for r in mix) == 10
    b = inject_burst(p, 3.0, 5, 100_000, 20)
    assert len(b) == 45 and sum(r.input_len == 100_000 for r in b) == 5
    with pytest.raises(ValueError, match="rate must be > 0"):
        poisson(base, 0.0)


def _small_gpu() -> LatencyModel:
    # 1 GB of KV: 8192 tokens of 128 KiB at 16 tokens per block = 476 blocks after weights
    gpu = GpuHw("tiny", hbm_gbs=1000.0, memory_gb=2.0, bf16_tflops=500.0, kernel_us=5.0)
    model = replace(MODEL, params_b=0.5)
    return LatencyModel(gpu, PNM, model)


def _reqs(n: int, seed: int = 0) -> list[TraceRequest]:
    import numpy as np

    rng = np.random.default_rng(seed)
    lens = rng.integers(200, 2500, n)
    outs = rng.integers(20, 300, n)
    return poisson([TraceRequest(i, 0.0, int(a), int(b)) for i, (a, b) in
                    enumerate(zip(lens, outs, strict=True))], 50.0, seed)


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_scheduler_capacity_preemption_and_conservation(preemption: str) -> None:
    lm = _small_gpu()
    reqs = _reqs(120)
    sim = ServingSim(lm, ServingConfig(mode="gpu", preemption=preemption))
    run = sim.run(reqs)
    assert sorted(r.rid for r in run.results) == list(range(120))  # each exactly once
    assert run.peak_gpu_blocks <= run.gpu_blocks
    assert run.preemptions > 0  # memory forced some
    by = {r.rid: r for r in run.results}
    for q in reqs:
        r = by[q.rid]
        assert r.first_token_s >= q.arrival_s and r.finish_s >= r.first_token_s
    assert sum(r.output_len - 1 for r in run.results) == run.decode_tokens
    again = ServingSim(lm, ServingConfig(mode="gpu", preemption=preemption)).run(reqs)
    assert summarize(again) == summarize(run)  # deterministic


def test_nelssa_routes_by_threshold_and_relieves_the_gpu() -> None:
    lm = _small_gpu()
    reqs = _reqs(120)
    gpu = ServingSim(lm, ServingConfig(mode="gpu")).run(reqs)
    nel = ServingSim(lm, ServingConfig(mode="nelssa", t_input=1500)).run(reqs)
    assert sorted(r.rid for r in nel.results) == list(range(120))
    assert {r.rid for r in nel.results if r.tier == "pnm"} == {
        q.rid for q in reqs if q.input_len >= 1500}
    assert nel.preemptions < gpu.preemptions
    assert nel.peak_gpu_blocks <= nel.gpu_blocks
    auto = ServingSim(lm, ServingConfig(mode="nelssa"))
    assert auto.t_input == lm.t_input(4)


def test_a_request_no_tier_holds_is_named() -> None:
    lm = _small_gpu()
    huge = [TraceRequest(0, 0.0, 100, 10, line=1), TraceRequest(1, 1.0, 20_000, 10, line=2)]
    with pytest.raises(CapacityError, match="trace line 2: 20010 tokens exceed the GPU's KV"):
        ServingSim(lm, ServingConfig(mode="gpu", prefix_caching=False)).run(huge)
    # on the PNM tier it decodes, but a colocated prefill holds its whole prompt's KV on the GPU
    with pytest.raises(CapacityError, match=r"trace line 2: its prefill needs the KV of 20000 "
                       r"tokens on the GPU.*--prefill disaggregated"):
        ServingSim(lm, ServingConfig(mode="nelssa", t_input=10_000, prefix_caching=False)).run(huge)
    ok = ServingSim(lm, ServingConfig(mode="nelssa", t_input=10_000,
                                      prefill="disaggregated", prefix_caching=False)).run(huge)
    assert len(ok.results) == 2


def test_disaggregated_prefill_feeds_decode_with_kv() -> None:
    lm = _small_gpu()
    reqs = _reqs(80, seed=3)
    cfg = ServingConfig(mode="gpu", prefill="disaggregated", prefill_gpus=2)
    sim = ServingSim(lm, cfg)
    run = sim.run(reqs)
    assert sorted(r.rid for r in run.results) == list(range(80))
    by = {r.rid: r for r in run.results}
    # the first token comes from the prefill GPUs: no earlier than arrival + its own prefill
    for q in reqs:
        assert by[q.rid].first_token_s >= q.arrival_s + sim.prefill_s(q.input_len) - 1e-12
    # a prefill is chunked at max_batched_tokens: two chunks cost more than one of half size
    assert sim.prefill_s(16384) > 2 * sim.prefill_s(8192) - 1e-12
    with pytest.raises(ValueError, match="prefill must be 'colocated' or 'disaggregated'"):
        ServingConfig(prefill="remote")


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_the_newest_request_is_preempted(preemption: str) -> None:
    lm = _small_gpu()  # 381 blocks of 16 tokens
    a = TraceRequest(0, 0.0, 2000, 3000)
    b = TraceRequest(1, 0.001, 2000, 3000)  # admitted second: the newest
    sim = ServingSim(lm, ServingConfig(mode="gpu", preemption=preemption))
    assert sim.gpu_blocks == 381
    run = sim.run([a, b])
    by = {r.rid: r for r in run.results}
    assert by[0].preemptions == 0 and by[1].preemptions >= 1
    assert by[1].finish_s > by[0].finish_s
    assert run.peak_gpu_blocks <= 381


def test_migration_replaces_recompute_under_growth() -> None:
    from nelssa.emu.serving.workload import growing

    lm = _small_gpu()  # 381 blocks = 6,096 tokens of GPU KV
    reqs = poisson(growing(60, 300, 900, 2.0, seed=4), 20.0, seed=4)
    base = dict(mode="nelssa", t_input=1000, prefill="disaggregated", prefill_gpus=4)
    off = ServingSim(lm, ServingConfig(**base)).run(reqs)
    on_sim = ServingSim(lm, ServingConfig(**base, migration=True))
    on = on_sim.run(reqs)
    for run in (off, on):
        assert sorted(r.rid for r in run.results) == list(range(60))
        assert run.peak_gpu_blocks <= run.gpu_blocks
        assert run.peak_pnm_tokens <= on_sim.pnm_tokens
    assert off.migrations == 0 and off.preemptions > 0
    assert on.migrations > 0 and on.migrated_tokens > 0
    # fewer tokens to rebuild (the memory it frees admits more, which may give way more often)
    assert on.recompute_tokens < off.recompute_tokens
    migrated = [r for r in on.results if r.migrated]
    assert len(migrated) == on.migrations and all(r.tier == "pnm" for r in migrated)
    # one way: the migrated ones started on the GPU tier (inputs below T_input)
    assert all(r.input_len < 1000 for r in migrated)
    assert summarize(on)["decode_throughput_tps"] > summarize(off)["decode_throughput_tps"]
    with pytest.raises(ValueError, match="migration needs mode 'nelssa'"):
        ServingConfig(mode="gpu", migration=True)


def test_a_recomputed_request_holds_only_the_tokens_it_has() -> None:
    """Regression: after a recompute preemption the generated tokens were counted twice (once in
    the rebuilt prefill, once more on top), so the request asked for blocks it did not need and
    preempted itself again."""
    lm = _small_gpu()  # 381 blocks = 6,096 tokens
    a = TraceRequest(0, 0.0, 1000, 3500)
    b = TraceRequest(1, 0.001, 1000, 3500)
    run = ServingSim(lm, ServingConfig(mode="gpu")).run([a, b])
    by = {r.rid: r for r in run.results}
    # B gives way once, when both together outgrow the cache (about 3,048 tokens each); back
    # after A has finished, it rebuilds prompt + generated and then fits to its end (4,500)
    assert by[0].preemptions == 0 and by[1].preemptions == 1 and run.preemptions == 1
    assert 2000 < run.recompute_tokens < 4500
    assert sum(r.output_len - 1 for r in run.results) == run.decode_tokens
