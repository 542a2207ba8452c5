"""The schedulers by name, for every engine that plans steps (the serving emulator's replay,
the co-simulation): one registry, so a name means the same scheduler everywhere."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nelssa.emu.latency.hardware import ModelHw
from nelssa.emu.policy.schedule import JobScheduler


@dataclass(frozen=True)
class SchedulerSpec:
    """What a scheduler is made with (vLLM's names in brackets)."""

    model: ModelHw
    """The model's shape (vLLM reads it as a config; ours does not need it)."""
    blocks: int
    """The GPU's KV blocks, the null block among them (num_gpu_blocks)."""
    block_tokens: int
    """Tokens per block (block_size)."""
    max_running: int
    """Most jobs running at once (max_num_seqs)."""
    max_batched_tokens: int
    """A step's token budget (max_num_batched_tokens)."""
    prefix_caching: bool = False
    """Automatic prefix caching (enable_prefix_caching)."""
    swap: bool = False
    """Swap preemption instead of recompute (ours only)."""
    aggregate: bool = True
    """Ours: leading decodes taken in one pass (off: the general pass, the reference)."""
    in_process: bool = False
    """vLLM: this process is the vLLM environment's (else it runs in a child process
    there)."""


def _ours(spec: SchedulerSpec) -> JobScheduler:
    from nelssa.emu.policy.v1_scheduler import V1Scheduler

    return V1Scheduler(spec.blocks, spec.block_tokens, spec.max_running,
                       spec.max_batched_tokens, spec.prefix_caching, spec.swap, spec.aggregate)


def _vllm(spec: SchedulerSpec) -> JobScheduler:
    if spec.swap:
        raise ValueError("vLLM's v1 scheduler preempts by recompute only (no swap)")
    from nelssa.emu.policy import vllm_scheduler

    make = (vllm_scheduler.VllmScheduler if spec.in_process
            else vllm_scheduler.RemoteVllmScheduler)
    return make(spec.model, spec.blocks, spec.block_tokens, spec.max_running,
                spec.max_batched_tokens, spec.prefix_caching)


SCHEDULERS: dict[str, Callable[[SchedulerSpec], JobScheduler]] = {"ours": _ours, "vllm": _vllm}
"""``ours``: the project's implementation of vLLM v1's algorithm (``v1_scheduler.py``);
``vllm``: vLLM's own v1 Scheduler, unmodified (``vllm_scheduler.py``, its own environment)."""


def make_scheduler(name: str, spec: SchedulerSpec) -> JobScheduler:
    try:
        make = SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}: one of {', '.join(SCHEDULERS)}") from None
    return make(spec)
