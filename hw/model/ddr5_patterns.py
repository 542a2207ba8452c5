"""Access patterns for measuring the memory subsystem: the issue's benchmark patterns plus the
variants the timing estimate is calibrated and checked on. Byte addresses, 64-byte lines."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from nelssa.hw.model.ddr5_addr import Decoded, DeviceGeometry, encode

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


# -- generated patterns of every kind, for checking the estimate against the cycle model -------
PATTERN_KINDS = ("random blocks", "one bank", "one bank group", "stride", "K and V",
                 "hot rows", "mixed reads and writes")
"""The kinds :func:`generated_pattern` draws (issue 23, item 4)."""


def _coords(geo: DeviceGeometry, amap: str, sc, bg, bank, row, col) -> npt.NDArray[np.int64]:
    d = Decoded(*(np.asarray(x, dtype=np.int64) for x in (sc, bg, bank, row, col)))
    return encode(d, geo, amap)


def generated_pattern(kind: str, n: int, geo: DeviceGeometry, rng: np.random.Generator,
                      amap: str = "cacheline") -> tuple[Pattern, str]:
    """About ``n`` requests of one kind with parameters drawn from ``rng``; returns the pattern
    and the parameters in words."""
    t = geo.timing
    space = geo.capacity_bytes // geo.line_bytes
    cols = t.columns_per_row
    lines = np.arange(n, dtype=np.int64)
    if kind == "random blocks":  # one line to several rows
        per = int(rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 24, 48, 96, 320]))
        base = rng.integers(0, space // per, max(1, n // per)) * per
        a = (base[:, None] + np.arange(per)[None, :]).ravel()
        return (a * geo.line_bytes, None), f"{per}-line blocks"
    if kind in ("one bank", "one bank group"):  # row visits of h hits in one bank (group)
        hits = int(rng.choice([1, 2, 4, 8, 16, 32, 64]))
        nrows = int(rng.integers(1, 9))  # distinct rows cycled through, or random rows if 8
        visit = lines // hits
        row = rng.integers(0, t.rows, n) if nrows == 8 else visit % nrows
        sc = np.full(n, rng.integers(0, geo.subchannels))
        bg = np.full(n, rng.integers(0, t.bank_groups))
        bank = (np.full(n, rng.integers(0, t.banks_per_group)) if kind == "one bank"
                else rng.integers(0, t.banks_per_group, n))
        writes = None
        wfrac = float(rng.choice([0.0, 0.0, 0.5, 1.0]))
        if wfrac:
            writes = rng.random(n) < wfrac
        a = _coords(geo, amap, sc, bg, bank, row, (lines % hits + visit * hits) % cols)
        return (a, writes), (f"{hits} hits a row, {nrows if nrows < 8 else 'random'} rows, "
                             f"{wfrac:.0%} writes")
    if kind == "stride":  # a literal stride: powers of two send everything to few banks
        stride = int(rng.choice([1, 3, 5])) << int(rng.integers(0, 17))
        start = int(rng.integers(0, space))
        a = (start + lines * stride) % space
        return (a * geo.line_bytes, None), f"stride {stride} lines"
    if kind == "K and V":  # K and V of each selected cluster, interleaved
        per = int(rng.choice([4, 8, 16, 32, 64, 128]))
        grain = int(rng.choice([1, 4, per]))
        clusters = max(1, n // (2 * per))
        region = space // 2
        # V's region starts one region away (same bank, other rows under the cacheline map) or at
        # a random line
        v_off = region if rng.random() < 0.5 else int(rng.integers(0, region // per)) * per
        idx = rng.integers(0, region // per - 1, clusters) * per
        k = (idx[:, None] + np.arange(per)[None, :]).reshape(clusters, per // grain, grain)
        v = (k + v_off) % space
        a = np.stack([k, v], axis=2).ravel()
        return (a * geo.line_bytes, None), (f"{per}-line clusters, interleaved by {grain}, "
                                            f"V at +{v_off}")
    if kind == "hot rows":
        rows = int(rng.choice([1, 2, 4, 8, 16, 32, 64, 256]))
        hot = rng.integers(0, space // cols, rows) * cols
        a = hot[rng.integers(0, rows, n)] + rng.integers(0, cols, n)
        return (a * geo.line_bytes, None), f"{rows} hot rows"
    if kind == "mixed reads and writes":
        per = int(rng.choice([1, 1, 4, 16, 64, 128]))
        frac = float(rng.uniform(0.05, 0.95))
        base = rng.integers(0, space // per, max(1, n // per)) * per
        a = (base[:, None] + np.arange(per)[None, :]).ravel()
        by_block = rng.random() < 0.5
        writes = (np.repeat(rng.random(len(base)) < frac, per) if by_block
                  else rng.random(len(a)) < frac)
        return (a * geo.line_bytes, writes), (f"{per}-line blocks, {frac:.0%} "
                                              f"{'written blocks' if by_block else 'writes'}")
    raise ValueError(f"unknown pattern kind {kind!r}; known: {', '.join(PATTERN_KINDS)}")


RAMULATOR = {"sequential": 91.1, "random 64 B": {"ddr5-6400an": 45.7, "ddr5-6400": 89.8},
             "random 4 KB": 89.0, "random 8 KB": 89.8}
"""Bandwidth (% of peak) of benchmark_patterns' patterns measured with Ramulator 2.1,
DDR5_6400AN, one sub-channel, FR-FCFS, open page, refresh on, MOP4CLXOR map, 1M reads (from
issue 23); random lines also with nRRD_S=8, nFAW=32 (``ddr5-6400``). Not rerun here: Ramulator 2
cannot be built on this machine."""
RAMULATOR_READ_HITS = {"random 4 KB": 67.5}
"""Ramulator 2's read row-hit rate (%) on the same run (DDR5_6400AN), as issue 43 quotes it."""
