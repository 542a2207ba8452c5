"""Administrative tokens: only a server's operator may stop it, or drive a device; the one
place tokens are made, written, read and found (host/pnm_node/admin.py is the node's view).

At start a node draws ``ADMIN_TOKEN_BYTES`` random bytes and writes them to a file only its
user can read (0600); ``nelssa node stop`` (NodeClient.shutdown) reads the file and presents the
token with SHUTDOWN. A SHUTDOWN without it is refused like any other bad request, and the node
goes on serving: no client can stop a node over its socket.

A device server (``nelssa device serve``, driver/remote.py) works the same way: it takes every
call only from a connection that presented its token first (AUTH); the token comes from
``--token-file`` (a node passes the one it drew for the devices it starts) or is drawn and
written here for the device's endpoint, where a node of the same user on the same host reads it
(``node up --attach``; from another host: ``--device-token FILE``, a copy of the file).
Tokens are compared with ``secrets.compare_digest`` (constant time).

Where the file lies: for an ``ipc://PATH`` endpoint, ``PATH.admin`` beside the socket (whoever
may write that folder can replace the socket itself); for any other endpoint, a file named by a
hash of the endpoint in ``$TMPDIR/nelssa-UID``, a folder only its user may enter (checked). The
server removes the file when it stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import tempfile
import time
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


def default_endpoint(name: str) -> str:
    """``ipc://`` endpoint ``name`` in this user's private folder (``$TMPDIR/nelssa-UID``):
    the default of a node or device, one per user of the machine, not one path they share.
    ``prepare_endpoint`` makes the folder before a server binds there."""
    return f"ipc://{_private_path() / name}"


def prepare_endpoint(endpoint: str) -> None:
    """Make this user's private folder (0700, checked) when ``endpoint`` lies in it."""
    scheme, _, rest = endpoint.partition("://")
    if scheme == "ipc" and Path(rest).parent == _private_path():
        _private_dir()


def token_path(endpoint: str) -> Path:
    """The file holding the admin token of the node at ``endpoint``."""
    scheme, _, rest = endpoint.partition("://")
    if scheme == "ipc":
        return Path(f"{rest}.admin")
    digest = hashlib.sha256(endpoint.encode()).hexdigest()[:32]
    return _private_dir() / f"node-{digest}.admin"


def new_token() -> bytes:
    return secrets.token_bytes(ADMIN_TOKEN_BYTES)


def write_token_file(path: Path, token: bytes) -> None:
    """Write ``token`` to a new file at ``path``, readable by this user alone (a file in the
    way, even one planted there, is never written through). The file appears whole: written
    beside it first, then linked into place (a client waiting for a starting server's token
    never reads it empty)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise AdminTokenError(f"cannot write an admin token to {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(token)
        os.link(tmp, path)  # fails on anything in the way, as O_EXCL did
    except OSError as e:
        raise AdminTokenError(f"cannot write an admin token to {path}: {e.strerror}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _wait_for(path: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not os.path.lexists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def read_token_file(path: Path, wait_s: float = 0.0) -> bytes:
    """The token in ``path``: a file of this user's, mode 0600, of ``ADMIN_TOKEN_BYTES``
    (waiting up to ``wait_s`` for a server that is still starting to write it)."""
    _wait_for(path, wait_s)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise AdminTokenError(f"cannot read the token file {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        token = f.read(ADMIN_TOKEN_BYTES + 1)
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077
            or len(token) != ADMIN_TOKEN_BYTES):
        raise AdminTokenError(f"{path} is not a token file of this user (a file of its "
                              f"own, mode 0600, {ADMIN_TOKEN_BYTES} bytes)")
    return token


def token_from_file(path: Path) -> bytes:
    """The token in ``path``, or a new one written there if there is no such file."""
    if not os.path.lexists(path):
        token = new_token()
        write_token_file(path, token)
        return token
    return read_token_file(path)


def write_token(endpoints: list[str], token: bytes | None = None) -> bytes:
    """Write ``token`` (default: a new one) for each of ``endpoints`` (names of one server: as
    asked and as bound), replacing a dead server's file."""
    token = new_token() if token is None else token
    for ep in dict.fromkeys(endpoints):
        path = token_path(ep)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        write_token_file(path, token)
    return token


def read_token(endpoint: str, wait_s: float = 0.0) -> bytes:
    """The admin token of this user's node or device at ``endpoint``, waiting up to
    ``wait_s`` for a server that is still starting to write it."""
    path = token_path(endpoint)
    _wait_for(path, wait_s)
    if not os.path.lexists(path):
        raise AdminTokenError(f"no admin token for the server at {endpoint} ({path}): only "
                              "the user who started it, on its host, holds it")
    return read_token_file(path)


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
