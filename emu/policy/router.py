"""Split-batch routing (paper 4.1): a request whose prompt reaches T_input tokens goes to the
PNM tier, the others stay on the GPU. T_input is the latency model's crossover for the
configured GPU, PNM tier, link and model (``LatencyModel.t_input``), unless it is given."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nelssa.emu.latency.model import LatencyModel
from nelssa.emu.policy.states import Tier


class Source(enum.IntEnum):
    """Where T_input came from."""

    GIVEN = 1
    CROSSOVER = 2
    NO_CROSSOVER = 3
    """The PNM tier is never faster for this hardware and model: every request on the GPU."""
    NO_PNM = 4
    """No PNM tier (a GPU-only run)."""
    ADAPTIVE = 5
    """Moved by the tiers' load from where it started (``emu/policy/adaptive.py``)."""


@dataclass(frozen=True)
class Router:
    t_input: int | None
    """Prompts of this many tokens or more go to the PNM tier; None: none does."""
    source: Source = Source.GIVEN

    def __post_init__(self) -> None:
        if self.t_input is not None and (isinstance(self.t_input, bool)
                                         or not isinstance(self.t_input, int)
                                         or self.t_input < 1):
            raise ValueError(f"t_input must be an integer >= 1 token, got {self.t_input!r}")

    @classmethod
    def from_latency(cls, latency: LatencyModel, devices: int, t_input: int | None = None,
                     pnm: bool = True) -> Router:
        """The router of a run: ``t_input`` if given, else the crossover for ``devices``."""
        if not pnm:
            return cls(None, Source.NO_PNM)
        if t_input is not None:
            return cls(t_input, Source.GIVEN)
        x = latency.t_input(devices)
        return cls(x, Source.CROSSOVER if x is not None else Source.NO_CROSSOVER)

    def tier(self, prompt_tokens: int) -> Tier:
        """The tier a prompt of ``prompt_tokens`` is placed on."""
        return Tier.PNM if self.past(prompt_tokens) else Tier.GPU

    def past(self, context: int) -> bool:
        """A context this long belongs on the PNM tier (a GPU request this long may migrate)."""
        return self.t_input is not None and context >= self.t_input

    def describe(self) -> str:
        if self.source is Source.NO_PNM:
            return "no PNM tier"
        if self.source is Source.NO_CROSSOVER:
            return "none (the PNM tier is never faster for this hardware and model)"
        how = {Source.GIVEN: "given", Source.CROSSOVER: "the latency model's crossover",
               Source.ADAPTIVE: "adaptive"}[self.source]
        return f"{self.t_input:,} tokens ({how})"
