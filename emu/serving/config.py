"""Settings of one serving-emulator run: scheduler, tiers and policies (defaults and their
meaning live here, the command line reads them)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from nelssa.emu.latency.fields import Num
from nelssa.emu.latency.hardware import SHARE
from nelssa.emu.latency.model import DEVICE_COUNT, Sparsity
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK, link_preset
from nelssa.emu.policy.slo import MLPERF_SLO

MODEL_LEN = Num("a positive integer (tokens)", integer=True, lo=1, most=1 << 40)
"""A cap on a request's prompt and output tokens."""
PERCENTILE = Num("a percentile in (0, 100]", lo=0, lo_open=True, hi=100)


class SchedulerKind(enum.Enum):
    OURS = "ours"
    """This emulator's scheduler, which follows vLLM v1's algorithm (the fast path)."""
    VLLM = "vllm"
    """vLLM's own v1 Scheduler and KVCacheManager, unmodified (in the vLLM environment)."""


@dataclass(frozen=True)
class ServingConfig:
    """Scheduler and tier settings of one run."""

    mode: str = "gpu"
    """``gpu`` (GPU-only baseline) or ``nelssa``."""
    devices: int = field(default=4, metadata={"num": DEVICE_COUNT})
    """PNM devices (NELSSA)."""
    max_running: int = 256
    """Most requests in the running batch (vLLM max_num_seqs)."""
    max_batched_tokens: int = 8192
    """Tokens per step, decode tokens and prefill chunks together (vLLM max_num_batched_tokens)."""
    block_tokens: int = 16
    """Tokens per KV block (vLLM block_size)."""
    gpu_mem_util: float = 0.9
    """Share of GPU memory for weights and KV (vLLM gpu_memory_utilization)."""
    preemption: str = "recompute"
    """``recompute`` (vLLM v1's only kind) or ``swap`` (our scheduler only)."""
    pcie_gbs: float = 55.0
    """Host link bandwidth for swapping, GB/s."""
    t_input: int | None = None
    """Routing threshold in tokens; None takes the latency model's crossover for ``devices``."""
    adaptive: bool = False
    """Move T_input with the tiers' load, from where it starts (emu/policy/adaptive.py: GPU KV
    use and preemptions, PNM memory and its queue's wait, a decode step against the TPOT SLO;
    within 0.25x..4x)."""
    tpot_budget: bool = False
    """With colocated prefill, while requests decode and the oldest prefill wait is within the
    TTFT SLO, cap each step's token budget to the largest (of ``max_batched_tokens``, half of
    it, ...) whose prefill chunk's step stays within half the TPOT SLO (emu/policy/budget.py,
    Sarathi-Serve's rule): a scheduling knob of the adaptive orchestrator, separate from
    ``adaptive`` (T_input), the same for both schedulers."""
    shed_late: bool = False
    """Drop a request still waiting for its first token once it has waited the TTFT SLO (it
    has missed it), so its prefill goes to requests that can still meet theirs: under deep
    compute overload FCFS makes every request miss (emu/policy/shed.py). An admission knob of
    the adaptive orchestrator, the same for both schedulers."""
    window_tokens: int = Sparsity().window_tokens
    """Tokens of a PNM-tier request that the GPU attends to densely: sink, recent, one chunk
    not yet clustered."""
    sample_s: float = 1.0
    """Interval of the time series."""
    prefill: str = "colocated"
    """``colocated``: prefill runs in chunks on the decode GPU (vLLM on one GPU);
    ``disaggregated``: a separate prefill GPU of the same kind serves prefills FCFS and the
    decode GPU receives their KV (the paper's Prefill Node, section 5)."""
    prefill_gpus: int = field(default=1, metadata={"num": Num("an integer in 1..1024",
                                                               integer=True, lo=1, hi=1024)})
    """Prefill GPUs when disaggregated (each request goes to the first one free)."""
    migration: bool = False
    """NELSSA: move GPU requests whose context has grown past T_input to the PNM tier in the
    background when GPU memory runs short (paper 4.3), instead of waiting to preempt."""
    migrate_at: float = field(default=0.95, metadata={"num": SHARE})
    """Share of the GPU's KV blocks in use from which a migration starts."""
    link_gbs: float = link_preset(DEFAULT_GPU_PNM_LINK).bandwidth_gbps / 8
    """GPU node -> PNM node bandwidth for migrations, GB/s (the default link's: RoCE 400G,
    50)."""
    prefix_caching: bool = True
    """Automatic prefix caching (vLLM's default), over the trace's ``hash_ids``; a request
    without them (made up, not from a trace) shares no prefix."""
    scheduler: SchedulerKind = SchedulerKind.OURS
    """Whose scheduler replays the trace."""
    max_model_len: int | None = field(default=None, metadata={"num": MODEL_LEN})
    """Longest request taken, prompt and output tokens together (vLLM's --max-model-len): a
    longer one is rejected and counted, as vLLM answers it with an error, and the run goes on
    (so is one that neither tier could ever hold); none: no cap but the tiers' memory (the
    PNM tier serves contexts past the model's trained length, as the paper's Figure 10)."""

    def __post_init__(self) -> None:
        if self.prefill not in ("colocated", "disaggregated"):
            raise ValueError(f"prefill must be 'colocated' or 'disaggregated', got "
                             f"{self.prefill!r}")
        if self.mode not in ("gpu", "nelssa"):
            raise ValueError(f"mode must be 'gpu' or 'nelssa', got {self.mode!r}")
        if self.preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', got "
                             f"{self.preemption!r}")
        if not isinstance(self.scheduler, SchedulerKind):
            raise ValueError(f"scheduler must be a SchedulerKind, got {self.scheduler!r}")
        if self.scheduler is SchedulerKind.VLLM and self.preemption == "swap":
            raise ValueError("vLLM v1 preempts by recompute only: swap needs --scheduler ours")
        for name in ("devices", "max_running", "max_batched_tokens", "block_tokens",
                     "window_tokens", "prefill_gpus"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.t_input is not None and (not isinstance(self.t_input, int)
                                         or isinstance(self.t_input, bool) or self.t_input < 1):
            raise ValueError(f"t_input must be an integer >= 1 token, got {self.t_input!r}")
        for name in ("pcie_gbs", "sample_s"):
            if not getattr(self, name) > 0 or getattr(self, name) == float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        if not 0 < self.migrate_at <= 1 or not 0 < self.link_gbs < float("inf"):
            raise ValueError(f"migrate_at must be in (0, 1] and link_gbs > 0, got "
                             f"{self.migrate_at}, {self.link_gbs}")
        if self.migration and self.mode != "nelssa":
            raise ValueError("migration needs mode 'nelssa' (there is no PNM tier otherwise)")
        if self.max_model_len is not None:
            MODEL_LEN.check(self.max_model_len, "max_model_len")
        if not 0 < self.gpu_mem_util <= 1:
            raise ValueError(f"gpu_mem_util must be in (0, 1], got {self.gpu_mem_util}")


@dataclass(frozen=True)
class MetricsConfig:
    """What a run's summary reports, as ``vllm bench serve`` does: its percentiles and the SLO
    its goodput counts requests against."""

    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
    """Percentiles of TTFT, TPOT, ITL and end-to-end latency in the summary (vLLM's
    --metric-percentiles), comma-separated; P50, P95 and P99 are always kept as well (the
    comparison and the plots read them)."""
    goodput_ttft_s: float | None = MLPERF_SLO.ttft_s
    """Goodput's TTFT SLO (vLLM's --goodput ttft:MS): MLPerf's Llama 3.1 405B server scenario
    by default (emu/policy/slo.py); none: not part of it."""
    goodput_tpot_s: float | None = MLPERF_SLO.tpot_s
    """Goodput's TPOT SLO (vLLM's --goodput tpot:MS); none: not part of it."""
    goodput_e2el_s: float | None = None
    """Goodput's end-to-end latency SLO (vLLM's --goodput e2el:MS); none: not part of it."""

    def __post_init__(self) -> None:
        if not self.percentiles:
            raise ValueError("percentiles: give at least one")
        for p in self.percentiles:
            PERCENTILE.check(p, "percentile")
        for name in ("goodput_ttft_s", "goodput_tpot_s", "goodput_e2el_s"):
            v = getattr(self, name)
            if v is not None and not (0 < v < float("inf")):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {v!r}")

    @property
    def all_percentiles(self) -> tuple[float, ...]:
        """The chosen percentiles with P50, P95 and P99, in order."""
        return tuple(sorted({*self.percentiles, 50.0, 95.0, 99.0}))
