"""The co-simulation's router (paper 4.1): T_input from the latency model's crossover for the
hardware and the model it emulates (its GPU preset, a PNM tier, the link to the node, the
device count, the decoder's own shape and the selection and cluster size it runs with),
unless it is given. The serving emulator takes its router from the same function of the
latency model (``emu/policy/router.Router.from_latency``)."""

from __future__ import annotations

from nelssa.emu.latency.hardware import DEFAULT_PNM, HardwareCatalog, ModelHw
from nelssa.emu.latency.model import LatencyModel, Sparsity
from nelssa.emu.policy.router import Router
from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.request import DecodeConfig

PNM_PRESET = DEFAULT_PNM
"""The PNM tier's description the crossover assumes (the emulated devices': ``hardware.json``)."""


def model_hw(c: LlamaConfig, name: str = "co-simulated") -> ModelHw:
    """What the latency model needs of the decoder."""
    return ModelHw(name, layers=c.num_hidden_layers, kv_heads=c.num_key_value_heads,
                   q_heads=c.num_attention_heads, head_dim=c.head_dim, params_b=c.params / 1e9,
                   max_context=c.max_position_embeddings,
                   embedding_b=c.vocab_size * c.hidden_size / 1e9)


def latency_model(c: LlamaConfig, cfg: DecodeConfig, link: str, pnm: str = PNM_PRESET,
                  catalog: HardwareCatalog | None = None) -> LatencyModel:
    cat = catalog or HardwareCatalog.load()
    return LatencyModel(cat.get("gpus", cfg.gpu), cat.get("pnm", pnm), model_hw(c),
                        Sparsity(selection=cfg.selection,
                                 compression=cfg.cluster.tokens_per_cluster),
                        cat.get("links", link))


def crossover_router(c: LlamaConfig, cfg: DecodeConfig, link: str, devices: int,
                     t_input: int | None = None, pnm: str = PNM_PRESET,
                     catalog: HardwareCatalog | None = None) -> Router:
    """``t_input`` if given, else the crossover for ``devices`` devices (of the PNM entry
    ``pnm`` of ``catalog``, the presets when None)."""
    return Router.from_latency(latency_model(c, cfg, link, pnm, catalog), devices, t_input)
