"""The partitioning study's accounting (nelssa/experiments/partition_study.py) on the model backend,
on a tiny grid: placement as the node's partitioner makes it, bytes read against the selected
clusters' bytes, the replayed stream against the model device's own lines, and the imbalance
head-wise partitioning shows when 8 KV heads do not divide over 3 devices."""

from __future__ import annotations

import numpy as np
import pytest

from nelssa.driver.formats import CLUSTER_ENTRY, cluster_bytes
from nelssa.experiments import partition_jobs as pj
from nelssa.experiments import partition_study as ps
from nelssa.host.pnm_node.protocol import Partition

CONTEXT, REQUESTS = 2048, 8  # 128 clusters per KV head, 5 selected


def _works(context=CONTEXT, requests=REQUESTS):
    return {(r, h): pj.head_work(0, context, r, h, 0.04)
            for r in range(requests) for h in range(pj.KV_HEADS)}


def test_directory_entries_are_the_driver_format():
    addrs = np.array([0x1000, 0x2040, 0x12345680])
    tokens = np.array([8, 24, 17])
    first, raw = pj.directory_lines(1 << 20, addrs, tokens, np.array([1]))
    want = b"".join(CLUSTER_ENTRY.build({"kv_addr": int(a), "tokens": int(t)})
                    for a, t in zip(addrs, tokens, strict=True))
    assert first.tolist() == [1 << 20]
    assert raw.tobytes()[:len(want)] == want


def test_placement_follows_the_partitioner():
    works = _works(requests=1)
    head = pj.plan(Partition.HEAD, 3, works, 64)
    assert [sorted(j.head for j in jobs) for jobs in head] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    cluster = pj.plan(Partition.CLUSTER, 3, works, 64)
    for h in range(pj.KV_HEADS):
        shards = [next(j for j in jobs if j.head == h) for jobs in cluster]
        w = works[(0, h)]
        # every cluster in exactly one shard, shards within one cluster of each other
        assert sum(len(s.tokens) for s in shards) == len(w.tokens)
        loads = [int(s.tokens.sum()) for s in shards]
        assert max(loads) - min(loads) <= pj.CLUSTER_TOKENS[1]
        # the selected clusters' tokens, whichever shard holds them
        got = sorted(int(t) for s in shards for t in s.tokens[s.selected])
        assert got == sorted(w.tokens[w.selected].tolist())


@pytest.mark.parametrize("partition", [Partition.HEAD, Partition.CLUSTER])
def test_bytes_read_are_the_selected_clusters_and_the_descriptors(partition):
    works = _works()
    jobs = pj.plan(partition, 3, works, 64)
    runs = [pj.run_model(j, 0) for j in jobs]
    want_kv = sum(cluster_bytes(int(t), pj.HEAD_DIM)
                  for w in works.values() for t in w.tokens[w.selected])
    assert sum(r.kv_bytes for r in runs) == want_kv
    assert sum(r.kv_lines for r in runs) * 64 == want_kv
    clusters = sum(len(w.selected) for w in works.values())
    for r in runs:
        # PERF_BYTES_READ: the KV, a directory line per cluster, ids and Q per descriptor
        ids_lines = r.bytes_read // 64 - r.kv_lines - r.clusters - 16 * r.descriptors
        assert r.descriptors <= ids_lines <= r.descriptors * 2
        assert len(r.stream) * 64 == r.bytes_read
    assert sum(r.clusters for r in runs) == clusters


def test_stream_is_the_model_devices_lines():
    """The replayed stream holds exactly the lines the model device's descriptors read."""
    from nelssa.hw.model import device_exec

    seen = []
    real = device_exec.run_descriptor

    def spy(d, mem, region, config):
        out = real(d, mem, region, config)
        seen.extend(out[2])
        return out

    jobs = pj.plan(Partition.CLUSTER, 2, _works(requests=1), 64)[0]
    device_exec.run_descriptor = spy
    import nelssa.hw.model.device as model_device
    model_device.run_descriptor = spy
    try:
        run = pj.run_model(jobs, 0)
    finally:
        device_exec.run_descriptor = real
        model_device.run_descriptor = real
    assert sorted(seen) == sorted(run.stream.tolist())


def test_head_wise_imbalance_on_three_devices():
    """8 KV heads on 3 devices: 3, 3 and 2 heads each, so the busiest device does 3/(8/3) of
    the mean's work (8 requests: 24, 24 and 16 descriptors, whole rounds of 4 units)."""
    cfg = pj.Config(Partition.HEAD, CONTEXT, REQUESTS, 3)
    cfg.jobs = pj.plan(Partition.HEAD, 3, _works(), 64)
    pj.run_config(cfg, None, None, True, 0, 0)
    row = cfg.summary()
    assert row["descriptors"] == [24, 24, 16]
    assert row["imbalance"] == pytest.approx(3 / (8 / 3), rel=0.04)
    assert row["layer_cycles"] == max(row["cycles"])
    cfg = pj.Config(Partition.CLUSTER, CONTEXT, REQUESTS, 3)
    cfg.jobs = pj.plan(Partition.CLUSTER, 3, _works(), 64)
    pj.run_config(cfg, None, None, True, 0, 0)
    assert cfg.summary()["imbalance"] < 1.06


def testunit_interleave_deals_parts_to_the_first_free_unit():
    streams = [np.arange(4) * 64 + base for base in (0, 1 << 20, 2 << 20)] + [np.array([7 << 20])]
    order, fill = pj.unit_interleave(streams, 2)
    # unit 0: the first part, then the third; unit 1: the second, then the fourth
    assert order[:4].tolist() == [0, 1 << 20, 64, (1 << 20) + 64]
    assert order.tolist().index(2 << 20) == 8 and order.tolist().index(7 << 20) == 9
    assert fill == pytest.approx(13 / (2 * 8))


def test_replay_counts_commands():
    run = pj.run_model(pj.plan(Partition.HEAD, 8, _works(requests=1), 64)[0], 0)
    n = len(run.stream) // 2
    rep = pj.replay(run, n)
    assert rep.lines == n and rep.reads == n  # all reads, each one a RD command
    assert 0 < rep.acts <= rep.reads
    assert rep.clusters == pytest.approx(n / len(run.stream) * run.clusters)
    assert pj.replay(run, 10 * n).lines == len(run.stream)


@pytest.mark.parametrize("argv, words", [
    (["--points", "128Q:1"], "CONTEXT:REQUESTS"),
    (["--points", "128K:0"], "requests"),
    (["--devices", "0"], "devices 0"),
    (["--points", "1M:8@0"], "devices 1..64"),
    (["--points", "1M:8@x"], "CONTEXT:REQUESTS"),
    (["--selection", "nan"], "selection"),
    (["--ddr5-lines", "-1"], "--ddr5-lines"),
])
def test_bad_options_exit_2_naming_them(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        ps.parse_args(argv)
    assert e.value.code == 2
    assert words in capsys.readouterr().err


def test_page_and_plot_from_a_tiny_grid(tmp_path):
    saved = tmp_path / "rows.json"
    ps.main(["--backend", "model", "--points", "2K:1", "--devices", "1", "3",
             "--ddr5-lines", "256", "--json", str(saved), "--write", "--out", str(tmp_path)])
    text = (tmp_path / "partitioning.md").read_text()
    assert "Head-wise, 2K x 1 on 3: 3/3/2 KV heads per device" in text
    # two configurations of each, in the table of configurations and in that of devices
    assert text.count("\n| head | 2K | 1 |") == 4 and text.count("\n| cluster | 2K | 1 |") == 4
    assert (tmp_path / "partitioning.png").stat().st_size > 10_000
    # the page again from the saved rows, nothing run
    (tmp_path / "partitioning.md").unlink()
    ps.main(["--replot", str(saved), "--out", str(tmp_path)])
    assert (tmp_path / "partitioning.md").read_text() == text
