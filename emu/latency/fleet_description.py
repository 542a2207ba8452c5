"""A fleet in the hardware description: decode instances, a prefill GPU pool, PNM nodes and the
fabric between them (paper 5.1: the GPU and PNM tiers scale independently). It is the ``fleet``
section of a hardware file; its GPU, PNM and link names are entries of the same catalog (the
presets and the file's own). One instance group of count 1 and one node group of count 1 is
what ``serve-sim``'s options describe without a fleet.

    fleet:
      dispatch: length-aware        # round-robin, least-work, length-aware
      orchestrator: fleet-adaptive  # static (default), fleet-adaptive
      instances:
        - {count: 4, gpu: h100-nvl, tp: 1}
        - {count: 2, gpu: h100-nvl, tp: 2, prefill: pool}
      prefill_pool: {gpu: h100-nvl, gpus: 2}
      pnm_nodes:
        - {name: pnm-a, count: 2, devices: 4, pnm: prototype}
      fabric: {link: roce-400g, switch_gbs: 100}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from nelssa.emu.latency.description import DescriptionError, Strict, validated
from nelssa.emu.policy.dispatch import DISPATCHERS
from nelssa.emu.policy.orchestrator import ORCHESTRATORS, OrchestratorKind

__all__ = ["Fabric", "FleetSpec", "InstanceGroup", "NodeGroup", "PrefillPool", "fleet_spec"]

MAX_INSTANCES = 4096
MAX_NODES = 1024


class InstanceGroup(Strict):
    """Decode instances alike: one GPU (or tensor-parallel group) each, its own scheduler."""

    count: int = Field(1, ge=1, le=MAX_INSTANCES, description="instances of this kind")
    gpu: str | None = Field(None, description="a GPU entry (default: the one the command "
                            "uses, --gpu or the file's use.gpu)")
    tp: int = Field(1, ge=1, le=16, description="tensor-parallel degree: that many GPUs as "
                    "one (memory, bandwidth and FLOP/s times tp; their communication is not "
                    "costed, as the 2x-h100-nvl preset)")
    prefill: Literal["colocated", "pool"] = Field(
        "colocated", description="colocated: chunked prefill on the instance's own GPU; "
        "pool: prefilled on the fleet's prefill_pool, the KV handed to the instance")
    pnm_nodes: list[str] | None = Field(None, description="names of the node groups its "
                                        "PNM-tier requests may use (default: all)")


class PrefillPool(Strict):
    """The prefill GPUs the ``pool`` instances share (FCFS, each request to the first free)."""

    gpu: str | None = Field(None, description="a GPU entry (default: the command's GPU)")
    gpus: int = Field(1, ge=1, le=MAX_INSTANCES, description="prefill GPUs in the pool")


class NodeGroup(Strict):
    """PNM nodes alike: a host and its devices, holding long requests' KV head-wise."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="the group's name (instances name it in pnm_nodes)")
    count: int = Field(1, ge=1, le=MAX_NODES, description="nodes of this kind")
    devices: int = Field(4, ge=1, le=64, description="PNM devices per node")
    pnm: str | None = Field(None, description="a PNM entry: the device (default: the "
                            "command's --pnm or the file's use.pnm)")


class Fabric(Strict):
    """The Ethernet between decode instances and PNM nodes."""

    link: str | None = Field(None, description="a link entry, instance to node (default: the "
                             "command's --link or the file's use.link)")
    switch_gbs: float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False, description="the switch every instance's "
        "traffic to and from the PNM nodes crosses, GB/s (default: none, unlimited): decode "
        "steps' queries and outputs, migrations' KV, pool-prefilled PNM-tier requests' KV; "
        "past its bandwidth each transfer's link part is stretched by the offered load over "
        "the bandwidth (emu/serving/fabric.py)")


class FleetSpec(Strict):
    """A fleet: instances, an optional prefill pool, PNM nodes, the fabric, the dispatcher."""

    instances: list[InstanceGroup] = Field(min_length=1, max_length=256,
                                           description="the decode instance groups")
    prefill_pool: PrefillPool | None = Field(None, description="shared prefill GPUs (needed "
                                             "by instances with prefill: pool)")
    pnm_nodes: list[NodeGroup] = Field(default_factory=list, max_length=256,
                                       description="the PNM node groups (none: GPU only)")
    fabric: Fabric = Field(default_factory=Fabric, description="instance <-> node links")
    dispatch: str = Field("round-robin", description="the global dispatcher: "
                          + ", ".join(DISPATCHERS))

    orchestrator: str = Field(
        OrchestratorKind.STATIC.value, description="the fleet's orchestrator (paper 10, "
        "emu/policy/orchestrator.py): static keeps each instance's T_input and places new KV "
        "on the node with the most room; fleet-adaptive moves each instance's T_input and its "
        "node preference with the fleet's signals (PNM node memory, device load and queues, "
        "instance KV use, queues and decode steps). Known: " + ", ".join(ORCHESTRATORS))

    @field_validator("dispatch")
    @classmethod
    def _dispatch(cls, v: str) -> str:
        if v not in DISPATCHERS:
            raise ValueError(f"unknown dispatch policy {v!r} (known: {', '.join(DISPATCHERS)})")
        return v

    @field_validator("orchestrator")
    @classmethod
    def _orchestrator(cls, v: str) -> str:
        if v not in ORCHESTRATORS:
            raise ValueError(f"unknown orchestrator {v!r} (known: {', '.join(ORCHESTRATORS)})")
        return v

    @model_validator(mode="after")
    def _refs(self) -> FleetSpec:
        names = [g.name for g in self.pnm_nodes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"pnm_nodes: the name {sorted(dup)[0]!r} is given twice")
        for i, g in enumerate(self.instances):
            for n in g.pnm_nodes or ():
                if n not in names:
                    raise ValueError(f"instances[{i}].pnm_nodes: no node group {n!r} (the "
                                     f"groups: {', '.join(names) or 'none'})")
            if g.prefill == "pool" and self.prefill_pool is None:
                raise ValueError(f"instances[{i}]: prefill 'pool' needs a prefill_pool")
        if sum(g.count for g in self.instances) > MAX_INSTANCES:
            raise ValueError(f"instances: more than {MAX_INSTANCES} in all")
        if sum(g.count for g in self.pnm_nodes) > MAX_NODES:
            raise ValueError(f"pnm_nodes: more than {MAX_NODES} nodes in all")
        return self


def fleet_spec(raw: Any, where: str) -> FleetSpec:
    """A file's ``fleet`` section checked (DescriptionError naming the file and field)."""
    if not isinstance(raw, dict):
        raise DescriptionError(f"{where} [fleet]: must be an object, got {type(raw).__name__}")
    return validated(FleetSpec, raw, f"{where} [fleet]: ", "section 'fleet'")
