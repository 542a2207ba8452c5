"""Two GPU decode nodes sharing one PNM node of a model device (`nelssa decode --gpu-nodes 2`,
one clock domain) against the fleet emulator's contention model: the per-step wait for the
node and the step time agree within 5 % (nelssa/experiments/fleet_cosim_check.py)."""

from __future__ import annotations

from nelssa.experiments.fleet_cosim_check import BOUND, Run, compare


def test_two_decode_nodes_agree_with_the_fleet_model() -> None:
    # mistral-7b's layer (llama-3-8b's) with a 4K vocabulary (its random output head was most
    # of a decode node's start) and the prompt's KV from the emulated prefill node, not a real
    # 4K-token pass (host time only): the node's attention per step is that of the full
    # vocabulary's run (4.8 us), the GPU's step shorter (172 us, not 247), so the devices
    # still have room for both nodes and the common start still queues the second node's
    # first ATTEND: the regime the fleet's contention model describes, compared as before.
    rows = compare(Run(layers=1, model="mistral-7b", vocab=4096, prefill="emulated",
                       long_len=4096, steps=3, kmeans_iterations=2), [1, 2])
    two = rows[1]
    assert two["k"] == 2 and two["cosim_wait"] > 0
    assert abs(two["wait_diff"]) <= BOUND, two
    assert abs(two["step_diff"]) <= BOUND, two
    # the nodes' common start: the second's first ATTEND queues behind the first's
    assert two["first_wait"] > rows[0]["first_wait"]
