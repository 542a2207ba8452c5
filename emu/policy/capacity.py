"""The GPU's KV in blocks, as vLLM v1's KV cache manager counts it (the scheduler that holds
them is ``v1_scheduler.py``). A PNM-tier request keeps on the GPU its sink and recent tokens
and one centroid (keys only) per cluster: ``resident_tokens``."""

from __future__ import annotations

import math


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks that hold ``tokens``."""
    return (tokens + block_tokens - 1) // block_tokens


def resident_tokens(context: int, kept: int, compression: float) -> int:
    """GPU-resident KV of a PNM-tier request of ``context`` tokens in token-equivalents: the
    ``kept`` sink and recent tokens and a centroid per ``compression`` tokens (keys only,
    half a token's K and V)."""
    return min(context, kept) + math.ceil(context * (1.0 / compression) / 2)
