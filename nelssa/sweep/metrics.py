"""The metrics a sweep records, each with its unit and the direction that is better: the one
table the results' columns, the Pareto front and the plot's labels read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    label: str
    """How a plot names it (with its unit)."""
    better: str | None
    """``higher`` or ``lower``; None: neither (a count that describes the run, not a goal)."""


HIGHER, LOWER = "higher", "lower"
TABLE: dict[str, Metric] = {
    "requests": Metric("requests completed", HIGHER),
    "pnm_requests": Metric("requests on the PNM tier", None),
    "t_input_tokens": Metric("T_input (tokens)", None),
    "duration_s": Metric("emulated duration (s)", LOWER),
    "decode_throughput_tps": Metric("decode throughput (tokens/s)", HIGHER),
    "ttft_p50_s": Metric("TTFT P50 (s)", LOWER),
    "ttft_p99_s": Metric("TTFT P99 (s)", LOWER),
    "tpot_p50_s": Metric("TPOT P50 (s)", LOWER),
    "tpot_p99_s": Metric("TPOT P99 (s)", LOWER),
    "slo_attainment": Metric("SLO attainment (share of requests)", HIGHER),
    "slo_met": Metric("requests meeting the SLO", HIGHER),
    "goodput_rps": Metric("goodput (requests/s)", HIGHER),
    "shed": Metric("requests shed", LOWER),
    "preemptions": Metric("preemptions", LOWER),
    "migrations": Metric("migrations", LOWER),
    "cost_devices": Metric("cost: PNM devices", LOWER),
    "rejected": Metric("requests rejected", LOWER),
    "request_throughput_rps": Metric("request throughput (requests/s)", HIGHER),
    "output_throughput_tps": Metric("output throughput (tokens/s)", HIGHER),
    "itl_p50_s": Metric("ITL P50 (s)", LOWER),
    "itl_p99_s": Metric("ITL P99 (s)", LOWER),
    "e2el_p50_s": Metric("E2E latency P50 (s)", LOWER),
    "e2el_p99_s": Metric("E2E latency P99 (s)", LOWER),
    "overloaded": Metric("overloaded (1: the queue grew without bound)", LOWER),
}
METRICS = tuple(TABLE)
"""The results' metric columns, in order."""
RANKED = tuple(name for name, m in TABLE.items() if m.better is not None)
"""The metrics a Pareto front can weigh against cost (those with a better direction)."""


def axis_label(name: str) -> str:
    """``name``'s label with its better direction, for a plot's axis."""
    m = TABLE[name]
    return m.label if m.better is None else f"{m.label}, {m.better} is better"
