"""Our scheduler's runs of pure decode steps, taken many at a time, and the decodes that lead
a step, taken in one pass, give bit for bit what stepping one step and one job at a time gives:
every per-request time, every counter, every sample."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nelssa.emu.latency.hardware import GpuHw, ModelHw, PnmHw
from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.policy.prefix import Content, Kind
from nelssa.emu.policy.schedule import JobSpec
from nelssa.emu.policy.v1_scheduler import V1Scheduler
from nelssa.emu.serving import fastpath
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.replay import replay
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.workload import TraceRequest, growing, poisson

LM = LatencyModel(
    GpuHw("g", hbm_gbs=1000.0, memory_gb=18.2, bf16_tflops=500.0),
    PnmHw("p", bw_eff_gbs=100.0, capacity_gb=2.0, t_base_us=4.0, t_dev_us=1.0, t_host_us=2.0),
    ModelHw("m", layers=32, kv_heads=8, q_heads=32, head_dim=128, params_b=8.0,
            max_context=1 << 20))


def _mixed(n: int, seed: int) -> list[TraceRequest]:
    import numpy as np

    rng = np.random.default_rng(seed)
    shared = tuple(range(40))
    out = []
    for i in range(n):
        inp = int(rng.integers(100, 1500))
        ids = shared[:int(rng.integers(0, 4))] + tuple(1000 + 50 * i + k for k in range(40))
        out.append(TraceRequest(i, 0.0, inp, int(rng.integers(1, 600)), line=0,
                           hash_ids=ids[:-(-inp // 512)]))
    return poisson(out, 4.0, seed)


CASES = {
    "gpu": ServingConfig(mode="gpu"),
    "gpu, no caching": ServingConfig(mode="gpu", prefix_caching=False),
    "nelssa": ServingConfig(mode="nelssa", t_input=1200, devices=2),
    "swap": ServingConfig(mode="gpu", preemption="swap", prefix_caching=False),
    "disaggregated migration": ServingConfig(mode="nelssa", t_input=1500, migration=True,
                                             prefill="disaggregated", prefill_gpus=2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_runs_equal_steps(name: str) -> None:
    cfg = CASES[name]
    reqs = (poisson(growing(60, 300, 900, 2.0, seed=2), 20.0, seed=2) if cfg.migration
            else _mixed(80, 1))
    sim = ServingSim(LM, cfg)
    fast = replay(sim, reqs)
    slow = replay(sim, reqs, fast=False)
    a, b = fast.to_json(), slow.to_json()
    for d in (a, b):
        d.pop("wall_s"), d.pop("cpu_s")
    assert a == b
    assert fast.steps > 1000 and len(fast.results) == len(reqs)
    if cfg.migration:
        assert fast.migrations > 0
    else:
        assert fast.preemptions > 0  # memory is short enough to matter


def test_steady_steps_stop_before_a_finish_and_at_full_memory() -> None:
    s = V1Scheduler(blocks=12, block_tokens=16, max_running=8, max_batched_tokens=64,
                     prefix_caching=False)
    s.add(JobSpec("a", 20, 50, Content(0, Kind.PROMPT)))
    s.add(JobSpec("b", 30, 5, Content(1, Kind.PROMPT)))
    s.update(s.schedule())  # both prefilled in one step, one token each
    assert fastpath.steady_steps(s, 1000) == 3  # b's 5th token would finish it
    s2 = V1Scheduler(blocks=6, block_tokens=16, max_running=8, max_batched_tokens=64,
                      prefix_caching=False)
    s2.add(JobSpec("a", 20, 500, Content(0, Kind.PROMPT)))
    s2.update(s2.schedule())
    # 5 usable blocks (block 0 is vLLM's null block); a has computed 20 tokens, and step i of
    # the run computes token 20 + i: 60 steps fit
    assert fastpath.steady_steps(s2, 1000) == 5 * 16 - 20
    fastpath.advance(s2, 5 * 16 - 20)
    assert s2.used_blocks() == 6 and fastpath.steady_steps(s2, 1000) == 0
    assert replace(CASES["gpu"], prefix_caching=True).prefix_caching


def test_a_prefill_cut_one_token_short_samples_its_first_token_in_the_next_step() -> None:
    """A chunk that stops one token short of the prompt leaves a job whose next step is one
    token, like a decode, but it samples the first token: no run of decodes may take it."""
    for caching in (False, True):
        cfg = ServingConfig(mode="gpu", max_batched_tokens=64, max_running=8,
                            prefix_caching=caching)
        reqs = [TraceRequest(0, 0.0, 65, 50, line=0, hash_ids=(1,))]
        sim = ServingSim(LM, cfg)
        fast, slow = replay(sim, reqs), replay(sim, reqs, fast=False)
        (a,), (b,) = fast.results, slow.results
        assert b.first_token_s < b.finish_s and slow.steps == 51  # 64 + 1 prompt tokens, 49 more
        assert (a.first_token_s, a.finish_s, fast.decode_tokens) == (
            b.first_token_s, b.finish_s, slow.decode_tokens)


def test_decode_run_terms_price_a_step_as_step_agg_s_does_bit_for_bit() -> None:
    import numpy as np

    from nelssa.emu.serving.cost import CostModel

    cost = CostModel(LM, 2, 1024, 64.0, 50.0)
    rng = np.random.default_rng(5)
    for _ in range(2000):
        tokens, pnm_n = int(rng.integers(1, 300)), int(rng.integers(0, 40))
        gpu_ctx, window = int(rng.integers(0, 1 << 22)), int(rng.integers(0, 1 << 16))
        pnm_ctx = int(rng.integers(0, 1 << 24)) if pnm_n else 0
        t_pnm = None if rng.random() < 0.5 else float(rng.random() * 1e-2)
        base, s_kv, s_centroid, s_pnm, comm = cost.decode_run_terms(tokens, pnm_n)
        t_attn = (gpu_ctx + window) * s_kv
        t_tier = pnm_ctx * s_pnm + comm if t_pnm is None else t_pnm
        step = base + pnm_ctx * s_centroid + (t_attn if t_attn >= t_tier else t_tier)
        assert step == cost.step_agg_s(tokens, gpu_ctx, pnm_ctx, pnm_n, window, t_pnm=t_pnm)
