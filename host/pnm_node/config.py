"""The PNM node's configuration: how NelssaHost (host/pnm_node/host.py) reaches its devices,
accounts time and bounds what clients may ask."""

from __future__ import annotations

from dataclasses import dataclass, field

from nelssa.emu.latency.fields import Num, check_numbers
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK, link_preset
from nelssa.emu.link.transport import LinkLimits
from nelssa.host.pnm_node.protocol import MAX_WRITE_KV_BYTES

TIMEOUT_S = Num("a finite number of seconds > 0", lo=0, lo_open=True, least=1e-3, most=1e6)
"""A wait: below a millisecond it rounds to no wait at all (ZeroMQ polls in milliseconds)."""
HOST_NS = Num("a number of ns in 0..1e9 (one second)", lo=0, hi=1e9)
CLOCK_MHZ = Num("a clock > 0 MHz", lo=0, lo_open=True, least=1e-3, most=1e5)
LIMIT = Num("a positive integer", integer=True, lo=1, most=(1 << 31) - 1)
"""Counts the node keeps tables of (sessions, clients, queued requests)."""
BYTES = Num("a positive integer", integer=True, lo=1, most=(1 << 62) - 1)
WRITE_BYTES = Num("a positive integer", integer=True, lo=1, most=1 << 30)
"""A WRITE_KV payload: the link's frames give payloads 32-bit lengths, and the link takes
two requests' worth (node.py)."""
RTL_LAYERS = Num("an integer in 0..65535", integer=True, lo=0, hi=0xFFFF)
"""Layers sampled on twins: a 16-bit field of the node's status."""


@dataclass(frozen=True)
class NodeConfig:
    """How NelssaHost reaches its devices and accounts time."""

    devices: tuple[str, ...]
    """Endpoint of each device process (``nelssa device serve``)."""
    link: str = DEFAULT_GPU_PNM_LINK
    """Link preset toward the GPU node (emu/link/model.PRESETS)."""
    cxl: str = "cxl-pcie5-x16"
    """Link preset between the host and each device."""
    backend: str = "remote"
    """What the device processes run (``rtl``, ``model``), shown by status."""
    device_timeout_s: float = field(default=30.0, metadata={"num": TIMEOUT_S})
    """A device that does not answer, or answers without progress, for this long is marked
    down (how long its work takes does not count: driver/remote.py HEARTBEAT_S)."""
    connect_timeout_s: float = field(default=300.0, metadata={"num": TIMEOUT_S})
    """How long to wait for each device to answer first (an ``rtl`` device may be building)."""
    host_request_ns: float = field(default=1000.0, metadata={"num": HOST_NS})
    """Emulated host software time per request (parse, dispatch, aggregate)."""
    host_descriptor_ns: float = field(default=100.0, metadata={"num": HOST_NS})
    """Emulated host software time per descriptor built."""
    core_clock_mhz: float | None = field(default=None, metadata={"num": CLOCK_MHZ})
    """Device core clock: device cycles to emulated time. None: the devices' own (each port's
    ``clock_hz``: a simulated device's preset, a board's manifest), which must agree."""
    device_token_file: str | None = None
    """The token file the node presents to its device processes (emu/link/tokens.py; a node
    that starts its devices draws one); None: each device's own, written for its endpoint on
    this host (`device serve` without --token-file)."""
    fpga_manifest: str | None = None
    """Bitstream manifest of ``fpga:`` devices (default: manifest.json in each board folder)."""
    max_sessions: int = field(default=4096, metadata={"num": LIMIT})
    """Sessions open on the node, over all clients."""
    max_sessions_per_client: int = field(default=1024, metadata={"num": LIMIT})
    """Sessions one client (with its queue pairs) may hold open."""
    max_client_bytes: int | None = field(default=None, metadata={"num": BYTES})
    """Device memory (bytes, over all devices) the KV regions of one client may take; None: as
    much as the devices have (one GPU node per PNM node, the paper's setup)."""
    max_clients: int = field(default=1024, metadata={"num": LIMIT})
    """Clients the node keeps state for; when full, the least recently used one without
    sessions is forgotten (its queue pairs then stand alone)."""
    max_queue_pairs: int = field(default=16, metadata={"num": LIMIT})
    """Connections that may join one client (host/pnm_node/access.py)."""
    max_request_heads: int = field(default=256, metadata={"num": LIMIT})
    """KV heads one ALLOC_KV or ATTEND request may name."""
    max_request_tokens: int = field(default=1 << 19, metadata={"num": LIMIT})
    """KV tokens one ATTEND may read, over all its KV heads (each selected cluster's tokens):
    a bound on one request's device work, so no request holds a device for long. The default,
    524,288, is two KV heads of 4,096 clusters of 64 tokens (a Llama-3-8B layer at 128K
    context selecting a quarter of each of its 8 KV heads is 262,144)."""
    max_client_queued_tokens: int = field(default=1 << 21, metadata={"num": LIMIT})
    """KV tokens of work (ATTEND reads, WRITE_KV writes) one client may have queued or running
    on one device; a request that would pass it is refused with DEVICE_BUSY, so a client
    flooding a device fills only its own share. At least ``max_request_tokens`` (the default
    is four such requests)."""
    probe_period_s: float = field(default=1.0, metadata={"num": TIMEOUT_S})
    """How often a device marked down is probed (a new connection, its registers read); one
    that answers again is re-admitted with its memory taken as empty."""
    max_write_kv_bytes: int = field(default=MAX_WRITE_KV_BYTES,
                                    metadata={"num": WRITE_BYTES})
    """Largest WRITE_KV payload, checked from its header before the body is parsed (the
    client splits larger writes)."""
    rtl_layers: int = field(default=0, metadata={"num": RTL_LAYERS})
    """Sampled simulation: layers 0..rtl_layers-1 of every session also run on a Verilated
    twin of each device (``twins``), answered with the twin's results and cycles and held to
    the model device bit for bit and cycle for cycle (host/pnm_node/sampling.py); the other
    layers on the devices alone. 0: no sampling."""
    twins: tuple[str, ...] = ()
    """Endpoints of the twins, one per device, with ``rtl_layers`` (`node up` starts them)."""
    kv_backdoor: bool = True
    """Write KV (prefill offload, chunk appends, migration) into a simulated device's memory
    by backdoor and a board's by DMA, its emulated time charged as the CXL.mem lines it
    replaces; off, every line crosses CXL.mem as a message (slow: about 1 MB/s of wall time)."""
    split_over_units: bool = True
    """Cut each device's share of a request into a whole number of rounds of its attention
    units, the parts merged by log-sum-exp (driver/split.py): a device given fewer KV heads
    than it has units otherwise leaves bandwidth unused."""
    max_domain_members: int = field(default=64, metadata={"num": LIMIT})
    """Members one clock domain may have (host/pnm_node/domains.py)."""
    max_client_domains: int = field(default=4, metadata={"num": LIMIT})
    """Clock domains one client may have open (those it opened and that have not ended), so
    no client takes the node's ``max_clients`` domains from the others (a co-simulation opens
    one)."""
    domain_stall_s: float = field(default=600.0, metadata={"num": TIMEOUT_S})
    """A clock-domain member nothing is heard from for this long while another member's
    ATTEND waits on it is removed from the domain, and the others go on."""
    max_queued: int = field(default=LinkLimits.max_queued, metadata={"num": LIMIT})
    """Requests waiting to run, all clients together; once it is full, a request of a client
    holding its share of the queue is refused at once with BUSY (emu/link/server.py). Freeing,
    closing, status and shutdown are never refused."""

    def __post_init__(self) -> None:
        if not 1 <= len(self.devices) <= 32:
            raise ValueError(f"devices: a node has 1..32 devices, got {len(self.devices)}")
        link_preset(self.link)
        link_preset(self.cxl)
        check_numbers(self)  # by the same Nums as `node up`'s options
        if self.max_client_queued_tokens < self.max_request_tokens:
            raise ValueError(f"max_client_queued_tokens ({self.max_client_queued_tokens}) must be "
                             f">= max_request_tokens ({self.max_request_tokens}): a client must "
                             "be able to queue one request of the largest size")
        if (self.rtl_layers > 0) != bool(self.twins) or (
                self.twins and len(self.twins) != len(self.devices)):
            raise ValueError(f"rtl_layers {self.rtl_layers} with {len(self.twins)} twins for "
                             f"{len(self.devices)} devices: sampling needs a twin per device")
