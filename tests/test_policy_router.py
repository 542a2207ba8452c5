"""Split-batch routing (emu/policy/router.py): T_input is the latency model's crossover for the
configured hardware and model, in the serving emulator and in the co-simulation alike, unless
it is given; the migration policy's choice."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from nelssa.emu.latency.hardware import HardwareCatalog
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.policy.migration import MigrationPolicy
from nelssa.emu.policy.router import Router, Source
from nelssa.emu.policy.states import Tier
from nelssa.emu.serving.config import ServingConfig
from nelssa.emu.serving.sim import ServingSim
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.request import DecodeConfig
from nelssa.host.gpu.routing import crossover_router, model_hw


def test_router_is_the_crossover_unless_given() -> None:
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                      cat.get("models", "llama-3-8b"), Sparsity(), cat.get("links", "roce-400g"))
    for n in (1, 2, 4, 8):
        r = Router.from_latency(lm, n)
        assert r.t_input == lm.t_input(n)
        assert r.source is (Source.CROSSOVER if r.t_input is not None else Source.NO_CROSSOVER)
    r = Router.from_latency(lm, 4)
    assert r.tier(r.t_input - 1) is Tier.GPU and r.tier(r.t_input) is Tier.PNM
    given = Router.from_latency(lm, 4, t_input=1000)
    assert (given.t_input, given.source) == (1000, Source.GIVEN)
    assert "given" in given.describe()
    # one device of a fifth of the prototype's bandwidth never beats the GPU
    slow = LatencyModel(lm.gpu, dataclasses.replace(lm.pnm, bw_eff_gbs=lm.pnm.bw_eff_gbs / 5),
                        lm.model, lm.sparsity, lm.link)
    none = Router.from_latency(slow, 1)
    assert none.t_input is None and none.tier(10**9) is Tier.GPU and "never" in none.describe()
    gpu_only = Router.from_latency(lm, 4, t_input=1000, pnm=False)
    assert gpu_only.t_input is None and gpu_only.source is Source.NO_PNM
    with pytest.raises(ValueError, match="t_input must be an integer >= 1"):
        Router(0)


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_both_halves_take_the_same_crossover(devices: int) -> None:
    """The co-simulation's decoder and the serving emulator, on the same GPU, PNM tier, link,
    model and selection, route at the same T_input."""
    c = LlamaConfig()
    cfg = DecodeConfig(selection=0.04)
    cat = HardwareCatalog.load()
    lm = LatencyModel(cat.get("gpus", cfg.gpu), cat.get("pnm", "prototype"), model_hw(c),
                      Sparsity(selection=0.04, compression=cfg.cluster.tokens_per_cluster),
                      cat.get("links", "roce-400g"))
    serving = ServingSim(lm, ServingConfig(mode="nelssa", devices=devices, gpu_mem_util=0.9))
    cosim = crossover_router(c, cfg, "roce-400g", devices)
    assert cosim.t_input == serving.t_input == lm.t_input(devices) is not None
    assert crossover_router(c, cfg, "roce-400g", devices, t_input=2000).t_input == 2000


def test_migration_policy_takes_the_longest_past_t_input() -> None:
    p, r = MigrationPolicy(0.9), Router(500)
    cands = [(400, "a"), (600, "b"), (600, "c"), (450, "d")]
    assert p.choose(r, False, 90, 100, cands) == (600, "b")  # the first of equals
    assert p.choose(r, True, 90, 100, cands) is None  # one transfer at a time
    assert p.choose(r, False, 89, 100, cands) is None  # no pressure
    assert p.choose(r, False, 95, 100, [(499, "a")]) is None  # not past T_input
    assert p.choose(Router(None), False, 95, 100, cands) is None
    with pytest.raises(ValueError, match=r"migrate_at must be in \(0, 1\]"):
        MigrationPolicy(0.0)


def test_decode_takes_t_input_from_the_crossover() -> None:
    """`nelssa decode` without --t-input routes at the crossover of its hardware and model."""
    want = crossover_router(LlamaConfig(), DecodeConfig(), "roce-400g", 4).t_input
    proc = subprocess.run([sys.executable, "-m", "nelssa.cli", "decode", "--backend", "model",
                           "--devices", "4", "--short", "1", "--long", "0", "--steps", "1",
                           "--trace", "/dev/null", "--plot", "/dev/null"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"T_input {want:,} tokens (the latency model's crossover)" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "nelssa.cli", "decode", "--backend", "model",
                           "--devices", "1", "--short", "1", "--long", "0", "--grow"],
                          capture_output=True, text=True, timeout=600)
    # one device's crossover is past the model's positions: refused, naming both
    assert proc.returncode == 2 and "--grow: the growing request starts at" in proc.stderr
    assert "exceeds the model's 131072 positions: give --t-input" in proc.stderr
    assert "Traceback" not in proc.stderr
