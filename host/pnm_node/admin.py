"""The node's administrative token: only the node's operator may stop it.

At start a node draws ``ADMIN_TOKEN_BYTES`` random bytes and writes them to a file only its
user can read (0600); ``nelssa node stop`` (NodeClient.shutdown) reads the file and presents the
token with SHUTDOWN. A SHUTDOWN without it is refused like any other bad request, and the node
goes on serving: no client can stop a node over its socket.

Where the file lies: for an ``ipc://PATH`` endpoint, ``PATH.admin`` beside the socket (whoever
may write that folder can replace the socket itself); for any other endpoint, a file named by a
hash of the endpoint in ``$TMPDIR/nelssa-UID``, a folder only its user may enter (checked). The
node removes the file when it stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from nelssa.emu.files import read_bytes

ADMIN_TOKEN_BYTES = 32


class AdminTokenError(ValueError):
    """No readable admin token for an endpoint (no node of this user there), or an unsafe
    place for one."""


def _private_path() -> Path:
    return Path(tempfile.gettempdir()) / f"nelssa-{os.getuid()}"


def _private_dir() -> Path:
    folder = _private_path()
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise AdminTokenError(f"{folder} is not a folder of this user's alone (mode 0700): "
                              "remove it, it holds the admin tokens of nodes")
    return folder


def token_path(endpoint: str) -> Path:
    """The file holding the admin token of the node at ``endpoint``."""
    scheme, _, rest = endpoint.partition("://")
    if scheme == "ipc":
        return Path(f"{rest}.admin")
    digest = hashlib.sha256(endpoint.encode()).hexdigest()[:32]
    return _private_dir() / f"node-{digest}.admin"


def write_token(endpoints: list[str]) -> bytes:
    """Draw a token and write it for each of ``endpoints`` (names of one node: as asked and as
    bound), replacing a dead node's file."""
    token = secrets.token_bytes(ADMIN_TOKEN_BYTES)
    for ep in dict.fromkeys(endpoints):
        path = token_path(ep)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        try:  # a new file, never one planted there: readable by this user alone
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise AdminTokenError(f"cannot write the node's admin token to {path}: "
                                  f"{e.strerror}") from None
        with os.fdopen(fd, "wb") as f:
            f.write(token)
    return token


def read_token(endpoint: str) -> bytes:
    """The admin token of this user's node at ``endpoint``."""
    path = token_path(endpoint)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise AdminTokenError(f"no admin token for the node at {endpoint} ({path}): only the "
                              "user who started the node, on its host, can stop it") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        token = f.read(ADMIN_TOKEN_BYTES + 1)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(token) != ADMIN_TOKEN_BYTES:
        raise AdminTokenError(f"{path} is not an admin token written by a node of this user "
                              f"(owner, mode 0600 and {ADMIN_TOKEN_BYTES} bytes)")
    return token


def remove_token(endpoints: list[str], token: bytes) -> None:
    """Remove the token files of ``endpoints`` that still hold ``token`` (a later node's are
    left alone)."""
    for ep in dict.fromkeys(endpoints):
        with contextlib.suppress(OSError, ValueError):
            path = token_path(ep)
            if read_bytes(path, "admin token", ADMIN_TOKEN_BYTES + 1) == token:
                path.unlink()
            if path.parent == _private_path():
                with contextlib.suppress(OSError):  # the private folder, once it is empty
                    path.parent.rmdir()
