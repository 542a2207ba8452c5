"""Sampled simulation (issue 24 item 5, host/pnm_node/sampling.py): the first rtl_layers layers
of a session also run on a twin of each device, answered with the twin's results and cycles,
checked against the device bit for bit and cycle for cycle; later layers run on the devices
alone."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver.command import AttnOutput
from nelssa.driver.formats import DescStatus
from nelssa.host.pnm_node.client import NodeClient
from nelssa.host.pnm_node.devices import BatchResult
from nelssa.host.pnm_node.sampling import SampleStats, compare
from tests.node_helpers import GROUP, HEAD_DIM, InProcessNode, NodeProcess, Workload
from tests.node_helpers import single_device_reference as reference

HEADS = [0, 1, 2, 3]


def _out(o: float, status: DescStatus = DescStatus.OK) -> AttnOutput:
    return AttnOutput(0, status, np.full((2, 4), o, np.float32), np.zeros(2, np.float32))


def test_compare_counts_bit_differences_and_records_the_estimate():
    stats = SampleStats()
    rtl = BatchResult([_out(1.0), _out(2.0), _out(3.0)], 1000, 0)
    model = BatchResult([_out(1.0), _out(np.nextafter(np.float32(2), np.float32(3))),
                         _out(3.0, DescStatus.ERR_HEAD_DIM)], 1100, 0)
    assert compare(stats, 0, rtl, model) == [1, 2]
    assert (stats.batches, stats.descriptors, stats.mismatches) == (1, 3, 2)
    assert (stats.rtl_cycles, stats.model_cycles, stats.worst_ppm) == (1000, 1100, 100_000)
    assert compare(stats, 1, rtl, BatchResult(rtl.outputs, 990, 0)) == []
    assert stats.worst_ppm == 100_000 and stats.model_cycles == 2090


def _run(client: NodeClient, layers: int) -> dict[int, dict[int, tuple[np.ndarray, ...]]]:
    """Every layer's KV written and attended: (O, LSE) per layer and KV head."""
    s = client.open_session(HEAD_DIM, GROUP)
    out = {}
    for layer in range(layers):
        w = Workload.make(10 + layer, HEADS)
        client.alloc_kv(s, layer, HEADS, w.max_clusters, w.max_tokens)
        for h, d in w.heads.items():
            client.write_kv(s, layer, h, d.keys, d.values)
        res = client.attend(s, layer, {h: d.q for h, d in w.heads.items()},
                            {h: d.ids for h, d in w.heads.items()})
        want = reference(w, 2)
        for h in HEADS:
            assert np.array_equal(res.o[h].view(np.uint32), want[h][0].view(np.uint32))
            assert np.array_equal(res.lse[h].view(np.uint32), want[h][1].view(np.uint32))
        out[layer] = res
    client.close_session(s)
    return out


def test_sampled_layers_run_on_the_twins_too(tmp_path):
    """The plumbing, with model devices as twins: the sampled layer's batches run on both and
    agree to the bit and the cycle; the other layer runs once; closing frees both sides."""
    from nelssa.emu.launcher import DeviceProcesses

    twins = DeviceProcesses(2, "model")
    node = None
    try:
        node = InProcessNode(f"ipc://{tmp_path}/node", 2, rtl_layers=1,
                             twins=tuple(twins.endpoints), token_file=twins.token_file)
        with NodeClient(node.endpoint) as client:
            _run(client, 2)
            st = client.status().sampling
        assert (st.rtl_layers, st.batches, st.mismatches) == (1, 2, 0)  # layer 0, 2 devices
        assert st.descriptors >= 4 and st.rtl_cycles == st.model_cycles > 0
        assert st.worst_ppm == 0 and st.model_error == 0.0
        for slot in node.host.twins + node.host.slots:
            assert slot.mem.regions == {}
    finally:
        if node is not None:
            node.stop()
        twins.stop()


def test_sampling_needs_a_twin_per_device():
    from nelssa.host.pnm_node.config import NodeConfig

    with pytest.raises(ValueError, match="sampling needs a twin per device"):
        NodeConfig(("a", "b"), rtl_layers=1, twins=("c",))
    with pytest.raises(ValueError, match="sampling needs a twin per device"):
        NodeConfig(("a",), twins=("c",))


@pytest.mark.rtl
def test_sampled_layer_on_verilated_twins(tmp_path):
    """`nelssa node up --rtl-layers 1`: layer 0 on Verilated twins, bit-identical to the model
    devices, whose cycle estimate is held within 15 % of the RTL's."""
    node = NodeProcess(f"ipc://{tmp_path}/node", 2, extra=["--rtl-layers", "1"])
    try:
        assert "twin (rtl, layers 0..0)" in node.output()
        with NodeClient(node.endpoint, timeout_s=600) as client:
            _run(client, 2)
            st = client.status().sampling
        assert (st.rtl_layers, st.batches, st.mismatches) == (1, 2, 0)
        assert st.rtl_cycles > 0 and abs(st.model_error) < 0.15, st
    finally:
        node.kill()
