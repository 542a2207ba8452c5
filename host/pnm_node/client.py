"""The client of a PNM node, as the GPU node uses it: sessions, KV allocation and ingestion,
attention requests (sync, or async returning a future so the caller overlaps its own work), and
status. Every call that fails on the node raises the error class of its code (errors.py).

Sessions belong to the connection that opened them; ``queue_pair`` opens another connection of
the same client (for bulk transfers) that reaches the same sessions."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from nelssa.driver.regs import unpack_caps
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK, LinkFaults, link_preset
from nelssa.emu.link.security import CurveClientKeys
from nelssa.emu.link.transport import LinkClient, PendingReply, ReplyInfo
from nelssa.host.pnm_node import protocol as p
from nelssa.host.pnm_node.admin import read_token
from nelssa.host.pnm_node.errors import error_for
from nelssa.host.pnm_node.protocol import NodeOp, Partition

T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """Emulated time of one request, end to end; the parts add up to ``total_ps``."""

    sent_ps: int
    link_up_ps: int
    """GPU node to PNM node (latency, serialization, queueing behind earlier messages)."""
    host_ps: int
    queue_ps: int
    """Waiting for the critical device to finish earlier requests."""
    cxl_ps: int
    """CXL transfers of the device on the critical path."""
    device_ps: int
    """Compute of the device on the critical path."""
    link_down_ps: int
    device_cycles: int
    critical_device: int

    @property
    def total_ps(self) -> int:
        return (self.link_up_ps + self.host_ps + self.queue_ps + self.cxl_ps + self.device_ps
                + self.link_down_ps)

    @property
    def arrive_ps(self) -> int:
        """When the reply is back at the GPU node."""
        return self.sent_ps + self.total_ps

    @property
    def comm_ps(self) -> int:
        """Communication: both link directions and the CXL transfers."""
        return self.link_up_ps + self.link_down_ps + self.cxl_ps


def _timing(info: ReplyInfo, t: Any) -> Timing:
    if t.arrive_ps + t.host_ps + t.queue_ps + t.cxl_ps + t.device_ps != info.server_done_ps:
        raise RuntimeError("node timing does not add up: arrive + host + queue + cxl + device "
                           "!= done")
    return Timing(info.sent_ps, t.arrive_ps - info.sent_ps, t.host_ps, t.queue_ps, t.cxl_ps,
                  t.device_ps, info.arrive_ps - info.server_done_ps, t.device_cycles,
                  t.critical_device)


@dataclass(frozen=True)
class WriteResult:
    cluster_ids: range
    timing: Timing


@dataclass(frozen=True)
class AttendResult:
    o: dict[int, npt.NDArray[np.float32]]
    """(query heads, head_dim) per KV head."""
    lse: dict[int, npt.NDArray[np.float32]]
    """(query heads,) per KV head, natural log."""
    timing: Timing
    device_cycles: dict[int, int]
    """Cycles each device computed."""
    device_start_ps: dict[int, int]
    """Emulated time each device started on the request."""
    ddr5: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Each device's DDR5 counters over its part (driver/port.DDR5_COUNTERS, summed over its
    sub-channels), for the devices that count their DDR5 commands."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    alive: bool
    endpoint: str
    backend: str
    mem_bytes: int
    used_bytes: int
    regions: int
    queue_depth: int
    descriptors: int
    cycles: int
    caps: dict[str, Any]
    """The device's CAPS fields (driver/regs.unpack_caps): engines, max_qheads, head_dims,
    max_cluster_tokens."""
    error: str


@dataclass(frozen=True)
class SamplingInfo:
    """Sampled simulation on the node (host/pnm_node/sampling.py): layers 0..rtl_layers-1 on
    the devices' Verilated twins, checked against the model devices."""

    rtl_layers: int
    batches: int
    descriptors: int
    mismatches: int
    """Descriptors whose RTL and model results differed in a bit."""
    rtl_cycles: int
    model_cycles: int
    worst_ppm: int
    """Largest |model - rtl| / rtl of one device batch, parts per million."""

    @property
    def model_error(self) -> float:
        """The model's cycles over all sampled batches against the RTL's, relative."""
        return (self.model_cycles - self.rtl_cycles) / max(self.rtl_cycles, 1)


@dataclass(frozen=True)
class NodeStatus:
    version: str
    link: str
    sessions: int
    requests: int
    errors: int
    """Requests answered with an error."""
    clock_hz: float
    """The devices' core clock (device cycles to time)."""
    bad_frames: int
    """Frames the link refused (malformed, corrupted)."""
    duplicates: int
    """Duplicated frames the link dropped."""
    busy: int
    """Requests refused BUSY (the node's queue was full and their client held its share)."""
    queued: int
    """Requests waiting to run when the node answered."""
    devices: list[DeviceInfo]
    sampling: SamplingInfo = SamplingInfo(0, 0, 0, 0, 0, 0, 0)



class NodeFuture(Generic[T]):
    """A request in flight (one or several messages); ``result()`` waits for it."""

    def __init__(self, pending: Sequence[PendingReply],
                 decode: Callable[[list[ReplyInfo]], T]) -> None:
        self._pending, self._decode = list(pending), decode

    def done(self) -> bool:
        return all(x.done() for x in self._pending)

    def result(self) -> T:
        return self._decode([x.result() for x in self._pending])


class NodeClient:
    """A connection to a node at ``endpoint`` over a link of preset ``link``."""

    def __init__(self, endpoint: str, link: str = DEFAULT_GPU_PNM_LINK, timeout_s: float = 120.0,
                 faults: LinkFaults | None = None, curve: CurveClientKeys | None = None,
                 max_write_bytes: int = p.MAX_WRITE_KV_BYTES,
                 routing_id: bytes | None = None) -> None:
        """``max_write_bytes``: WRITE_KV messages are kept to this size and to the node's
        max_write_kv_bytes (which the node tells each connection: the link's hello), a larger
        write is sent as several. ``routing_id``: what the node
        knows this connection by, and binds its sessions to (default: 128 random bits; a
        connection ZeroMQ re-establishes keeps it, and with it the sessions: LinkClient)."""
        if max_write_bytes < 1:
            raise ValueError(f"max_write_bytes must be >= 1, got {max_write_bytes}")
        self.link = LinkClient(endpoint, link_preset(link), timeout_s, faults, curve,
                               error_factory=error_for, routing_id=routing_id)
        self._curve, self.max_write_bytes = curve, max_write_bytes
        self._node_write_bytes: int | None = None
        """The node's max_write_kv_bytes (0: it did not say), once asked."""
        self._join_through: NodeClient | None = None

    def _write_limit(self) -> int:
        """The largest WRITE_KV message: ``max_write_bytes`` and the node's limit, which the
        node tells this connection (asked once, outside emulated time)."""
        if self._node_write_bytes is None:
            info = self._link().hello()[1]
            self._node_write_bytes = (p.NODE_HELLO.parse(info).max_write_kv_bytes
                                      if len(info) >= p.NODE_HELLO.sizeof() else 0)
        return min(self.max_write_bytes, self._node_write_bytes or self.max_write_bytes)

    def queue_pair(self) -> NodeClient:
        """Another connection of this client, reaching the same sessions (its requests do not
        queue behind this connection's on the link). It joins the client on its first call (as
        a NodeClient connects: nothing is sent before), and a failed join fails that call."""
        qp = NodeClient(self.link.endpoint, self.link.spec.name, self.link.timeout_s,
                        curve=self._curve, max_write_bytes=self.max_write_bytes)
        qp._join_through = self
        return qp

    def _link(self) -> LinkClient:
        """The link, once this connection belongs to its client."""
        parent, self._join_through = self._join_through, None
        if parent is not None:
            try:
                rep = p.JOIN_TICKET_REP.parse(parent._link().call(NodeOp.JOIN_TICKET,
                                                                  b"").payload)
                self.link.call(NodeOp.JOIN, p.JOIN_REQ.build({"ticket": rep.ticket}))
            except BaseException:
                self._join_through = parent  # the next call tries again
                raise
        return self.link

    def close(self) -> None:
        self.link.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control path ------------------------------------------------------------------------------
    def open_session(self, head_dim: int = 128, group: int = 4,
                     partition: Partition | str = Partition.HEAD) -> int:
        part = Partition[partition.upper()] if isinstance(partition, str) else partition
        info = self._link().call(NodeOp.OPEN_SESSION, p.OPEN_SESSION_REQ.build(
            {"partition": part, "head_dim": head_dim, "group": group}))
        return int(p.OPEN_SESSION_REP.parse(info.payload).session)

    def close_session(self, session: int) -> None:
        self._link().call(NodeOp.CLOSE_SESSION, p.SESSION_REQ.build({"session": session}))

    def alloc_kv(self, session: int, layer: int, kv_heads: Sequence[int], max_clusters: int,
                 max_tokens: int) -> dict[int, list[int]]:
        """Reserve KV per head; returns the devices holding each head."""
        info = self._link().call(NodeOp.ALLOC_KV, p.ALLOC_KV_REQ.build({
            "session": session, "layer": layer, "max_clusters": max_clusters,
            "max_tokens": max_tokens, "count": len(kv_heads), "kv_heads": list(kv_heads)}))
        rep = p.ALLOC_KV_REP.parse(info.payload)
        return {e.kv_head: [d for d in range(32) if e.devices >> d & 1] for e in rep.placement}

    def free_kv(self, session: int, layer: int) -> None:
        self._link().call(NodeOp.FREE_KV, p.FREE_KV_REQ.build({"session": session,
                                                            "layer": layer}))

    def status(self) -> NodeStatus:
        rep = p.STATUS_REP.parse(self._link().call(NodeOp.STATUS, b"").payload)
        devices = [DeviceInfo(d.index, bool(d.alive), d.endpoint, d.backend, d.mem_bytes,
                              d.used_bytes, d.regions, d.queue_depth, d.descriptors, d.cycles,
                              unpack_caps(d.caps), d.error) for d in rep.devices]
        sm = rep.sampling
        return NodeStatus(rep.version, rep.link, rep.sessions, rep.requests, rep.errors,
                          rep.clock_khz * 1000.0, rep.bad_frames, rep.duplicates, rep.busy,
                          rep.queued, devices, SamplingInfo(
                              sm.rtl_layers, sm.batches, sm.descriptors, sm.mismatches,
                              sm.rtl_cycles, sm.model_cycles, sm.worst_ppm))

    def probe_status(self) -> NodeStatus:
        """``status`` over a connection of its own, so that this connection's link (its
        queueing, its emulated clock) does not see the request: for a caller whose emulated
        times must not depend on how it looked at the node."""
        with NodeClient(self.link.endpoint, self.link.spec.name, self.link.timeout_s,
                        curve=self._curve) as probe:
            return probe.status()

    def shutdown(self, token: bytes | None = None) -> None:
        """Stop the node (it stops the device processes it started), as its operator: with
        the node's admin token, by default the one the node wrote for this endpoint
        (admin.read_token; AdminTokenError when there is none to read)."""
        if token is None:
            token = read_token(self.link.endpoint)
        self._link().call(NodeOp.SHUTDOWN, p.SHUTDOWN_REQ.build({"token": token}))

    # -- clock domains (host/pnm_node/domains.py) ------------------------------------------------
    def domain_open(self, members: int) -> bytes:
        """Open a clock domain for ``members`` clients: its ticket, a secret to hand them."""
        info = self._link().call(NodeOp.DOMAIN_OPEN, p.DOMAIN_OPEN_REQ.build(
            {"members": members}))
        return bytes(p.DOMAIN_OPEN_REP.parse(info.payload).ticket)

    def domain_join(self, ticket: bytes) -> None:
        """Join a clock domain: this client's ATTENDs share its members' device timeline."""
        self._link().call(NodeOp.DOMAIN_JOIN, p.DOMAIN_JOIN_REQ.build({"ticket": ticket}))

    def domain_leave(self) -> None:
        self._link().call(NodeOp.DOMAIN_LEAVE, b"")

    def domain_promise(self, send_ps: int) -> None:
        """A null message: nothing this client sends will be stamped before ``send_ps``."""
        self._link().call(NodeOp.DOMAIN_PROMISE, b"", send_ps)

    # -- data path ---------------------------------------------------------------------------------
    def write_kv_async(self, session: int, layer: int, kv_head: int,
                       keys: Sequence[npt.NDArray[np.uint16]],
                       values: Sequence[npt.NDArray[np.uint16]],
                       send_ps: int | None = None) -> NodeFuture[WriteResult]:
        """Append clusters (bf16 bits, (tokens, head_dim) each) to a KV head."""
        if len(keys) != len(values) or not keys:
            raise ValueError(f"{len(keys)} key clusters and {len(values)} value clusters: need "
                             "the same number, at least one")
        # every cluster's K then V, back to back
        parts = [np.asarray(a, dtype="<u2").reshape(-1) for kv in zip(keys, values, strict=True)
                 for a in kv]
        sizes = [2 * parts[2 * i].nbytes for i in range(len(keys))]
        # consecutive clusters per message, each message within what both ends allow
        head_b = p.WRITE_KV_HEAD.sizeof()
        most = self._write_limit()
        room = most - head_b
        chunks: list[list[int]] = [[]]
        size = 0
        for i, b in enumerate(sizes):
            if 4 + b > room:
                raise ValueError(f"cluster {i} of {np.shape(keys[i])[0]} tokens takes "
                                 f"{4 + b} bytes; a WRITE_KV message holds at most "
                                 f"{room} (max_write_bytes {self.max_write_bytes}, the node's "
                                 f"max_write_kv_bytes {self._node_write_bytes or 'unknown'})")
            if size + 4 + b > room and chunks[-1]:
                chunks.append([])
                size = 0
            chunks[-1].append(i)
            size += 4 + b
        sent = self.link.clock_ps if send_ps is None else send_ps
        pending = []
        for idx in chunks:
            # the message made in place: the KV bits are copied once, into it (a 128K-token
            # head is 64 MB; each copy more was fresh memory to fault in)
            counts = np.array([np.shape(keys[i])[0] for i in idx], dtype="<u4")
            data_at = head_b + counts.nbytes
            msg = np.empty(data_at + sum(sizes[i] for i in idx), dtype=np.uint8)
            msg[:head_b] = np.frombuffer(p.WRITE_KV_HEAD.build(
                {"session": session, "layer": layer, "kv_head": kv_head, "count": len(idx)}),
                dtype=np.uint8)
            msg[head_b:data_at] = counts.view(np.uint8)
            np.concatenate(parts[2 * idx[0]:2 * idx[-1] + 2], out=msg[data_at:].view("<u2"))
            pending.append(self._link().request(NodeOp.WRITE_KV, memoryview(msg), sent))

        def decode(infos: list[ReplyInfo]) -> WriteResult:
            reps = [p.WRITE_KV_REP.parse(info.payload) for info in infos]
            for a, b in itertools.pairwise(reps):
                if b.first_id != a.first_id + a.count:
                    raise RuntimeError(f"a write sent in {len(reps)} messages got cluster ids "
                                       f"{a.first_id}.. then {b.first_id}..: another write to "
                                       "the same KV head came in between")
            last = max(range(len(infos)), key=lambda i: infos[i].arrive_ps)
            return WriteResult(range(reps[0].first_id, reps[-1].first_id + reps[-1].count),
                               _timing(infos[last], reps[last].timing))
        return NodeFuture(pending, decode)

    def write_kv(self, session: int, layer: int, kv_head: int,
                 keys: Sequence[npt.NDArray[np.uint16]],
                 values: Sequence[npt.NDArray[np.uint16]]) -> WriteResult:
        return self.write_kv_async(session, layer, kv_head, keys, values).result()

    def attend_async(self, session: int, layer: int,
                     queries: Mapping[int, npt.NDArray[np.uint16]],
                     cluster_ids: Mapping[int, Sequence[int]], scale: float | None = None,
                     send_ps: int | None = None) -> NodeFuture[AttendResult]:
        """Sparse attention of one layer: per KV head, its query rows ((group, head_dim) bf16
        bits) against the selected clusters."""
        if set(queries) != set(cluster_ids) or not queries:
            raise ValueError(f"queries for KV heads {sorted(queries)} but cluster ids for "
                             f"{sorted(cluster_ids)}: need the same, at least one")
        shapes = {np.shape(q) for q in queries.values()}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2:
            raise ValueError(f"every query must be (group, head_dim), got shapes {shapes}")
        q_heads, head_dim = next(iter(shapes))
        groups = [{"kv_head": h, "num_ids": len(cluster_ids[h]),
                   "ids": np.asarray(cluster_ids[h], dtype="<u4").tobytes(),
                   "q": np.ascontiguousarray(queries[h], dtype="<u2").tobytes()}
                  for h in sorted(queries)]
        pending = self._link().request(NodeOp.ATTEND, p.ATTEND_REQ.build({
            "session": session, "layer": layer, "q_heads": q_heads, "head_dim": head_dim,
            "scale": 0.0 if scale is None else scale, "count": len(groups),
            "groups": groups}), send_ps)

        def decode(infos: list[ReplyInfo]) -> AttendResult:
            info = infos[0]
            rep = p.ATTEND_REP.parse(info.payload)
            o = {g.kv_head: np.frombuffer(g.o, dtype="<f4").reshape(q_heads, head_dim).copy()
                 for g in rep.groups}
            lse = {g.kv_head: np.frombuffer(g.lse, dtype="<f4").copy() for g in rep.groups}
            return AttendResult(o, lse, _timing(info, rep.timing),
                                {d.device: d.cycles for d in rep.devices},
                                {d.device: d.start_ps for d in rep.devices},
                                {d.device: tuple(d.ddr5) for d in rep.devices if d.ddr5_counted})
        return NodeFuture([pending], decode)

    def attend(self, session: int, layer: int, queries: Mapping[int, npt.NDArray[np.uint16]],
               cluster_ids: Mapping[int, Sequence[int]],
               scale: float | None = None) -> AttendResult:
        return self.attend_async(session, layer, queries, cluster_ids, scale).result()
