"""Access patterns for measuring the memory subsystem: the issue's benchmark patterns plus the
variants the timing estimate is calibrated and checked on. Byte addresses, 64-byte lines."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_addr import DeviceGeometry

Pattern = tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]
"""Addresses and is-write flags (None: all reads)."""


def random_blocks(n: int, block_bytes: int, geo: DeviceGeometry,
                  rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``n`` lines in whole blocks of ``block_bytes`` at random block-aligned addresses."""
    per = block_bytes // geo.line_bytes
    base = rng.integers(0, geo.capacity_bytes // block_bytes, max(1, n // per)) * per
    return (base[:, None] + np.arange(per)[None, :]).ravel() * geo.line_bytes


def benchmark_patterns(n: int, geo: DeviceGeometry, rng: np.random.Generator
                       ) -> dict[str, npt.NDArray[np.int64]]:
    """The issue's patterns (reads). On one sub-channel with the cacheline map, consecutive
    lines go to different bank groups, then columns."""
    line_bytes = geo.line_bytes
    lines = np.arange(n, dtype=np.int64)
    space = geo.capacity_bytes // line_bytes
    groups = geo.timing.bank_groups * geo.subchannels
    return {
        "sequential": lines * line_bytes,
        "one bank group": ((lines % 64) * groups + (lines // 64) * 64 * groups) * line_bytes,
        "random 64 B": rng.integers(0, space, n) * line_bytes,
        "random 4 KB": random_blocks(n, 4096, geo, rng),
        "random 8 KB": random_blocks(n, 8192, geo, rng),
    }


def calibration_patterns(n: int, geo: DeviceGeometry, rng: np.random.Generator
                         ) -> dict[str, Pattern]:
    """Reads and mixes of reads and writes over block sizes from a line to 16 KB."""
    out: dict[str, Pattern] = {k: (v, None) for k, v in benchmark_patterns(n, geo, rng).items()}
    for size in (1024, 2048, 16384):
        out[f"random {size // 1024} KB"] = (random_blocks(n, size, geo, rng), None)
    space = geo.capacity_bytes // geo.line_bytes
    for frac in (0.2, 0.5):
        out[f"random 64 B, {frac:.0%} writes"] = (rng.integers(0, space, n) * geo.line_bytes,
                                                  rng.random(n) < frac)
        blocks = random_blocks(n, 4096, geo, rng)
        per_block = np.repeat(rng.random(len(blocks) // 64) < frac, 64)
        out[f"random 4 KB, {frac:.0%} written blocks"] = (blocks, per_block[:len(blocks)])
    # a few hot rows: row hits with bank conflicts between them
    hot = rng.integers(0, space // 64, 16) * 64
    out["hot rows"] = ((hot[rng.integers(0, 16, n)] + rng.integers(0, 64, n)) * geo.line_bytes,
                       None)
    return out
