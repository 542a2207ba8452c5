"""KV partitioner: where each (session, layer, KV head) lives on the node's devices.

Head-wise (the paper's choice, 5.3): a KV head lives whole on one device, KV head h on device
h mod N, so one layer's heads spread evenly and every device works on every decode step.
Cluster-wise (Figure 7(ii)): each KV head has a shard on every device; each new cluster goes to
the shard holding the fewest tokens, so no shard exceeds its share by more than one cluster and
a shard sized ceil(max_tokens / N) + one cluster always has room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nelssa.driver.memory import KvRegion
from nelssa.host.pnm_node.protocol import Partition


@dataclass
class Shard:
    """The part of one KV head on one device."""

    device: int
    region: KvRegion
    tokens: int = 0


@dataclass
class HeadKv:
    """One (session, layer, KV head): its shards and where each cluster went."""

    shards: list[Shard]
    cluster_shard: list[int] = field(default_factory=list)
    """Shard index of each cluster, by cluster id."""
    cluster_local: list[int] = field(default_factory=list)
    """Cluster id inside its shard's region, by cluster id."""
    reserved_bytes: int = 0
    """Device memory its shards' regions take, charged to the session's client."""
    twin_regions: list[KvRegion] = field(default_factory=list)
    """A sampled layer's regions on the devices' Verilated twins, by shard
    (host/pnm_node/sampling.py); empty otherwise."""

    @property
    def num_clusters(self) -> int:
        return len(self.cluster_shard)

    @property
    def device_mask(self) -> int:
        mask = 0
        for s in self.shards:
            mask |= 1 << s.device
        return mask

    def place(self, tokens: list[int]) -> list[int]:
        """Shard index for each new cluster (least tokens first, lowest index on ties); does
        not record anything."""
        load = [s.tokens for s in self.shards]
        out = []
        for t in tokens:
            best = min(range(len(load)), key=lambda i: (load[i], i))
            out.append(best)
            load[best] += t
        return out


@dataclass
class Session:
    """What a client opened: its layout and its KV."""

    id: int
    """The handle its client names it by: 64 random bits."""
    partition: Partition
    head_dim: int
    group: int
    """Query heads per KV head."""
    owner: bytes = b""
    """The client that opened it (host/pnm_node/access.py)."""
    kv: dict[tuple[int, int], HeadKv] = field(default_factory=dict)
    """By (layer, KV head)."""


def head_devices(partition: Partition, kv_head: int, devices: Sequence[int]) -> list[int]:
    """The devices that hold a KV head, among ``devices`` (those up when it is allocated: a
    device that is down takes no new KV, so what was lost with it goes to the survivors)."""
    if partition == Partition.HEAD:
        return [devices[kv_head % len(devices)]]
    return list(devices)


def shard_tokens(partition: Partition, max_tokens: int, devices: int,
                 max_cluster_tokens: int) -> int:
    """Tokens to reserve in each shard of a KV head (see the module docstring)."""
    if partition == Partition.HEAD:
        return max_tokens
    return -(-max_tokens // devices) + max_cluster_tokens
