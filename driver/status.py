"""Status codes an attention engine reports when a command ends.

One source of truth: the SV package ``rtl/core/nelssa_engine_pkg.sv`` is generated from these
definitions (``python -m nelssa.gen``), and a test fails when the two drift.
"""

from __future__ import annotations

from enum import IntEnum


class AttnStatus(IntEnum):
    """Completion status of one attention command (4 bits in hardware)."""

    OK = 0
    """Result valid."""
    ERR_BAD_HEAD_DIM = 1
    """head_dim is not 64 or 128, or exceeds the engine's HeadDim; nothing consumed."""
    ERR_BAD_QHEADS = 2
    """Query heads per KV head is 0 or exceeds the engine's NumQHeads; nothing consumed."""
    ERR_NO_CLUSTERS = 3
    """The command selects zero clusters; nothing consumed."""
    ERR_BAD_CLUSTER_LEN = 4
    """A cluster declares 0 tokens or more than the engine's MaxClusterTokens; stream drained."""
    ERR_SHORT_STREAM = 5
    """The stream's last beat came before the declared token count was reached."""
    ERR_LONG_STREAM = 6
    """The declared token count was reached but the stream went on; drained to its last beat."""


ENGINE_BEAT_BYTES = 64
"""Bytes per stream beat (one DDR5 burst / CXL.mem line)."""
ENGINE_LANES = ENGINE_BEAT_BYTES // 2
"""bf16 elements per beat."""
SUPPORTED_HEAD_DIMS = (64, 128)
"""head_dim values an engine accepts at run time (up to its HeadDim parameter)."""
