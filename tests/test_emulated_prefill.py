"""The emulated prefill node (host/gpu/emulated_prefill.py): KV with the stated statistics, made
the same way every time, and a first token from a real pass of the last prompt token."""

from __future__ import annotations

import pytest
import torch

from nelssa.host.gpu import emulated_prefill
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.emulated_prefill import EmulatedPrefill, SyntheticKvConfig, projection_spread
from nelssa.host.gpu.model import Llama, attention_with_lse, random_weights

SMALL = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=64)


@pytest.fixture(scope="module")
def model() -> Llama:
    return Llama(SMALL, random_weights(SMALL, seed=3))


def test_keys_and_values_have_the_projections_scale_and_a_passage_structure(model):
    cfg = SyntheticKvConfig(run_tokens=64)
    e = EmulatedPrefill(model, cfg)
    k, v = e.layer_kv(1, 4096)
    assert k.shape == v.shape == (4096, 2, 64)
    w = model.w["model.layers.1.self_attn.k_proj.weight"]
    spread = projection_spread(w, 2, 64)  # (heads, hd)
    # the per-dimension RMS is the projection's (RoPE rotates pairs of dimensions: compare the
    # RMS over each head)
    for h in range(2):
        want = spread[h].pow(2).mean().sqrt()
        assert abs(float(k[:, h].pow(2).mean().sqrt()) / float(want) - 1) < 0.1
    # pre-RoPE structure: undo the rotation and look at the offset and the runs
    raw = model._rope(k, -torch.arange(4096).float())  # the inverse rotation
    for h in range(2):
        x = raw[:, h]
        offset = x.mean(0)
        share = float(offset.pow(2).sum() / x.pow(2).sum(-1).mean())
        assert 0.2 < share < 0.5  # offset_share 0.35 (the topics' mean adds a little)
        centred = torch.nn.functional.normalize(x - offset, dim=-1)
        near = float((centred[1:] * centred[:-1]).sum(-1).mean())  # neighbours: mostly one run
        far = float((centred[2048:] * centred[:-2048]).sum(-1).mean())
        assert near > 0.5 and abs(far) < 0.1


def test_the_same_kv_for_the_same_request_and_seed(model):
    a = EmulatedPrefill(model).layer_kv(0, 300, request_seed=5)
    b = EmulatedPrefill(model).layer_kv(0, 300, request_seed=5)
    c = EmulatedPrefill(model).layer_kv(0, 300, request_seed=6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    # a longer prompt's KV starts with a shorter one's (what a recovery makes again)
    longer = EmulatedPrefill(model).layer_kv(0, 5000, request_seed=5)
    assert torch.equal(longer[0][:300], a[0]) and torch.equal(longer[1][:300], a[1])
    # bf16 values, as the devices hold them
    assert torch.equal(a[0], a[0].to(torch.bfloat16).float())


def test_the_last_token_is_a_real_pass_over_the_context(model, monkeypatch):
    """Given the real context KV, the emulated prefill's first token and last-token K and V are
    the real prefill's."""
    prompt = [int(t) for t in torch.randint(0, 256, (200,), generator=torch.Generator()
                                            .manual_seed(1))]
    logits, real = model.prefill(torch.tensor(prompt), last_only=True)
    e = EmulatedPrefill(model)
    # copies: the last token's K and V are written over the context's last row
    monkeypatch.setattr(e, "layer_kv", lambda layer, n, seed=0, dtype=None:
                        tuple(t.clone() for t in real[layer]))
    first, kv = e.prefill(prompt)
    assert first == int(logits[-1].argmax())
    for (k, v), (kr, vr) in zip(kv, real, strict=True):
        assert torch.equal(k[:-1], kr[:-1]) and torch.equal(v[:-1], vr[:-1])
        # the last token's own pass: the same up to float rounding, then bf16 (one ulp)
        torch.testing.assert_close(k[-1], kr[-1], rtol=1e-2, atol=1e-3)
        torch.testing.assert_close(v[-1], vr[-1], rtol=1e-2, atol=1e-3)


def test_bad_statistics_are_refused():
    with pytest.raises(ValueError, match="sum to 1"):
        SyntheticKvConfig(offset_share=0.5, topic_share=0.5, noise_share=0.5)
    with pytest.raises(ValueError, match="sum to 1"):
        SyntheticKvConfig(offset_share=float("nan"))
    with pytest.raises(ValueError, match="run_tokens"):
        SyntheticKvConfig(run_tokens=0)


def test_decode_with_the_emulated_prefill_node(tmp_path, model):
    """`--prefill emulated` (and auto past its threshold): long prompts' KV from the emulated
    node, offloaded and attended as a real prefill's; the first token is the emulation's, the
    devices' attention within their bound, the prefill node's time recorded."""
    from nelssa.host.gpu.config import PrefillConfig, PrefillMode
    from nelssa.host.gpu.engine import DecodeConfig, DecodeEngine
    from nelssa.host.gpu.prefill import emulates
    from nelssa.host.pnm_node.client import NodeClient
    from tests.node_helpers import NodeProcess

    assert emulates(SMALL, 2000, PrefillConfig(emulate_above_s=1e-6))
    assert not emulates(SMALL, 2000, PrefillConfig())
    assert not emulates(SMALL, 10, PrefillConfig(prefill=PrefillMode.REAL, emulate_above_s=1e-6))
    emu = Llama(SMALL, model.w, prefill=PrefillConfig(prefill=PrefillMode.EMULATED))
    node = NodeProcess(f"ipc://{tmp_path}/node", 2)
    try:
        with NodeClient(node.endpoint, timeout_s=60) as c:
            dec = DecodeEngine(emu, DecodeConfig(t_input=300, recent=16, sink=4), c)
            g = torch.Generator().manual_seed(4)
            prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (100, 900)]
            reqs = [dec.add(p, 3) for p in prompts]
            for _ in range(2):
                dec.step()
            long = reqs[1]
            assert all(dec.kv(r.rid).emulated_prefill and dec.kv(r.rid).prefill_ps > 0
                       for r in reqs)
            assert long.tier.name == "PNM" and dec.kv(long.rid).offloaded > 0
            first, _ = EmulatedPrefill(emu).prefill(prompts[1], long.rid)
            assert long.generated[0] == first and len(long.generated) == 3
            assert dec.kv(long.rid).max_engine_error < 1e-3
            dec.close()
    finally:
        node.kill()


def test_kv_in_bf16_and_by_rope_chunks_holds_the_same_values(model, monkeypatch):
    """The bf16 KV a long prompt is held in until offloaded has the float32 KV's values, and
    RoPE a chunk of tokens at a time gives what it gives over all of them (chunk boundaries
    inside and on a seed block's)."""
    e = EmulatedPrefill(model)
    k, v = e.layer_kv(1, 5000, request_seed=2)
    kb, vb = e.layer_kv(1, 5000, request_seed=2, dtype=torch.bfloat16)
    assert kb.dtype == torch.bfloat16
    assert torch.equal(kb.float(), k) and torch.equal(vb.float(), v)
    monkeypatch.setattr(emulated_prefill, "ROPE_TOKENS", 1000)
    kc, vc = e.layer_kv(1, 5000, request_seed=2)
    assert torch.equal(kc, k) and torch.equal(vc, v)
    # RoPE's tables made again for every head (past ROPE_CACHE_BYTES): the same values
    monkeypatch.setattr(emulated_prefill, "ROPE_CACHE_BYTES", 0)
    kn, vn = e.layer_kv(1, 5000, request_seed=2)
    assert torch.equal(kn, k) and torch.equal(vn, v)
    with pytest.raises(ValueError, match="dtype"):
        e.layer_kv(1, 10, dtype=torch.float16)


def test_attention_with_lse_is_softmax_attention_over_bf16_kv():
    """A KV head's group at a time (no repeated K and V), bf16 K and V read as stored: the
    same as the whole softmax over the float values, its LSE that of the scaled scores."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(*s, generator=g) for s in ((8, 64), (700, 2, 64), (700, 2, 64)))
    kb, vb = k.to(torch.bfloat16), v.to(torch.bfloat16)
    got, lse = attention_with_lse(q, kb, vb)
    kk, vv = (t.float().repeat_interleave(4, dim=1) for t in (kb, vb))
    s = torch.einsum("hd,chd->hc", q.double(), kk.double()) / 8.0
    want = torch.einsum("hc,chd->hd", torch.softmax(s, dim=-1), vv.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, dim=-1), rtol=1e-6, atol=1e-6)
    plain, _ = attention_with_lse(q, k, v)
    assert not torch.allclose(got, plain, rtol=1e-6, atol=1e-7)  # it did read the bf16 values


def test_streamed_offload_and_file_memory_change_nothing(tmp_path, model):
    """Without the accuracy check, a PNM-tier prompt's emulated KV goes to the node a layer
    at a time (``stream_offload``), here to model devices holding their memory in files
    (`node up --device-memory file`): the same tokens, centroids, windows and emulated step
    times as writing it all after the prefill to devices in RAM."""
    from nelssa.host.gpu.config import PrefillConfig, PrefillMode
    from nelssa.host.gpu.engine import DecodeConfig, DecodeEngine
    from nelssa.host.pnm_node.client import NodeClient
    from tests.node_helpers import NodeProcess

    emu = Llama(SMALL, model.w, prefill=PrefillConfig(prefill=PrefillMode.EMULATED))
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (100, 900, 700)]
    runs = []
    for stream, extra in ((True, ["--device-memory", "file"]), (False, [])):
        node = NodeProcess(f"ipc://{tmp_path}/node-{stream}", 2, extra=extra)
        try:
            with NodeClient(node.endpoint, timeout_s=60) as c:
                cfg = DecodeConfig(t_input=300, recent=16, sink=4, check_accuracy=False,
                                   stream_offload=stream)
                dec = DecodeEngine(emu, cfg, c)
                reqs = [dec.add(p, 3) for p in prompts]
                steps = [dec.step().step_ps for _ in range(2)]
                runs.append((steps, reqs, [dec.kv(r.rid) for r in reqs]))
                dec.close()
        finally:
            node.kill()
    (steps_a, a, kv_a), (steps_b, b, kv_b) = runs
    assert steps_a == steps_b and all(s > 0 for s in steps_a)
    assert [r.tier.name for r in a] == ["GPU", "PNM", "PNM"]
    assert [r.generated for r in a] == [r.generated for r in b]
    for ra, rb in zip(kv_a, kv_b, strict=True):
        assert ra.offloaded == rb.offloaded
        for (ka, va), (kb, vb) in zip(ra.kv, rb.kv, strict=True):
            assert torch.equal(ka, kb) and torch.equal(va, vb)
        for la, lb in zip(ra.centroids, rb.centroids, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(la, lb, strict=True))
    assert kv_a[1].kv[0][0].shape[0] == 4 + 16 + 2  # the window: sink, recent, two generated
