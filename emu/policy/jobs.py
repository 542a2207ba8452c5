"""How a request becomes jobs, the vLLM requests a scheduler sees, as the paper put NELSSA into
an unmodified vLLM (8.3). One job model for the serving emulator's replay and the
co-simulation's engine:

- a GPU-tier request is one job: its prompt, then its generated tokens;
- a PNM-tier request is prefilled on the GPU as a job of one output token (its prompt's KV on
  the GPU while it is built), then decodes as a second job whose prompt is what it keeps on the
  GPU: sink and recent tokens and its centroids (``capacity.resident_tokens``). That prompt's
  KV comes from the prefill (nothing is computed for it), but it passes through the token
  budget and the FCFS queue as vLLM would take it;
- a request whose KV arrives from elsewhere (a prefill GPU, or the GPU's own recovery of KV the
  node lost) enters as a job whose prompt KV is there: nothing is computed unless a preemption
  makes the GPU compute it again;
- a migration (paper 4.3) ends the GPU job and starts the PNM tier's second job.
"""

from __future__ import annotations

import enum

from nelssa.emu.policy.prefix import Content, Kind
from nelssa.emu.policy.schedule import JobSpec


class JobKind(enum.Enum):
    GPU = "gpu"
    """A GPU-tier request, prefilled here."""
    GPU_KV_IN = "gpu-kv-in"
    """A GPU-tier request whose prompt KV arrives (from a prefill GPU, or recomputed)."""
    PNM_PREFILL = "pnm-prefill"
    """A PNM-tier request's prefill on the GPU."""
    PNM_RESIDENT = "pnm-resident"
    """A PNM-tier request decoding: its GPU-resident window and centroids."""

    @property
    def kv_arrives(self) -> bool:
        """Its prompt's KV is there when it is admitted: only its first token is computed."""
        return self in (JobKind.GPU_KV_IN, JobKind.PNM_RESIDENT)


_SUFFIX = {JobKind.GPU: "", JobKind.GPU_KV_IN: "", JobKind.PNM_PREFILL: "",
           JobKind.PNM_RESIDENT: ".r"}


def job_id(rid: int, kind: JobKind, nth: int = 0) -> str:
    """The job's id: the request's for its first GPU-side job, ``.r`` after it for its resident
    job; ``nth`` > 0 for the jobs of a request that comes back (a recovery), which must not
    reuse a live id."""
    base = f"{rid}{_SUFFIX[kind]}"
    return base if nth == 0 else f"{base}.{nth}"


def job_spec(jid: str, rid: int, kind: JobKind, prompt_tokens: int, tokens_left: int,
             hash_ids: tuple[int, ...] | None = None) -> JobSpec:
    """The job of ``kind`` for request ``rid``: ``prompt_tokens`` of prompt (the resident
    tokens for a resident job), ``tokens_left`` still to generate (a prefill job makes one)."""
    content = (Content(rid, Kind.RESIDENT) if kind is JobKind.PNM_RESIDENT
               else Content(rid, Kind.PROMPT, hash_ids))
    max_tokens = 1 if kind is JobKind.PNM_PREFILL else tokens_left
    return JobSpec(jid, prompt_tokens, max_tokens, content)
