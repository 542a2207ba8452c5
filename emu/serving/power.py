"""The serving emulator's energy: a run's activity (``results.Activity``, what its steps did in
the cost model's terms) priced by ``emu/energy.py``, by tier: the decode GPUs, the prefill GPUs
(disaggregated prefill) and the PNM nodes with the links to them. One instance (``serve-sim``)
and a fleet (``fleet.py``) are priced the same way, instance by instance."""

from __future__ import annotations

from nelssa.emu.energy import EnergySplit, TierEnergy, gpu_split, pnm_split
from nelssa.emu.latency.hardware import EnergyHw, GpuHw
from nelssa.emu.serving.cost import CostModel
from nelssa.emu.serving.results import Activity, RunResult

__all__ = ["decode_split", "pnm_tier_split", "prefill_split", "run_energy"]


def decode_split(run: RunResult, cost: CostModel, wall_s: float) -> EnergySplit:
    """One decode GPU (or tensor-parallel group, as its description says) over ``wall_s``."""
    a = run.activity
    flops, hbm = cost.gpu_work(a, run.migrated_tokens)
    return gpu_split(cost.lm.gpu, wall_s, a.busy_s, flops, hbm)


def prefill_split(pool: Activity, cost: CostModel, gpu: GpuHw, gpus: int,
                  wall_s: float) -> EnergySplit:
    """``gpus`` prefill GPUs over ``wall_s``, their work summed in ``pool``."""
    if not gpus:
        return EnergySplit()
    flops, hbm = cost.gpu_work(pool)
    return gpu_split(gpu, wall_s, pool.busy_s, flops, hbm, count=gpus)


def pnm_tier_split(runs: list[tuple[RunResult, CostModel]], e: EnergyHw, devices: int,
                   nodes: int, wall_s: float,
                   ddr5_counted_j: float | None = None) -> EnergySplit:
    """``nodes`` PNM nodes of ``devices`` devices in all over ``wall_s``, serving the PNM-tier
    work of ``runs`` (each priced on its own cost model's sparsity and shape); the links'
    bytes are counted on RoCE (GPU node to PNM node) and again on CXL (host to devices).
    ``ddr5_counted_j``: counted DDR5 energy, which replaces the average."""
    if not nodes:
        return EnergySplit()
    ops = None
    kv = link = 0.0
    for run, cost in runs:
        o, k, n = cost.pnm_work(run.activity, run.migrated_tokens)
        ops = o if ops is None else ops + o
        kv, link = kv + k, link + n
    assert ops is not None
    return pnm_split(e, wall_s, ops, kv, devices, nodes, link, link, ddr5_counted_j)


def run_energy(run: RunResult, cost: CostModel, e: EnergyHw) -> TierEnergy:
    """One ``serve-sim`` run: its decode GPU, its prefill GPUs (``prefill_gpus`` of the same
    kind with disaggregated prefill) and, in ``nelssa`` mode, its PNM node of ``devices``."""
    cfg, wall = run.config, run.end_s
    pool = cfg.prefill_gpus if cfg.prefill == "disaggregated" else 0
    nodes = 1 if cfg.mode == "nelssa" else 0
    return TierEnergy.of(
        wall, run.activity.output_tokens, (1, decode_split(run, cost, wall)),
        (pool, prefill_split(run.prefill_activity, cost, cost.lm.gpu, pool, wall)),
        (nodes, cfg.devices * nodes, pnm_tier_split([(run, cost)], e, cfg.devices * nodes,
                                                    nodes, wall)))
