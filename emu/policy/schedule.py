"""The scheduler protocol of the policy core: what the serving emulator's replay and the
co-simulation's engine ask of a scheduler, and the plan of plain data it returns (job ids and
token counts, no tensors).

A request becomes one or more jobs, vLLM requests, as the paper put NELSSA into an unmodified
vLLM (8.3; ``jobs.py`` says which). The engine hands jobs to a scheduler and asks it, step after
step, what to run; it runs the step and tells the scheduler which jobs produced a token. Two
implementations sit behind the protocol: ``v1_scheduler.V1Scheduler``, the project's own
implementation of vLLM v1's algorithm, and ``vllm_scheduler.VllmScheduler``, vLLM's own v1
Scheduler (in the vLLM environment; ``RemoteVllmScheduler`` reaches it from this one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from nelssa.emu.policy.prefix import Content


@dataclass(frozen=True)
class JobSpec:
    """What a scheduler is given: one vLLM request."""

    jid: str
    prompt_tokens: int
    max_tokens: int
    content: Content


@dataclass(slots=True)
class Planned:
    jid: str
    start: int
    """Tokens computed before this step (the chunk attends to them)."""
    tokens: int


@dataclass
class StepPlan:
    """What one step runs."""

    scheduled: list[Planned] = field(default_factory=list)
    decodes: list[str] = field(default_factory=list)
    """Jobs decoding one token each that do not finish with it, when the scheduler lists them
    apart from ``scheduled`` (ours does, for its running jobs' decodes that lead the step)."""
    preempted: list[tuple[str, int]] = field(default_factory=list)
    """Jobs preempted this step, with the tokens they held (to be computed again)."""
    swap_in_tokens: int = 0
    prefix_hit_tokens: int = 0
    """Tokens of newly admitted jobs found in the prefix cache."""


class JobScheduler(Protocol):
    """What an engine (the replay, the co-simulation) needs of a scheduler."""

    def add(self, spec: JobSpec, front: bool = False) -> None:
        """Queue a job, at the back of the waiting queue or (a request already in service
        that continues as a new job) at its front."""
        ...

    def schedule(self) -> StepPlan: ...

    def update(self, plan: StepPlan) -> list[tuple[str, bool]]:
        """Jobs of ``plan.scheduled`` that sampled a token, each with whether it finished (each
        of ``plan.decodes`` sampled one and goes on)."""
        ...

    def abort(self, jid: str) -> None: ...

    def used_blocks(self) -> int: ...

    def counts(self) -> tuple[int, int]:
        """Running and waiting jobs."""
        ...

    def set_budget(self, tokens: int) -> None:
        """The token budget of the steps from the next on (vLLM max_num_batched_tokens)."""
        ...
