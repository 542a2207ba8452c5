"""The two halves side by side (issue 24 item 7): for one batch, the co-simulation's emulated
step time (``nelssa decode``'s machinery: the PyTorch GPU side, real descriptors to model
devices over ZeroMQ) and the serving emulator's step cost (``emu/serving/cost.CostModel``) for
the same batch, hardware and model, component by component.

Components both have (microseconds per step):

- ``gpu``: the GPU's own work (launches, QKV, O-projection and MLP, the GPU-tier requests'
  attention, the PNM-tier requests' windows): the co-simulation's ``others_ps``, the cost
  model's kernel + linear + GPU attention;
- ``topk``: the centroid search of the PNM-tier requests;
- ``wait``: the GPU waiting for the node beyond its own work;
- ``step``: their sum.

The node's own figures (``pnm_attn``: the devices' compute; ``comm``: link, host software,
queueing, CXL) are shown beside them; in the co-simulation they are summed over the node
requests of the step (one per long request and layer), so they are a latency sum, not a share
of the step.

The co-simulation runs here, in this process, with a node booted as a child process; it lies
above both halves, so it lives at the top of the layering with the command line.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

from nelssa.emu.latency.hardware import DEFAULT_GPU
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.link.model import GPU_PNM_LINKS

log = logging.getLogger(__name__)

COMPONENTS = ("gpu", "topk", "wait", "step")
"""The components both halves have, in the table's order."""
MAX_LEN = 1 << 20
"""Longest context a point takes (the model shapes' positions bound it further)."""


@dataclass(frozen=True)
class Point:
    """One batch on one hardware configuration."""

    long: int
    long_len: int
    short: int
    short_len: int
    devices: int
    link: str
    shape: str = "llama-3-8b"
    layers: int = 2
    gpu: str = DEFAULT_GPU
    selection: float = Sparsity().selection
    steps: int = 2
    """Decode steps run; the last one is compared (the first may carry admissions)."""

    def __post_init__(self) -> None:
        check_point(self)

    @property
    def label(self) -> str:
        return (f"{self.long}x{_k(self.long_len)} + {self.short}x{_k(self.short_len)}, "
                f"{self.devices} dev, {self.link}")


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def check_point(p: Point) -> None:
    """ValueError naming the first field out of range."""
    from nelssa.host.gpu.config import PRESETS, preset_name

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(what)

    need(isinstance(p.long, int) and 0 <= p.long <= 64, f"long must be 0..64, got {p.long}")
    need(isinstance(p.short, int) and 0 <= p.short <= 256,
         f"short must be 0..256, got {p.short}")
    need(p.long + p.short > 0, "long and short are both 0: nothing to decode")
    for name in ("long_len", "short_len"):
        v = getattr(p, name)
        need(isinstance(v, int) and 1 <= v <= MAX_LEN, f"{name} must be 1..{MAX_LEN}, got {v}")
    need(isinstance(p.devices, int) and 1 <= p.devices <= 32,
         f"devices must be 1..32, got {p.devices}")
    need(p.link in GPU_PNM_LINKS, f"link must be one of {sorted(GPU_PNM_LINKS)}, got "
                                  f"{p.link!r}")
    need(preset_name(p.shape) in PRESETS, f"shape must be one of {sorted(PRESETS)}, got "
                                          f"{p.shape!r}")
    need(isinstance(p.layers, int) and 1 <= p.layers <= 256,
         f"layers must be 1..256, got {p.layers}")
    need(isinstance(p.steps, int) and 1 <= p.steps <= 64, f"steps must be 1..64, got {p.steps}")
    need(0 < p.selection <= 1, f"selection must be in (0, 1], got {p.selection}")
    if p.long and p.short:
        need(p.short_len < p.long_len, f"short_len ({p.short_len}) must be below long_len "
                                       f"({p.long_len}): T_input sits between them")


@dataclass
class Side:
    """One half's figures for a step, microseconds."""

    gpu: float
    topk: float
    wait: float
    pnm_attn: float
    comm: float
    detail: dict[str, float] = field(default_factory=dict)

    @property
    def step(self) -> float:
        return self.gpu + self.topk + self.wait


@dataclass
class Comparison:
    point: Point
    cosim: Side
    serving: Side
    wall_s: float = 0.0

    def diff(self, component: str) -> float | None:
        """Relative difference, serving against co-simulation (None where both are ~0)."""
        a, b = getattr(self.cosim, component), getattr(self.serving, component)
        base = max(abs(a), 1e-9)
        if abs(a) < 1e-3 and abs(b) < 1e-3:
            return None
        return (b - a) / base

    def as_dict(self) -> dict[str, object]:
        return {"point": asdict(self.point), "cosim": asdict(self.cosim),
                "serving": asdict(self.serving), "wall_s": self.wall_s,
                "diff": {c: self.diff(c) for c in COMPONENTS}}


def _config(p: Point):  # type: ignore[no-untyped-def]
    from nelssa.host.gpu.clustering import ClusterConfig
    from nelssa.host.gpu.config import PRESETS, preset_name
    from nelssa.host.gpu.request import DecodeConfig

    c = PRESETS[preset_name(p.shape)](layers=p.layers)
    if max(p.long_len, p.short_len) + p.steps + 1 > c.max_position_embeddings:
        raise ValueError(f"a prompt of {max(p.long_len, p.short_len)} tokens and "
                         f"{p.steps + 1} generated exceed {p.shape}'s "
                         f"{c.max_position_embeddings} positions")
    t_input = p.long_len if p.long else p.short_len + 1
    cfg = DecodeConfig(t_input=t_input, selection=p.selection, gpu=p.gpu,
                       check_accuracy=False, cluster=ClusterConfig())
    return c, cfg


def serving_side(p: Point) -> Side:
    """The serving emulator's cost of the point's last step (every context as it is then)."""
    from nelssa.emu.link.model import PRESETS as LINK_PRESETS
    from nelssa.emu.serving.cost import CostModel
    from nelssa.host.gpu.routing import latency_model

    c, cfg = _config(p)
    lm = latency_model(c, cfg, p.link)
    spec = LINK_PRESETS[p.link]
    grown = p.steps  # tokens generated before the last step decodes (the first from prefill)
    s = lm.sparsity  # the window as it is then: sink, recent and the tokens not yet clustered
    window = s.sink_tokens + s.recent_tokens + min(grown, s.chunk_tokens)
    cost = CostModel(lm, p.devices, window, pcie_gbs=63.0, link_gbs=spec.bandwidth_gbps / 8)
    parts = cost.step_parts(p.short * (p.short_len + grown), [p.long_len + grown] * p.long,
                            decodes=p.short)
    us = 1e6
    return Side(gpu=(parts.kernel_s + parts.linear_s + parts.gpu_attn_s) * us,
                topk=parts.topk_s * us, wait=parts.wait_s * us,
                pnm_attn=parts.pnm_attn_s * us, comm=parts.comm_s * us,
                detail={**{k: v * us for k, v in parts.as_dict().items()},
                        "transfer": lm.t_link * c.num_hidden_layers * us if p.long else 0.0,
                        "kv_bytes": p.selection * p.long * (p.long_len + grown)
                        * lm.model.kv_bytes_per_token})


def cosim_side(p: Point, timeout_s: float = 600.0) -> Side:
    """The co-simulation's last step: a node of ``p.devices`` model devices booted here, the
    requests prefilled by the emulated prefill node, ``p.steps`` steps decoded."""
    import numpy as np

    from nelssa.cosim import CosimSession, NodeSpec
    from nelssa.emu.policy.states import Tier
    from nelssa.host.gpu.config import PrefillConfig, PrefillMode
    from nelssa.host.gpu.model import Llama
    from nelssa.host.gpu.routing import crossover_router

    c, cfg = _config(p)
    model = Llama.load(None, seed=0, config=c,
                       prefill=PrefillConfig(prefill=PrefillMode.EMULATED))
    router = crossover_router(c, cfg, p.link, p.devices, cfg.t_input)
    rng = np.random.default_rng(0)
    prompts = ([rng.integers(0, c.vocab_size, p.short_len).tolist() for _ in range(p.short)]
               + [rng.integers(0, c.vocab_size, p.long_len).tolist() for _ in range(p.long)])
    node = NodeSpec(p.devices, "model", p.link)
    with CosimSession(model, cfg, node, router=router, timeout_s=timeout_s) as session:
        dec = session.engine
        rep = None
        for rep in session.run(prompts, p.steps + 1, p.steps):  # noqa: B007 - the last one
            if dec.steps == 1:
                tiers = [r.tier for r in dec.requests]
                if tiers.count(Tier.PNM) != p.long:
                    raise RuntimeError(
                        f"{tiers.count(Tier.PNM)} of {p.long} long requests reached the PNM "
                        f"tier: {[r.note for r in dec.requests if r.note]}")
        assert rep is not None
        windows = [dec.kv(r.rid).kv[0][0].shape[0] for r in dec.requests if r.tier is Tier.PNM]
    us = 1e-6
    return Side(gpu=rep.others_ps * us, topk=rep.topk_ps * us, wait=rep.wait_ps * us,
                pnm_attn=rep.pnm_attn_ps * us,
                comm=(rep.transfer_ps + rep.pnm_overhead_ps) * us,
                detail={"transfer": rep.transfer_ps * us, "pnm_overhead": rep.pnm_overhead_ps * us,
                        "node_requests": rep.node_requests, "kv_bytes": rep.kv_bytes,
                        "window_tokens": max(windows, default=0),
                        "device_cycles": max(rep.device_cycles.values(), default=0)})


def compare(p: Point) -> Comparison:
    """Both halves at one point."""
    import time

    t0 = time.perf_counter()
    cosim = cosim_side(p)
    wall = time.perf_counter() - t0
    log.info("%s: co-simulation %.1f s wall", p.label, wall)
    return Comparison(p, cosim, serving_side(p), wall)


STEP_BOUND = 0.05
"""Largest relative difference of the step, and of its GPU and top-K components."""
WAIT_BOUND_US = 4.0
"""Largest difference of the GPU's wait for the node, per layer (microseconds): what the
node's accounting has that the latency model's T_comm and BW_PNM^eff leave out, most at 8
devices (32 descriptors a layer at 0.1 us of host time each, and the devices' per-descriptor
cycles): 3.2 us measured there, rounded up (docs/results/cosim_agreement.md says what)."""


def verdict(r: Comparison) -> str:
    """``agree``, or which bound is passed."""
    off = [c for c in ("step", "gpu", "topk")
           if r.diff(c) is not None and abs(r.diff(c)) > STEP_BOUND]  # type: ignore[arg-type]
    if abs(r.serving.wait - r.cosim.wait) > WAIT_BOUND_US * r.point.layers:
        off.append("wait")
    return "agree" if not off else "differs: " + ", ".join(off)
