"""Device memory of the ``model`` backend: costs host memory only where written.

Pages of 64 KiB, each a numpy array made on its first write, so the clustered KV of a long
request (gigabytes) is stored at its own size and copied in bulk; a bitmap per page says which
lines were written, so the memory counts and lists written lines as a map of lines would.

``SparseFileMemory`` keeps the same contents in a sparse file instead (the device address is the
file offset; holes read as zeros): a node whose devices hold more KV than the host's RAM
(32 layers of two 128K-token requests) keeps it on disk, read back through the page cache,
with only the bitmaps in memory."""

from __future__ import annotations

import os
from pathlib import Path

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
        for index in sorted(self._written):
            page = self._stored_page(index)
            for line in np.flatnonzero(self._written[index]).tolist():
                out[index * PAGE_BYTES + line * LINE_BYTES] = page[
                    line * LINE_BYTES:(line + 1) * LINE_BYTES].tobytes()
        return out

    def _stored_page(self, index: int) -> np.ndarray:
        """The bytes of a page that has been written."""
        return self._pages[index]

    def image(self) -> dict[int, bytes]:
        """Every line that is not all zero, by line address."""
        return {a: v for a, v in self.written().items() if any(v)}


class SparseFileMemory(SparseMemory):
    """``SparseMemory`` whose pages live in the sparse file ``path`` (created, and removed by
    ``close``): the same reads, writes and line counts, host memory only for the bitmaps."""

    def __init__(self, size: int, path: str | Path) -> None:
        super().__init__(size)
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)

    def _fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"device memory file {self.path} is closed")
        return self._fd

    def _touch(self, index: int) -> np.ndarray:
        w = self._written.get(index)
        if w is None:
            w = self._written[index] = np.zeros(PAGE_LINES, dtype=bool)
        return w

    def _mark(self, index: int, first_line: int, end_line: int) -> None:
        self._touch(index)
        super()._mark(index, first_line, end_line)

    def read(self, addr: int, n: int) -> bytes:
        data = os.pread(self._fileno(), n, addr)
        return data if len(data) == n else data + bytes(n - len(data))  # past the end: zeros

    def write(self, addr: int, data: bytes) -> None:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self._fileno(), view[done:], addr + done)
        pos = 0
        while pos < len(view):
            index, off = divmod(addr + pos, PAGE_BYTES)
            take = min(PAGE_BYTES - off, len(view) - pos)
            self._mark(index, off // LINE_BYTES, -(-(off + take) // LINE_BYTES))
            pos += take

    def write_line(self, line_addr: int, data: bytes, byte_enable: int) -> None:
        base = line_addr - line_addr % LINE_BYTES
        line = np.frombuffer(self.read(base, LINE_BYTES), dtype=np.uint8).copy()
        src = np.frombuffer(data, dtype=np.uint8)
        mask = np.array([byte_enable >> b & 1 for b in range(LINE_BYTES)], dtype=bool)
        line[mask] = src[mask]
        self.write(base, line.tobytes())

    @property
    def bytes_held(self) -> int:
        """Bytes of the file's pages (on disk, not in host memory)."""
        return len(self._written) * PAGE_BYTES

    def _stored_page(self, index: int) -> np.ndarray:
        return np.frombuffer(self.read(index * PAGE_BYTES, PAGE_BYTES), dtype=np.uint8)

    def close(self) -> None:
        """Close and remove the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.path.unlink(missing_ok=True)
