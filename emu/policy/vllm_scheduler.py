"""vLLM's own v1 Scheduler and KVCacheManager behind the policy core's scheduler protocol
(``schedule.JobScheduler``), unmodified: no model, no GPU, a fake token for each request that
finished its prefill (as vLLM's own ``tests/v1/core`` drive it).

``VllmScheduler`` imports vLLM, so it runs in the vLLM environment (``make vllm``). Two ways
reach it from elsewhere: the serving emulator runs its whole replay there
(``emu/serving/vllm_env.py``); the co-simulation, whose GPU side and devices live here, keeps it
in a child process of that environment and talks to it one call at a time
(``RemoteVllmScheduler``: each call a JSON line on the child's standard input, its answer a JSON
line on its standard output; ``python -m nelssa.emu.policy.vllm_scheduler --serve``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nelssa.emu.latency.hardware import ModelHw
from nelssa.emu.policy.prefix import Content, Kind
from nelssa.emu.policy.schedule import JobSpec, Planned, StepPlan

log = logging.getLogger(__name__)

ENV_VAR = "NELSSA_VLLM_PYTHON"
"""The vLLM environment's python, where it is not the checkout's ``.venv-vllm``."""


class VllmEnvError(RuntimeError):
    """The vLLM environment is missing or broken."""


def vllm_python() -> Path:
    """The vLLM environment's interpreter, or a VllmEnvError that says how to make it."""
    given = os.environ.get(ENV_VAR)
    path = (Path(given) if given else
            Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise VllmEnvError(f"vLLM's scheduler needs its own environment and {path} is not "
                           f"there: run `make vllm` in the checkout (or set {ENV_VAR})")
    return path


def vllm_env() -> dict[str, str]:
    """The environment vLLM's scheduler runs in: the CPU target, its own logs quiet."""
    return {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}


VLLM_VERSION = "0.33.0"
"""The release this adapter is written against (its scheduler's constructor changes between
releases)."""


def _config_json(model: ModelHw) -> dict[str, object]:
    """A Llama-style HF config of the model's shape (vLLM reads it; no weights, no tokenizer)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": model.q_heads * model.head_dim,
            "intermediate_size": 4 * model.q_heads * model.head_dim,
            "num_hidden_layers": model.layers, "num_attention_heads": model.q_heads,
            "num_key_value_heads": model.kv_heads, "head_dim": model.head_dim,
            "max_position_embeddings": model.max_context, "vocab_size": 128256,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False}


class VllmScheduler:
    """One vLLM v1 Scheduler with ``blocks`` KV blocks of ``block_tokens``."""

    def __init__(self, model: ModelHw, blocks: int, block_tokens: int, max_running: int,
                 max_batched_tokens: int, prefix_caching: bool) -> None:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        import torch
        import vllm
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.structured_output import StructuredOutputManager

        if vllm.__version__ != VLLM_VERSION:
            raise RuntimeError(f"vLLM {vllm.__version__} found, this adapter is for "
                               f"{VLLM_VERSION} (make vllm installs it)")
        self._tmp = tempfile.TemporaryDirectory(prefix="nelssa-vllm-")
        Path(self._tmp.name, "config.json").write_text(json.dumps(_config_json(model)))
        mc = ModelConfig(model=self._tmp.name, skip_tokenizer_init=True,
                         max_model_len=model.max_context, dtype="bfloat16")
        sc = SchedulerConfig(max_num_seqs=max_running, max_num_batched_tokens=max_batched_tokens,
                             max_model_len=model.max_context, is_encoder_decoder=False)
        cc = CacheConfig(block_size=block_tokens, enable_prefix_caching=prefix_caching)
        vc = VllmConfig(model_config=mc, scheduler_config=sc, cache_config=cc)
        vc.cache_config.num_gpu_blocks = blocks
        kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[
            KVCacheGroupSpec(["model.layers.0.self_attn.attn"], FullAttentionSpec(
                block_size=block_tokens, num_kv_heads=model.kv_heads, head_size=model.head_dim,
                dtype=torch.bfloat16))])
        self.s = Scheduler(vllm_config=vc, kv_cache_config=kv,
                           structured_output_manager=StructuredOutputManager(vc),
                           block_size=block_tokens, hash_block_size=block_tokens,
                           log_stats=False)
        self.blocks = blocks
        self.hasher = None
        if prefix_caching:
            from vllm.utils.hashing import get_hash_fn_by_name
            from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

            fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
            init_none_hash(fn)
            self.hasher = get_request_block_hasher(block_tokens, fn)
        self._out_token: dict[str, int] = {}
        self._last = None

    def add(self, spec: JobSpec, front: bool = False) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        req = Request(spec.jid, spec.content.token_ids(spec.prompt_tokens),
                      SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True), None,
                      arrival_time=0.0, block_hasher=self.hasher)
        self._out_token[spec.jid] = spec.content.output_token_id()
        self.s.add_request(req)
        if front:  # a request already in service continues (as a preempted one would)
            self.s.waiting.remove_request(req)
            self.s.waiting.prepend_request(req)

    def counts(self) -> tuple[int, int]:
        return self.s.get_request_counts()

    def set_budget(self, tokens: int) -> None:
        self.s.max_num_scheduled_tokens = tokens  # read at the start of each schedule()

    def used_blocks(self) -> int:
        return self.blocks - self.s.kv_cache_manager.block_pool.get_num_free_blocks()

    def schedule(self) -> StepPlan:
        before = {r.request_id for r in self.s.running}
        so = self.s.schedule()
        self._last = so
        plan = StepPlan()
        for jid, n in so.num_scheduled_tokens.items():
            req = self.s.requests[jid]
            start = req.num_computed_tokens - n  # vLLM counts the step's tokens at schedule
            plan.scheduled.append(Planned(jid, start, n))
            if jid not in before:  # admitted now: what it starts from came from the cache
                plan.prefix_hit_tokens += start
        for jid in so.preempted_req_ids or ():
            if jid in self.s.requests:
                plan.preempted.append((jid, self.s.requests[jid].num_tokens))
        return plan

    def update(self, plan: StepPlan) -> list[tuple[str, bool]]:
        from vllm.v1.outputs import ModelRunnerOutput

        ids = [p.jid for p in plan.scheduled]
        sampled = []
        for jid in ids:
            req = self.s.requests[jid]
            sampled.append([self._out_token[jid]] if req.num_computed_tokens >= req.num_tokens
                           else [])
        out = ModelRunnerOutput(req_ids=ids, req_id_to_index={j: i for i, j in enumerate(ids)},
                                sampled_token_ids=sampled)
        eco = self.s.update_from_output(self._last, out)
        finished = {o.request_id for v in eco.values() for o in v.outputs
                    if o.finish_reason is not None}
        for jid in finished:
            self._out_token.pop(jid, None)
        return [(jid, jid in finished) for jid, tok in zip(ids, sampled, strict=True) if tok]

    def abort(self, jid: str) -> None:
        from vllm.v1.request import RequestStatus

        self.s.finish_requests(jid, RequestStatus.FINISHED_ABORTED)
        self._out_token.pop(jid, None)


# -- the scheduler in a child process of the vLLM environment ----------------------------------
def _spec_json(spec: JobSpec) -> list[Any]:
    c = spec.content
    return [spec.jid, spec.prompt_tokens, spec.max_tokens, c.rid, c.kind.value,
            list(c.hash_ids) if c.hash_ids is not None else None]


def _spec_from_json(d: list[Any]) -> JobSpec:
    jid, prompt, max_tokens, rid, kind, hashes = d
    return JobSpec(jid, prompt, max_tokens,
                   Content(rid, Kind(kind), tuple(hashes) if hashes is not None else None))


def _plan_json(plan: StepPlan) -> dict[str, Any]:
    return {"scheduled": [[p.jid, p.start, p.tokens] for p in plan.scheduled],
            "decodes": plan.decodes, "preempted": [list(x) for x in plan.preempted],
            "swap_in_tokens": plan.swap_in_tokens, "prefix_hit_tokens": plan.prefix_hit_tokens}


def _plan_from_json(d: dict[str, Any]) -> StepPlan:
    return StepPlan([Planned(*p) for p in d["scheduled"]], list(d["decodes"]),
                    [(j, n) for j, n in d["preempted"]], d["swap_in_tokens"],
                    d["prefix_hit_tokens"])


class RemoteVllmScheduler:
    """``VllmScheduler`` in a child process of the vLLM environment, behind the same protocol:
    every call goes there and its answer comes back, so each plan is vLLM's own."""

    def __init__(self, model: ModelHw, blocks: int, block_tokens: int, max_running: int,
                 max_batched_tokens: int, prefix_caching: bool = False) -> None:
        python = vllm_python()
        self._proc = subprocess.Popen(
            [str(python), "-m", "nelssa.emu.policy.vllm_scheduler", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=vllm_env())
        self._plans: dict[int, StepPlan] = {}
        self._call("init", asdict(model), blocks, block_tokens, max_running, max_batched_tokens,
                   prefix_caching)

    def _call(self, op: str, *args: Any) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps([op, *args]) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            err = self._proc.stderr.read() if self._proc.stderr is not None else ""
            tail = "\n".join(err.strip().splitlines()[-12:])
            raise VllmEnvError(f"vLLM's scheduler process ended at {op!r}:\n{tail}")
        answer = json.loads(line)
        if "error" in answer:
            raise VllmEnvError(f"vLLM's scheduler refused {op!r}: {answer['error']}")
        return answer["ok"]

    def add(self, spec: JobSpec, front: bool = False) -> None:
        self._call("add", _spec_json(spec), front)

    def schedule(self) -> StepPlan:
        plan = _plan_from_json(self._call("schedule"))
        self._plans = {id(plan): plan}
        return plan

    def update(self, plan: StepPlan) -> list[tuple[str, bool]]:
        if id(plan) not in self._plans:
            raise ValueError("update takes the plan of the last schedule()")
        return [(j, f) for j, f in self._call("update")]

    def abort(self, jid: str) -> None:
        self._call("abort", jid)

    def used_blocks(self) -> int:
        return int(self._call("used_blocks"))

    def counts(self) -> tuple[int, int]:
        running, waiting = self._call("counts")
        return running, waiting

    def set_budget(self, tokens: int) -> None:
        self._call("set_budget", tokens)

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def serve(inp: Any = None, out: Any = None) -> int:
    """The child's loop: one call a line (``["op", args...]``), one answer a line (``{"ok":
    value}`` or ``{"error": text}``), until standard input closes."""
    inp, out = inp or sys.stdin, out or sys.stdout
    sched: VllmScheduler | None = None
    last: StepPlan | None = None
    for line in inp:
        op, *args = json.loads(line)
        try:
            if op == "init":
                sched = VllmScheduler(ModelHw(**args[0]), *args[1:])
                value: Any = None
            elif sched is None:
                raise RuntimeError("init first")
            elif op == "add":
                sched.add(_spec_from_json(args[0]), bool(args[1]))
                value = None
            elif op == "schedule":
                last = sched.schedule()
                value = _plan_json(last)
            elif op == "update":
                if last is None:
                    raise RuntimeError("update before schedule")
                value = [list(x) for x in sched.update(last)]
                last = None
            elif op == "abort":
                sched.abort(args[0])
                value = None
            elif op == "used_blocks":
                value = sched.used_blocks()
            elif op == "counts":
                value = list(sched.counts())
            elif op == "set_budget":
                sched.set_budget(int(args[0]))
                value = None
            else:
                raise RuntimeError(f"unknown call {op!r}")
        except (RuntimeError, ValueError, KeyError, TypeError) as e:
            out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        else:
            out.write(json.dumps({"ok": value}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if sys.argv[1:] != ["--serve"]:
        sys.stderr.write("usage: python -m nelssa.emu.policy.vllm_scheduler --serve\n")
        sys.exit(2)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    sys.exit(serve())
