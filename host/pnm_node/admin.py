"""The node's administrative token: only the node's operator may stop it (``nelssa node stop``
presents it with SHUTDOWN). Tokens are made, written and found in one place for nodes and
devices alike: emu/link/tokens.py, re-exported here."""

from nelssa.emu.link.tokens import (
    ADMIN_TOKEN_BYTES,
    AdminTokenError,
    new_token,
    read_token,
    read_token_file,
    remove_token,
    token_from_file,
    token_path,
    write_token,
    write_token_file,
)

__all__ = [
    "ADMIN_TOKEN_BYTES",
    "AdminTokenError",
    "new_token",
    "read_token",
    "read_token_file",
    "remove_token",
    "token_from_file",
    "token_path",
    "write_token",
    "write_token_file",
]
