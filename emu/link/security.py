"""Where a link may bind, and ZeroMQ CURVE on its sockets.

A socket binds to loopback (ipc://, inproc://, tcp://127.0.0.1, tcp://localhost, tcp://[::1])
unless CURVE keys are given: anything else would expose device memory to the network. Keys are
ZeroMQ certificate files, made with ``nelssa node keygen DIR`` (``zmq.auth.create_certificates``):
``DIR/<name>.key`` is the public half to hand to clients, ``DIR/<name>.key_secret`` the secret
half the server keeps. A server given a folder of client public keys accepts only those clients,
and knows each by its key as well as its routing id (LinkServer._peer_key): a node's sessions are
then bound to the client's key. A server without that folder accepts any client that knows its
public key and knows clients by routing id alone (ZeroMQ runs no ZAP authentication there, so no
key reaches the server with a message).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from nelssa.emu.files import read_bytes

KEY_BYTES = 4096
"""A ZeroMQ certificate is about 300 bytes."""

log = logging.getLogger(__name__)


def is_loopback(endpoint: str) -> bool:
    """True for endpoints that other hosts cannot reach."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # '*', an interface name or a host name
        return False


@dataclass(frozen=True)
class CurveServerKeys:
    """A server's CURVE identity."""

    secret_file: Path
    """The server's ``.key_secret`` certificate."""
    clients_dir: Path | None = None
    """Folder of accepted clients' public ``.key`` files; None accepts any client that knows
    the server's public key."""


@dataclass(frozen=True)
class CurveClientKeys:
    """What a client needs to reach a CURVE server."""

    server_public_file: Path
    """The server's public ``.key`` certificate."""
    secret_file: Path | None = None
    """The client's own ``.key_secret`` (needed when the server restricts clients); None
    makes a fresh key pair."""


def make_keys(folder: Path, name: str) -> tuple[Path, Path]:
    """Create a key pair; returns (public file, secret file)."""
    folder.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(folder), name)
    return Path(public), Path(secret)


def _load(path: Path, need_secret: bool) -> tuple[bytes, bytes | None]:
    read_bytes(path, "CURVE key file", KEY_BYTES)  # a device or a huge file refused first
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except Exception as e:
        raise ValueError(f"{path} is not a ZeroMQ certificate: {e}") from None
    if need_secret and secret is None:
        raise ValueError(f"{path} holds no secret key (pass the .key_secret file)")
    return public, secret


def secure_server(sock: zmq.Socket, endpoint: str, keys: CurveServerKeys | None) -> None:
    """Apply CURVE to a socket about to bind, or refuse a non-loopback bind without it."""
    if keys is None:
        if not is_loopback(endpoint):
            raise ValueError(
                f"refusing to bind {endpoint}: it is not a loopback address, and binding to the "
                "network needs CURVE keys (make them with `nelssa node keygen DIR` and pass "
                "--curve-secret DIR/node.key_secret)")
        return
    if not zmq.has("curve"):
        raise RuntimeError("this libzmq was built without CURVE support")
    public, secret = _load(keys.secret_file, need_secret=True)
    if keys.clients_dir is not None:
        from zmq.auth.thread import ThreadAuthenticator

        if not keys.clients_dir.is_dir():
            raise ValueError(f"CURVE clients folder {keys.clients_dir} does not exist")
        auth = ThreadAuthenticator(sock.context)  # ZAP serves the sockets of its context
        auth.start()
        auth.configure_curve(domain="*", location=str(keys.clients_dir))
        log.info("accepting only the CURVE clients in %s", keys.clients_dir)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True


def secure_client(sock: zmq.Socket, keys: CurveClientKeys | None) -> None:
    """Apply CURVE to a socket about to connect."""
    if keys is None:
        return
    server_public, _ = _load(keys.server_public_file, need_secret=False)
    if keys.secret_file is not None:
        public, secret = _load(keys.secret_file, need_secret=True)
    else:
        public, secret = zmq.curve_keypair()
    sock.curve_serverkey = server_public
    sock.curve_publickey = public
    sock.curve_secretkey = secret
