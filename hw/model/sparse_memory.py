"""Device memory of the ``model`` backend: costs host memory only where written.

Pages of 64 KiB, each a numpy array made on its first write, so the clustered KV of a long
request (gigabytes) is stored at its own size and copied in bulk; a bitmap per page says which
lines were written, so the memory counts and lists written lines as a map of lines would."""

from __future__ import annotations

import numpy as np

from nelssa.driver import cxl
from nelssa.driver.formats import LINE_BYTES

PAGE_BYTES = 1 << 16
PAGE_LINES = PAGE_BYTES // LINE_BYTES


class SparseMemory:
    """``size`` bytes of device memory, zeros where never written."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pages: dict[int, np.ndarray] = {}
        self._written: dict[int, np.ndarray] = {}  # page -> bool per line
        self._lines = 0

    def _page(self, index: int) -> np.ndarray:
        page = self._pages.get(index)
        if page is None:
            page = self._pages[index] = np.zeros(PAGE_BYTES, dtype=np.uint8)
            self._written[index] = np.zeros(PAGE_LINES, dtype=bool)
        return page

    def _mark(self, index: int, first_line: int, end_line: int) -> None:
        w = self._written[index]
        self._lines += int(end_line - first_line - np.count_nonzero(w[first_line:end_line]))
        w[first_line:end_line] = True

    def read(self, addr: int, n: int) -> bytes:
        out = np.zeros(n, dtype=np.uint8)
        pos = 0
        while pos < n:
            index, off = divmod(addr + pos, PAGE_BYTES)
            take = min(PAGE_BYTES - off, n - pos)
            page = self._pages.get(index)
            if page is not None:
                out[pos:pos + take] = page[off:off + take]
            pos += take
        return out.tobytes()

    def write(self, addr: int, data: bytes) -> None:
        src = np.frombuffer(data, dtype=np.uint8)
        pos = 0
        while pos < len(src):
            index, off = divmod(addr + pos, PAGE_BYTES)
            take = min(PAGE_BYTES - off, len(src) - pos)
            if take == PAGE_BYTES and index not in self._pages:  # a whole new page: one copy
                self._pages[index] = src[pos:pos + take].copy()
                self._written[index] = np.ones(PAGE_LINES, dtype=bool)
                self._lines += PAGE_LINES
            else:
                self._page(index)[off:off + take] = src[pos:pos + take]
                self._mark(index, off // LINE_BYTES, -(-(off + take) // LINE_BYTES))
            pos += take

    def write_line(self, line_addr: int, data: bytes, byte_enable: int) -> None:
        index, off = divmod(line_addr - line_addr % LINE_BYTES, PAGE_BYTES)
        page = self._page(index)
        src = np.frombuffer(data, dtype=np.uint8)
        if byte_enable == cxl.FULL_LINE:
            page[off:off + LINE_BYTES] = src
        else:
            mask = np.array([byte_enable >> b & 1 for b in range(LINE_BYTES)], dtype=bool)
            line = page[off:off + LINE_BYTES]
            line[mask] = src[mask]
        self._mark(index, off // LINE_BYTES, off // LINE_BYTES + 1)

    @property
    def line_count(self) -> int:
        """Lines ever written (zeros included)."""
        return self._lines

    @property
    def bytes_held(self) -> int:
        """Host memory the pages take."""
        return len(self._pages) * PAGE_BYTES

    def written(self) -> dict[int, bytes]:
        """Every line written by anyone (zeros included), by address."""
        out = {}
        for index in sorted(self._pages):
            page, w = self._pages[index], self._written[index]
            for line in np.flatnonzero(w).tolist():
                out[index * PAGE_BYTES + line * LINE_BYTES] = page[
                    line * LINE_BYTES:(line + 1) * LINE_BYTES].tobytes()
        return out

    def image(self) -> dict[int, bytes]:
        """Every line that is not all zero, by line address."""
        return {a: v for a, v in self.written().items() if any(v)}
