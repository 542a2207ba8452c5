"""vLLM's own scheduler plans real co-simulation steps (`nelssa decode --scheduler vllm`): the
same batch on a node of model devices, planned once by the project's scheduler and once by
vLLM's v1 Scheduler (unmodified, in a child process of its environment, `make vllm`), gives the
same plans step for step (jobs and their token counts, preemptions) and the same tokens. The
batch is made to need the whole job model: a PNM-tier request (its prefill job, then its
resident job) and a GPU whose KV runs short (a preemption, a recompute)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nelssa.emu.policy.schedule import StepPlan
from nelssa.emu.policy.states import SeqState, Tier
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.engine import DecodeConfig, DecodeEngine
from nelssa.host.gpu.model import Llama, random_weights
from nelssa.host.pnm_node.client import NodeClient
from tests.node_helpers import NodeProcess

SMALL = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    max_position_embeddings=4096)
Plan = tuple[list[tuple[str, int]], list[str]]


def _run(scheduler: str, endpoint: str) -> tuple[DecodeEngine, list[Plan]]:
    """Three GPU-tier requests and one for the PNM tier on a GPU of 20 KV blocks: the three
    outgrow it (the newest is preempted and recomputed), the long one's prefill waits for
    room, then it decodes on the node."""
    model = Llama(SMALL, random_weights(SMALL, 1))
    cfg = DecodeConfig(t_input=300, selection=1.0, chunk=8, recent=16, sink=4,
                       check_accuracy=False, gpu_kv_tokens=20 * 16)
    plans: list[Plan] = []
    with NodeClient(endpoint) as c:
        dec = DecodeEngine(model, cfg, c, scheduler=scheduler)
        g = torch.Generator().manual_seed(4)
        for n in (40, 90, 120, 300):
            dec.add(torch.randint(0, 512, (n,), generator=g).tolist(), 41)
        planned = dec.sched.schedule

        def recorded() -> StepPlan:
            plan = planned()
            # ours lists the decodes that lead a step apart; vLLM lists every job scheduled
            jobs = [(p.jid, p.tokens) for p in plan.scheduled] + [(j, 1) for j in plan.decodes]
            plans.append((sorted(jobs), sorted(j for j, _ in plan.preempted)))
            return plan

        dec.sched.schedule = recorded  # type: ignore[method-assign]
        while dec.unfinished():
            dec.step()
        dec.close()
    return dec, plans


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    n = NodeProcess(f"ipc://{tmp_path_factory.mktemp('vllm')}/node", 2, "model")
    yield n
    n.kill()


def test_vllm_plans_the_same_cosimulation_steps(node: NodeProcess) -> None:
    ours, our_plans = _run("ours", node.endpoint)
    vllm, vllm_plans = _run("vllm", node.endpoint)
    # the batch needed the whole job model: a preemption, and a PNM-tier request's two jobs
    assert [r.preemptions for r in ours.requests] == [0, 0, 1, 0]
    assert [r.tier for r in ours.requests] == [Tier.GPU] * 3 + [Tier.PNM]
    assert any(("3", 300) in jobs for jobs, _ in our_plans)  # its prefill job
    assert any(jid == "3.r" for jobs, _ in our_plans for jid, _ in jobs)  # its resident job
    assert len(our_plans) > 80
    for step, (a, b) in enumerate(zip(our_plans, vllm_plans, strict=True)):
        assert a == b, f"scheduler step {step}: ours {a}, vLLM's {b}"
    assert [r.generated for r in vllm.requests] == [r.generated for r in ours.requests]
    assert [r.preemptions for r in vllm.requests] == [r.preemptions for r in ours.requests]
    assert all(r.status is SeqState.DONE for r in vllm.requests)
    assert ours.steps == vllm.steps


def test_vllm_scheduler_without_its_environment_is_one_clear_error(tmp_path: Path,
                                                                   monkeypatch) -> None:
    from nelssa.emu.policy.vllm_scheduler import VllmEnvError

    monkeypatch.setenv("NELSSA_VLLM_PYTHON", str(tmp_path / "missing"))
    dec = DecodeEngine(Llama(SMALL, random_weights(SMALL, 1)), DecodeConfig(t_input=300), None,
                       scheduler="vllm")
    dec.add([1, 2, 3], 2)
    with pytest.raises(VllmEnvError, match="run `make vllm`"):
        dec.step()


def _step_table(out: str) -> list[str]:
    """The step rows of `nelssa decode`'s table (emulated figures only)."""
    return [line for line in out.splitlines() if re.match(r"\s+\d+\s+\d+S\+\s*\d+L", line)]


@pytest.mark.rtl
def test_nelssa_decode_with_vllm_on_rtl_devices(tmp_path: Path) -> None:
    """The command, small: a short and a long request decoded on a Verilated device, planned
    by vLLM's scheduler, give our scheduler's step table to the picosecond."""
    tables = []
    for scheduler in ("ours", "vllm"):
        proc = subprocess.run(
            [sys.executable, "-m", "nelssa.cli", "decode", "--backend", "rtl", "--devices", "1",
             "--short", "1", "--long", "1", "--long-len", "1100", "--t-input", "1024",
             "--steps", "3", "--no-accuracy", "--scheduler", scheduler,
             "--trace", str(tmp_path / f"{scheduler}.json"),
             "--plot", str(tmp_path / f"{scheduler}.png")],
            capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "request 1: prompt   1100 tokens -> PNM tier" in proc.stdout
        tables.append(_step_table(proc.stdout))
    assert len(tables[0]) == 3 and tables[0] == tables[1], tables
