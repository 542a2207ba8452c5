"""The cyclic garbage collector, collecting its youngest generation less often while a replay
runs.

A replay makes container objects by the million (a step's plan and lists, a run's step
times) and keeps long ones alive (a job's KV block list, thousands of ints with prefix
caching): at Python's default (a collection of the youngest generation every 700 net
allocations) each collection walks every young list's references, which took 5 % of a
16-instance fleet's CPU time and 2 % of a single run's (issue 42, item 7: the study of
scripts/fleet_scale.py timed with ``gc.callbacks``, at 9adae92). A threshold of
``YOUNG`` allocations walks them a small fraction as often; memory stays bounded (the young
generation at most ``YOUNG`` objects), and what a collection frees is unchanged: results are
the same bit for bit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG", "fewer_collections"]

YOUNG = 50_000
"""Net container allocations between two collections of the youngest generation."""


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Within the block, the youngest generation collected every ``YOUNG`` allocations at most
    (a higher threshold already set is kept); the thresholds as they were afterwards."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
