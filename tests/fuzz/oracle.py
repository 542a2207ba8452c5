"""The oracles every fuzz target is judged by, and the tally a campaign prints.

* hang: an input that does not finish within its time bound (wall clock, or a device that stays
  busy past a cycle bound);
* crash: an exception or exit of what is under test (for a loader: anything but its documented
  clean error; for a server: it stops answering, or answers INTERNAL);
* wrong result: an answer that differs from the reference (Python reference, model, or for the
  ``rtl`` backend the model's bits);
* outside: a device write outside the owning queue's region (or outside device memory).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum


class Kind(Enum):
    """What an oracle found."""

    HANG = "hangs"
    CRASH = "crashes"
    WRONG = "wrong results"
    OUTSIDE = "writes outside the region"


@dataclass(frozen=True)
class Finding:
    kind: Kind
    what: str
    """What went wrong, with what the reference expected."""

    def __str__(self) -> str:
        return f"{self.kind.name}: {self.what}"


class Hang(BaseException):
    """Raised into an input that ran past its time bound. A BaseException, so that a broad
    ``except Exception`` in the code under test cannot swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in this thread after ``seconds`` of wall time (main thread only;
    elsewhere no limit is set and the caller's own timeouts must bound the input)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise Hang(f"no result within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def guarded(findings: list[Finding], seconds: float, what: str):
    """Context manager for one step of an input: a Hang or an exception becomes a finding
    (HANG or CRASH) instead of propagating. Use ``with guarded(...) as ok:`` and check
    ``ok.passed`` afterwards."""
    return _Guard(findings, seconds, what)


class _Guard:
    def __init__(self, findings: list[Finding], seconds: float, what: str) -> None:
        self.findings, self.seconds, self.what = findings, seconds, what
        self.passed = False
        self._limit: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> _Guard:
        self._limit = time_limit(self.seconds)
        self._limit.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self._limit is not None
        try:
            self._limit.__exit__(None, None, None)
        finally:
            self._limit = None
        if exc is None:
            self.passed = True
            return False
        if isinstance(exc, Hang):
            self.findings.append(Finding(Kind.HANG, f"{self.what}: {exc}"))
            return True
        if isinstance(exc, TimeoutError):
            self.findings.append(Finding(Kind.HANG, f"{self.what}: {type(exc).__name__}: {exc}"))
            return True
        if isinstance(exc, Exception):
            self.findings.append(Finding(Kind.CRASH, f"{self.what}: {type(exc).__name__}: "
                                                     f"{exc}"))
            return True
        return False  # KeyboardInterrupt, SystemExit: not ours to judge


def expect_equal(findings: list[Finding], what: str, got: object, want: object,
                 kind: Kind = Kind.WRONG) -> bool:
    """A WRONG finding (or ``kind``) when ``got != want``; True when they agree."""
    if got == want:
        return True
    findings.append(Finding(kind, f"{what}: got {_short(got)}, expected {_short(want)}"))
    return False


def _short(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 5] + " ...)"


def explain(findings: list[Finding]) -> str:
    """One line per finding, for an assertion message."""
    return "\n".join(str(f) for f in findings)


@dataclass
class Tally:
    """Inputs tried and findings of one target in a campaign."""

    target: str
    unit: str
    """What an input is counted in (descriptors, frames, requests, files, ...)."""
    tried: int = 0
    cases: int = 0
    """Inputs as hypothesis drew them (one may hold many units)."""
    counts: dict[Kind, int] = field(default_factory=lambda: dict.fromkeys(Kind, 0))
    examples: dict[Kind, list[tuple[str, str]]] = field(
        default_factory=lambda: {k: [] for k in Kind})
    """Up to a few (finding, input) pairs per kind, for the report; ``counts`` counts
    findings (each names one unit: a descriptor, a frame, a request, a file)."""
    keep: int = 3

    def add(self, units: int, findings: list[Finding], case: object) -> None:
        self.tried += units
        self.cases += 1
        for f in findings:
            self.counts[f.kind] += 1
        for kind in {f.kind for f in findings}:
            seen = {w for w, _ in self.examples[kind]}
            for f in findings:
                if f.kind is kind and f.what not in seen and len(self.examples[kind]) < self.keep:
                    self.examples[kind].append((f.what, _short(case, 600)))
                    seen.add(f.what)

    @property
    def clean(self) -> bool:
        return not any(self.counts.values())
