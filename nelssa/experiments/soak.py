"""Soak of a PNM node (issue 20): several clients, each a process of its own, send ATTEND
requests at ``--factor`` times the rate the node sustains, for a bounded time, over real
ZeroMQ to a real `nelssa node up` (its devices real processes).

First the sustainable rate is measured: one client keeps ``--window`` requests in flight for
``--measure-s`` seconds; the answered requests per second are the rate the node sustains. Then
``--clients`` clients offer ``--factor`` times that rate together, on a fixed schedule that does
not wait for answers (a send waits only where the link's window is full: the link's
back-pressure, seen as offered but not sent). What the node's queue cannot hold is refused at
once with BUSY (``--max-queued``, the node's admission control). A share of the requests
(``--bad``) is such that the node must refuse it (another client's session, a malformed
payload, a request over a per-request limit), so refusals are exercised under the load. Every
answer is compared bit for bit with the answer the same request got before the soak.

Printed and written to ``--out`` (docs/results/soak.md): the node's resident memory over time,
and per client: requests offered, sent, answered, refused (by error code), wrong, lost (sent
and neither answered nor refused). A run passes when nothing is lost or wrong and the node's
memory at the end is within ``--rss-slack-mib`` of its level after the first quarter.

    .venv/bin/python scripts/soak.py                       # 30 s, 4 clients, 10x
    .venv/bin/python scripts/soak.py --seconds 3 --clients 2 --measure-s 1 --out /tmp/s.md
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from nelssa.emu.link.transport import LinkLimits
from nelssa.options import POSITIVE_FLOAT, POSITIVE_INT, PROBABILITY, SECONDS, Parser, int_range
from nelssa.provenance import commit_label

HEAD_DIM, GROUP, KV_HEADS, CLUSTERS, SELECTED = 128, 4, 2, 24, 8
BAD_KINDS = ("foreign session", "malformed", "over a limit")


@dataclass
class ClientResult:
    offered: int = 0
    """Slots of the schedule that came due during the soak."""
    sent: int = 0
    """Requests handed to the link (the rest of what was offered was held back by it)."""
    answered: int = 0
    wrong: int = 0
    """Answers that differ from the reference, or requests served that had to be refused."""
    refused: dict[str, int] = field(default_factory=dict)
    """By error code."""
    failed: dict[str, int] = field(default_factory=dict)
    """Sent and neither answered nor refused by the node (timeouts, link errors)."""
    latency_ms: list[float] = field(default_factory=list)
    """Wall-clock round trip of each answered request."""
    busy_ms: list[float] = field(default_factory=list)
    """Wall-clock round trip of each request refused BUSY."""
    answered_in_soak: int = 0
    """Answers that came back before the soak's end (the rest while draining after it)."""
    drain_s: float = 0.0
    """Wall time from the soak's end until the last answer."""

    @property
    def lost(self) -> int:
        return self.sent - self.answered - sum(self.refused.values())


def _workload(seed: int) -> tuple[dict, dict, dict]:
    """Keys and values, a query and a selection per KV head (bf16 bits)."""
    from nelssa.hw.model.fp import f32_to_bf16_bits

    rng = np.random.default_rng(seed)

    def bf16(shape: tuple[int, ...]) -> np.ndarray:
        return f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))

    kv, queries, ids = {}, {}, {}
    for h in range(KV_HEADS):
        tokens = rng.integers(4, 25, CLUSTERS)
        kv[h] = ([bf16((int(t), HEAD_DIM)) for t in tokens],
                 [bf16((int(t), HEAD_DIM)) for t in tokens])
        queries[h] = bf16((GROUP, HEAD_DIM))
        ids[h] = sorted(rng.choice(CLUSTERS, SELECTED, replace=False).tolist())
    return kv, queries, ids


def _load(client, seed: int) -> tuple[int, dict, dict]:
    kv, queries, ids = _workload(seed)
    s = client.open_session(HEAD_DIM, GROUP, "head")
    client.alloc_kv(s, 0, list(kv), CLUSTERS, CLUSTERS * 25)
    for h, (keys, values) in kv.items():
        client.write_kv(s, 0, h, keys, values)
    return s, queries, ids


def measure_rate(endpoint: str, seconds: float, window: int) -> float:
    """Answered ATTENDs per second with ``window`` in flight from one client."""
    from nelssa.host.pnm_node.client import NodeClient

    with NodeClient(endpoint, timeout_s=60) as c:
        s, queries, ids = _load(c, 1)
        c.attend(s, 0, queries, ids)  # warm
        inflight, answered = [], 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            while len(inflight) < window:
                inflight.append(c.attend_async(s, 0, queries, ids))
            inflight.pop(0).result()
            answered += 1
        rate = answered / (time.monotonic() - t0)
        for f in inflight:
            f.result()
        c.close_session(s)
    return rate


def _client(index: int, endpoint: str, rate: float, seconds: float, bad: float,
            foreign: int, ready: mp.Queue, go, out: mp.Queue) -> None:
    """One client process: load a session, then offer ``rate`` ATTENDs per second."""
    from nelssa.emu.link.frame import LinkErrorCode
    from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
    from nelssa.host.pnm_node.client import NodeClient, NodeFuture
    from nelssa.host.pnm_node.errors import NodeError
    from nelssa.host.pnm_node.protocol import NodeErrorCode, NodeOp

    res = ClientResult()
    rng = np.random.default_rng(100 + index)
    with NodeClient(endpoint, timeout_s=120) as c:
        s, queries, ids = _load(c, 10 + index)
        want = c.attend(s, 0, queries, ids)
        from nelssa.host.pnm_node.protocol import ATTEND_HEAD

        # a header announcing more KV heads than max_request_heads (256): refused from it
        too_many = ATTEND_HEAD.build({"session": s, "layer": 0, "q_heads": GROUP,
                                      "head_dim": HEAD_DIM, "scale": 0.0, "count": 300})
        pending: list[tuple[float, str, NodeFuture]] = []

        def collect(block: bool) -> None:
            keep = []
            for sent_at, kind, f in pending:
                if not block and not f.done():
                    keep.append((sent_at, kind, f))
                    continue
                try:
                    r = f.result()
                except NodeError as e:
                    name = (NodeErrorCode(e.code).name if e.code in set(NodeErrorCode)
                            else LinkErrorCode(e.code).name if e.code in set(LinkErrorCode)
                            else f"error {e.code}")
                    res.refused[name] = res.refused.get(name, 0) + 1
                    if e.code == LinkErrorCode.BUSY:
                        res.busy_ms.append((time.monotonic() - sent_at) * 1000)
                    continue
                except (LinkTimeoutError, RemoteError) as e:
                    res.failed[type(e).__name__] = res.failed.get(type(e).__name__, 0) + 1
                    continue
                if kind != "good":
                    res.wrong += 1  # served although it had to be refused
                    continue
                res.answered += 1
                res.answered_in_soak += time.monotonic() - t0 <= seconds
                res.latency_ms.append((time.monotonic() - sent_at) * 1000)
                if not all(np.array_equal(r.o[h], want.o[h])
                           and np.array_equal(r.lse[h], want.lse[h]) for h in want.o):
                    res.wrong += 1
            pending[:] = keep

        ready.put(index)
        go.wait()
        t0 = time.monotonic()
        backlog = 0  # slots of the schedule that came due and are not sent yet
        while time.monotonic() - t0 < seconds:
            due = max(0, int((time.monotonic() - t0) * rate) + 1 - res.offered)
            res.offered += due
            backlog += due
            while backlog:
                backlog -= 1
                kind = "good"
                if rng.random() < bad:
                    kind = BAD_KINDS[int(rng.integers(len(BAD_KINDS)))]
                sent_at = time.monotonic()
                if kind == "good":
                    f = c.attend_async(s, 0, queries, ids)
                elif kind == "foreign session":
                    f = c.attend_async(foreign, 0, queries, ids)
                elif kind == "malformed":
                    f = NodeFuture([c.link.request(NodeOp.ATTEND, bytes(7))], lambda x: x)
                else:
                    f = NodeFuture([c.link.request(NodeOp.ATTEND, too_many)], lambda x: x)
                res.sent += 1
                pending.append((sent_at, kind, f))
                if time.monotonic() - t0 >= seconds:
                    break  # the schedule ends with the soak, whatever is still due
            collect(block=False)
            time.sleep(0.005)  # the clients share the node's cores: they poll gently
        res.offered = int(seconds * rate) + 1  # the whole schedule: what was not sent was held
        collect(block=True)
        res.drain_s = max(0.0, time.monotonic() - t0 - seconds)
        c.close_session(s)
    out.put((index, asdict(res)))


def _rss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    m = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(m.group(1)) if m else 0


def run(devices: int, clients: int, seconds: float, factor: float, measure_s: float,
        window: int, bad: float, max_queued: int | None = None, backend: str = "model") -> dict:
    """Boot a node, measure its sustainable rate, soak it; the raw figures."""
    from nelssa.emu.launcher import NodeLauncher
    from nelssa.host.pnm_node.client import NodeClient

    load_before = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="nelssa-soak-"))
    endpoint = f"ipc://{folder}/node"
    node = NodeLauncher(endpoint, devices, backend, "roce-400g", 300.0,
                        extra=[] if max_queued is None else ["--max-queued", str(max_queued)])
    device_pids = [int(m.group(1)) for line in node.lines
                   if (m := re.search(r"device \d+: .* \(pid (\d+)\)", line))]
    samples: list[tuple[float, int]] = []
    results: dict[int, dict] = {}
    try:
        window = min(window, max_queued or window)  # what the node takes from one client
        rate = measure_rate(endpoint, measure_s, window)
        offered = rate * factor
        with NodeClient(endpoint, timeout_s=30) as c:  # a handle the soak clients do not own
            foreign = c.open_session(HEAD_DIM, GROUP)
            ctx = mp.get_context("spawn")
            q: mp.Queue = ctx.Queue()
            ready: mp.Queue = ctx.Queue()
            go = ctx.Event()
            procs = [ctx.Process(target=_client, args=(i, endpoint, offered / clients, seconds,
                                                       bad, foreign, ready, go, q))
                     for i in range(clients)]
            for p in procs:
                p.start()
            for _ in procs:  # every client has loaded its KV: all start together
                ready.get(timeout=300)
            start_at = time.monotonic()
            go.set()
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    samples.append((time.monotonic() - start_at, _rss_kib(node.proc.pid)))
                    stop.wait(0.25)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            deadline = start_at + seconds + 300
            while len(results) < clients and time.monotonic() < deadline:
                try:
                    i, r = q.get(timeout=1.0)
                    results[i] = r
                except queue.Empty:
                    if not any(p.is_alive() for p in procs):
                        break
            stop.set()
            sampler.join()
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
            status = c.status()
            c.close_session(foreign)
        device_rss = [_rss_kib(pid) for pid in device_pids]
    finally:
        node.stop()
    during = [(t, kib) for t, kib in samples if 0 <= t <= seconds]
    quarter = [kib for t, kib in during if t <= seconds / 4] or [0]
    end = [kib for t, kib in during if t >= seconds * 0.9] or [0]
    return {"devices": devices, "clients": clients, "seconds": seconds, "factor": factor,
            "window": window, "bad": bad, "sustainable_rate": rate, "offered_rate": offered,
            "max_queued": max_queued,
            "results": [results.get(i) for i in range(clients)], "rss_kib": during,
            "rss_quarter_kib": max(quarter), "rss_end_kib": max(end),
            "rss_max_kib": max((k for _, k in during), default=0),
            "device_rss_kib": device_rss, "load": (load_before, os.getloadavg()[0]),
            "node_requests": status.requests,
            "node_errors": status.errors}


def _percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def report(r: dict, command: str, slack_mib: float) -> tuple[str, bool]:
    """The Markdown page and whether the run passed."""
    rows, total, busy_ms = [], Counter(), []
    for i, c in enumerate(r["results"]):
        if c is None:
            rows.append(f"| {i} | no result: the client process died | | | | | | | |")
            total["dead"] += 1
            continue
        res = ClientResult(**c)
        refused = ", ".join(f"{k} {v}" for k, v in sorted(res.refused.items())) or "0"
        failed = "".join(f" ({k} {v})" for k, v in sorted(res.failed.items()))
        rows.append(f"| {i} | {res.offered} | {res.offered - res.sent} | {res.sent} | "
                    f"{res.answered} | {refused} | "
                    f"{res.wrong} | {res.lost}{failed} | {_percentile(res.latency_ms, 50):.0f} "
                    f"/ {_percentile(res.latency_ms, 99):.0f} | "
                    f"{_percentile(res.busy_ms, 50):.0f} / {_percentile(res.busy_ms, 99):.0f} |")
        busy_ms += res.busy_ms
        for k in ("offered", "sent", "answered", "wrong", "lost", "answered_in_soak"):
            total[k] += getattr(res, k)
        total["drain_ms"] = max(total["drain_ms"], round(res.drain_s * 1000))
        total["refused"] += sum(res.refused.values())
        total["busy"] += res.refused.get("BUSY", 0)
    growth_mib = (r["rss_end_kib"] - r["rss_quarter_kib"]) / 1024
    ok = (total["lost"] == 0 and total["wrong"] == 0 and total["dead"] == 0
          and growth_mib <= slack_mib)
    every = max(1, len(r["rss_kib"]) // 12)
    queue = r["max_queued"] if r.get("max_queued") else f"{LinkLimits.max_queued} (the default)"
    lines = [
        "# Soak of a PNM node",
        "",
        f"Command: `{command}` (written by scripts/soak.py at commit {commit_label()})",
        "",
        f"{r['clients']} client processes against `nelssa node up --devices {r['devices']}` "
        f"(model backend) over ipc://, for {r['seconds']:g} s. Each request is an ATTEND of "
        f"{KV_HEADS} KV heads x {GROUP} query heads (head_dim {HEAD_DIM}, {SELECTED} of "
        f"{CLUSTERS} clusters each) on the client's own session. The node, its devices and "
        f"the clients share this machine's {os.cpu_count()} cores (load average "
        f"{r['load'][0]:.1f} before, {r['load'][1]:.1f} after): the rates are this machine's, "
        "the pass criteria are not.",
        "",
        f"- Sustainable rate, measured first (one client, {r['window']} requests in flight): "
        f"**{r['sustainable_rate']:.1f} requests/s**.",
        f"- Offered: {r['factor']:g} x that, {r['offered_rate']:.0f} requests/s from all "
        f"clients together on a fixed schedule; {r['bad']:.0%} of them are requests the node "
        f"must refuse ({', '.join(BAD_KINDS)}).",
        f"- Answered during the soak: {total['answered_in_soak'] / r['seconds']:.1f} "
        f"requests/s; what was in flight at its end drained in {total['drain_ms'] / 1000:.1f} s.",
        f"- Admission control: the node's queue holds {queue} requests of all clients "
        f"together (`node up --max-queued`); {total['busy']} requests found their client's "
        f"share of it taken and were refused at once with BUSY, answered in "
        f"{_percentile(busy_ms, 50):.0f} ms at the median and {_percentile(busy_ms, 99):.0f} ms "
        "at p99 (the node takes in what has arrived between two requests). Held back (not "
        f"sent: the link's window of 64 unanswered requests was full): "
        f"{total['offered'] - total['sent']}.",
        f"- Node resident memory: {r['rss_quarter_kib'] / 1024:.1f} MiB after the first "
        f"quarter, {r['rss_max_kib'] / 1024:.1f} MiB at most, {r['rss_end_kib'] / 1024:.1f} MiB "
        f"at the end ({growth_mib:+.1f} MiB; allowed {slack_mib:g} MiB). Device processes at "
        f"the end: {', '.join(f'{k / 1024:.0f} MiB' for k in r['device_rss_kib'])}.",
        f"- Totals: offered {total['offered']}, sent {total['sent']}, answered "
        f"{total['answered']}, refused {total['refused']}, wrong {total['wrong']}, "
        f"held back {total['offered'] - total['sent']}, **lost {total['lost']}**. Node "
        f"counters: {r['node_requests']} requests, "
        f"{r['node_errors']} answered with an error. Result: **{'PASS' if ok else 'FAIL'}**.",
        "",
        "| client | offered | held back | sent | answered | refused (code: n) | wrong | lost | "
        "answered in p50 / p99 (ms) | BUSY in p50 / p99 (ms) |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        *rows,
        "",
        "Node resident memory during the soak (seconds: MiB):",
        "",
        "    " + "  ".join(f"{t:.1f}: {kib / 1024:.1f}" for t, kib in r["rss_kib"][::every]),
        "",
    ]
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int_range(1, 32), default=2,
                    help="device processes of the node (1..32)")
    ap.add_argument("--clients", type=POSITIVE_INT, default=4, help="client processes")
    ap.add_argument("--seconds", type=SECONDS, default=30.0, help="length of the soak")
    ap.add_argument("--factor", type=POSITIVE_FLOAT, default=10.0,
                    help="offered load as a multiple of the sustainable rate")
    ap.add_argument("--measure-s", type=SECONDS, default=5.0,
                    help="seconds spent measuring the sustainable rate")
    ap.add_argument("--window", type=POSITIVE_INT, default=16,
                    help="requests in flight while measuring the sustainable rate")
    ap.add_argument("--bad", type=PROBABILITY, default=0.1,
                    help="share of requests the node must refuse, in [0, 1]")
    ap.add_argument("--max-queued", type=POSITIVE_INT,
                    help="the node's queue (`node up --max-queued`; default: the node's)")
    ap.add_argument("--rss-slack-mib", type=POSITIVE_FLOAT, default=32.0,
                    help="allowed growth of the node's memory from the first quarter to the end")
    ap.add_argument("--out", default="docs/results/soak.md", help="the Markdown page")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args(argv)
    for opt in ("out", "json"):
        path = getattr(args, opt)
        if path and not Path(path).resolve().parent.is_dir():
            print(f"error: --{opt} {path}: folder {Path(path).parent} does not exist",
                  file=sys.stderr)
            return 2
    r = run(args.devices, args.clients, args.seconds, args.factor, args.measure_s, args.window,
            args.bad, args.max_queued)
    command = " ".join(["python scripts/soak.py", *(sys.argv[1:] if argv is None else argv)])
    text, ok = report(r, command, args.rss_slack_mib)
    Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(r))
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
