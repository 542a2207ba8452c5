"""The states the policies reason about. String-valued enums, so a report or a JSON result can
print them; code compares them by identity."""

from __future__ import annotations

import enum


class Tier(enum.StrEnum):
    """Where a request's attention runs."""

    GPU = "gpu"
    """Dense attention over KV in GPU memory."""
    PNM = "pnm"
    """Sparse attention on the PNM tier; the GPU keeps a window and the centroids."""


class SeqState(enum.StrEnum):
    """A request's place in the GPU's schedule."""

    WAITING = "waiting"
    """Not admitted yet, or waiting to be admitted again (its GPU KV freed)."""
    RUNNING = "running"
    """Holds GPU KV blocks and makes a token every step."""
    DONE = "done"
    FAILED = "failed"
    """The node lost what it needed and no recovery was possible."""


class Transfer(enum.IntEnum):
    """A background KV transfer from the GPU to the PNM tier."""

    MIGRATION = 1
    """GPU memory ran short: a request grown past T_input moves (paper 4.3)."""
    RECOVERY = 2
    """KV the node lost with a device, recomputed on the GPU, goes back."""


class Fallback(enum.IntEnum):
    """Why a request the router sent to the PNM tier is (or stays) on the GPU."""

    NONE = 0
    NO_NODE = 1
    """No PNM node was given."""
    OFFLOAD_FAILED = 2
    """Writing its prompt's KV to the node failed."""
    MIGRATION_FAILED = 3
    """A migration's writes failed: it is not tried again."""
    RECOVERY_FAILED = 4
    """Putting recomputed KV back failed: it is not tried again."""
