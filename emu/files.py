"""Every file a command reads, read through one bounded reader: a regular file only (a character
device such as /dev/zero, a FIFO, a socket or a folder is refused before a byte is read, and a
FIFO's open does not block), and never more than a stated size in all or per line, so a bad path
costs one line of error instead of a hang and gigabytes of memory.

Refusals are ``InputFileError`` (a ValueError) whose message names what the file is for and its
path; each reader turns it into its own error type.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

KIB = 1 << 10
MIB = 1 << 20
DOCUMENT_BYTES = 16 * MIB
"""Hardware files, sweep specs, config.json shapes, manifests, keys: a few kilobytes in
practice (the presets file is about 10 KB)."""
TRACE_BYTES = 1 << 30
"""A request trace (Mooncake's conversation trace is 3 MB): every request read is held in
memory, so a bound on the file bounds the replay's memory."""
LINE_BYTES = MIB
"""One trace line (a 2M-token prompt's hash ids are about 80 KB)."""


class InputFileError(ValueError):
    """A file that cannot be read as one; the message names its use and path."""


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def not_a_file(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a file (without opening it), or None when it can."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    kind = _kind(st.st_mode)
    if kind is not None:
        return f"is {kind}, not a file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB" if n >= KIB else f"{n} bytes"


@contextmanager
def open_bounded(path: str | Path, what: str, max_bytes: int | None) -> Iterator[BinaryIO]:
    """``path`` opened for reading when it is a regular file of at most ``max_bytes`` (None: any
    size, for weights); InputFileError otherwise. Reads of the open file are the caller's to bound
    (a file may grow, and /proc's report no size)."""
    label = f"{what} {path}"
    try:  # O_NONBLOCK: opening a FIFO with no writer would wait for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputFileError(f"{label} does not exist") from None
    except OSError as e:
        raise InputFileError(f"{label} cannot be read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            raise InputFileError(f"{label} is {kind}, not a file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise InputFileError(f"{label} is {_size(st.st_size)}, more than the "
                                 f"{_size(max_bytes)} a {what} may be")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_bytes(path: str | Path, what: str, max_bytes: int = DOCUMENT_BYTES) -> bytes:
    """The whole of a small file (InputFileError naming ``what`` and the path)."""
    with open_bounded(path, what, max_bytes) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            raise InputFileError(f"{what} {path} cannot be read ({e.strerror})") from None
    if len(data) > max_bytes:
        raise InputFileError(f"{what} {path} is more than the {_size(max_bytes)} a {what} may be")
    return data


def read_text(path: str | Path, what: str, max_bytes: int = DOCUMENT_BYTES) -> str:
    """A small UTF-8 text file (a byte-order mark is dropped)."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputFileError(f"{what} {path} is not UTF-8 text (byte {e.start})") from None


def read_lines(path: str | Path, what: str, max_bytes: int = TRACE_BYTES,
               max_line: int = LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line of a file of at most ``max_bytes``, each line at most
    ``max_line`` bytes; a longer one is refused by its number before it is held whole."""
    with open_bounded(path, what, max_bytes) as f:
        total = 0
        n = 0
        while True:
            try:
                line = f.readline(max_line + 1)
            except OSError as e:
                raise InputFileError(f"{what} {path} cannot be read ({e.strerror})") from None
            if not line:
                return
            n += 1
            total += len(line)
            if len(line.rstrip(b"\n")) > max_line:
                raise InputFileError(f"{what} {path}:{n}: the line is longer than "
                                  f"{_size(max_line)}")
            if total > max_bytes:
                raise InputFileError(f"{what} {path} is more than the {_size(max_bytes)} a {what} "
                                  "may be")
            yield n, line
