"""Bit-exact model of the PNM attention engine (rtl/core/nelssa_attn_engine.sv).

The order of every floating-point operation is the RTL's, documented in docs/numerics.md:

* score of token j, query head h: 32 bf16 products per 64-byte beat, summed in a binary tree
  (lanes (0,1), (2,3), ... then pairs of those), beat sums added in beat order to an accumulator
  starting at +0, then multiplied by ``c = fmul(scale, log2(e))`` (scores live in the log2 domain);
* per cluster: ``m_new = max(m, t_0..t_{n-1})``, ``alpha = exp2(m - m_new)``,
  ``p_j = exp2(t_j - m_new)``, both 0 while ``m_new`` is -Inf (all scores so far -Inf); at the
  first V row ``O = O*alpha`` and ``l = l*alpha``; for every V row ``O += p_j*v_j`` (multiply,
  then add) and ``l += p_j``;
* at the end: ``O *= recip(l)``, ``LSE = (m + log2(l)) * ln(2)``.

The stream form (``pack_stream``/``check_stream``) mirrors the RTL's beat-level protocol,
including the status it reports for malformed streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import numpy.typing as npt

from nelssa.driver.regs import CAPS_MAX_CLUSTER_TOKENS
from nelssa.driver.status import ENGINE_LANES, SUPPORTED_HEAD_DIMS, AttnStatus
from nelssa.hw.model import fp

U16 = npt.NDArray[np.uint16]
U32 = npt.NDArray[np.uint32]


FP_LATENCY_MAX = 15
"""Largest latency of a unit the RTL engine accepts (its elaboration check)."""

COMPUTE_LANES = tuple(1 << k for k in range(ENGINE_LANES.bit_length()))
"""The lane counts the RTL engine's datapath may have (ComputeLanes: powers of two up to a
beat's 32 lanes)."""


@dataclass(frozen=True)
class FpLatency:
    """Cycles from an arithmetic unit's inputs to its result, per kind of unit (the RTL
    engine's *Latency parameters; 0: combinational, today's ASIC-like device). The results do
    not depend on them, only the engine's cycles (hw/model/engine_cycles.py)."""

    bf16_mul: int = 0
    """Bf16MulLatency: the dot products' bf16 x bf16 multipliers."""
    add: int = 0
    """AddLatency: fp32 adders (dot-product tree, row fold, softmax, o and l updates, LSE)."""
    mul: int = 0
    """MulLatency: fp32 multipliers (scale, rescale, p*v, LSE, output normalisation)."""
    exp2: int = 0
    """Exp2Latency: the softmax weights' exp2."""
    log2: int = 0
    """Log2Latency: the LSE's log2."""
    recip: int = 0
    """RecipLatency: the output normalisation's reciprocal."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= FP_LATENCY_MAX:
                raise ValueError(f"fp latency {f.name}: an integer in 0..{FP_LATENCY_MAX} "
                                 f"cycles, got {v!r}")

    def rtl_params(self) -> dict[str, int]:
        """The RTL engine's parameters (nelssa_attn_engine) for these latencies."""
        return {RTL_LATENCY_PARAMS[f.name]: getattr(self, f.name) for f in fields(self)}


RTL_LATENCY_PARAMS = {"bf16_mul": "Bf16MulLatency", "add": "AddLatency", "mul": "MulLatency",
                      "exp2": "Exp2Latency", "log2": "Log2Latency", "recip": "RecipLatency"}
"""FpLatency's fields by the RTL parameter each sets."""


@dataclass(frozen=True)
class EngineParams:
    """Elaboration-time parameters of one engine instance (the RTL's parameters)."""

    head_dim: int = 128
    """HeadDim: largest head_dim the engine accepts (64 or 128)."""
    num_qheads: int = 8
    """NumQHeads: largest GQA group (query heads per KV head) the engine accepts, 1..8."""
    max_cluster_tokens: int = 64
    """MaxClusterTokens: largest cluster, in tokens (size of the score buffer)."""
    latency: FpLatency = field(default_factory=FpLatency)
    """The arithmetic units' latencies (the *Latency parameters): cycles only, not results."""
    compute_lanes: int = ENGINE_LANES
    """ComputeLanes: lanes of a beat the datapath computes a cycle (a K or V beat takes
    32 / compute_lanes cycles, a result beat 16 / min(compute_lanes, 16)); cycles only, not
    results: every lane's operations and the dot products' tree are the same."""

    def __post_init__(self) -> None:
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {self.head_dim}")
        if not 1 <= self.num_qheads <= 8:
            raise ValueError(f"num_qheads must be in 1..8, got {self.num_qheads}")
        if not 1 <= self.max_cluster_tokens <= CAPS_MAX_CLUSTER_TOKENS:  # what CAPS can say
            raise ValueError(f"max_cluster_tokens must be in 1..{CAPS_MAX_CLUSTER_TOKENS}, "
                             f"got {self.max_cluster_tokens}")
        if isinstance(self.latency, dict):  # as a JSON description gives it
            object.__setattr__(self, "latency", FpLatency(**self.latency))
        if isinstance(self.compute_lanes, bool) or self.compute_lanes not in COMPUTE_LANES:
            raise ValueError(f"compute_lanes must be one of {COMPUTE_LANES}, "
                             f"got {self.compute_lanes!r}")

    @property
    def as_fitted(self) -> bool:
        """The engine's cycles are those the device models are fitted on: combinational
        units, a beat a cycle (hw/model/engine_cycles.py gives what the others add)."""
        return self.latency == FpLatency() and self.compute_lanes == ENGINE_LANES

    def rtl_params(self) -> dict[str, int]:
        """The RTL engine's parameters (nelssa_attn_engine) for this instance; the latencies
        only where a unit is pipelined and the lanes only where narrower than a beat (a
        combinational beat-a-cycle build's cache key names neither)."""
        return {"HeadDim": self.head_dim, "NumQHeads": self.num_qheads,
                "MaxClusterTokens": self.max_cluster_tokens,
                **({} if self.latency == FpLatency() else self.latency.rtl_params()),
                **({} if self.compute_lanes == ENGINE_LANES
                   else {"ComputeLanes": self.compute_lanes})}


@dataclass(frozen=True)
class AttnResult:
    """What the engine reports for one command."""

    status: AttnStatus
    """Completion status; ``o`` and ``lse`` are None unless it is OK."""
    o: U32 | None = None
    """Normalised output, fp32 bits, shape (query heads, head_dim)."""
    lse: U32 | None = None
    """Log-sum-exp of the scaled scores (natural log), fp32 bits, shape (query heads,)."""


def _check_bf16(name: str, arr: npt.ArrayLike, ndim: int) -> U16:
    a = np.asarray(arr)
    if a.dtype != np.uint16:
        raise TypeError(f"{name} must be bf16 bit patterns of dtype uint16, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    return a


def validate_command(
    params: EngineParams, q: npt.ArrayLike, keys: Sequence[npt.ArrayLike],
    values: Sequence[npt.ArrayLike],
) -> tuple[U16, list[U16], list[U16]]:
    """Shape and dtype checks of a well-formed command; raises naming the bad argument."""
    qa = _check_bf16("q", q, 2)
    h, d = qa.shape
    if d not in SUPPORTED_HEAD_DIMS or d > params.head_dim:
        raise ValueError(f"q: head_dim {d} not supported by an engine with HeadDim "
                         f"{params.head_dim}")
    if not 1 <= h <= params.num_qheads:
        raise ValueError(f"q: {h} query heads, engine supports 1..{params.num_qheads}")
    if len(keys) != len(values):
        raise ValueError(f"keys has {len(keys)} clusters but values has {len(values)}")
    if not keys:
        raise ValueError("keys: at least one cluster is required")
    ks, vs = [], []
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        ka = _check_bf16(f"keys[{i}]", k, 2)
        va = _check_bf16(f"values[{i}]", v, 2)
        if ka.shape != va.shape or ka.shape[1] != d:
            raise ValueError(f"keys[{i}] {ka.shape} and values[{i}] {va.shape} must both be "
                             f"(tokens, {d})")
        if not 1 <= ka.shape[0] <= params.max_cluster_tokens:
            raise ValueError(f"keys[{i}]: {ka.shape[0]} tokens, engine supports "
                             f"1..{params.max_cluster_tokens}")
        ks.append(ka)
        vs.append(va)
    return qa, ks, vs


def _weight(t: U32, m: U32) -> U32:
    """exp2(t - m), or +0 where the running max m is -Inf (no finite score yet)."""
    return np.where(m == fp.NEG_INF, np.uint32(0), fp.exp2(fp.fsub(t, m))).astype(np.uint32)


def scores(q: U16, k: U16, c: np.uint32) -> U32:
    """Log2-domain scores (tokens, query heads) of one cluster, in the RTL's sum order."""
    n, d = k.shape
    h = q.shape[0]
    prods = fp.bf16_mul(q[None, :, :], k[:, None, :])  # (n, h, d)
    tree = prods.reshape(n, h, d // ENGINE_LANES, ENGINE_LANES)
    while tree.shape[-1] > 1:
        tree = fp.fadd(tree[..., 0::2], tree[..., 1::2])
    beat_sums = tree[..., 0]
    acc = np.zeros((n, h), dtype=np.uint32)
    for b in range(beat_sums.shape[-1]):
        acc = fp.fadd(acc, beat_sums[..., b])
    return fp.fmul(acc, c)


def attend(
    params: EngineParams, q: npt.ArrayLike, keys: Sequence[npt.ArrayLike],
    values: Sequence[npt.ArrayLike], scale: float | np.float32,
) -> AttnResult:
    """Run one well-formed command: ``q`` (H, D) bf16 bits, per-cluster K and V (n, D) bf16.

    The RTL's operations in its order, batched where the order does not matter: the scores,
    ``p_j`` and ``p_j*v_j`` of many tokens at once (each is its own operation; groups of
    whole clusters, GROUP_TOKENS, bound the temporaries), each
    cluster's max as a tree (max is associative and commutative, signed zeros and NaN
    included), and each cluster's chain of ``O += p_j*v_j`` as one float32 running sum,
    which rounds as the adds one by one do unless a partial sum is subnormal (flushed) or
    NaN (canonicalised): then that cluster takes the adds one by one."""
    qa, ks, vs = validate_command(params, q, keys, values)
    scale_bits = np.float32(scale).view(np.uint32)
    c = fp.fmul(scale_bits, fp.LOG2E_BITS)
    h, d = qa.shape
    sizes = [k.shape[0] for k in ks]
    ends = np.cumsum(sizes)
    starts = ends - sizes
    groups = _groups(sizes)
    t_all = np.concatenate([scores(qa, np.concatenate(ks[i:j]), c) for i, j in groups])
    # each cluster's max: clusters padded with -Inf (the identity of fmax) to the longest
    longest = max(sizes)
    padded = np.full((len(ks), longest, h), fp.NEG_INF, dtype=np.uint32)
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        padded[i, :b - a] = t_all[a:b]
    while padded.shape[1] > 1:
        half = padded.shape[1] // 2
        top = fp.fmax(padded[:, :half], padded[:, half:2 * half])
        padded = np.concatenate([top, padded[:, 2 * half:]], axis=1)
    # the running max after each cluster, from -Inf: a prefix scan (fmax is associative) in
    # log2(clusters) steps instead of one fmax per cluster
    m_after = fp.fmax(np.full((len(ks), h), fp.NEG_INF, dtype=np.uint32), padded[:, 0])
    step = 1
    while step < len(ks):
        m_after = np.concatenate([m_after[:step], fp.fmax(m_after[step:], m_after[:-step])])
        step *= 2
    m = m_after[-1]
    m_before = np.concatenate([np.full((1, h), fp.NEG_INF, dtype=np.uint32), m_after[:-1]])
    alpha = _weight(m_before, m_after)  # (clusters, h)
    rescale = (alpha != fp.ONE).any(axis=1).tolist()  # O and l are canonical, so times 1
    p_all = _weight(t_all, np.repeat(m_after, sizes, axis=0))  # (tokens, h)
    p_in = fp.daz(p_all)  # what fadd reads of each p_j
    lsum = np.zeros(h, dtype=np.uint32)
    o = np.zeros((h, d), dtype=np.uint32)
    for gi, gj in groups:
        base = int(starts[gi])
        pv = fp.fmul(p_all[base:int(ends[gj - 1]), :, None],
                     fp.bf16_to_f32_bits(np.concatenate(vs[gi:gj]))[:, None, :])
        for i in range(gi, gj):
            a, b = int(starts[i]), int(ends[i])
            if rescale[i]:  # else alpha is 1 for every head: O*1 and l*1 are their own bits
                o, lsum = fp.fmul(o, alpha[i][:, None]), fp.fmul(lsum, alpha[i])
            o = _chain(o, pv[a - base:b - base])
            lsum = _chain(lsum, p_in[a:b])
    o = fp.fmul(o, fp.recip(lsum)[:, None])
    lse = fp.fmul(fp.fadd(m, fp.log2(lsum)), fp.LN2_BITS)
    return AttnResult(AttnStatus.OK, o, lse)


GROUP_TOKENS = 512
"""Tokens whose products (scores, p_j * v_j) are made at once: per-token work in groups of
whole clusters keeps the temporaries at a few MiB, reused from the heap, where a whole
descriptor's (131,072 tokens x 8 heads x 128: gigabytes in float64) made fresh pages, faulted
in and unmapped per operation (the model backend's system time)."""


def _groups(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """[first, end) cluster ranges of about GROUP_TOKENS tokens (at least one cluster each)."""
    groups, first, tokens = [], 0, 0
    for i, n in enumerate(sizes):
        if tokens and tokens + n > GROUP_TOKENS:
            groups.append((first, i))
            first, tokens = i, 0
        tokens += n
    groups.append((first, len(sizes)))
    return groups


def _chain(acc: U32, terms: U32) -> U32:
    """``acc`` then ``acc = fadd(acc, terms[j])`` for each j in order (all canonical fp32
    bits: no subnormal, canonical NaN): one float32 running sum, the same bits unless a
    partial sum is subnormal or NaN, where the adds run one by one."""
    stacked = np.concatenate([acc[None], terms]).view(np.float32)
    # the same adds either way: np.add.accumulate along axis 0 is the faster for narrow rows
    # (l), and 9x slower than adding row by row in place for wide ones (O, 1,024 lanes)
    with np.errstate(all="ignore"):
        if stacked[0].size <= 64:
            np.add.accumulate(stacked, axis=0, out=stacked)
        else:
            for j in range(1, len(stacked)):
                np.add(stacked[j - 1], stacked[j], out=stacked[j])
    sums = stacked[1:].view(np.uint32)
    if not fp.has_special(sums):
        return sums[-1].copy()
    for term in terms:
        acc = fp.fadd(acc, term)
    return acc


def pack_stream(q: U16, keys: Sequence[U16], values: Sequence[U16]) -> U16:
    """The beat stream the engine consumes: Q rows, then per cluster its K rows and V rows.

    Returns (beats, 32) bf16 bits; lane i of a beat is bits [16i+15:16i] of the 512-bit bus.
    """
    parts = [q.reshape(-1)]
    for k, v in zip(keys, values, strict=True):
        parts += [k.reshape(-1), v.reshape(-1)]
    return np.concatenate(parts).reshape(-1, ENGINE_LANES)


@dataclass
class EngineCommand:
    """One command at the engine's ports: the command fields, the cluster-length entries and
    the beat stream offered (possibly malformed, for tests of the error paths)."""

    head_dim: int
    """cmd_head_dim_i."""
    num_qheads: int
    """cmd_num_qheads_i."""
    scale: float
    """cmd_scale_i, rounded to fp32."""
    cluster_lens: list[int]
    """Entries offered on the cluster channel."""
    beats: U16
    """(n, 32) bf16 bits offered on the stream."""
    last_index: int | None = None
    """Index of the beat carrying kv_last_i; default the final one."""
    num_clusters: int | None = None
    """cmd_num_clusters_i; default len(cluster_lens)."""

    def __post_init__(self) -> None:
        if self.last_index is None:
            self.last_index = len(self.beats) - 1
        if self.num_clusters is None:
            self.num_clusters = len(self.cluster_lens)
        if len(self.cluster_lens) < self.num_clusters:
            raise ValueError(f"cluster_lens has {len(self.cluster_lens)} entries but num_clusters"
                             f" is {self.num_clusters}: the engine would wait for the rest")

    @classmethod
    def from_workload(cls, q: U16, keys: Sequence[U16], values: Sequence[U16],
                      scale: float) -> EngineCommand:
        """The well-formed command for these inputs."""
        return cls(q.shape[1], q.shape[0], float(scale), [k.shape[0] for k in keys],
                   pack_stream(q, keys, values))

    def expected_status(self, params: EngineParams) -> AttnStatus:
        """The status the engine must report for this command."""
        lens = self.cluster_lens[: self.num_clusters]
        return check_stream(params, self.head_dim, self.num_qheads, lens,
                            int(self.last_index) + 1)


def check_stream(
    params: EngineParams, head_dim: int, num_qheads: int, cluster_lens: Sequence[int],
    num_beats: int,
) -> AttnStatus:
    """Status the RTL reports for a command whose stream has ``num_beats`` beats (last on the final
    one) and whose cluster channel carries ``cluster_lens``; OK means the stream is well formed."""
    if head_dim not in SUPPORTED_HEAD_DIMS or head_dim > params.head_dim:
        return AttnStatus.ERR_BAD_HEAD_DIM
    if not 1 <= num_qheads <= params.num_qheads:
        return AttnStatus.ERR_BAD_QHEADS
    if not cluster_lens:
        return AttnStatus.ERR_NO_CLUSTERS
    bpr = head_dim // ENGINE_LANES
    pos = num_qheads * bpr
    if num_beats <= pos:
        return AttnStatus.ERR_SHORT_STREAM
    for i, n in enumerate(cluster_lens):
        if not 1 <= n <= params.max_cluster_tokens:
            return AttnStatus.ERR_BAD_CLUSTER_LEN
        pos += 2 * n * bpr
        if num_beats < pos or (num_beats == pos and i < len(cluster_lens) - 1):
            return AttnStatus.ERR_SHORT_STREAM
    return AttnStatus.ERR_LONG_STREAM if num_beats > pos else AttnStatus.OK
