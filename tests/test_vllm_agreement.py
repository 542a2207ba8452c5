"""Our scheduler held to vLLM's own (0.33.0, unmodified, in the vLLM environment that
`make vllm` builds and `make test` requires): short replays of each agreement regime through
both, every figure within its goal; the adapter's bookkeeping on a hand-made case."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nelssa.emu.serving.agreement import GOALS, compare, latency_model, regimes
from nelssa.emu.serving.config import SchedulerKind, ServingConfig
from nelssa.emu.serving.sim import ServingSim
from nelssa.emu.serving.vllm_env import run_many_in_vllm_env
from nelssa.emu.serving.workload import TraceRequest

TRACE = Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl"


def test_every_regime_agrees_with_vllm() -> None:
    rows = compare(regimes(TRACE, scale=0.03))
    assert [r["regime"] for r in rows] == ["light", "saturated", "recompute", "mixed",
                                           "migration", "prefix"]
    for r in rows:
        assert all(r["met"].values()), (r["regime"], r["diff"], r["ours"], r["vllm"])
        assert r["vllm"]["steps"] > 100 and r["vllm"]["decode_tps"] > 0
    by = {r["regime"]: r for r in rows}
    # the regimes are what they say: NELSSA's long requests, prefix hits and preemptions occur
    assert by["mixed"]["vllm"]["decode_tps"] != by["saturated"]["vllm"]["decode_tps"]
    assert by["prefix"]["vllm"]["steps"] != by["saturated"]["vllm"]["steps"]


def test_hand_made_replay_is_identical_through_both() -> None:
    """A small GPU (preemptions), a PNM tier, shared prefixes; a prefill cut by the budget;
    requests dropped past the TTFT SLO: per-request results equal."""
    lm = latency_model()
    lm = replace(lm, gpu=replace(lm.gpu, memory_gb=18.5))  # 0.59 GB of KV: about 4,500 tokens
    shared = tuple(range(8))
    reqs = [TraceRequest(i, 0.01 * i, 600 + 97 * i, 40 + 13 * (i % 7), line=i + 1,
                    hash_ids=shared[:2] + (100 + i,) * 6 if i % 2 else shared)
            for i in range(24)]
    reqs.append(TraceRequest(24, 0.05, 3000, 30, line=25, hash_ids=(7,) * 6))
    cfg = ServingConfig(mode="nelssa", t_input=2900, devices=1)
    ours = ServingSim(lm, cfg).run(reqs)
    # and a prefill cut one token short by the budget: its next step samples the first token
    cut = ServingConfig(mode="gpu", max_batched_tokens=256, max_running=8)
    lone = [TraceRequest(0, 0.0, 257, 40, line=1, hash_ids=(1,))]
    # and requests dropped past the TTFT SLO (shed_late) under a burst past the prefill rate
    burst = [TraceRequest(i, 0.05 * i, 9000 + 1500 * (i % 5), 20, line=i + 1) for i in range(40)]
    shed = ServingConfig(mode="nelssa", t_input=12000, devices=1, shed_late=True,
                         prefix_caching=False)
    theirs, theirs_cut, theirs_shed = run_many_in_vllm_env([
        (ServingSim(lm, replace(c, scheduler=SchedulerKind.VLLM)), r)
        for c, r in ((cfg, reqs), (cut, lone))] + [
        (ServingSim(latency_model(), replace(shed, scheduler=SchedulerKind.VLLM)), burst)])
    ours_shed = ServingSim(latency_model(), shed).run(burst)
    assert ours_shed.shed > 0 and {r.tier for r in ours_shed.results} == {"gpu", "pnm"}
    assert (ours_shed.shed, ours_shed.steps) == (theirs_shed.shed, theirs_shed.steps)
    assert sorted((r.rid, r.first_token_s, r.finish_s) for r in ours_shed.results) == sorted(
        (r.rid, r.first_token_s, r.finish_s) for r in theirs_shed.results)
    ours_cut = ServingSim(lm, cut).run(lone)
    assert [(r.first_token_s, r.finish_s) for r in ours_cut.results] == [
        (r.first_token_s, r.finish_s) for r in theirs_cut.results]
    assert ours_cut.steps == theirs_cut.steps == 41
    assert ours.preemptions > 0 and ours.prefix_hit_tokens > 0
    assert {r.tier for r in ours.results} == {"gpu", "pnm"}
    assert ours.steps == theirs.steps and ours.preemptions == theirs.preemptions
    assert ours.prefix_hit_tokens == theirs.prefix_hit_tokens
    key = sorted((r.rid, r.first_token_s, r.finish_s, r.preemptions) for r in ours.results)
    assert key == sorted((r.rid, r.first_token_s, r.finish_s, r.preemptions)
                         for r in theirs.results)


def test_missing_vllm_environment_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 3, '
                     '"hash_ids": [1]}\n')
    proc = subprocess.run([sys.executable, "-m", "nelssa.cli", "serve-sim", "--trace",
                           str(trace), "--scheduler", "vllm", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120,
                          env={"NELSSA_VLLM_PYTHON": str(tmp_path / "none"), "PATH": ""})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "run `make vllm`" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_swap_is_ours_only() -> None:
    with pytest.raises(ValueError, match="vLLM v1 preempts by recompute only"):
        ServingConfig(preemption="swap", scheduler=SchedulerKind.VLLM)
    assert set(GOALS) == {"decode_tps", "tpot_p50", "tpot_p99", "preemptions", "steps"}
