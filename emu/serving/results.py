"""What a serving-emulator run produces: per-request results, the time series and the run's
counters, with a JSON form (the vLLM-driven replay runs in another process and returns one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestResult:
    rid: int
    input_len: int
    output_len: int
    tier: str
    arrival_s: float
    first_token_s: float
    finish_s: float
    preemptions: int
    migrated: bool = False

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.output_len < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_len - 1)


@dataclass
class Sample:
    t_s: float
    running: int
    waiting: int
    """Requests waiting: for the GPU's scheduler, and (``pnm_waiting``) for the PNM tier."""
    gpu_kv_used: float
    """Share of the GPU's KV blocks in use."""
    decode_tokens: int
    """Decode tokens produced since the previous sample."""
    pnm_running: int = 0
    t_input: int | None = None
    """The routing threshold after this sample (it moves with ``adaptive`` routing)."""
    pnm_waiting: int = 0
    """Of ``waiting``, the requests queued for the PNM tier's memory."""
    pnm_mem_used: float = 0.0
    """Share of the PNM tier's memory held."""


@dataclass
class Activity:
    """What the decode GPU did over a run, summed over its steps: what its energy comes from
    (``CostModel.work``). Step sums of the cost model's own aggregates."""

    busy_s: float = 0.0
    """Time spent in steps (the rest of the run it idles)."""
    steps: int = 0
    """Steps (each reads the weights once)."""
    tokens: int = 0
    """Tokens computed (decode tokens and prefill chunks' tokens)."""
    gpu_ctx: int = 0
    """GPU-tier decode context read, tokens (summed over steps)."""
    window: int = 0
    """PNM-tier requests' GPU windows read, tokens."""
    pnm_ctx: int = 0
    """PNM-tier contexts attended to, tokens."""
    pnm_decodes: int = 0
    """PNM-tier decode tokens (one node request per layer each)."""
    prefill_pairs: float = 0.0
    """Prefill (query, key) pairs."""
    swap_tokens: int = 0
    """Tokens swapped in over PCIe."""
    offload_tokens: int = 0
    """PNM-tier prompts' KV sent to the PNM tier, tokens."""
    output_tokens: int = 0
    """Output tokens of the requests finished."""

    def add(self, other: Activity) -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)

    def count_step(self, agg: tuple[int, int, int, int, int, float], swap_tokens: int) -> None:
        """One step's ``CostModel.step_sums`` (and its swapped-in tokens) added."""
        tokens, gpu_ctx, pnm_ctx, pnm_n, window, pairs = agg
        self.steps += 1
        self.tokens += tokens
        self.gpu_ctx += gpu_ctx
        self.pnm_ctx += pnm_ctx
        self.pnm_decodes += pnm_n
        self.window += window
        self.prefill_pairs += pairs
        self.swap_tokens += swap_tokens

    @classmethod
    def prefill(cls, tokens: int, chunk: int, busy_s: float) -> Activity:
        """A prefill GPU's work on one prompt of ``tokens`` in chunks of ``chunk``
        (``CostModel.prefill_s``): the weights read per chunk, every token computed, the
        causal pairs."""
        out = cls()
        out.count_prefill(tokens, chunk, busy_s)
        return out

    def count_prefill(self, tokens: int, chunk: int, busy_s: float) -> None:
        """``add(Activity.prefill(tokens, chunk, busy_s))`` without the Activity between (a
        fleet's prefill pool counts every request's)."""
        self.busy_s += busy_s
        self.steps += -(-tokens // chunk)
        self.tokens += tokens
        self.prefill_pairs += tokens * tokens / 2


@dataclass
class RunResult:
    config: Any
    """The ServingConfig of the run."""
    t_input: int | None
    results: list[RequestResult] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    steps: int = 0
    preemptions: int = 0
    end_s: float = 0.0
    decode_tokens: int = 0
    peak_gpu_blocks: int = 0
    """Most GPU KV blocks in use at once."""
    gpu_blocks: int = 0
    """GPU KV blocks in all."""
    peak_pnm_tokens: int = 0
    """Most PNM-tier tokens reserved at once."""
    migrations: int = 0
    """Requests moved from the GPU to the PNM tier while decoding."""
    migrated_tokens: int = 0
    """Context moved by those migrations (clustered once, incrementally)."""
    recompute_tokens: int = 0
    """Tokens to be prefilled again because of recompute preemptions."""
    prefix_hit_tokens: int = 0
    """Prompt tokens found in the prefix cache instead of being computed."""
    shed: int = 0
    """Requests dropped waiting for their first token past the TTFT SLO (``shed_late``); they
    have no result."""
    scheduler: str = "ours"
    """Whose scheduler ran: ``ours`` or ``vllm``."""
    wall_s: float = 0.0
    """Wall time of the replay itself (for vLLM: in its process, without its start)."""
    cpu_s: float = 0.0
    """CPU time of the replay's process during it (less disturbed by a busy machine)."""
    rejected: int = 0
    """Requests refused before the run (longer than ``max_model_len``, or more than a tier
    can hold: ``sim.admit``); they have no result."""
    token_gaps: dict[int, Sequence[float]] | None = None
    """Each request's gaps between its output tokens, by ``rid``, in seconds, in order
    (``itl.py``); None where they were not recorded."""
    activity: Activity = field(default_factory=Activity)
    """What the decode GPU did (its energy's inputs)."""
    prefill_activity: Activity = field(default_factory=Activity)
    """What the prefill GPUs did (disaggregated prefill), summed over them."""

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()
             if k not in ("config", "results", "samples", "token_gaps", "activity",
                          "prefill_activity")}
        d["activity"] = asdict(self.activity)
        d["prefill_activity"] = asdict(self.prefill_activity)
        d["token_gaps"] = None if self.token_gaps is None else {
            str(k): list(g) for k, g in self.token_gaps.items()}
        d["results"] = [asdict(r) for r in self.results]
        d["samples"] = [asdict(s) for s in self.samples]
        return d

    @classmethod
    def from_json(cls, config: Any, d: dict[str, Any]) -> RunResult:
        rest = {k: v for k, v in d.items()
                if k not in ("results", "samples", "token_gaps", "activity",
                             "prefill_activity")}
        gaps = d.get("token_gaps")
        return cls(config=config, results=[RequestResult(**r) for r in d["results"]],
                   samples=[Sample(**s) for s in d["samples"]],
                   activity=Activity(**d.get("activity", {})),
                   prefill_activity=Activity(**d.get("prefill_activity", {})),
                   token_gaps=None if gaps is None else {
                       int(k): list(g) for k, g in gaps.items()},
                   **rest)
