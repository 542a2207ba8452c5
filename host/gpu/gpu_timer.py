"""Where the GPU side's tensors live and how its kernel times are taken (issue 45).

``TorchDevice`` is ``nelssa decode --torch-device``: the GPU side's weights, KV cache and
attention on the CPU or on a CUDA GPU (``auto``: CUDA when torch sees one). The timers are a
registry by name (``TIMERS``): ``roofline`` measures nothing (the roofline model of
``timing.py`` prices every operation, as before), ``cuda-events`` records a CUDA event before
and after the work the roofline prices (QKV, attention, top-K search, O-proj + MLP, the output
head) and takes the GPU's elapsed time between them. The device picks its timer
(``DEVICE_TIMERS``) unless one is named; a test registers a stand-in that returns known
times. torch is imported where a device is resolved or a timer made, not with this module
(the command line's parser reads ``TorchConfig``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class TorchDevice(Enum):
    """Where the GPU side's tensors live."""

    AUTO = "auto"
    """CUDA when torch sees a GPU, else the CPU."""
    CPU = "cpu"
    CUDA = "cuda"


class WeightsDtype(Enum):
    """What the decode's weight matrices are held in on its device."""

    AUTO = "auto"
    """bfloat16 on CUDA (what a serving GPU reads, and the roofline prices), float32 on the
    CPU (the figures and tokens every CPU run has given)."""
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


@dataclass(frozen=True)
class TorchConfig:
    """Where the decode's GPU side runs and how its time is taken (``DecodeConfig.torch``)."""

    torch_device: TorchDevice = TorchDevice.AUTO
    """Where the GPU side's weights, KV cache and attention run: cpu, cuda, or auto (cuda
    when torch sees a GPU). On CUDA each step's GPU time is measured with CUDA events around
    the work the roofline model prices (QKV, attention, top-K search, O-proj + MLP, output
    head), the roofline's figure kept beside it; on the CPU the roofline model prices it.
    The descriptors to the PNM node are the same either way."""
    gpu_timer: str | None = None
    """The kernel timer by name (``TIMERS``); None: the device's (roofline on the CPU,
    cuda-events on CUDA)."""
    torch_weights: WeightsDtype = WeightsDtype.AUTO
    """The decode's weight matrices on the device: float32, bfloat16, or auto (bfloat16 on
    CUDA, as the roofline prices them; float32 on the CPU). Activations, KV and attention stay
    float32; the prefill node's weights stay float32 on the host."""

    def __post_init__(self) -> None:
        if not isinstance(self.torch_weights, WeightsDtype):
            raise ValueError(f"torch_weights must be one of {[d.value for d in WeightsDtype]}, "
                             f"got {self.torch_weights!r}")
        if not isinstance(self.torch_device, TorchDevice):
            raise ValueError(f"torch_device must be one of {[d.value for d in TorchDevice]}, "
                             f"got {self.torch_device!r}")
        if self.gpu_timer is not None and self.gpu_timer not in TIMERS:
            raise ValueError(f"unknown GPU timer {self.gpu_timer!r}; choose one of "
                             f"{sorted(TIMERS)}")


class GpuTime(Enum):
    """Where a step's GPU time comes from."""

    MODELLED = "modelled"
    """The roofline model of the GPU description (timing.py)."""
    MEASURED = "measured"
    """What the GPU took for the priced kernel families (the rest, launches and recomputes,
    stays modelled)."""


class Family(Enum):
    """The kernel families the roofline prices and a timer can measure."""

    QKV = "qkv"
    ATTENTION = "attention"
    TOPK = "top-k"
    MLP = "o-proj+mlp"
    HEAD = "output-head"


class NoCudaError(ValueError):
    """CUDA asked for where torch sees none."""


def resolve_device(choice: TorchDevice) -> torch.device:
    """The torch device of ``choice``; NoCudaError for ``cuda`` without a GPU."""
    import torch

    if choice is TorchDevice.CUDA and not torch.cuda.is_available():
        raise NoCudaError("no CUDA device here (torch.cuda.is_available() is False; torch "
                          f"{torch.__version__})")
    if choice is TorchDevice.CPU or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def weights_dtype(choice: WeightsDtype, device: torch.device) -> torch.dtype:
    """The torch dtype of ``choice`` on ``device``."""
    import torch

    if choice is WeightsDtype.BFLOAT16 or (choice is WeightsDtype.AUTO
                                            and device.type == "cuda"):
        return torch.bfloat16
    return torch.float32


def device_name(device: torch.device) -> str:
    """The GPU's name as torch gives it (``torch.cuda.get_device_name``), or "cpu"."""
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


@dataclass
class Span:
    """One timed piece of work: ``ps`` is what it took, None where nothing was measured."""

    family: Family
    ps: int | None = None


class KernelTimer:
    """Times the work inside ``span``; this base measures nothing (the roofline's)."""

    name: ClassVar[str] = "roofline"
    measures: ClassVar[bool] = False

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @contextmanager
    def span(self, family: Family) -> Iterator[Span]:
        yield Span(family)


class CudaEventTimer(KernelTimer):
    """CUDA events around the work, on the current stream; the end event is waited for, so
    each span is one synchronisation (the time is the GPU's between the two events, the
    host's launch gaps inside the span among it)."""

    name = "cuda-events"
    measures = True

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise NoCudaError(f"the {self.name} timer needs a CUDA device, got {device}")
        super().__init__(device)

    @contextmanager
    def span(self, family: Family) -> Iterator[Span]:
        import torch

        s = Span(family)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        yield s
        end.record()
        end.synchronize()
        s.ps = round(start.elapsed_time(end) * 1e9)  # milliseconds


TIMERS: dict[str, type[KernelTimer]] = {KernelTimer.name: KernelTimer,
                                        CudaEventTimer.name: CudaEventTimer}
"""The timers by name."""
DEVICE_TIMERS: dict[str, str] = {"cpu": KernelTimer.name, "cuda": CudaEventTimer.name}
"""The timer a device type takes unless one is named: the CPU's times say nothing of a GPU."""


def register_timer(cls: type[KernelTimer]) -> type[KernelTimer]:
    """Make a timer known by its ``name`` (a decorator)."""
    TIMERS[cls.name] = cls
    return cls


def make_timer(device: torch.device, name: str | None = None) -> KernelTimer:
    """The timer ``name`` (None: the device's) for work on ``device``."""
    name = name or DEVICE_TIMERS[device.type]
    try:
        cls = TIMERS[name]
    except KeyError:
        raise ValueError(f"unknown GPU timer {name!r}; choose one of {sorted(TIMERS)}") from None
    return cls(device)
