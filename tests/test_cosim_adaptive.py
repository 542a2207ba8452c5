"""The adaptive routing threshold in the co-simulation (issue 26 item 1): the GPU decode node
holds the same policy object the serving emulator does (emu/policy/adaptive.py), observes its
own tiers (its KV blocks and preemptions, the node's memory from STATUS, each step's attention
on either side) and routes new requests by where the threshold has moved."""

from __future__ import annotations

import pytest
import torch
from node_helpers import NodeProcess

from nelssa.emu.policy.adaptive import AdaptiveConfig, AdaptiveThreshold, Move, TierLoad
from nelssa.emu.policy.states import Tier
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.engine import DecodeConfig, DecodeEngine
from nelssa.host.gpu.model import Llama, random_weights
from nelssa.host.pnm_node.client import NodeClient

SMALL = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    max_position_embeddings=4096)
T_INPUT = 300
QUICK = AdaptiveConfig(interval_s=1e-9, cooldown_s=1e-9, reset_s=1.0, home_s=1.0)
"""Steps of this small model take microseconds of emulated time: observe at every one."""


class Recording(AdaptiveThreshold):
    """The threshold, keeping what it was shown."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.seen: list[TierLoad] = []

    def observe(self, load: TierLoad) -> Move:
        self.seen.append(load)
        return super().observe(load)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    n = NodeProcess(f"ipc://{tmp_path_factory.mktemp('adaptive')}/node", 2, "model",
                    device_timeout=5.0)
    yield n
    n.kill()


def _run(client: NodeClient, adaptive: AdaptiveThreshold | None) -> DecodeEngine:
    """Three GPU-tier requests fill the emulated GPU's KV; after two steps a 250-token one
    (below the crossover) arrives."""
    cfg = DecodeConfig(t_input=T_INPUT, selection=1.0, chunk=8, recent=16, sink=4,
                       check_accuracy=False, gpu_kv_tokens=50 * 16)
    dec = DecodeEngine(Llama(SMALL, random_weights(SMALL, 1)), cfg, client,
                        adaptive=adaptive)
    g = torch.Generator().manual_seed(3)
    for n in (200, 240, 280):
        dec.add(torch.randint(0, 512, (n,), generator=g).tolist(), 8)
    for _ in range(2):
        dec.step()
    dec.add(torch.randint(0, 512, (250,), generator=g).tolist(), 4)
    while dec.unfinished():
        dec.step()
    return dec


def test_a_full_gpu_lowers_the_threshold_and_the_next_request_goes_to_the_node(
        node: NodeProcess) -> None:
    with NodeClient(node.endpoint, "roce-400g", timeout_s=20) as c:
        static = _run(c, None)
        a = Recording(T_INPUT, QUICK)
        moved = _run(c, a)
    assert static.router.t_input == T_INPUT
    assert static.requests[3].tier is Tier.GPU  # below the crossover: the GPU
    # the GPU's KV was near full (the three hold 47 of its 50 blocks) and the node
    # had memory and time to spare: lowered
    assert a.history and a.history[0][2] is Move.DOWN, a.history
    assert moved.router.t_input < 250 <= T_INPUT
    assert moved.requests[3].tier is Tier.PNM and moved.kv(3).offloaded > 0
    # the migration policy reads the same router: the longest GPU request, past the lowered
    # threshold now, moves to the node under the memory pressure
    assert not any(r.migrated for r in static.requests)
    assert moved.requests[2].migrated and not moved.requests[0].migrated
    assert len(moved.requests[3].generated) == 4
    assert any("adaptive" in e for e in moved.events)
    # what it was shown: this GPU's own step (its attention within it), the node's replies
    # beside it, the node's memory from STATUS; no queue for the node's memory
    assert len(a.seen) == moved.steps
    for load in a.seen:
        assert 0 < load.gpu_attn_s < load.step_s and 0 <= load.pnm_s < load.step_s
        assert load.gpu_wait_s == 0 and load.pnm_wait_s == 0
        assert 0 < load.gpu_kv_used <= 1 and 0 <= load.pnm_mem_used < 1
    assert any(load.pnm_s > 0 for load in a.seen) and any(x.pnm_mem_used > 0 for x in a.seen)


def test_a_threshold_that_does_not_start_at_the_config_is_refused() -> None:
    cfg = DecodeConfig(t_input=T_INPUT, recent=16, sink=4)
    model = Llama(SMALL, random_weights(SMALL, 1))
    with pytest.raises(ValueError, match="starts at 400"):
        DecodeEngine(model, cfg, None, adaptive=AdaptiveThreshold(400))
    with pytest.raises(ValueError, match="must exceed sink"):
        DecodeEngine(model, cfg, None, adaptive=AdaptiveThreshold(T_INPUT, AdaptiveConfig(
            lo_factor=0.05)))

