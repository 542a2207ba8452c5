"""The stand-in for the CUDA events (a timer that returns known times) and a small decode
engine, for the tests of the GPU side (test_gpu_timer.py, test_gpu_check.py)."""

from __future__ import annotations

from contextlib import contextmanager

from nelssa.host.gpu.config import LlamaConfig
from nelssa.host.gpu.engine import DecodeEngine
from nelssa.host.gpu.gpu_timer import (
    Family,
    KernelTimer,
    Span,
    TorchConfig,
    TorchDevice,
    WeightsDtype,
)
from nelssa.host.gpu.model import Llama
from nelssa.host.gpu.request import DecodeConfig

KNOWN_PS = {Family.QKV: 1_000_000, Family.ATTENTION: 2_000_000, Family.TOPK: 3_000_000,
            Family.MLP: 4_000_000, Family.HEAD: 5_000_000}
"""What the stand-in timer says each family took (1..5 us)."""


class KnownTimer(KernelTimer):
    """A stand-in for the CUDA events: each span takes its family's ``KNOWN_PS``."""

    name = "known-test"
    measures = True

    @contextmanager
    def span(self, family: Family):
        s = Span(family)
        yield s
        s.ps = KNOWN_PS[family]


def engine(timer: str | None, device: TorchDevice = TorchDevice.CPU,
           weights: WeightsDtype = WeightsDtype.AUTO) -> DecodeEngine:
    """Two short requests (40 and 70 tokens, 3 new each) of a 2-layer small model, prefilled,
    decoded on ``device`` with ``timer`` (None: the device's) and ``weights``."""
    c = LlamaConfig.small(layers=2, vocab=256)
    cfg = DecodeConfig(torch=TorchConfig(device, timer, weights))
    dec = DecodeEngine(Llama.load(None, config=c), cfg, None)
    for n in (40, 70):
        dec.add(list(range(1, n + 1)), 3)
    dec.prefill()
    return dec
