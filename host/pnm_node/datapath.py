"""NelssaHost's data path: WRITE_KV (the Memory API) and ATTEND (the Command API).

Each request is checked whole and planned on the node's thread, its device work queued per
device (dispatch.py), and its reply made on the node's thread once every part is done
(lanes.py); the state it changes (where each cluster went) changes then, and only then.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from nelssa.driver.command import AttnRequest
from nelssa.driver.formats import LINE_BYTES, MAX_IDS, DescStatus
from nelssa.driver.port import DDR5_COUNTERS
from nelssa.emu.link.model import PS_PER_NS
from nelssa.emu.link.transport import Reply, ServiceError, ServiceRequest
from nelssa.host.pnm_node import protocol as p
from nelssa.host.pnm_node.aggregate import merge_partials
from nelssa.host.pnm_node.devices import BatchResult, DeviceSlot, DeviceUnreachableError
from nelssa.host.pnm_node.dispatch import DeviceWork, outcome
from nelssa.host.pnm_node.lanes import Pending
from nelssa.host.pnm_node.partition import HeadKv
from nelssa.host.pnm_node.protocol import MAX_EMU_TIME_PS, NodeErrorCode, NodeOp
from nelssa.host.pnm_node.sampling import compare, twin_requests

if TYPE_CHECKING:
    from nelssa.host.pnm_node.host import NelssaHost


def _fail(code: NodeErrorCode, message: str) -> ServiceError:
    return ServiceError(code, message)


def device_results(results: dict[DeviceSlot, Any], parts: list[DeviceWork]) -> dict[int, Any]:
    """Results by device index; a device that failed becomes a DEVICE_DOWN error (all parts
    are done by now, so no device is left mid-request)."""
    out, down = {}, []
    for part in parts:
        try:
            out[part.slot.index] = outcome(results, part.slot)
        except DeviceUnreachableError as e:
            down.append(str(e))
    if down:
        raise _fail(NodeErrorCode.DEVICE_DOWN, "; ".join(down))
    return out


def write_kv(host: NelssaHost, r: ServiceRequest) -> Pending:
    host.check_write_size(r.payload)
    # WRITE_KV_REQ read in place: its header, the token counts, then the KV (no copy of it)
    q = p.WRITE_KV_HEAD.parse(r.payload)
    at = p.WRITE_KV_HEAD.sizeof() + 4 * q.count
    if len(r.payload) < at:
        raise _fail(NodeErrorCode.BAD_REQUEST, f"malformed WRITE_KV payload: {q.count} "
                    f"token counts need {4 * q.count} bytes, "
                    f"{len(r.payload) - p.WRITE_KV_HEAD.sizeof()} follow the header")
    q_data = memoryview(r.payload)[at:]
    s = host.session(r, q.session)
    head = host.head(s, q.layer, q.kv_head)
    tokens = np.frombuffer(r.payload, dtype="<u4", count=q.count,
                           offset=p.WRITE_KV_HEAD.sizeof()).astype(np.int64)
    hd = s.head_dim
    max_ct = host.slots[0].dev.caps["max_cluster_tokens"]
    if q.count < 1 or tokens.min() < 1 or tokens.max() > max_ct:
        raise _fail(NodeErrorCode.BAD_REQUEST, f"{q.count} clusters with token counts "
                    f"{tokens[:8].tolist()}...: need >= 1 cluster of 1..{max_ct} tokens")
    need = int(tokens.sum()) * hd * 4
    if len(q_data) != need:
        raise _fail(NodeErrorCode.BAD_REQUEST, f"KV data of {len(q_data)} bytes; "
                    f"{q.count} clusters of {int(tokens.sum())} tokens x head_dim {hd} "
                    f"need {need}")
    data = np.frombuffer(q_data, dtype=np.uint8)
    ends = np.cumsum(tokens * hd * 4)  # each cluster's K then V, back to back
    starts = ends - tokens * hd * 4
    where = head.place([int(t) for t in tokens])
    per_shard: dict[int, list[int]] = {}
    for i, sh in enumerate(where):
        per_shard.setdefault(sh, []).append(i)
    for sh, idx in per_shard.items():  # room everywhere before writing anywhere
        region = head.shards[sh].region
        more = sum(-(-int(tokens[i]) * hd * 4 // LINE_BYTES) * LINE_BYTES for i in idx)
        if (region.num_clusters + len(idx) > region.max_clusters
                or region.data_used + more > region.data_bytes):
            raise _fail(NodeErrorCode.OUT_OF_MEMORY, f"session {s.id} layer {q.layer} KV "
                        f"head {q.kv_head}: region on device {head.shards[sh].device} is "
                        f"full ({region.num_clusters}/{region.max_clusters} clusters, "
                        f"{region.data_bytes - region.data_used} bytes left, {len(idx)} "
                        f"clusters of {more} bytes asked)")
    host.need_alive({head.shards[sh].device for sh in per_shard}, bool(head.twin_regions))
    host.need_current(s, q.layer, q.kv_head, head)

    def write(slot: DeviceSlot, region: Any, idx: list[int]) -> tuple[list[int], int]:
        if idx == list(range(idx[0], idx[-1] + 1)):  # a run of clusters: no copy
            kv = data[starts[idx[0]]:ends[idx[-1]]]
        else:
            kv = np.concatenate([data[starts[i]:ends[i]] for i in idx])
        ids = slot.mem.write_packed(region, tokens[idx], kv)
        to_dev, from_dev = slot.port.take()
        return ids, host.cxl.transfer_ps(to_dev) + host.cxl.transfer_ps(from_dev)

    shard_of: dict[int, int] = {head.shards[sh].device: sh for sh in per_shard}
    parts = [DeviceWork(host.slots[head.shards[sh].device],
                  lambda sl, rg=head.shards[sh].region, ix=idx: write(sl, rg, ix),
                  int(tokens[idx].sum()))
             for sh, idx in per_shard.items()]
    twin_parts = [DeviceWork(host.twins[head.shards[sh].device],
                       lambda sl, rg=head.twin_regions[sh], ix=idx: write(sl, rg, ix),
                       int(tokens[idx].sum()))
                  for sh, idx in per_shard.items() if head.twin_regions]
    job = host.queue_work(s, parts + twin_parts)

    def finish(done: dict[DeviceSlot, Any]) -> Reply:
        by_dev = device_results(done, parts)
        results = {shard_of[d]: v for d, v in by_dev.items()}
        twin_results = {shard_of[d]: v for d, v in device_results(done, twin_parts).items()}
        for sh, (ids, _) in twin_results.items():  # the same clusters in the same order
            if ids != results[sh][0]:
                raise _fail(NodeErrorCode.DEVICE_ERROR, f"the twin of device "
                            f"{head.shards[sh].device} placed clusters {ids[:4]}... where the "
                            f"device placed {results[sh][0][:4]}...")
        local: dict[int, int] = {}
        for sh, idx in per_shard.items():
            for i, lid in zip(idx, results[sh][0], strict=True):
                local[i] = lid
            head.shards[sh].tokens += int(sum(tokens[i] for i in idx))
        first = head.num_clusters
        for i, sh in enumerate(where):
            head.cluster_shard.append(sh)
            head.cluster_local.append(local[i])
        crit = max(results, key=lambda sh: results[sh][1])
        timing = {"arrive_ps": r.arrive_ps, "host_ps": host.host_ps, "queue_ps": 0,
                  "cxl_ps": results[crit][1], "device_ps": 0,
                  "done_ps": r.arrive_ps + host.host_ps + results[crit][1],
                  "device_cycles": 0, "critical_device": head.shards[crit].device}
        return Reply(NodeOp.WRITE_KV, p.WRITE_KV_REP.build(
            {"first_id": first, "count": q.count, "timing": timing}), timing["done_ps"])

    return Pending(job, finish)


def _plan_group(host: NelssaHost, s: Any, layer: int, g: Any, q_heads: int, head_dim: int,
                scale: float | None) -> tuple[HeadKv, list[tuple[int, AttnRequest]], int]:
    """One KV head's descriptors by device, and the KV tokens they read."""
    head = host.head(s, layer, g.kv_head)
    ids = np.frombuffer(g.ids, dtype="<u4").astype(np.int64)
    if not 1 <= ids.size <= MAX_IDS:
        raise _fail(NodeErrorCode.BAD_REQUEST, f"KV head {g.kv_head}: {ids.size} cluster"
                    f" ids; a request takes 1..{MAX_IDS}")
    bad = ids[ids >= head.num_clusters]
    if bad.size:
        raise _fail(NodeErrorCode.BAD_REQUEST, f"KV head {g.kv_head}: cluster id "
                    f"{int(bad[0])} not written (0..{head.num_clusters - 1})")
    qrows = np.frombuffer(g.q, dtype="<u2").reshape(q_heads, head_dim)
    shard_of = np.asarray(head.cluster_shard, dtype=np.int64)[ids]
    local_of = np.asarray(head.cluster_local, dtype=np.int64)[ids]
    out = []
    for sh in np.unique(shard_of):
        shard = head.shards[int(sh)]
        out.append((shard.device, AttnRequest(shard.region, qrows,
                                              local_of[shard_of == sh].tolist(), scale)))
    return head, out, sum(_tokens(a) for _, a in out)


def _tokens(a: AttnRequest) -> int:
    """KV tokens a descriptor reads: what its device time is roughly proportional to."""
    clusters = a.region.clusters
    return sum(clusters[i][1] for i in a.cluster_ids)


def attend(host: NelssaHost, r: ServiceRequest, member: Any = None) -> Pending:
    """``member``: the sender's (clock domain, member) where it is in one (domains.py)."""
    cfg = host.config
    count = p.ATTEND_HEAD.parse(r.payload).count  # the size, before the groups are parsed
    if count > cfg.max_request_heads:
        raise host.over("max_request_heads", f"ATTEND of {count} KV heads")
    q = p.ATTEND_REQ.parse(r.payload)
    s = host.session(r, q.session)
    if q.q_heads != s.group or q.head_dim != s.head_dim:
        raise _fail(NodeErrorCode.BAD_REQUEST, f"query of {q.q_heads} heads x head_dim "
                    f"{q.head_dim}; session {s.id} has groups of {s.group} x {s.head_dim}")
    host.check_heads([g.kv_head for g in q.groups])
    if not (math.isfinite(q.scale) and q.scale >= 0):
        raise _fail(NodeErrorCode.BAD_REQUEST, f"scale {q.scale}: must be finite and > 0, "
                    "or 0 for 1/sqrt(head_dim)")
    scale = None if q.scale == 0 else float(q.scale)
    # plan every descriptor before touching a device
    plan: dict[int, list[tuple[int, AttnRequest]]] = {}
    sampled = host.sampled(q.layer)
    twin_of: dict[int, Any] = {}  # a sampled layer's regions on the twins
    total = 0
    for gi, g in enumerate(q.groups):
        head, reqs, tokens = _plan_group(host, s, q.layer, g, q.q_heads, q.head_dim, scale)
        total += tokens
        twin_of.update((id(sh.region), tr) for sh, tr in zip(head.shards, head.twin_regions,
                                                             strict=False))
        for d, a in reqs:
            plan.setdefault(d, []).append((gi, a))
        host.need_current(s, q.layer, g.kv_head, head)
    if total > cfg.max_request_tokens:
        raise host.over("max_request_tokens", f"ATTEND reading {total} KV tokens "
                        f"({len(q.groups)} KV heads)")
    host.need_alive(set(plan), sampled)
    if cfg.split_over_units:
        plan = {d: host.split(d, items) for d, items in plan.items()}
    share = {d: sum(_tokens(a) for _, a in items) for d, items in plan.items()}
    def batch(items: list) -> Any:
        return lambda sl, reqs=[a for _, a in items]: sl.run_batch(reqs)

    parts = [DeviceWork(host.slots[d], batch(items), share[d]) for d, items in plan.items()]
    twin_plan = {d: twin_requests(items, twin_of) for d, items in plan.items() if sampled}
    twin_parts = [DeviceWork(host.twins[d], batch(items), share[d])
                  for d, items in twin_plan.items()]
    committed: list[Any] = []  # a domain's ATTEND: its times, or why there are none

    def commit(done: dict[DeviceSlot, Any]) -> None:
        """On a device thread, in the domain's start order: the ATTEND's times on the
        domain's device timeline."""
        try:
            res = device_results(done, twin_parts if sampled else parts)
            committed.append(_attend_times(host, r, plan, res, member[0].busy_until_ps))
        except ServiceError as e:
            committed.append(e)

    held = None if member is None else (member, r.arrive_ps, commit)
    job = host.queue_work(s, parts + twin_parts, held)

    def finish(done: dict[DeviceSlot, Any]) -> Reply:
        results: dict[int, BatchResult] = device_results(done, parts)
        if sampled:  # the sample's answer is the RTL's, held to the model's
            twin_results: dict[int, BatchResult] = device_results(done, twin_parts)
            for d in results:
                bad = compare(host.sampling, d, twin_results[d], results[d])
                if bad:
                    raise _fail(NodeErrorCode.DEVICE_ERROR, f"device {d} and its Verilated "
                                f"twin differ in {len(bad)} of {len(plan[d])} descriptors "
                                f"(the first: {bad[0]}) at layer {q.layer}")
            results = twin_results
        partials = _partials(q, plan, results)  # a device's error fails it before any time moves
        if member is None:  # the client's own timeline (host.py)
            times = _attend_times(host, r, plan, results, host.clients.owner(s).busy_until_ps)
        elif isinstance(committed[0], ServiceError):
            raise committed[0]
        else:
            times = committed[0]
        return _attend_reply(q, plan, results, partials, times)

    return Pending(job, finish)


Times = tuple[dict[str, int], dict[int, int]]
"""An ATTEND's emulated timing (the TIMING fields) and each device's start."""


def _attend_times(host: NelssaHost, r: ServiceRequest,
                  plan: dict[int, list[tuple[int, AttnRequest]]],
                  results: dict[int, BatchResult], busy: dict[int, int]) -> Times:
    """Each device starts the request at max(its arrival + host time, the device's
    busy-until on ``busy``'s timeline), which moves to its end."""
    descriptors = sum(len(v) for v in plan.values())
    host_ps = host.host_ps + round(host.config.host_descriptor_ns * PS_PER_NS * descriptors)
    ready = r.arrive_ps + host_ps
    start = {d: max(ready, busy.get(d, 0)) for d in results}
    end = {d: start[d] + res.cxl_ps + round(res.cycles * host.ps_per_cycle)
           for d, res in results.items()}
    if max(end.values()) > MAX_EMU_TIME_PS:  # refused before the devices' times move
        raise _fail(NodeErrorCode.BAD_REQUEST, f"emulated time: the reply would leave at "
                    f"{max(end.values())} ps, past the {MAX_EMU_TIME_PS} ps a link takes")
    busy.update(end)
    crit = max(end, key=lambda d: (end[d], -d))
    timing = {"arrive_ps": r.arrive_ps, "host_ps": host_ps,
              "queue_ps": start[crit] - ready, "cxl_ps": results[crit].cxl_ps,
              "device_ps": end[crit] - start[crit] - results[crit].cxl_ps,
              "done_ps": end[crit], "device_cycles": results[crit].cycles,
              "critical_device": crit}
    return timing, start


Partials = dict[int, list[tuple[np.ndarray, np.ndarray]]]


def _partials(q: Any, plan: dict[int, list[tuple[int, AttnRequest]]],
              results: dict[int, BatchResult]) -> Partials:
    """Each KV head's partial outputs, or DEVICE_ERROR for a descriptor that failed."""
    partials: Partials = {}
    for d, items in plan.items():
        for (gi, _), out in zip(items, results[d].outputs, strict=True):
            if out.status != DescStatus.OK or out.o is None or out.lse is None:
                raise _fail(NodeErrorCode.DEVICE_ERROR, f"device {d}: KV head "
                            f"{q.groups[gi].kv_head} completed with {out.status.name}")
            partials.setdefault(gi, []).append((out.o, out.lse))
    return partials


def _attend_reply(q: Any, plan: dict[int, list[tuple[int, AttnRequest]]],
                  results: dict[int, BatchResult], partials: Partials, times: Times) -> Reply:
    outs = []
    for gi, g in enumerate(q.groups):
        o, lse = merge_partials(partials[gi])
        outs.append({"kv_head": g.kv_head, "o": o.astype("<f4").tobytes(),
                     "lse": lse.astype("<f4").tobytes()})
    timing, start = times
    devices = [{"device": d, "start_ps": start[d], "cycles": res.cycles,
                "cxl_ps": res.cxl_ps, "descriptors": len(plan[d]),
                "ddr5_counted": int(res.ddr5 is not None),
                "ddr5": res.ddr5 or (0,) * len(DDR5_COUNTERS)}
               for d, res in sorted(results.items())]
    return Reply(NodeOp.ATTEND, p.ATTEND_REP.build(
        {"timing": timing, "q_heads": q.q_heads, "head_dim": q.head_dim,
         "count": len(outs), "groups": outs, "ndev": len(devices), "devices": devices}),
        timing["done_ps"])
