"""Chunked prefill (host/gpu/prefill.py): the same result as the dense causal pass, whatever
the chunk; no (prompt x prompt) working set; the Llama-3-8B preset; the estimates and the
refusals of `nelssa decode` before a run it cannot hold or prefill in time."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from nelssa.cli import build_parser, main
from nelssa.cli_decode_args import check_decode_args
from nelssa.host.gpu import prefill as prefill_mod
from nelssa.host.gpu.config import (
    LLAMA3_ROPE_SCALING,
    PRESETS,
    LlamaConfig,
    PrefillConfig,
    PrefillMode,
)
from nelssa.host.gpu.model import Llama, _rope_inv_freq, dense_attention, random_weights
from nelssa.host.gpu.prefill import (
    available_memory,
    check_run,
    chunk_attention,
    estimate_prefill,
    estimate_run,
    kv_bytes,
    weight_layers,
)

GQA = LlamaConfig(vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=4096)
GIB = 1 << 30


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("chunk", [3, 7, 64, 100, 203, 500])
def test_chunked_prefill_equals_the_dense_pass(chunk):
    """GQA (4 query heads per KV head), chunks that divide the prompt's 203 tokens and chunks
    that do not, one chunk larger than the prompt: hidden states, logits and every layer's K
    and V as the dense pass gives them, to float32 rounding."""
    model = Llama(GQA, random_weights(GQA, 3, qk_gain=3.0), attn_bf16=False)
    tokens = torch.randint(0, GQA.vocab_size, (203,), generator=torch.Generator().manual_seed(1))
    x_ref, kv_ref = model.dense_forward(tokens)
    x, kv = model._forward(tokens, "all", chunk)
    assert x.shape == x_ref.shape and _rel(x, x_ref) < 2e-5
    for (k, v), (k_ref, v_ref) in zip(kv, kv_ref, strict=True):
        assert k.shape == k_ref.shape == (203, 2, 16)
        assert _rel(k, k_ref) < 2e-5 and _rel(v, v_ref) < 2e-5
    model.prefill_cfg = PrefillConfig(prefill_chunk=chunk)
    logits, _ = model.prefill(tokens)
    last, _ = model.prefill(tokens, last_only=True)
    ref = model.logits(x_ref)
    assert logits.shape == (203, 300) and _rel(logits, ref) < 2e-5
    assert last.shape == (1, 300) and _rel(last[0], ref[-1]) < 2e-5
    assert model.context_kv(tokens)[1][0].shape == (203, 2, 16)


def test_chunked_prefill_with_bf16_attention_inputs():
    """As the decode runs it (q, k, v rounded to bf16): a rounding that lands the other side
    of a bf16 step moves a value by one bf16 ulp, no more."""
    model = Llama(GQA, random_weights(GQA, 3, qk_gain=3.0))
    tokens = torch.randint(0, GQA.vocab_size, (150,), generator=torch.Generator().manual_seed(2))
    x_ref, kv_ref = model.dense_forward(tokens)
    x, kv = model._forward(tokens, "all", 32)
    assert _rel(x, x_ref) < 3e-3
    k, k_ref = kv[0][0], kv_ref[0][0]
    assert float(((k - k_ref).abs() > 0).float().mean()) < 0.01  # almost all bit-equal


@pytest.mark.parametrize("lse_merge", [True, False])
@pytest.mark.parametrize("n, ctx, heads, kv_heads", [(50, 120, 8, 2), (17, 17, 4, 4),
                                                     (1, 64, 8, 1), (33, 40, 6, 3)])
def test_chunk_attention_is_causal_attention_of_the_last_tokens(lse_merge, n, ctx, heads,
                                                                 kv_heads):
    """Both kernels (the LSE merge of the earlier tokens and the own causal block; the one
    masked SDPA call) against the dense masked attention."""
    g = torch.Generator().manual_seed(n + ctx)
    q = torch.randn(n, heads, 32, generator=g) * 2
    k, v = torch.randn(ctx, kv_heads, 32, generator=g) * 2, torch.randn(ctx, kv_heads, 32)
    out = chunk_attention(q, k, v, lse_merge)
    ref = dense_attention(q, k, v, causal=True)
    assert out.shape == (n, heads, 32) and _rel(out, ref) < 1e-5
    with pytest.raises(ValueError, match="queries over a context"):
        chunk_attention(q, k[: n - 1], v[: n - 1])


def test_a_long_prefill_has_no_prompt_by_prompt_working_set():
    """16,384 tokens through a tiny model: the dense pass would hold a 16K x 16K mask and
    scores (2 GiB); the chunked one stays within its KV and a chunk's work."""
    code = """
import json, resource, torch
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.model import Llama, random_weights
c = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                max_position_embeddings=1 << 15)
m = Llama(c, random_weights(c))
tokens = torch.randint(0, 64, (16384,))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
logits, kv = m.prefill(tokens, last_only=True)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps([grew * 1024, list(logits.shape), list(kv[0][0].shape)]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    grew, logits, k = json.loads(out.stdout)
    assert logits == [1, 64] and k == [16384, 1, 32]
    assert grew < 256 << 20, f"peak memory grew {grew / 2**20:.0f} MiB"


def test_llama3_8b_preset():
    c = LlamaConfig.llama3_8b(layers=4)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.group) == (32, 8, 128, 4)
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (4096, 14336, 4)
    assert c.rope_theta == 500000.0 and c.max_position_embeddings >= 131072
    assert c.rope_scaling == LLAMA3_ROPE_SCALING and c.rope_scaling["factor"] == 8.0
    assert c.vocab_size == 32000 and LlamaConfig.llama3_8b(vocab=1000).vocab_size == 1000
    assert LlamaConfig.llama3_8b().num_hidden_layers == 32
    assert PRESETS["llama-3-8b"](layers=2) == LlamaConfig.llama3_8b(layers=2)
    assert PRESETS["small"]() == LlamaConfig()
    assert LlamaConfig.llama3_8b(positions=1 << 20).max_position_embeddings == 1 << 20
    assert PRESETS["small"](positions=100).max_position_embeddings == 100
    # q 64 MiB, k and v 16 MiB each, o 64 MiB, three MLP matrices 224 MiB each, two norms
    assert c.layer_params * 4 == (64 + 16 + 16 + 64 + 3 * 224) * 2**20 + 2 * 4096 * 4
    # Llama-3 RoPE: the highest frequency kept, the lowest divided by the factor
    base = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128))
    inv = _rope_inv_freq(c).double()
    assert torch.allclose(inv[0], base[0]) and torch.allclose(inv[-1], base[-1] / 8)


def test_llama3_8b_one_layer_forward():
    c = LlamaConfig.llama3_8b(layers=1, vocab=256)
    model = Llama(c, random_weights(c, 0))
    tokens = torch.tensor([1, 5, 9, 200, 7])
    x = model.embed(tokens)
    q, k, v = model.qkv(0, x, torch.arange(5))
    assert q.shape == (5, 32, 128) and k.shape == v.shape == (5, 8, 128)
    attn = chunk_attention(q, k, v)
    y = model.finish_layer(0, x, attn)
    assert y.shape == (5, 4096) and torch.isfinite(y).all() and not torch.equal(y, x)
    logits, kv = model.prefill(tokens, last_only=True)
    assert logits.shape == (1, 256) and torch.allclose(kv[0][0], k)
    assert torch.allclose(logits[0], model.logits(y)[-1], rtol=1e-4, atol=1e-4)


def test_estimates():
    c = LlamaConfig.llama3_8b(layers=32)
    est = estimate_prefill(c, 32768)
    assert est.kv_bytes == kv_bytes(c, 32768) == 2 * 32768 * 32 * 8 * 128 * 4
    assert est.weights_bytes == c.params * 4 and est.total_bytes > 24 * GIB
    # linear work ~ 2 x parameters per token; attention grows with the square of the prompt
    small = estimate_prefill(c, 1024)
    assert 2 * 1024 * 32 * c.layer_params < small.flops < 1.1 * 2 * 1024 * c.params
    assert est.flops > 32 * small.flops
    assert estimate_prefill(c, 4096, chunk=512).activation_bytes < estimate_prefill(
        c, 4096, chunk=2048).activation_bytes
    cfg = PrefillConfig()
    run = estimate_run(c, [512], [32768], cfg, accuracy=True, local_node=True)
    cents = 0.5 / 16  # the centroids: a float32 key per 16 tokens
    # the long prompt emulated (auto, past emulate_above_s): its own KV in bf16
    assert run.kv_bytes == kv_bytes(c, 512) + (2.0 + cents) * kv_bytes(c, 32768)
    real = estimate_run(c, [512], [32768], replace(cfg, prefill=PrefillMode.REAL))
    assert real.kv_bytes == kv_bytes(c, 512) + (2.5 + cents) * kv_bytes(c, 32768)
    # sampled simulation: the twins hold another bf16 copy of their layers (8 of 32 here)
    sampled = estimate_run(c, [512], [32768], cfg, twin_layers=8)
    assert sampled.kv_bytes == kv_bytes(c, 512) + (2.125 + cents) * kv_bytes(c, 32768)
    why = check_run(run, cfg, 24 * GIB)
    assert why is not None and "GiB of host memory" in why and "24.0 GiB available" in why
    # the sampled 32-layer target: without the accuracy check a long prompt's emulated KV is
    # streamed to the node (one bf16 layer held), the node's model devices hold theirs in
    # files (on disk, not in memory), the twins theirs (4 of 32 layers) in RAM, and 4 shared
    # weight sets leave the embeddings and 4 layers of weights
    long = [131056] * 2
    target = estimate_run(c, [1024] * 4, long, cfg, accuracy=False, twin_layers=4,
                          weight_sets=4, file_memory=True)
    assert target.weights_bytes == (c.vocab_params + 4 * c.layer_params) * 4
    assert target.kv_bytes == int(4 * kv_bytes(c, 1024) + 2 * (0.5 / 8 + 0.5 / 32 + cents)
                                  * kv_bytes(c, 131056))
    assert target.disk_bytes == 2 * 0.5 * kv_bytes(c, 131056)
    assert check_run(target, cfg, 24 * GIB) is None
    full = check_run(target, cfg, 24 * GIB, disk_free=20 * GIB)
    assert full is not None and "32.0 GiB of disk" in full and "20.0 GiB free" in full
    in_ram = estimate_run(c, [1024] * 4, long, cfg, accuracy=False, twin_layers=4)
    assert in_ram.kv_bytes - target.kv_bytes == kv_bytes(c, 131056)  # the node's copy
    assert in_ram.weights_bytes == c.params * 4 and in_ram.disk_bytes == 0
    why = check_run(in_ram, cfg, 24 * GIB)
    assert why is not None and f"weights {c.params * 4 / GIB:.1f}, KV" in why
    tiny = estimate_run(LlamaConfig(), [64], [1024], cfg)
    assert check_run(tiny, cfg, 24 * GIB) is None
    slow_cfg = PrefillConfig(host_gflops=1.0, prefill_limit_s=10)
    slow = check_run(estimate_run(LlamaConfig(), [64], [1024], slow_cfg), slow_cfg, 24 * GIB)
    assert slow is not None and "the limit is 10 s" in slow
    with pytest.raises(ValueError, match="prefill_chunk"):
        PrefillConfig(prefill_chunk=0)


def test_weight_sets_share_layers_and_keep_the_first_layers_values():
    """``random_weights(weight_sets=N)``: layers 0..N-1 are those of a model of N layers,
    layer i holds layer i mod N's tensors (no memory of its own); 0 changes nothing."""
    tiny = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    c4 = LlamaConfig(num_hidden_layers=4, **tiny)
    c8 = LlamaConfig(num_hidden_layers=8, **tiny)
    own, shared = random_weights(c8, 2), random_weights(c8, 2, weight_sets=4)
    alone = random_weights(c4, 2)
    assert all(torch.equal(own[k], v) for k, v in random_weights(c8, 2, weight_sets=0).items())
    assert all(torch.equal(shared[k], v) for k, v in alone.items())
    assert not torch.equal(own["model.layers.5.self_attn.q_proj.weight"],
                           own["model.layers.1.self_attn.q_proj.weight"])
    for name in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"):
        assert shared[f"model.layers.5.{name}"] is shared[f"model.layers.1.{name}"]
    assert weight_layers(c8, 4) == 4 and weight_layers(c8, 0) == weight_layers(c8, 8) == 8


def test_available_memory(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       32000000 kB\nMemAvailable:   1000 kB\n")
    assert available_memory(f) == 1000 * 1024
    assert available_memory(tmp_path / "none") is None
    assert available_memory() is None or available_memory() > 0


def _decode_error(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(["decode", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_decode_refuses_what_the_host_cannot_hold_or_prefill(capsys, monkeypatch):
    monkeypatch.setattr(prefill_mod, "available_memory", lambda: 24 * GIB)
    err = _decode_error(capsys, ["--model-shape", "llama3-8b", "--long-len", "32768",
                                 "--long", "1"])
    assert "--model-shape llama3-8b (32 layers)" in err and "--long-len up to 32768" in err
    assert "GiB of host memory" in err and "of the 24.0 GiB available" in err
    err = _decode_error(capsys, ["--prefill-limit", "1", "--long-len", "32768"])
    assert "s of host time to prefill" in err and "the limit is 1 s" in err
    err = _decode_error(capsys, ["--model-shape", "small", "--prefill-chunk", "0"])
    assert "argument --prefill-chunk" in err
    # a prompt past the model's positions, refused before the model is built
    err = _decode_error(capsys, ["--model-shape", "llama3-8b", "--layers", "1", "--long-len",
                                 "131072", "--long", "1", "--steps", "2"])
    assert "--long-len: a prompt of 131072 tokens and 3 generated exceed the model's 131072" in err
    err = _decode_error(capsys, ["--prefill", "sometimes"])
    assert "argument --prefill: 'sometimes': choose from real, emulated, auto" in err
    parser = build_parser()  # the preset with few layers passes
    args = parser.parse_args(["decode", "--model-shape", "llama3-8b", "--layers", "1",
                              "--short", "1", "--long", "1", "--long-len", "4096"])
    check_decode_args(parser, args)
    assert args.layers == 1 and args.prefill_chunk == PrefillConfig.prefill_chunk


def test_decode_refuses_shapes_the_devices_cannot_hold(capsys, tmp_path):
    for name, fields, words in [
            ("hd96", {"hidden_size": 384, "num_attention_heads": 4, "num_key_value_heads": 1,
                      "head_dim": 96}, "head_dim 96: the PNM devices take 64, 128"),
            ("g16", {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 1,
                     "head_dim": 64}, "16 query heads per KV head: the PNM devices take at "
                                      "most 8")]:
        folder = tmp_path / name
        folder.mkdir()
        cfg = LlamaConfig(vocab_size=64, intermediate_size=64, num_hidden_layers=1, **fields)
        (folder / "config.json").write_text(json.dumps(cfg.to_hf()))
        err = _decode_error(capsys, ["--model", str(folder)])
        assert f"--model {folder}: {words}" in err
    # a config.json without weights is a random model: it can be cut (and is still refused)
    err = _decode_error(capsys, ["--model", str(tmp_path / "hd96"), "--layers", "2"])
    assert "head_dim 96: the PNM devices take 64, 128" in err
    _weights_folder(tmp_path / "w")
    err = _decode_error(capsys, ["--model", str(tmp_path / "w"), "--layers", "2"])
    assert "--model-shape, --layers, --vocab and --positions describe a random model" in err


def _weights_folder(folder):
    from safetensors.torch import save_file

    from nelssa.host.gpu.model import random_weights

    folder.mkdir()
    cfg = LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=64)
    (folder / "config.json").write_text(json.dumps(cfg.to_hf()))
    save_file(random_weights(cfg), str(folder / "model.safetensors"))


def test_options_of_the_32_layer_run_refuse_what_they_cannot_do(capsys, tmp_path):
    err = _decode_error(capsys, ["--device-memory", "file", "--backend", "rtl"])
    assert "--device-memory file: the model devices of a node this run boots" in err
    _weights_folder(tmp_path / "w")
    err = _decode_error(capsys, ["--weight-sets", "4", "--model", str(tmp_path / "w")])
    assert "--weight-sets shares random weights between layers; --model loads them" in err
