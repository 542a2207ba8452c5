"""vLLM's own v1 Scheduler and KVCacheManager behind the serving emulator's scheduler interface,
unmodified: no model, no GPU, a fake token for each request that finished its prefill (as
vLLM's own ``tests/v1/core`` drive it). It imports vLLM, so it runs in the vLLM environment
(``make vllm``); ``python -m nelssa.emu.serving.vllm_sched`` there reads a replay job as JSON on
standard input and writes the run's result as JSON on standard output (``vllm_env.py`` is the
other end).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from nelssa.emu.latency.hardware import ModelHw
from nelssa.emu.serving.scheduler import JobSpec, Planned, StepPlan

log = logging.getLogger(__name__)

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


def main() -> int:
    """Read replay jobs (``{"jobs": [...]}``) on stdin, replay each through vLLM, write
    ``{"runs": [...]}`` with their results and wall and CPU times (``replay`` measures them, as
    for ours) on stdout."""
    from nelssa.emu.serving.replay import job_from_json, replay

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    runs = []
    for job in json.load(sys.stdin)["jobs"]:
        sim, requests = job_from_json(job)
        runs.append(replay(sim, requests).to_json())
    json.dump({"runs": runs}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
