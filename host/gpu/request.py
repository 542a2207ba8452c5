"""What the hybrid decode works on: its configuration (routing, selection, clustering,
migration) and each request's state on the two tiers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from nelssa.host.gpu.clustering import ClusterConfig
from nelssa.host.gpu.timing import gpu_preset
from nelssa.host.pnm_node.client import NodeFuture

Tensor = torch.Tensor


@dataclass(frozen=True)
class DecodeConfig:
    """Routing, selection and clustering of the hybrid decode."""

    t_input: int = 1024
    """Prompts of this many tokens or more go to the PNM tier."""
    selection: float = 0.04
    """Share of a KV head's clusters selected per step (at least one)."""
    sink: int = 4
    """First tokens of a long request that stay on the GPU."""
    recent: int = 64
    """Latest tokens of a long request that stay on the GPU."""
    chunk: int = 1024
    """Generated tokens clustered and appended to the node at a time."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """k-means settings."""
    gpu: str = "h100-nvl"
    """GPU preset of the roofline time model."""
    check_accuracy: bool = True
    """Keep every long request's full KV on the host to measure the hybrid attention against
    dense attention over the whole context (costs host memory and time)."""
    gpu_kv_tokens: int | None = None
    """KV tokens the emulated GPU holds; with it, a request that has grown past ``t_input``
    migrates to the PNM tier in the background once ``migrate_at`` of it is in use (paper
    4.3). None: no migration."""
    migrate_at: float = 0.95
    """Share of ``gpu_kv_tokens`` in use from which a migration starts."""

    def __post_init__(self) -> None:
        if self.gpu_kv_tokens is not None and self.gpu_kv_tokens < 1:
            raise ValueError(f"gpu_kv_tokens must be >= 1, got {self.gpu_kv_tokens}")
        if not 0 < self.migrate_at <= 1:
            raise ValueError(f"migrate_at must be in (0, 1], got {self.migrate_at}")
        if not 0.0 < self.selection <= 1.0:
            raise ValueError(f"selection must be in (0, 1], got {self.selection}")
        if self.sink < 0 or self.recent < 0 or self.chunk < 1:
            raise ValueError(f"sink and recent must be >= 0 and chunk >= 1, got {self.sink}, "
                             f"{self.recent}, {self.chunk}")
        if self.t_input <= self.sink + self.recent:
            raise ValueError(f"t_input ({self.t_input}) must exceed sink + recent "
                             f"({self.sink + self.recent}) so a long request has clusters")
        gpu_preset(self.gpu)


def to_bf16_bits(t: Tensor) -> np.ndarray:
    return t.contiguous().to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


@dataclass
class Migration:
    """KV of a GPU request on its way to the node; the GPU keeps all of it until every write
    is confirmed."""

    futures: list[NodeFuture]
    tokens: int
    """Cache length when it started: tokens [sink, tokens - recent) are being written."""
    start_ps: int
    start_step: int
    done_ps: int | None = None
    recovery: bool = False
    """It puts back KV the node lost (not a migration for want of GPU memory)."""


@dataclass
class Request:
    """One sequence being decoded."""

    rid: int
    prompt: list[int]
    max_new: int
    generated: list[int] = field(default_factory=list)
    tier: str = "gpu"
    """``gpu`` or ``pnm``; a request moves back only while it recovers KV the node lost."""
    status: str = "running"
    """``running``, ``done`` or ``failed``."""
    note: str = ""
    """Why it failed, or why a long request stayed on the GPU."""
    kv: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    """Per layer, the K and V the GPU holds (all of it, or a long request's window)."""
    full: list[tuple[Tensor, Tensor]] | None = None
    """Per layer, the whole context (long requests, with accuracy checks on)."""
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
    """A background migration under way."""
    migrated: bool = False
    """It started on the GPU and moved to the PNM tier while decoding."""
    recoveries: int = 0
    """Times the node lost its KV with a device and the GPU recomputed it."""
    recovering: bool = False
    """Its recomputed KV is to go back to the node (then it returns to the PNM tier)."""
    max_engine_error: float = 0.0
    """Largest relative error against dense attention over exactly the tokens it attended to
    (window and selected clusters): the devices' and the merge's own error."""

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.generated)
