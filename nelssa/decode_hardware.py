"""What `nelssa decode` takes from the hardware description: the decoder's shape (--model: a
weights folder, a config.json, or a model entry cut by --layers/--vocab/--positions), the GPU
that times it, the PNM entry whose device the booted node runs, and the link."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path

from nelssa.emu.link.model import GPU_PNM_LINKS
from nelssa.hardware_options import chosen, load_catalog
from nelssa.host.gpu.config import PRESETS, LlamaConfig, preset_name
from nelssa.options import UsageError

log = logging.getLogger(__name__)


def weights_folder(args: argparse.Namespace) -> str | None:
    """--model when it is a folder of safetensors weights (a Hugging Face model), else None:
    random weights."""
    p = Path(args.model) if args.model else None
    return args.model if p is not None and p.is_dir() and any(p.glob("*.safetensors")) else None


def model_name(args: argparse.Namespace) -> str:
    """What --model (or the deprecated --model-shape) names, else the files' use.model, else
    the small model."""
    if args.model_shape is not None:
        log.warning("--model-shape is deprecated: --model %s names the same shape",
                    args.model_shape)
    cat = load_catalog(args.hardware) if args.hardware else None
    name = args.model or args.model_shape or (cat.use.get("models") if cat else None)
    return name or "small"


def model_config(args: argparse.Namespace) -> LlamaConfig:
    """The decoder's shape: the ``--model`` folder's or file's config.json, else the model
    entry --model names (the decoder's own presets, else a shape of the hardware description)
    with ``--layers``, ``--vocab`` and ``--positions``; ValueError naming what is wrong."""
    folder = weights_folder(args)
    if folder is not None:
        return LlamaConfig.from_hf(folder)
    name = model_name(args)
    if Path(name).exists():
        c = LlamaConfig.from_hf(name)
    elif preset_name(name) in PRESETS:
        return PRESETS[preset_name(name)](layers=args.layers, vocab=args.vocab,
                                          positions=args.positions)
    else:
        entry = chosen(load_catalog(args.hardware), "models", name)
        if entry.hf is None:
            raise ValueError(f"model {name!r} has no shape (a config.json) for the decoder")
        c = LlamaConfig.from_shape(entry.hf)
    cut = {k: v for k, v in (("num_hidden_layers", args.layers), ("vocab_size", args.vocab),
                             ("max_position_embeddings", args.positions)) if v}
    return replace(c, **cut)


def gpu_pnm_link(args: argparse.Namespace):
    """The GPU (its name, registered for the decoder's timing) and the PNM entry of
    --gpu/--pnm or the files' use section."""
    from nelssa.host.gpu.timing import register

    cat = load_catalog(args.hardware)
    register(cat)
    gpu = chosen(cat, "gpus", args.gpu)
    pnm = chosen(cat, "pnm", args.pnm)
    link = chosen(cat, "links", args.link).name
    if link not in GPU_PNM_LINKS:
        raise UsageError(f"--link {link}: the emulated link takes one of the link layer's "
                         f"presets ({', '.join(sorted(GPU_PNM_LINKS))})")
    return cat, gpu.name, pnm, link


def node_device_args(pnm) -> list[str]:
    """The booted node's devices as the PNM entry describes them (`node up` options)."""
    from nelssa.emu.latency.description import pnm_device

    return [] if pnm.device is None else pnm_device(pnm.device).node_args()
