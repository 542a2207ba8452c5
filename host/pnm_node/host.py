"""NelssaHost (paper 6.2): the control service, KV partitioner, job dispatcher and output
aggregator of one PNM node, as the handler of a link server.

Requests that need different devices run at the same time. The node's thread (the link
server's) checks each request whole and plans it before any device is touched, and makes every
change to the node's state (sessions, allocation, where each cluster went, emulated time); the
device work goes to per-device queues (dispatch.py), each served on a thread of its own and
shared among clients by deficit round robin over their KV tokens of work, a client's queued work
per device capped (``max_client_queued_tokens``: over it, DEVICE_BUSY) and one request's work
bounded (``max_request_tokens``); the reply is made on the node's thread once every part is
done. A client's requests keep their order (lanes.py): its ATTENDs may run beside one another;
anything that changes its state waits for what came before and holds what comes after, and its
replies are made in the order sent. Prefill ingestion (WRITE_KV) writes device memory through
the Memory API and never enters the command rings, so it never queues behind decode descriptors
in a device (paper 5.1). A device that stops answering fails only the requests that need it; it
is probed while down and re-admitted, empty, once it answers again (devices.py HealthWatch), so
new KV may land on it (what it held before is lost: requests on that KV fail DEVICE_DOWN).

Emulated time of a request: it arrives (the link model of emu/link), host software takes
``host_request_ns`` plus ``host_descriptor_ns`` per descriptor, then each device it needs spends
its CXL transfers (the CXL link model over the bytes its port carried) and its compute cycles;
the reply leaves when the slowest device is done.

Each client has its own view of device time: a request queues on a device behind the earlier
requests of the same client (its queue pairs included), never behind another client's. Clients'
emulated clocks are independent of one another (each GPU node runs its own), so ordering one
client's work after another's emulated time would let any client move every other client's
results with its clock; this way a client's clock, far-future or not, moves only its own.
Clients of one simulation share a clock: those that joined one clock domain (domains.py, with
the ticket its opener was given) share each device's timeline, their ATTENDs started in emulated
time order under conservative synchronization; a domain's work never moves a non-member's times.

Trust: every request is checked whole (each field; its size against the per-request limits,
from its header, before its body is parsed; its emulated time against ``MAX_ARRIVE_PS`` and the
times its reply would carry against the link's ``MAX_EMU_TIME_PS``) before anything changes. A
session is reached only by the client that opened it (host/pnm_node/access.py), within the
per-client limits of NodeConfig.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from construct import ConstructError

from nelssa import __version__
from nelssa.driver.formats import MAX_IDS
from nelssa.driver.memory import KvCapacityError, KvRegion, kv_region_bytes
from nelssa.emu.link.frame import LinkErrorCode
from nelssa.emu.link.model import PS_PER_NS, link_preset
from nelssa.emu.link.transport import Deferred, Reply, ServiceError, ServiceRequest
from nelssa.host.pnm_node import datapath
from nelssa.host.pnm_node import protocol as p
from nelssa.host.pnm_node.access import ClientTable
from nelssa.host.pnm_node.config import NodeConfig
from nelssa.host.pnm_node.devices import (
    DeviceSlot,
    DeviceUnreachableError,
    HealthWatch,
    ProcessWatch,
)
from nelssa.host.pnm_node.dispatch import DeviceQueues, DeviceWork, Job, outcome
from nelssa.host.pnm_node.domains import ClockDomain, DomainTable, Member
from nelssa.host.pnm_node.lanes import Lanes, Order, Pending
from nelssa.host.pnm_node.partition import HeadKv, Session, Shard, head_devices, shard_tokens
from nelssa.host.pnm_node.protocol import (
    MAX_ARRIVE_PS,
    NodeErrorCode,
    NodeOp,
    Partition,
)
from nelssa.host.pnm_node.sampling import SampleStats

log = logging.getLogger(__name__)


ALWAYS_ADMITTED = frozenset({NodeOp.CLOSE_SESSION, NodeOp.FREE_KV, NodeOp.STATUS,
                             NodeOp.SHUTDOWN, NodeOp.JOIN_TICKET, NodeOp.JOIN,
                             NodeOp.DOMAIN_LEAVE, NodeOp.DOMAIN_PROMISE})
"""Operations queued even when the node is busy: they free what others wait for, or the
operator needs them under load."""

LANE_ORDER = {NodeOp.ATTEND: Order.OVERLAP, NodeOp.WRITE_KV: Order.BARRIER,
              NodeOp.ALLOC_KV: Order.BARRIER, NodeOp.FREE_KV: Order.BARRIER,
              NodeOp.CLOSE_SESSION: Order.BARRIER}
"""How each operation with device work keeps its place among its client's (lanes.py); the
others (opening a session, status, joining, shutdown) touch no device and answer at once."""


def _fail(code: NodeErrorCode, message: str) -> ServiceError:
    return ServiceError(code, message)


def _free_on(slot: DeviceSlot, regions: list[KvRegion]) -> None:
    """Free regions on the slot's thread; one the device no longer holds (it was re-admitted
    empty since) is gone already."""
    for rg in regions:
        if slot.mem.regions.get((rg.session, rg.layer, rg.kv_head)) is rg:
            slot.mem.free_kv(rg)


class NelssaHost:
    """The node's software over its devices."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.cxl = link_preset(config.cxl)
        self.slots = [DeviceSlot(i, ep, self.cxl, config.backend, config.connect_timeout_s,
                                 config.device_timeout_s, fpga_manifest=config.fpga_manifest,
                                 bulk=config.kv_backdoor, token_file=config.device_token_file)
                      for i, ep in enumerate(config.devices)]
        self.twins = [DeviceSlot(i, ep, self.cxl, "rtl", config.connect_timeout_s,
                                 config.device_timeout_s, bulk=config.kv_backdoor,
                                 token_file=config.device_token_file)
                      for i, ep in enumerate(config.twins)]
        self.sampling = SampleStats()
        self.clients = ClientTable(config)
        self.lanes = Lanes()
        self.dispatcher = DeviceQueues(self.slots + self.twins, config.max_client_queued_tokens)
        # the lookahead: no message crosses the link faster than its base latency
        self.domains = DomainTable(config, round(link_preset(config.link).latency_ns
                                                 * PS_PER_NS), self.dispatcher)
        self._health = HealthWatch(self.slots + self.twins, config.probe_period_s,
                                   min(config.device_timeout_s, config.probe_period_s * 5))
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
            self._health.stop()
            self.dispatcher.stop()
            for slot in self.slots + self.twins:
                slot.close()
            raise
        self.clock_hz = clock_hz
        """Device cycles to emulated time: the devices' clock, or the configuration's."""
        self.ps_per_cycle = 1e12 / clock_hz
        self._ops: dict[int, Callable[[ServiceRequest], Reply | Pending]] = {
            NodeOp.OPEN_SESSION: self._open_session, NodeOp.CLOSE_SESSION: self._close_session,
            NodeOp.ALLOC_KV: self._alloc_kv, NodeOp.FREE_KV: self._free_kv,
            NodeOp.WRITE_KV: lambda r: datapath.write_kv(self, r),
            NodeOp.ATTEND: lambda r: datapath.attend(self, r),
            NodeOp.STATUS: self._status, NodeOp.SHUTDOWN: self._shutdown,
            NodeOp.JOIN_TICKET: self._join_ticket, NodeOp.JOIN: self._join,
            NodeOp.DOMAIN_OPEN: self._domain_open, NodeOp.DOMAIN_JOIN: self._domain_join,
            NodeOp.DOMAIN_LEAVE: self._domain_leave, NodeOp.DOMAIN_PROMISE: self._domain_promise,
        }

    def _device_clock_hz(self) -> int:
        """The one clock the node's devices (and their twins) run at."""
        clocks = {s.clock_hz for s in self.slots + self.twins}
        if len(clocks) != 1:
            raise ValueError("the node's devices run at different clocks: " + ", ".join(
                f"device {s.index} ({s.endpoint}) {s.clock_hz / 1e6:g} MHz" for s in self.slots))
        return clocks.pop()

    # -- the link handler -------------------------------------------------------------------------
    def handle(self, request: ServiceRequest) -> Reply | Deferred:
        """Answer now, or later (``Deferred``: device work queued, or held behind the client's
        earlier requests); on the node's thread."""
        self.requests += 1
        self.domains.tick()
        op = self._ops.get(request.op)
        cid = self.clients.client_id(request.peer)
        try:
            if op is None:
                raise ServiceError(LinkErrorCode.UNKNOWN_OP, f"operation {request.op} is not a "
                                   f"node operation ({', '.join(o.name for o in NodeOp)})")
            self._check_time(request)
            member = self.domains.arrived(cid, request)
        except ServiceError:
            self.errors += 1
            raise
        order = LANE_ORDER.get(NodeOp(request.op))

        def start() -> Reply | Pending:
            if member is None:
                return self._start(op, request)
            try:  # an ATTEND of a clock domain's member: held until it may start
                return self._start(lambda r: datapath.attend(self, r, member), request)
            except Exception:
                member[0].forget(member[1], request.arrive_ps)
                raise

        if order is None:
            out = start()
            assert isinstance(out, Reply)
            return out
        return self.lanes.submit(self.clients.client_id(request.peer), order, start)

    def _start(self, op: Callable[[ServiceRequest], Reply | Pending], request: ServiceRequest
               ) -> Reply | Pending:
        """Check and plan a request (its device work queued); errors counted, its later
        ones too."""
        try:
            try:
                out = op(request)
            except ConstructError as e:
                raise _fail(NodeErrorCode.BAD_REQUEST,
                            f"malformed {NodeOp(request.op).name} payload: {e}") from None
        except ServiceError:
            self.errors += 1
            raise
        if isinstance(out, Reply):
            return out

        def finish(results: dict[Any, Any]) -> Reply:
            try:
                return out.finish(results)
            except ServiceError:
                self.errors += 1
                raise

        return Pending(out.job, finish)

    def queue_work(self, s: Session, parts: list[DeviceWork],
                   held: tuple[tuple[ClockDomain, Member], int,
                               Callable[[dict[Any, Any]], None]] | None = None) -> Job:
        """Queue a request's device work for the session's client, or refuse it whole when
        it would pass the client's share of a device queue. ``held``: a clock domain's ATTEND
        (its domain and member, its arrival stamp, and what commits its emulated times), held
        until no member may precede it."""
        over = self.dispatcher.over_cap(s.owner, parts)
        if over is not None:
            raise _fail(NodeErrorCode.DEVICE_BUSY, f"{over}: over the node's limit "
                        f"max_client_queued_tokens = {self.config.max_client_queued_tokens}; "
                        "nothing was run: send it again once earlier requests are answered")
        if held is not None:
            (domain, member), arrive, commit = held
            return domain.hold(member, arrive, parts, commit)
        return self.dispatcher.run(s.owner, parts)

    def tick(self) -> None:
        """Time-outs of clock domains (on the node's thread, also while nothing arrives)."""
        self.domains.tick()

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
    def host_ps(self) -> int:
        return round(self.config.host_request_ns * PS_PER_NS)

    # -- sessions and allocation ------------------------------------------------------------------
    def session(self, r: ServiceRequest, sid: int) -> Session:
        """The caller's session: another client's fails as an unknown one does."""
        return self.clients.get(r.peer, sid)

    def head(self, s: Session, layer: int, kv_head: int) -> HeadKv:
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
                           self.host_ps)

    def _close_session(self, r: ServiceRequest) -> Pending:
        s = self.session(r, p.SESSION_REQ.parse(r.payload).session)
        job = self._release(s, list(s.kv))
        self.clients.close(s)
        log.info("session %#x closed", s.id)
        return Pending(job, lambda _: self._reply(NodeOp.CLOSE_SESSION, b"", r, self.host_ps))

    def _alloc_kv(self, r: ServiceRequest) -> Pending:
        q = p.ALLOC_KV_REQ.parse(r.payload)
        s = self.session(r, q.session)
        heads = list(q.kv_heads)
        self.check_heads(heads)
        for h in heads:
            if (q.layer, h) in s.kv:
                raise _fail(NodeErrorCode.BAD_REQUEST, f"session {s.id} layer {q.layer} KV head "
                            f"{h} is already allocated")
        if q.max_clusters < 1 or q.max_tokens < 1:
            raise _fail(NodeErrorCode.BAD_REQUEST, "max_clusters and max_tokens must be >= 1")
        up = [sl.index for sl in self.slots if sl.alive]  # new KV goes to the devices up
        if not up:
            self.need_alive(set(range(len(self.slots))))
        max_ct = self.slots[0].dev.caps["max_cluster_tokens"]
        tokens = shard_tokens(s.partition, q.max_tokens, len(up), max_ct)
        want = [(h, d) for h in heads for d in head_devices(s.partition, h, up)]
        sampled = self.sampled(q.layer)
        self.need_alive({d for _, d in want}, sampled)
        region_bytes = kv_region_bytes(s.head_dim, q.max_clusters, tokens)
        by_dev: dict[int, list[int]] = {}
        for h, d in want:
            by_dev.setdefault(d, []).append(h)

        def alloc(slot: DeviceSlot, hs: list[int]) -> dict[int, Any] | tuple[int, Exception]:
            """Every region of the device, or none: (the head that failed, why)."""
            got: dict[int, Any] = {}
            for h in hs:
                try:
                    got[h] = slot.mem.alloc_kv(s.id, q.layer, h, s.head_dim, q.max_clusters,
                                               tokens)
                except KvCapacityError as e:
                    _free_on(slot, list(got.values()))
                    return h, e
            return got

        slots = [(self.slots, "device")] + ([(self.twins, "the twin of device")] if sampled
                                            else [])
        parts = {(what, d): DeviceWork(side[d], lambda sl, hs=hs: alloc(sl, hs), 0)
                 for side, what in slots for d, hs in by_dev.items()}
        self.clients.reserve(s, region_bytes * len(want))  # refused here, nothing is reserved
        job = self.queue_work(s, list(parts.values()))

        def finish(results: dict[DeviceSlot, Any]) -> Reply:
            got: dict[tuple[str, int], dict[int, Any]] = {}
            failures = []
            for (what, d), part in parts.items():
                try:
                    out = outcome(results, part.slot)
                except DeviceUnreachableError as e:
                    failures.append(_fail(NodeErrorCode.DEVICE_DOWN, str(e)))
                    continue
                if isinstance(out, tuple):
                    failures.append(_fail(NodeErrorCode.OUT_OF_MEMORY, f"{what} {d} cannot "
                                          f"hold session {s.id} layer {q.layer} KV head "
                                          f"{out[0]}: {out[1]}"))
                else:
                    got[(what, d)] = out
            if failures:  # each device rolled back its own; the others' part goes too
                undo = {parts[k].slot: list(v.values()) for k, v in got.items()}
                self.dispatcher.run(s.owner, [DeviceWork(sl, lambda x, rgs=rgs: _free_on(x, rgs), 0)
                                              for sl, rgs in undo.items()])
                self.clients.refund(s, region_bytes * len(want))
                raise failures[0]
            placement = []
            for h in heads:
                devs = head_devices(s.partition, h, up)
                head = HeadKv([Shard(d, got[("device", d)][h]) for d in devs],
                              reserved_bytes=region_bytes * len(devs),
                              twin_regions=[got[(w, d)][h] for d in devs
                                            for w in ("the twin of device",) if (w, d) in got])
                s.kv[(q.layer, h)] = head
                placement.append({"kv_head": h, "devices": head.device_mask})
            return self._reply(NodeOp.ALLOC_KV, p.ALLOC_KV_REP.build(
                {"count": len(placement), "placement": placement}), r, self.host_ps)

        return Pending(job, finish)

    def sampled(self, layer: int) -> bool:
        return layer < self.config.rtl_layers

    def _free_kv(self, r: ServiceRequest) -> Pending:
        q = p.FREE_KV_REQ.parse(r.payload)
        s = self.session(r, q.session)
        keys = [k for k in s.kv if k[0] == q.layer]
        if not keys:
            raise _fail(NodeErrorCode.NOT_ALLOCATED, f"session {s.id} layer {q.layer} has no KV")
        job = self._release(s, keys)
        return Pending(job, lambda _: self._reply(NodeOp.FREE_KV, b"", r, self.host_ps))

    def _release(self, s: Session, keys: list[tuple[int, int]]) -> Job:
        """Free regions (the session's state changes now, the devices' in the job); a region
        on a device that is down is gone with the device."""
        by_slot: dict[DeviceSlot, list[KvRegion]] = {}
        for key in keys:
            head = s.kv.pop(key)
            self.clients.refund(s, head.reserved_bytes)
            twins = [(self.twins[sh.device], rg) for sh, rg in zip(head.shards, head.twin_regions,
                                                                  strict=False)]
            for slot, region in [(self.slots[sh.device], sh.region) for sh in head.shards] + twins:
                if slot.alive:
                    by_slot.setdefault(slot, []).append(region)
        job = self.dispatcher.run(s.owner, [DeviceWork(sl, lambda x, rgs=rgs: _free_on(x, rgs), 0)
                                            for sl, rgs in by_slot.items()])
        job.future.add_done_callback(lambda f: [log.warning("freeing KV: %s", e)
                                                for e in f.result().values()
                                                if isinstance(e, BaseException)])
        return job

    def over(self, limit: str, what: str) -> ServiceError:
        return _fail(NodeErrorCode.LIMIT_EXCEEDED, f"{what}: over the node's limit {limit} = "
                     f"{getattr(self.config, limit)}")

    def check_heads(self, heads: list[int]) -> None:
        if not heads or len(set(heads)) != len(heads):
            raise _fail(NodeErrorCode.BAD_REQUEST, f"KV heads {heads[:16]}: need at least one, "
                        "each once")
        if len(heads) > self.config.max_request_heads:
            raise self.over("max_request_heads", f"{len(heads)} KV heads in one request")

    def check_write_size(self, payload: bytes) -> None:
        """A WRITE_KV's size against max_write_kv_bytes: what arrived, then what its header
        announces (each cluster: its token count and K and V of at least one token)."""
        if len(payload) > self.config.max_write_kv_bytes:
            raise self.over("max_write_kv_bytes", f"WRITE_KV of {len(payload)} bytes (split "
                             "it)")
        count = p.WRITE_KV_HEAD.parse(payload).count
        least = p.WRITE_KV_HEAD.sizeof() + count * (4 + 4 * min(
            self.slots[0].dev.caps["head_dims"]))
        if least > self.config.max_write_kv_bytes:
            raise self.over("max_write_kv_bytes", f"WRITE_KV announcing {count} clusters "
                             f"(at least {least} bytes)")

    def need_current(self, s: Session, layer: int, kv_head: int, head: HeadKv) -> None:
        """The KV head's regions still on their devices, or DEVICE_DOWN: a device re-admitted
        after it was down came back empty."""
        for sh in head.shards:
            rg = sh.region
            if self.slots[sh.device].mem.regions.get((rg.session, rg.layer, rg.kv_head)) is not rg:
                raise _fail(NodeErrorCode.DEVICE_DOWN, f"session {s.id} layer {layer} KV head "
                            f"{kv_head}: its KV on device {sh.device} was lost when the device "
                            "went down (it was re-admitted empty); free it and write it again")

    def split(self, device: int, items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """A device's descriptors cut over its attention units (driver/split.py)."""
        parts = self.slots[device].cq.split([a for _, a in items])
        return [(items[part.request][0], part.attn) for part in parts]

    def need_alive(self, devices: set[int], twins: bool = False) -> None:
        """The devices (and, for a sampled layer, their twins) up, or DEVICE_DOWN."""
        slots = [self.slots[d] for d in sorted(devices)]
        if twins:
            slots += [self.twins[d] for d in sorted(devices)]
        down = [sl.down_message() for sl in slots if not sl.alive]
        if down:
            raise _fail(NodeErrorCode.DEVICE_DOWN, "; ".join(down))

    # -- status and shutdown ----------------------------------------------------------------------
    def _status(self, r: ServiceRequest) -> Reply:
        """What the node holds, answered at once: a device busy with another client's work is
        not asked (its cycle count is the one last read)."""
        p.EMPTY.parse(r.payload)
        devices = []
        for sl in self.slots:
            alive = sl.alive
            devices.append({
                "index": sl.index, "alive": int(alive), "endpoint": sl.endpoint,
                "backend": sl.backend, "mem_bytes": sl.dev.mem_bytes,
                "used_bytes": sl.used_bytes if alive else 0,
                "regions": len(sl.mem.regions) if alive else 0,
                "queue_depth": self.dispatcher.queue(sl).depth,
                "descriptors": sl.descriptors, "cycles": sl.cycle_seen,
                "caps": sl.dev.caps_word,
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
            {"ticket": self.clients.ticket(r.peer)}), r, self.host_ps)

    def _join(self, r: ServiceRequest) -> Reply:
        self.clients.join(r.peer, p.JOIN_REQ.parse(r.payload).ticket)
        return self._reply(NodeOp.JOIN, b"", r, self.host_ps)

    # -- clock domains (domains.py) ---------------------------------------------------------------
    def _domain_open(self, r: ServiceRequest) -> Reply:
        members = p.DOMAIN_OPEN_REQ.parse(r.payload).members
        ticket = self.domains.open(self.clients.client_id(r.peer), members)
        return self._reply(NodeOp.DOMAIN_OPEN, p.DOMAIN_OPEN_REP.build({"ticket": ticket}), r,
                           self.host_ps)

    def _domain_join(self, r: ServiceRequest) -> Reply:
        self.domains.join(self.clients.client_id(r.peer),
                          p.DOMAIN_JOIN_REQ.parse(r.payload).ticket)
        return self._reply(NodeOp.DOMAIN_JOIN, b"", r, self.host_ps)

    def _domain_leave(self, r: ServiceRequest) -> Reply:
        p.EMPTY.parse(r.payload)
        self.domains.leave(self.clients.client_id(r.peer))
        return self._reply(NodeOp.DOMAIN_LEAVE, b"", r, self.host_ps)

    def _domain_promise(self, r: ServiceRequest) -> Reply:
        p.EMPTY.parse(r.payload)
        self.domains.promise(self.clients.client_id(r.peer), r)
        return self._reply(NodeOp.DOMAIN_PROMISE, b"", r)

    def watch_processes(self, exited: Callable[[], list[tuple[int, int]]]) -> None:
        """Mark a device down as soon as its process exits (processes the node started:
        ``exited`` is emu/launcher.py DeviceProcesses.dead)."""
        self._watch = ProcessWatch(self.slots, exited)

    def watch_twins(self, exited: Callable[[], list[tuple[int, int]]]) -> None:
        """The same for the twins' processes."""
        self._twin_watch = ProcessWatch(self.twins, exited)

    def close(self, shutdown_devices: bool = False) -> None:
        self._health.stop()
        for watch in (self._watch, self._twin_watch):
            if watch is not None:  # the devices are asked to exit now
                watch.stop()
        self.dispatcher.stop()
        for sl in self.slots + self.twins:
            sl.close(shutdown_devices)
