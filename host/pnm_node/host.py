"""NelssaHost (paper 6.2): the control service, KV partitioner, job dispatcher and output
aggregator of one PNM node, as the handler of a link server.

Requests are served one at a time in arrival order; inside a request every device it needs
works concurrently (each device slot has its own thread). Prefill ingestion (WRITE_KV) writes
device memory through the Memory API and never enters the command rings, so it never queues
behind decode descriptors in a device (paper 5.1). Every request is checked whole before any
device is touched, and a device that stops answering fails only the requests that need it.

Emulated time of a request: it arrives (the link model of emu/link), host software takes
``host_request_ns`` plus ``host_descriptor_ns`` per descriptor, then each device it needs spends
its CXL transfers (the CXL link model over the bytes its port carried) and its compute cycles;
the reply leaves when the slowest device is done.

Each client has its own view of device time: a request queues on a device behind the earlier
requests of the same client (its queue pairs included), never behind another client's. Clients'
emulated clocks are independent of one another (each GPU node runs its own), so ordering one
client's work after another's emulated time would let any client move every other client's
results with its clock; this way a client's clock, far-future or not, moves only its own.

Trust: every request is checked whole (each field; its size against the per-request limits,
from its header, before its body is parsed; its emulated time against ``MAX_ARRIVE_PS`` and the
times its reply would carry against the link's ``MAX_EMU_TIME_PS``) before anything changes. A
session is reached only by the client that opened it (host/pnm_node/access.py), within the
per-client limits of NodeConfig.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
from construct import ConstructError

from nelssa import __version__
from nelssa.driver.command import AttnRequest
from nelssa.driver.formats import LINE_BYTES, MAX_IDS, DescStatus
from nelssa.driver.memory import KvCapacityError, kv_region_bytes
from nelssa.emu.link.frame import LinkErrorCode
from nelssa.emu.link.model import PS_PER_NS, link_preset
from nelssa.emu.link.transport import Reply, ServiceError, ServiceRequest
from nelssa.host.pnm_node import protocol as p
from nelssa.host.pnm_node.access import ClientTable
from nelssa.host.pnm_node.aggregate import merge_partials
from nelssa.host.pnm_node.config import NodeConfig
from nelssa.host.pnm_node.devices import (
    BatchResult,
    DeviceSlot,
    DeviceUnreachableError,
    ProcessWatch,
)
from nelssa.host.pnm_node.partition import HeadKv, Session, Shard, head_devices, shard_tokens
from nelssa.host.pnm_node.protocol import (
    MAX_ARRIVE_PS,
    MAX_EMU_TIME_PS,
    NodeErrorCode,
    NodeOp,
    Partition,
)
from nelssa.host.pnm_node.sampling import SampleStats, compare, twin_requests

log = logging.getLogger(__name__)


ALWAYS_ADMITTED = frozenset({NodeOp.CLOSE_SESSION, NodeOp.FREE_KV, NodeOp.STATUS,
                             NodeOp.SHUTDOWN, NodeOp.JOIN_TICKET, NodeOp.JOIN})
"""Operations queued even when the node is busy: they free what others wait for, or the
operator needs them under load."""


def _fail(code: NodeErrorCode, message: str) -> ServiceError:
    return ServiceError(code, message)


def _wait(futures: dict[int, Future[Any]]) -> dict[int, Any]:
    """Results by device; the first device failure becomes a DEVICE_DOWN error (after all have
    finished, so no device is left mid-request)."""
    out, down = {}, []
    for dev, f in futures.items():
        try:
            out[dev] = f.result()
        except DeviceUnreachableError as e:
            down.append(str(e))
    if down:
        raise _fail(NodeErrorCode.DEVICE_DOWN, "; ".join(down))
    return out


class NelssaHost:
    """The node's software over its devices."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.cxl = link_preset(config.cxl)
        self.slots = [DeviceSlot(i, ep, self.cxl, config.backend, config.connect_timeout_s,
                                 config.device_timeout_s, fpga_manifest=config.fpga_manifest,
                                 bulk=config.kv_backdoor)
                      for i, ep in enumerate(config.devices)]
        self.twins = [DeviceSlot(i, ep, self.cxl, "rtl", config.connect_timeout_s,
                                 config.device_timeout_s, bulk=config.kv_backdoor)
                      for i, ep in enumerate(config.twins)]
        self.sampling = SampleStats()
        self.clients = ClientTable(config)
        self.requests = self.errors = 0
        self.stop_requested = False
        self.admin_token: bytes | None = None
        """What a SHUTDOWN must carry (host/pnm_node/admin.py); None: no SHUTDOWN stops it."""
        self._watch: ProcessWatch | None = None
        self._twin_watch: ProcessWatch | None = None
        self.link_counters: Callable[[], tuple[int, int, int, int]] = lambda: (0, 0, 0, 0)
        """(bad frames, duplicates, refused BUSY, queued now) of the link server, set by
        whoever serves this host."""
        try:
            clock_hz = (config.core_clock_mhz * 1e6 if config.core_clock_mhz is not None
                        else self._device_clock_hz())
        except ValueError:
            for slot in self.slots + self.twins:
                slot.close()
            raise
        self.clock_hz = clock_hz
        """Device cycles to emulated time: the devices' clock, or the configuration's."""
        self._ps_per_cycle = 1e12 / clock_hz
        self._ops: dict[int, Callable[[ServiceRequest], Reply]] = {
            NodeOp.OPEN_SESSION: self._open_session, NodeOp.CLOSE_SESSION: self._close_session,
            NodeOp.ALLOC_KV: self._alloc_kv, NodeOp.FREE_KV: self._free_kv,
            NodeOp.WRITE_KV: self._write_kv, NodeOp.ATTEND: self._attend,
            NodeOp.STATUS: self._status, NodeOp.SHUTDOWN: self._shutdown,
            NodeOp.JOIN_TICKET: self._join_ticket, NodeOp.JOIN: self._join,
        }

    def _device_clock_hz(self) -> int:
        """The one clock the node's devices (and their twins) run at."""
        clocks = {s.clock_hz for s in self.slots + self.twins}
        if len(clocks) != 1:
            raise ValueError("the node's devices run at different clocks: " + ", ".join(
                f"device {s.index} ({s.endpoint}) {s.clock_hz / 1e6:g} MHz" for s in self.slots))
        return clocks.pop()

    # -- the link handler -------------------------------------------------------------------------
    def handle(self, request: ServiceRequest) -> Reply:
        self.requests += 1
        op = self._ops.get(request.op)
        try:
            if op is None:
                raise ServiceError(LinkErrorCode.UNKNOWN_OP, f"operation {request.op} is not a "
                                   f"node operation ({', '.join(o.name for o in NodeOp)})")
            self._check_time(request)
            try:
                return op(request)
            except ConstructError as e:
                raise _fail(NodeErrorCode.BAD_REQUEST,
                            f"malformed {NodeOp(request.op).name} payload: {e}") from None
        except ServiceError:
            self.errors += 1
            raise

    def _check_time(self, r: ServiceRequest) -> None:
        """Refuse emulated times beyond the horizon, before anything changes: a reply that
        leaves within ``host_ps`` (and, for the data path, its own bounded work) then fits
        every time field on the way back."""
        if max(r.sent_ps, r.arrive_ps) > MAX_ARRIVE_PS:
            raise _fail(NodeErrorCode.BAD_REQUEST, f"emulated time: request sent at "
                        f"{r.sent_ps} ps arrives at {r.arrive_ps} ps, beyond the node's horizon "
                        f"of {MAX_ARRIVE_PS} ps (about 27 days)")

    def _reply(self, op: NodeOp, payload: bytes, request: ServiceRequest,
               host_ps: int = 0) -> Reply:
        return Reply(op, payload, request.arrive_ps + host_ps)

    def max_request_bytes(self) -> int:
        """The largest legal request payload: what the link server must take (LinkLimits)."""
        caps, heads = self.slots[0].dev.caps, self.config.max_request_heads
        qh, hd = caps["max_qheads"], max(caps["head_dims"])
        one = len(p.ATTEND_REQ.build({  # an ATTEND of one largest group
            "session": 0, "layer": 0, "q_heads": qh, "head_dim": hd, "scale": 0.0, "count": 1,
            "groups": [{"kv_head": 0, "num_ids": MAX_IDS, "ids": bytes(4 * MAX_IDS),
                        "q": bytes(2 * qh * hd)}]}))
        attend = p.ATTEND_HEAD.sizeof() + heads * (one - p.ATTEND_HEAD.sizeof())
        alloc = len(p.ALLOC_KV_REQ.build({"session": 0, "layer": 0, "max_clusters": 1,
                                          "max_tokens": 1, "count": heads,
                                          "kv_heads": [0] * heads}))
        return max(self.config.max_write_kv_bytes, attend, alloc)

    @property
    def _host_ps(self) -> int:
        return round(self.config.host_request_ns * PS_PER_NS)

    # -- sessions and allocation ------------------------------------------------------------------
    def _session(self, r: ServiceRequest, sid: int) -> Session:
        """The caller's session: another client's fails as an unknown one does."""
        return self.clients.get(r.peer, sid)

    def _head(self, s: Session, layer: int, kv_head: int) -> HeadKv:
        head = s.kv.get((layer, kv_head))
        if head is None:
            raise _fail(NodeErrorCode.NOT_ALLOCATED, f"session {s.id} layer {layer} KV head "
                        f"{kv_head} has no KV allocated")
        return head

    def _open_session(self, r: ServiceRequest) -> Reply:
        q = p.OPEN_SESSION_REQ.parse(r.payload)
        if int(q.partition) not in set(Partition):
            raise _fail(NodeErrorCode.BAD_REQUEST, f"partition {int(q.partition)} is not one of "
                        f"{', '.join(f'{x.value} ({x.name})' for x in Partition)}")
        caps = self.slots[0].dev.caps
        if q.head_dim not in caps["head_dims"]:
            raise _fail(NodeErrorCode.BAD_REQUEST, f"head_dim {q.head_dim} not supported by the "
                        f"devices ({caps['head_dims']})")
        if not 1 <= q.group <= caps["max_qheads"]:
            raise _fail(NodeErrorCode.BAD_REQUEST, f"group of {q.group} query heads per KV head;"
                        f" the devices take 1..{caps['max_qheads']}")
        s = self.clients.open(r.peer, Partition(int(q.partition)), q.head_dim, q.group)
        log.info("session %#x opened (%s-wise, head_dim %d, group %d)", s.id,
                 s.partition.name.lower(), q.head_dim, q.group)
        return self._reply(NodeOp.OPEN_SESSION, p.OPEN_SESSION_REP.build({"session": s.id}), r,
                           self._host_ps)

    def _close_session(self, r: ServiceRequest) -> Reply:
        s = self._session(r, p.SESSION_REQ.parse(r.payload).session)
        self._release(s, list(s.kv))
        self.clients.close(s)
        log.info("session %#x closed", s.id)
        return self._reply(NodeOp.CLOSE_SESSION, b"", r, self._host_ps)

    def _alloc_kv(self, r: ServiceRequest) -> Reply:
        q = p.ALLOC_KV_REQ.parse(r.payload)
        s = self._session(r, q.session)
        heads = list(q.kv_heads)
        self._check_heads(heads)
        for h in heads:
            if (q.layer, h) in s.kv:
                raise _fail(NodeErrorCode.BAD_REQUEST, f"session {s.id} layer {q.layer} KV head "
                            f"{h} is already allocated")
        if q.max_clusters < 1 or q.max_tokens < 1:
            raise _fail(NodeErrorCode.BAD_REQUEST, "max_clusters and max_tokens must be >= 1")
        up = [sl.index for sl in self.slots if sl.alive]  # new KV goes to the devices up
        if not up:
            self._need_alive(set(range(len(self.slots))))
        max_ct = self.slots[0].dev.caps["max_cluster_tokens"]
        tokens = shard_tokens(s.partition, q.max_tokens, len(up), max_ct)
        want = [(h, d) for h in heads for d in head_devices(s.partition, h, up)]
        self._need_alive({d for _, d in want})
        region_bytes = kv_region_bytes(s.head_dim, q.max_clusters, tokens)
        self.clients.reserve(s, region_bytes * len(want))  # refused here, nothing is reserved

        def alloc(slot: DeviceSlot, h: int) -> Any:
            return slot.mem.alloc_kv(s.id, q.layer, h, s.head_dim, q.max_clusters, tokens)

        got: dict[tuple[int, int], Any] = {}
        try:
            got = self._alloc_regions(self.slots, want, alloc, s, q.layer)
            twin_got = (self._alloc_regions(self.twins, want, alloc, s, q.layer, twin=True)
                        if self._sampled(q.layer) else {})
        except ServiceError:  # each side rolled back its own; the devices' part goes too
            self._free_regions(self.slots, got)
            self.clients.refund(s, region_bytes * len(want))
            raise
        placement = []
        for h in heads:
            shards = [Shard(d, got[(h, d)]) for d in head_devices(s.partition, h, up)]
            head = HeadKv(shards, reserved_bytes=region_bytes * len(shards),
                          twin_regions=[twin_got[(h, sh.device)] for sh in shards
                                        if (h, sh.device) in twin_got])
            s.kv[(q.layer, h)] = head
            placement.append({"kv_head": h, "devices": head.device_mask})
        return self._reply(NodeOp.ALLOC_KV, p.ALLOC_KV_REP.build(
            {"count": len(placement), "placement": placement}), r, self._host_ps)

    def _sampled(self, layer: int) -> bool:
        return layer < self.config.rtl_layers

    def _alloc_regions(self, slots: list[DeviceSlot], want: list[tuple[int, int]],
                       alloc: Callable[[DeviceSlot, int], Any], s: Session, layer: int,
                       twin: bool = False) -> dict[tuple[int, int], Any]:
        """A region per (KV head, device) on ``slots``, one at a time: a failure frees what
        was allocated and raises, so nothing stays half-allocated."""
        what = "the twin of device" if twin else "device"
        got: dict[tuple[int, int], Any] = {}
        for h, d in want:
            try:
                got[(h, d)] = slots[d].submit(lambda sl, h=h: alloc(sl, h)).result()
            except KvCapacityError as e:
                failure = _fail(NodeErrorCode.OUT_OF_MEMORY, f"{what} {d} cannot hold session "
                                f"{s.id} layer {layer} KV head {h}: {e}")
            except DeviceUnreachableError as e:
                failure = _fail(NodeErrorCode.DEVICE_DOWN, str(e))
            else:
                continue
            self._free_regions(slots, got)
            raise failure
        return got

    @staticmethod
    def _free_regions(slots: list[DeviceSlot], got: dict[tuple[int, int], Any]) -> None:
        for (_, d), region in got.items():
            with contextlib.suppress(DeviceUnreachableError):  # gone with its device
                slots[d].submit(lambda sl, rg=region: sl.mem.free_kv(rg)).result()

    def _free_kv(self, r: ServiceRequest) -> Reply:
        q = p.FREE_KV_REQ.parse(r.payload)
        s = self._session(r, q.session)
        keys = [k for k in s.kv if k[0] == q.layer]
        if not keys:
            raise _fail(NodeErrorCode.NOT_ALLOCATED, f"session {s.id} layer {q.layer} has no KV")
        self._release(s, keys)
        return self._reply(NodeOp.FREE_KV, b"", r, self._host_ps)

    def _release(self, s: Session, keys: list[tuple[int, int]]) -> None:
        """Free regions; a region on a device that is down is gone with the device."""
        futures = []
        for key in keys:
            head = s.kv.pop(key)
            self.clients.refund(s, head.reserved_bytes)
            twins = [(self.twins[sh.device], rg) for sh, rg in zip(head.shards, head.twin_regions,
                                                                  strict=False)]
            for slot, region in [(self.slots[sh.device], sh.region) for sh in head.shards] + twins:
                if slot.alive:
                    futures.append(slot.submit(lambda sl, rg=region: sl.mem.free_kv(rg)))
        for f in futures:
            try:
                f.result()
            except DeviceUnreachableError as e:
                log.warning("freeing KV: %s", e)

    def _over(self, limit: str, what: str) -> ServiceError:
        return _fail(NodeErrorCode.LIMIT_EXCEEDED, f"{what}: over the node's limit {limit} = "
                     f"{getattr(self.config, limit)}")

    def _check_heads(self, heads: list[int]) -> None:
        if not heads or len(set(heads)) != len(heads):
            raise _fail(NodeErrorCode.BAD_REQUEST, f"KV heads {heads[:16]}: need at least one, "
                        "each once")
        if len(heads) > self.config.max_request_heads:
            raise self._over("max_request_heads", f"{len(heads)} KV heads in one request")

    def _check_write_size(self, payload: bytes) -> None:
        """A WRITE_KV's size against max_write_kv_bytes: what arrived, then what its header
        announces (each cluster: its token count and K and V of at least one token)."""
        if len(payload) > self.config.max_write_kv_bytes:
            raise self._over("max_write_kv_bytes", f"WRITE_KV of {len(payload)} bytes (split "
                             "it)")
        count = p.WRITE_KV_HEAD.parse(payload).count
        least = p.WRITE_KV_HEAD.sizeof() + count * (4 + 4 * min(
            self.slots[0].dev.caps["head_dims"]))
        if least > self.config.max_write_kv_bytes:
            raise self._over("max_write_kv_bytes", f"WRITE_KV announcing {count} clusters "
                             f"(at least {least} bytes)")

    def _need_alive(self, devices: set[int], twins: bool = False) -> None:
        """The devices (and, for a sampled layer, their twins) up, or DEVICE_DOWN."""
        slots = [self.slots[d] for d in sorted(devices)]
        if twins:
            slots += [self.twins[d] for d in sorted(devices)]
        down = [sl.down_message() for sl in slots if not sl.alive]
        if down:
            raise _fail(NodeErrorCode.DEVICE_DOWN, "; ".join(down))

    # -- data path --------------------------------------------------------------------------------
    def _write_kv(self, r: ServiceRequest) -> Reply:
        self._check_write_size(r.payload)
        # WRITE_KV_REQ read in place: its header, the token counts, then the KV (no copy of it)
        q = p.WRITE_KV_HEAD.parse(r.payload)
        at = p.WRITE_KV_HEAD.sizeof() + 4 * q.count
        if len(r.payload) < at:
            raise _fail(NodeErrorCode.BAD_REQUEST, f"malformed WRITE_KV payload: {q.count} "
                        f"token counts need {4 * q.count} bytes, "
                        f"{len(r.payload) - p.WRITE_KV_HEAD.sizeof()} follow the header")
        q_data = memoryview(r.payload)[at:]
        s = self._session(r, q.session)
        head = self._head(s, q.layer, q.kv_head)
        tokens = np.frombuffer(r.payload, dtype="<u4", count=q.count,
                               offset=p.WRITE_KV_HEAD.sizeof()).astype(np.int64)
        hd = s.head_dim
        max_ct = self.slots[0].dev.caps["max_cluster_tokens"]
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
        self._need_alive({head.shards[sh].device for sh in per_shard}, bool(head.twin_regions))

        def write(slot: DeviceSlot, region: Any, idx: list[int]) -> tuple[list[int], int]:
            if idx == list(range(idx[0], idx[-1] + 1)):  # a run of clusters: no copy
                kv = data[starts[idx[0]]:ends[idx[-1]]]
            else:
                kv = np.concatenate([data[starts[i]:ends[i]] for i in idx])
            ids = slot.mem.write_packed(region, tokens[idx], kv)
            to_dev, from_dev = slot.port.take()
            return ids, self.cxl.transfer_ps(to_dev) + self.cxl.transfer_ps(from_dev)

        futures = {sh: self.slots[head.shards[sh].device].submit(
            lambda sl, rg=head.shards[sh].region, ix=idx: write(sl, rg, ix))
            for sh, idx in per_shard.items()}
        twin_futures = {sh: self.twins[head.shards[sh].device].submit(
            lambda sl, rg=head.twin_regions[sh], ix=idx: write(sl, rg, ix))
            for sh, idx in per_shard.items() if head.twin_regions}
        results, twin_results = _wait(futures), _wait(twin_futures)
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
        timing = {"arrive_ps": r.arrive_ps, "host_ps": self._host_ps, "queue_ps": 0,
                  "cxl_ps": results[crit][1], "device_ps": 0,
                  "done_ps": r.arrive_ps + self._host_ps + results[crit][1], "device_cycles": 0,
                  "critical_device": head.shards[crit].device}
        return Reply(NodeOp.WRITE_KV, p.WRITE_KV_REP.build(
            {"first_id": first, "count": q.count, "timing": timing}), timing["done_ps"])

    def _attend(self, r: ServiceRequest) -> Reply:
        count = p.ATTEND_HEAD.parse(r.payload).count  # the size, before the groups are parsed
        if count > self.config.max_request_heads:
            raise self._over("max_request_heads", f"ATTEND of {count} KV heads")
        q = p.ATTEND_REQ.parse(r.payload)
        s = self._session(r, q.session)
        if q.q_heads != s.group or q.head_dim != s.head_dim:
            raise _fail(NodeErrorCode.BAD_REQUEST, f"query of {q.q_heads} heads x head_dim "
                        f"{q.head_dim}; session {s.id} has groups of {s.group} x {s.head_dim}")
        self._check_heads([g.kv_head for g in q.groups])
        if not (math.isfinite(q.scale) and q.scale >= 0):
            raise _fail(NodeErrorCode.BAD_REQUEST, f"scale {q.scale}: must be finite and > 0, "
                        "or 0 for 1/sqrt(head_dim)")
        scale = None if q.scale == 0 else float(q.scale)
        # plan every descriptor before touching a device
        plan: dict[int, list[tuple[int, AttnRequest]]] = {}
        sampled = self._sampled(q.layer)
        twin_of: dict[int, Any] = {}  # a sampled layer's regions on the twins
        for gi, g in enumerate(q.groups):
            head = self._head(s, q.layer, g.kv_head)
            twin_of.update((id(sh.region), tr) for sh, tr in zip(head.shards, head.twin_regions,
                                                                 strict=False))
            ids = np.frombuffer(g.ids, dtype="<u4").astype(np.int64)
            if not 1 <= ids.size <= MAX_IDS:
                raise _fail(NodeErrorCode.BAD_REQUEST, f"KV head {g.kv_head}: {ids.size} cluster"
                            f" ids; a request takes 1..{MAX_IDS}")
            bad = ids[ids >= head.num_clusters]
            if bad.size:
                raise _fail(NodeErrorCode.BAD_REQUEST, f"KV head {g.kv_head}: cluster id "
                            f"{int(bad[0])} not written (0..{head.num_clusters - 1})")
            qrows = np.frombuffer(g.q, dtype="<u2").reshape(q.q_heads, q.head_dim)
            shard_of = np.asarray(head.cluster_shard, dtype=np.int64)[ids]
            local_of = np.asarray(head.cluster_local, dtype=np.int64)[ids]
            for sh in np.unique(shard_of):
                shard = head.shards[int(sh)]
                plan.setdefault(shard.device, []).append(
                    (gi, AttnRequest(shard.region, qrows, local_of[shard_of == sh].tolist(),
                                     scale)))
        self._need_alive(set(plan), sampled)
        if self.config.split_over_units:
            plan = {d: self._split(d, items) for d, items in plan.items()}
        futures = {d: self.slots[d].submit(lambda sl, reqs=[a for _, a in items]:
                                           sl.run_batch(reqs))
                   for d, items in plan.items()}
        twin_plan = {d: twin_requests(items, twin_of) for d, items in plan.items()
                     if sampled}
        twin_futures = {d: self.twins[d].submit(lambda sl, reqs=[a for _, a in items]:
                                                sl.run_batch(reqs))
                        for d, items in twin_plan.items()}
        results: dict[int, BatchResult] = _wait(futures)
        if sampled:  # the sample's answer is the RTL's, held to the model's
            twin_results: dict[int, BatchResult] = _wait(twin_futures)
            for d in results:
                bad = compare(self.sampling, d, twin_results[d], results[d])
                if bad:
                    raise _fail(NodeErrorCode.DEVICE_ERROR, f"device {d} and its Verilated "
                                f"twin differ in {len(bad)} of {len(plan[d])} descriptors "
                                f"(the first: {bad[0]}) at layer {q.layer}")
            results = twin_results
        partials: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for d, items in plan.items():
            for (gi, _), out in zip(items, results[d].outputs, strict=True):
                if out.status != DescStatus.OK or out.o is None or out.lse is None:
                    raise _fail(NodeErrorCode.DEVICE_ERROR, f"device {d}: KV head "
                                f"{q.groups[gi].kv_head} completed with {out.status.name}")
                partials.setdefault(gi, []).append((out.o, out.lse))
        outs = []
        for gi, g in enumerate(q.groups):
            o, lse = merge_partials(partials[gi])
            outs.append({"kv_head": g.kv_head, "o": o.astype("<f4").tobytes(),
                         "lse": lse.astype("<f4").tobytes()})
        descriptors = sum(len(v) for v in plan.values())
        host_ps = self._host_ps + round(self.config.host_descriptor_ns * PS_PER_NS * descriptors)
        # a device busy with an earlier request of this client (in emulated time) starts this
        # one after it; other clients' requests are not in this client's time (module doc)
        busy = self.clients.owner(s).busy_until_ps
        ready = r.arrive_ps + host_ps
        start = {d: max(ready, busy.get(d, 0)) for d in results}
        end = {d: start[d] + res.cxl_ps + round(res.cycles * self._ps_per_cycle)
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
        devices = [{"device": d, "start_ps": start[d], "cycles": res.cycles,
                    "cxl_ps": res.cxl_ps, "descriptors": len(plan[d])}
                   for d, res in sorted(results.items())]
        return Reply(NodeOp.ATTEND, p.ATTEND_REP.build(
            {"timing": timing, "q_heads": q.q_heads, "head_dim": q.head_dim,
             "count": len(outs), "groups": outs, "ndev": len(devices), "devices": devices}),
            timing["done_ps"])

    def _split(self, device: int, items: list[tuple[int, AttnRequest]]
               ) -> list[tuple[int, AttnRequest]]:
        """A device's descriptors cut over its attention units (driver/split.py)."""
        parts = self.slots[device].cq.split([a for _, a in items])
        return [(items[part.request][0], part.attn) for part in parts]

    # -- status and shutdown ----------------------------------------------------------------------
    def _status(self, r: ServiceRequest) -> Reply:
        p.EMPTY.parse(r.payload)
        cycles: dict[int, Future[int]] = {sl.index: sl.submit(lambda x: x.port.cycle)
                                          for sl in self.slots if sl.alive}
        devices = []
        for sl in self.slots:
            cyc = 0
            if sl.index in cycles:
                with contextlib.suppress(DeviceUnreachableError):
                    cyc = cycles[sl.index].result()
            alive = sl.alive
            devices.append({
                "index": sl.index, "alive": int(alive), "endpoint": sl.endpoint,
                "backend": sl.backend, "mem_bytes": sl.dev.mem_bytes,
                "used_bytes": sl.used_bytes if alive else 0,
                "regions": len(sl.mem.regions) if alive else 0,
                "queue_depth": sl.cq.in_flight if alive else 0,
                "descriptors": sl.descriptors, "cycles": cyc, "caps": sl.dev.caps_word,
                "error": "" if alive else sl.error})
        return self._reply(NodeOp.STATUS, p.STATUS_REP.build({
            "version": __version__, "link": self.config.link,
            "clock_khz": round(self.clock_hz / 1000),
            "sessions": self.clients.session_count, "requests": self.requests,
            "errors": self.errors,
            **dict(zip(("bad_frames", "duplicates", "busy", "queued"), self.link_counters(),
                       strict=True)),
            "ndev": len(devices),
            "devices": devices, "sampling": self.sampling.as_status(self.config.rtl_layers)}), r)

    def _shutdown(self, r: ServiceRequest) -> Reply:
        """The operator's stop: the admin token or a refusal, and the node serves on."""
        try:
            token = p.SHUTDOWN_REQ.parse(r.payload).token
        except ConstructError:
            token = None
        if (self.admin_token is None or token is None
                or not secrets.compare_digest(token, self.admin_token)):
            raise _fail(NodeErrorCode.BAD_REQUEST, "SHUTDOWN refused: it needs the node's "
                        "admin token (only the node's operator may stop it: `nelssa node "
                        "stop` on the node's host)")
        self.stop_requested = True
        return self._reply(NodeOp.SHUTDOWN, b"", r)

    # -- queue pairs ------------------------------------------------------------------------------
    def _join_ticket(self, r: ServiceRequest) -> Reply:
        p.EMPTY.parse(r.payload)
        return self._reply(NodeOp.JOIN_TICKET, p.JOIN_TICKET_REP.build(
            {"ticket": self.clients.ticket(r.peer)}), r, self._host_ps)

    def _join(self, r: ServiceRequest) -> Reply:
        self.clients.join(r.peer, p.JOIN_REQ.parse(r.payload).ticket)
        return self._reply(NodeOp.JOIN, b"", r, self._host_ps)

    def watch_processes(self, exited: Callable[[], list[tuple[int, int]]]) -> None:
        """Mark a device down as soon as its process exits (processes the node started:
        ``exited`` is emu/launcher.py DeviceProcesses.dead)."""
        self._watch = ProcessWatch(self.slots, exited)

    def watch_twins(self, exited: Callable[[], list[tuple[int, int]]]) -> None:
        """The same for the twins' processes."""
        self._twin_watch = ProcessWatch(self.twins, exited)

    def close(self, shutdown_devices: bool = False) -> None:
        for watch in (self._watch, self._twin_watch):
            if watch is not None:  # the devices are asked to exit now
                watch.stop()
        for sl in self.slots + self.twins:
            sl.close(shutdown_devices)
