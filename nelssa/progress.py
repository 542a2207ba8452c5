"""A small progress bar on stderr for long command-line work (nothing when stderr is not a
terminal, so logs stay clean)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, width: int = 30) -> None:
        self.total, self.label, self.width = max(total, 1), label, width
        self.done = 0
        self.t0 = time.monotonic()
        self.enabled = sys.stderr.isatty()
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        filled = self.width * self.done // self.total
        el = time.monotonic() - self.t0
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                         f"{self.done}/{self.total} {el:.0f}s")
        sys.stderr.flush()

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        self._draw()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
