"""Strategies for the values fuzzers feed: integers biased to the edges of their field, and
addresses biased to the edges of a region and of device memory."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from hypothesis import strategies as st

LINE = 64


def edges(bits: int) -> list[int]:
    """0, 1, 2, the largest value, one below it and the two values around the sign bit."""
    top = (1 << bits) - 1
    return sorted({0, 1, 2, top, top - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1})


def uint(bits: int, extra: Iterable[int] = ()) -> st.SearchStrategy[int]:
    """Any ``bits``-bit unsigned integer, often an edge value or one of ``extra``."""
    return _uint(bits, tuple(extra))


# strategies are built once per set of arguments: hypothesis validates each new one, which
# would cost more than the drawing
@cache
def _uint(bits: int, extra: tuple[int, ...]) -> st.SearchStrategy[int]:
    top = (1 << bits) - 1
    special = sorted({v for v in (*edges(bits), *extra) if 0 <= v <= top})
    return st.one_of(st.sampled_from(special), st.integers(0, top))


def address(near: Iterable[int], bits: int = 64) -> st.SearchStrategy[int]:
    """A ``bits``-bit address: one of ``near`` or an offset from one of them (misaligned by a
    little, a line or two before or after), or any aligned or unaligned address."""
    top = (1 << bits) - 1
    return _address(tuple(sorted({a & top for a in near})), bits)


@cache
def _address(anchors: tuple[int, ...], bits: int) -> st.SearchStrategy[int]:
    top = (1 << bits) - 1
    offsets = st.sampled_from([0, 1, 2, 4, 8, 16, 32, 48, 63, -1, -8, -16, -32, -LINE,
                               LINE, 2 * LINE, -2 * LINE])
    nearby = st.builds(lambda a, o: (a + o) & top, st.sampled_from(anchors), offsets)
    return st.one_of(nearby, st.integers(0, top).map(lambda a: a & ~(LINE - 1)),
                     st.integers(0, top))
