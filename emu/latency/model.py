"""Decode-attention latency of both tiers and their crossover (paper 4.1):

    T_GPU(L)    = L * M_kv / BW_GPU
    T_PNM(L, N) = L * M_kv / (C * BW_GPU)            centroid search on the GPU
                + S * L * M_kv / (N * BW_PNM_eff)    sparse attention over N devices
                + T_comm(N)
    T_comm(N)   = layers * (t_base + t_link + N * t_dev + [N > 1] * t_host)

with M_kv the KV bytes per token (all layers), C the compression factor of the centroid search
(tokens per cluster), S the selection ratio. Equating the two gives

    L_crossover(N) = T_comm(N) / (M_kv * ((C - 1) / (C * BW_GPU) - S / (N * BW_PNM_eff)))

which exists only while S / (N * BW_PNM_eff) < (C - 1) / (C * BW_GPU): more devices make it
easier to meet and move the crossover to shorter contexts.

T_comm is per decode step: each layer's attention is one round trip to the node (the next layer
needs its output), so the per-request costs repeat per layer: t_base (host software), t_link
(the link's round trip plus the serialization of the layer's query and output), t_dev per device
(its CXL transfers) and t_host beyond one device (dispatch and aggregation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nelssa.emu.latency.fields import Num, check_numbers
from nelssa.emu.latency.hardware import SHARE, GpuHw, LinkHw, ModelHw, PnmHw, measured_pnm

COMPRESSION = Num("a number > 1", lo=1, lo_open=True, most=1e6)
"""C: tokens per cluster."""
DEVICE_COUNT = Num("an integer in 1..1024", integer=True, lo=1, hi=1024)
"""N: PNM devices of the latency model and the serving replay (a node has at most 32)."""
TOKENS = Num("an integer >= 0", integer=True, lo=0, most=1 << 30)
POSITIVE = Num("a positive integer", integer=True, lo=1, most=1 << 30)


@dataclass(frozen=True)
class Sparsity:
    """The sparse-attention settings of the PNM tier (RetroInfer, paper 4.2; DESIGN.md,
    Reference parameters): the one place of these numbers for the latency model, the serving
    emulator's cost model and the co-simulation's clustering and GPU window."""

    selection: float = field(default=0.04, metadata={"num": SHARE})
    """S: share of clusters (and so of KV bytes) read per step (the paper's throughput runs)."""
    compression: float = field(default=16.0, metadata={"num": COMPRESSION})
    """C: tokens per cluster; the centroids are 1/C of the keys the GPU would read."""
    sink_tokens: int = field(default=4, metadata={"num": TOKENS})
    """First tokens of a PNM-tier request that stay on the GPU (attention sinks)."""
    recent_tokens: int = field(default=64, metadata={"num": TOKENS})
    """Latest tokens of a PNM-tier request that stay on the GPU."""
    chunk_tokens: int = field(default=1024, metadata={"num": POSITIVE})
    """Generated tokens held on the GPU until they are clustered and appended (paper 4.3)."""
    segment_tokens: int = field(default=8192, metadata={"num": POSITIVE})
    """Tokens clustered together by k-means; longer contexts are cut into segments."""
    kmeans_iterations: int = field(default=10, metadata={"num": POSITIVE})
    """k-means passes over a segment's keys."""

    def __post_init__(self) -> None:
        check_numbers(self)  # each field refused by its Num, named

    @property
    def window_tokens(self) -> int:
        """Tokens of a PNM-tier request the GPU attends to densely at most: sink, recent and
        one chunk not yet clustered."""
        return self.sink_tokens + self.recent_tokens + self.chunk_tokens


@dataclass(frozen=True)
class LatencyModel:
    """The formulas above for one GPU, one PNM tier and one model (seconds)."""

    gpu: GpuHw
    pnm: PnmHw
    model: ModelHw
    sparsity: Sparsity = Sparsity()
    link: LinkHw | None = None
    """The GPU node <-> PNM node link; None leaves only the PNM tier's own costs."""

    def __post_init__(self) -> None:
        if self.pnm.measured:  # the device's own bandwidth at this workload point
            object.__setattr__(self, "pnm", measured_pnm(
                self.pnm, self.sparsity.selection, self.sparsity.compression,
                self.model.q_heads // self.model.kv_heads, self.model.head_dim))

    @property
    def t_link(self) -> float:
        """One layer's round trip on the link: base latency both ways, the query (bf16) up
        and the output (fp32 O and LSE per query head) down."""
        if self.link is None:
            return 0.0
        return 2 * self.link.latency_us * 1e-6 + self.link_bytes * 8 / (self.link.gbps * 1e9)

    @property
    def link_bytes(self) -> int:
        """Bytes one query moves on the link in one layer: the query (bf16) up, the output
        (fp32 O and LSE per query head) down."""
        m = self.model
        return m.q_heads * m.head_dim * 2 + m.q_heads * (m.head_dim * 4 + 4)

    @property
    def _bw_gpu(self) -> float:
        return self.gpu.hbm_gbs * 1e9

    @property
    def _bw_pnm(self) -> float:
        return self.pnm.bw_eff_gbs * 1e9

    def t_gpu(self, length: float) -> float:
        """Dense decode attention of one request on the GPU, one step, all layers."""
        return length * self.model.kv_bytes_per_token / self._bw_gpu

    def t_comm(self, devices: int) -> float:
        if devices < 1:
            raise ValueError(f"devices must be >= 1, got {devices}")
        p = self.pnm
        per_layer = (p.t_base_us + devices * p.t_dev_us
                     + (p.t_host_us if devices > 1 else 0)) * 1e-6 + self.t_link
        return self.model.layers * per_layer

    def t_centroids(self, length: float) -> float:
        """GPU-side centroid search of one long request, one step."""
        return length * self.model.kv_bytes_per_token / (self.sparsity.compression
                                                         * self._bw_gpu)

    def t_sparse(self, length: float, devices: int) -> float:
        """Sparse attention on the PNM tier, one request, one step."""
        return (self.sparsity.selection * length * self.model.kv_bytes_per_token
                / (devices * self._bw_pnm))

    def t_pnm(self, length: float, devices: int) -> float:
        return self.t_centroids(length) + self.t_sparse(length, devices) + self.t_comm(devices)

    def crossover(self, devices: int) -> float | None:
        """Context length above which the PNM tier is faster, or None if it never is."""
        s, c = self.sparsity.selection, self.sparsity.compression
        slope = (c - 1) / (c * self._bw_gpu) - s / (devices * self._bw_pnm)
        if slope <= 0:
            return None
        return self.t_comm(devices) / (self.model.kv_bytes_per_token * slope)

    def t_input(self, devices: int) -> int | None:
        """The routing threshold: the crossover rounded up to a whole token."""
        x = self.crossover(devices)
        return None if x is None else int(-(-x // 1))
