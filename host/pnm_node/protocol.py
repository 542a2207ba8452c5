"""Messages between the GPU node's client and NelssaHost (construct, little endian), carried as
link frames (emu/link/frame.py) whose ``op`` is a ``NodeOp``.

Arrays travel as raw little-endian bytes (bf16 bits for K, V and Q; u32 cluster ids and token
counts; f32 outputs), so large payloads cost a copy, not a per-element parse. Every request
struct ends in ``Terminated``: a payload with bytes beyond its fields does not parse.

A session is named by a 64-bit handle the node draws at random (host/pnm_node/access.py).
"""

from __future__ import annotations

from enum import IntEnum

from construct import (
    Array,
    Bytes,
    Enum,
    Float32l,
    GreedyBytes,
    Int8ul,
    Int16ul,
    Int32ul,
    Int64ul,
    PascalString,
    Struct,
    Terminated,
    this,
)

from nelssa.driver.port import DDR5_COUNTERS
from nelssa.emu.link.frame import MAX_EMU_TIME_PS
from nelssa.host.pnm_node.admin import ADMIN_TOKEN_BYTES


class NodeOp(IntEnum):
    OPEN_SESSION = 1
    CLOSE_SESSION = 2
    """Frees every KV region of the session on every device."""
    ALLOC_KV = 3
    FREE_KV = 4
    WRITE_KV = 5
    """Append clusters of one (session, layer, KV head): the Memory API path."""
    ATTEND = 6
    """Sparse attention of one layer's KV heads: the Command API path."""
    STATUS = 7
    SHUTDOWN = 8
    """Stop the node (and the device processes it started): the node's operator only, with the
    admin token (host/pnm_node/admin.py); any other SHUTDOWN is a bad request."""
    JOIN_TICKET = 9
    """Ask for a single-use ticket another connection presents to join this client."""
    JOIN = 10
    """Present a ticket: this connection becomes a queue pair of the client that asked for it,
    reaching the same sessions under the same limits."""
    DOMAIN_OPEN = 11
    """Open a clock domain for a number of members (host/pnm_node/domains.py): its ticket."""
    DOMAIN_JOIN = 12
    """Present a domain's ticket: this client's ATTENDs share the domain's device timeline."""
    DOMAIN_LEAVE = 13
    """Leave the clock domain: this client holds its members no longer."""
    DOMAIN_PROMISE = 14
    """A null message: this member sends nothing stamped before this frame's send stamp."""


class Partition(IntEnum):
    HEAD = 0
    """Head-wise (the paper's choice): each KV head lives whole on one device."""
    CLUSTER = 1
    """Cluster-wise (paper Figure 7(ii)): each KV head's clusters spread over all devices."""


class NodeErrorCode(IntEnum):
    """Errors of the node (link errors are below 100: emu/link/frame.LinkErrorCode)."""

    BAD_REQUEST = 100
    """A request that cannot be served as asked (shape, range, duplicate allocation)."""
    UNKNOWN_SESSION = 101
    NOT_ALLOCATED = 102
    """A (session, layer, KV head) without a KV region."""
    OUT_OF_MEMORY = 103
    """A device has no room; nothing was allocated or written."""
    DEVICE_DOWN = 104
    """A device the request needs stopped answering or died."""
    DEVICE_ERROR = 105
    """A device completed a descriptor with an error status."""
    LIMIT_EXCEEDED = 106
    """A limit of the node (NodeConfig: per client, or per request) would be passed; nothing
    was changed. The message names the limit."""
    DEVICE_BUSY = 107
    """The client's work queued or running on a device would pass its share
    (``max_client_queued_tokens``); nothing was run or changed: send it again once earlier
    requests are answered."""
    DOMAIN_REFUSED = 108
    """A clock-domain operation or a member's request refused (a bad ticket, not a member, a
    stamp that goes back, removed after a stall); nothing was changed. The message says
    which."""


MAX_ARRIVE_PS = MAX_EMU_TIME_PS // 2
"""The latest emulated time (about 27 days) a request may arrive at; later ones are refused
before they change anything. A reply leaves by the link's ``MAX_EMU_TIME_PS`` (the data path
checks it before it commits; the rest follows: one request's own work, bounded by the
per-request limits, is far shorter than the other half of the range)."""
MAX_WRITE_KV_BYTES = 64 << 20
"""Default largest WRITE_KV payload a node takes (NodeConfig.max_write_kv_bytes); the client
splits a larger write into several."""
TICKET_BYTES = 16


TIMING = Struct(
    "arrive_ps" / Int64ul,
    "host_ps" / Int64ul,
    "queue_ps" / Int64ul,
    "cxl_ps" / Int64ul,
    "device_ps" / Int64ul,
    "done_ps" / Int64ul,
    "device_cycles" / Int64ul,
    "critical_device" / Int8ul,
)
"""Emulated time of one request at the node: it arrived at ``arrive_ps``; host software took
``host_ps``; the device on the critical path (the one that finished last) waited ``queue_ps``
for earlier requests, then spent ``cxl_ps`` on its CXL transfers and ``device_ps``
(``device_cycles`` at 800 MHz) computing; the reply left at ``done_ps`` = arrive + host + queue +
cxl + device."""

OPEN_SESSION_REQ = Struct("partition" / Enum(Int8ul, Partition), "head_dim" / Int16ul,
                          "group" / Int8ul, Terminated)
"""``group``: query heads per KV head (GQA)."""
OPEN_SESSION_REP = Struct("session" / Int64ul)
SESSION_REQ = Struct("session" / Int64ul, Terminated)

ALLOC_KV_REQ = Struct(
    "session" / Int64ul, "layer" / Int16ul, "max_clusters" / Int32ul, "max_tokens" / Int32ul,
    "count" / Int16ul, "kv_heads" / Array(this.count, Int16ul), Terminated,
)
"""Reserve room for ``max_clusters`` clusters and ``max_tokens`` tokens per KV head."""
ALLOC_KV_REP = Struct("count" / Int16ul, "placement" / Array(this.count, Struct(
    "kv_head" / Int16ul, "devices" / Int32ul)))
"""Which devices hold each KV head (a bit per device)."""
FREE_KV_REQ = Struct("session" / Int64ul, "layer" / Int16ul, Terminated)

WRITE_KV_HEAD = Struct("session" / Int64ul, "layer" / Int16ul, "kv_head" / Int16ul,
                       "count" / Int32ul)
"""The fixed start of a WRITE_KV request: what its size is checked from before the rest is
parsed."""
WRITE_KV_REQ = Struct(
    "session" / Int64ul, "layer" / Int16ul, "kv_head" / Int16ul, "count" / Int32ul,
    "tokens" / Bytes(this.count * 4), "data" / GreedyBytes,
)
"""``tokens``: u32 per cluster; ``data``: each cluster's K rows then V rows, bf16."""
WRITE_KV_REP = Struct("first_id" / Int32ul, "count" / Int32ul, "timing" / TIMING)

ATTEND_GROUP = Struct(
    "kv_head" / Int16ul, "num_ids" / Int32ul, "ids" / Bytes(this.num_ids * 4),
    "q" / Bytes(this._.q_heads * this._.head_dim * 2),
)
ATTEND_HEAD = Struct(
    "session" / Int64ul, "layer" / Int16ul, "q_heads" / Int8ul, "head_dim" / Int16ul,
    "scale" / Float32l, "count" / Int16ul,
)
"""The fixed start of an ATTEND request, checked before its groups are parsed."""
ATTEND_REQ = Struct(
    "session" / Int64ul, "layer" / Int16ul, "q_heads" / Int8ul, "head_dim" / Int16ul,
    "scale" / Float32l, "count" / Int16ul, "groups" / Array(this.count, ATTEND_GROUP),
    Terminated,
)
"""``scale`` 0 means 1/sqrt(head_dim); otherwise finite and positive."""
ATTEND_OUT = Struct(
    "kv_head" / Int16ul, "o" / Bytes(this._.q_heads * this._.head_dim * 4),
    "lse" / Bytes(this._.q_heads * 4),
)
DEVICE_TIME = Struct("device" / Int8ul, "start_ps" / Int64ul, "cycles" / Int64ul,
                     "cxl_ps" / Int64ul, "descriptors" / Int16ul,
                     "ddr5_counted" / Int8ul, "ddr5" / Array(len(DDR5_COUNTERS), Int64ul))
"""One device's part of a request: it started at ``start_ps`` (emulated), then spent
``cxl_ps`` and ``cycles``; ``ddr5``: where ``ddr5_counted`` is 1, the DDR5 counters of its
work (driver/port.DDR5_COUNTERS, summed over its sub-channels: what its DDR5 energy is priced
from); zeros, with 0, where the device does not count its DDR5 commands."""
ATTEND_REP = Struct(
    "timing" / TIMING, "q_heads" / Int8ul, "head_dim" / Int16ul,
    "count" / Int16ul, "groups" / Array(this.count, ATTEND_OUT),
    "ndev" / Int8ul, "devices" / Array(this.ndev, DEVICE_TIME),
)

DEVICE_STATUS = Struct(
    "index" / Int8ul, "alive" / Int8ul, "endpoint" / PascalString(Int16ul, "utf8"),
    "backend" / PascalString(Int8ul, "utf8"), "mem_bytes" / Int64ul, "used_bytes" / Int64ul,
    "regions" / Int32ul, "queue_depth" / Int32ul, "descriptors" / Int64ul, "cycles" / Int64ul,
    "caps" / Int32ul, "error" / PascalString(Int16ul, "utf8"),
)
"""``caps``: the device's CAPS register (driver/regs.unpack_caps), what it can run."""
SAMPLING_STATUS = Struct(
    "rtl_layers" / Int16ul, "batches" / Int64ul, "descriptors" / Int64ul,
    "mismatches" / Int64ul, "rtl_cycles" / Int64ul, "model_cycles" / Int64ul,
    "worst_ppm" / Int32ul,
)
"""Sampled simulation (host/pnm_node/sampling.py SampleStats): the layers on the devices'
Verilated twins and what checking them against the model devices has found."""
STATUS_REP = Struct(
    "version" / PascalString(Int8ul, "utf8"), "link" / PascalString(Int8ul, "utf8"),
    "sessions" / Int32ul, "requests" / Int64ul, "errors" / Int64ul, "clock_khz" / Int32ul,
    "bad_frames" / Int64ul, "duplicates" / Int64ul, "busy" / Int64ul, "queued" / Int32ul,
    "ndev" / Int8ul, "devices" / Array(this.ndev, DEVICE_STATUS),
    "sampling" / SAMPLING_STATUS,
)
EMPTY = Struct(Terminated)
"""The payload of STATUS and JOIN_TICKET requests: nothing."""
SHUTDOWN_REQ = Struct("token" / Bytes(ADMIN_TOKEN_BYTES), Terminated)
"""The node's admin token (host/pnm_node/admin.py)."""
JOIN_REQ = Struct("ticket" / Bytes(TICKET_BYTES), Terminated)
JOIN_TICKET_REP = Struct("ticket" / Bytes(TICKET_BYTES))
DOMAIN_OPEN_REQ = Struct("members" / Int16ul, Terminated)
"""How many members the domain waits for before any of their ATTENDs starts."""
DOMAIN_OPEN_REP = Struct("ticket" / Bytes(TICKET_BYTES))
DOMAIN_JOIN_REQ = Struct("ticket" / Bytes(TICKET_BYTES), Terminated)
NODE_HELLO = Struct("max_write_kv_bytes" / Int64ul)
"""What the node tells each connection in the link's hello (emu/link/frame.LINK_HELLO_OP): its
WRITE_KV limit, so a client splits its writes to fit (and never sends one the link drops)."""
