"""What the co-simulation works on: its configuration (routing, selection, clustering, GPU
memory, migration), each request as the engine sees it (``Request``: its tokens, tier, state and
current job; no tensors) and what the executor keeps for it by request id (``RequestKv``: its
KV, the node session, the centroids)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from nelssa.emu.latency.hardware import DEFAULT_GPU
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.policy.jobs import JobKind
from nelssa.emu.policy.states import Fallback, SeqState, Tier, Transfer
from nelssa.host.gpu.clustering import ClusterConfig
from nelssa.host.gpu.gpu_timer import TorchConfig
from nelssa.host.gpu.timing import gpu_preset
from nelssa.host.pnm_node.client import NodeFuture

Tensor = torch.Tensor
_SPARSITY = Sparsity()


@dataclass(frozen=True)
class DecodeConfig:
    """Routing, selection, clustering and GPU memory of the hybrid decode."""

    t_input: int | None = None
    """Prompts of this many tokens or more go to the PNM tier; None: none does. ``nelssa
    decode`` takes it from the latency model's crossover for its hardware and model
    (``routing.crossover_router``) unless ``--t-input`` is given."""
    selection: float = _SPARSITY.selection
    """Share of a KV head's clusters selected per step (at least one)."""
    sink: int = _SPARSITY.sink_tokens
    """First tokens of a long request that stay on the GPU."""
    recent: int = _SPARSITY.recent_tokens
    """Latest tokens of a long request that stay on the GPU."""
    chunk: int = _SPARSITY.chunk_tokens
    """Generated tokens clustered and appended to the node at a time."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """k-means settings."""
    gpu: str = DEFAULT_GPU
    """GPU preset of the roofline time model."""
    check_accuracy: bool = True
    """Keep every long request's full KV on the host to measure the hybrid attention against
    dense attention over the whole context (costs host memory and time)."""
    gpu_kv_tokens: int | None = None
    """KV the emulated GPU holds, in tokens (``block_tokens`` to a block, one block the null
    block, as vLLM counts): admission, preemption (recompute) and migration to the PNM tier of
    a request grown past ``t_input`` once ``migrate_at`` of it is in use (paper 4.3). None: a
    GPU without limit, no preemption, no migration."""
    block_tokens: int = 16
    """Tokens per KV block (vLLM's block_size)."""
    migrate_at: float = 0.95
    """Share of the GPU's KV blocks in use from which a migration starts."""
    inflight_bytes: int = 2 << 30
    """Most KV bytes of one transfer to the node in flight at a time: a KV head's writes wait
    for the oldest ones' replies beyond it (bounds the host memory of a 1M-token offload; a
    transfer's emulated send times are unchanged where it is given them)."""

    stream_offload: bool = True
    """Without ``check_accuracy``: an emulated prefill of a PNM-tier prompt writes each layer's
    KV to the node as it makes it, keeping the window, so one layer of the prompt's KV is in
    host memory at a time (the same writes, values and times as writing them all after the
    prefill, which False does)."""
    torch: TorchConfig = field(default_factory=TorchConfig)
    """Where the GPU side runs (cpu, cuda) and how its time is taken (gpu_timer.py)."""

    def __post_init__(self) -> None:
        if self.inflight_bytes < 1:
            raise ValueError(f"inflight_bytes must be >= 1, got {self.inflight_bytes}")
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {self.block_tokens}")
        if self.gpu_kv_tokens is not None and self.gpu_kv_tokens < 2 * self.block_tokens:
            raise ValueError(f"gpu_kv_tokens must be >= 2 blocks ({2 * self.block_tokens} "
                             f"tokens), got {self.gpu_kv_tokens}")
        if not 0 < self.migrate_at <= 1:
            raise ValueError(f"migrate_at must be in (0, 1], got {self.migrate_at}")
        if not 0.0 < self.selection <= 1.0:
            raise ValueError(f"selection must be in (0, 1], got {self.selection}")
        if self.sink < 0 or self.recent < 0 or self.chunk < 1:
            raise ValueError(f"sink and recent must be >= 0 and chunk >= 1, got {self.sink}, "
                             f"{self.recent}, {self.chunk}")
        if self.t_input is not None and self.t_input <= self.sink + self.recent:
            raise ValueError(f"t_input ({self.t_input}) must exceed sink + recent "
                             f"({self.sink + self.recent}) so a long request has clusters")
        gpu_preset(self.gpu)

    @property
    def gpu_kv_blocks(self) -> int | None:
        return None if self.gpu_kv_tokens is None else self.gpu_kv_tokens // self.block_tokens


def to_bf16_bits(t: Tensor) -> np.ndarray:
    """A tensor's bf16 bits on the host (where KV and queries cross to the node)."""
    return t.contiguous().to(torch.bfloat16).view(torch.int16).cpu().numpy().view(np.uint16)


@dataclass
class Migration:
    """KV of a GPU request on its way to the node; the GPU keeps all of it until every write
    is confirmed."""

    futures: list[NodeFuture]
    tokens: int
    """Cache length when it started: tokens [sink, tokens - recent) are being written."""
    start_ps: int
    start_step: int
    kind: Transfer
    done_ps: int | None = None


@dataclass(eq=False)
class Request:
    """A request as the engine sees it: its tokens, where its attention runs, its state in the
    GPU's schedule and its current job (``emu/policy/jobs.py``)."""

    rid: int
    prompt: list[int]
    max_new: int
    generated: list[int] = field(default_factory=list)
    tier: Tier = Tier.GPU
    """Where its attention runs; a request moves back only while it recovers KV the node
    lost."""
    status: SeqState = SeqState.WAITING
    fallback: Fallback = Fallback.NONE
    """Why a request routed to the PNM tier is on the GPU."""
    note: str = ""
    """Why it failed or fell back, in words, for people (control flow reads ``fallback``)."""
    migrated: bool = False
    """It started on the GPU and moved to the PNM tier while decoding."""
    preemptions: int = 0
    recoveries: int = 0
    """Times the node lost its KV with a device and the GPU recomputed it."""
    transfer: Transfer | None = None
    """A background transfer of its KV to the node under way."""
    job: JobKind = JobKind.GPU
    jid: str = ""
    """Its current job's id in the scheduler."""
    job_prompt: int = 0
    """Its current job's prompt tokens."""
    job_generated: int = 0
    """Tokens it had generated when its current job started."""
    admitted: bool = False
    """Its current job has been scheduled since it was last queued (its next work decodes)."""
    recompute: bool = False
    """Its current job was preempted: the KV it held is computed again when it is admitted."""

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.generated)


@dataclass(eq=False)
class RequestKv:
    """What the executor keeps for one request: its KV on the GPU, its session and centroids
    on the node, and its accuracy figures."""

    rid: int
    kv: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    """Per layer, the K and V the GPU holds (all of it, or a long request's window)."""
    full: list[tuple[Tensor, Tensor]] | None = None
    """Per layer, the whole context (long requests, with accuracy checks on)."""
    remote: bool = False
    """Its attention runs on the node (its KV there): the executor's own fact, which the
    engine's ``Request.tier`` follows after the step."""
    session: int | None = None
    chunks: int = 0
    """Chunk updates appended to the node so far."""
    offloaded: int = 0
    """Tokens [sink, sink + offloaded) live on the node."""
    centroids: list[list[Tensor]] = field(default_factory=list)
    """Per layer and KV head, (clusters, head_dim)."""
    sizes: list[list[Tensor]] = field(default_factory=list)
    """Per layer and KV head, the tokens of each cluster."""
    key_mean: list[Tensor] = field(default_factory=list)
    """Per layer, (kv heads, head_dim): the prefill keys' mean that clustering centres by."""
    members: list[list[list[Tensor]]] = field(default_factory=list)
    """Per layer and KV head, each cluster's token positions (with accuracy checks on)."""
    max_error: float = 0.0
    """Largest relative error of its attention against dense attention over the whole
    context, over the layers of this step (what selection leaves out)."""
    migration: Migration | None = None
    """A background transfer of its KV to the node under way (its writes)."""
    recovering: bool = False
    """Its recomputed KV is to go back to the node (then it returns to the PNM tier)."""
    emulated_prefill: bool = False
    """Its prompt's KV came from the emulated prefill node (host/gpu/emulated_prefill.py)."""
    prefill_ps: int = 0
    """Its prefill's time on the prefill node (the latency model's GPU; not this one's)."""
    max_engine_error: float = 0.0
    """Largest relative error against dense attention over exactly the tokens it attended to
    (window and selected clusters): the devices' and the merge's own error."""
