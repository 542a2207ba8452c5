"""The paper's head-of-line setting (nelssa/experiments/paper_hol.py, issue 44 item 11): the
workload is what the page says (short requests below T_input, bursts of BS long ones evenly
spaced), and on it long requests that overflow the GPU's KV stall the GPU-only baseline's short
requests while NELSSA's stay fast."""

from __future__ import annotations

from dataclasses import replace

from nelssa.emu.serving.workload import TraceRequest
from nelssa.experiments.paper_hol import SYSTEMS, Setting, model, run, short_tpot, workload


def _trace(n: int) -> list[TraceRequest]:
    return [TraceRequest(i, 0.0, 1000 + 37 * (i % 50), 100 + (i % 7) * 20) for i in range(n)]


def test_workload_is_the_stated_mix():
    s = replace(Setting(), shorts=100, long_input=50_000)
    trace = [TraceRequest(0, 0.0, 9000, 100), *_trace(150)]  # the first above T_input: left out
    reqs = workload(trace, 5000, s, rate=10, bs=2, bursts=3)
    longs = [r for r in reqs if r.input_len == s.long_input]
    assert len(reqs) == 100 + 6 and len(longs) == 6
    assert all(r.input_len + r.output_len < 5000 for r in reqs if r not in longs)
    span = max(r.arrival_s for r in reqs if r not in longs)
    assert sorted({r.arrival_s for r in longs}) == [span * k / 4 for k in (1, 2, 3)]
    assert [r.rid for r in reqs] == list(range(len(reqs)))


def test_long_requests_stall_the_baseline_not_nelssa():
    """Two 200K-token requests arriving among short ones fill the GPU's KV: the baseline
    preempts and its short requests' TPOT tail grows; NELSSA keeps them on the PNM tier."""
    s = replace(Setting(), shorts=1500, long_input=200_000)
    lm = model(s)
    trace = [TraceRequest(i, 0.0, 2000 + 61 * (i % 50), 300 + (i % 7) * 40) for i in range(1500)]
    runs = run(lm, s, workload(trace, lm.t_input(s.devices), s, rate=10, bs=2, bursts=1))
    assert set(runs) == set(SYSTEMS)
    base, ours = runs["GPU-only, swap"], runs["NELSSA"]
    assert base.preemptions > 0 and ours.preemptions == 0
    assert max(x.gpu_kv_used for x in base.samples) > 0.99
    assert max(x.gpu_kv_used for x in ours.samples) < 0.7
    assert short_tpot(base, s)["p99"] > 2.5 * short_tpot(ours, s)["p99"]
