"""The device interface's identity: a SHA-256 over the generated ``nelssa_dev_pkg`` (register
map, descriptor, completion and cluster-directory layouts, port-message opcodes), i.e. exactly
what the RTL is built against. A device reports its first 32 bits in IFACE_HASH; a bitstream
manifest carries all of it; software refuses a device whose hash differs from its own."""

from __future__ import annotations

from functools import cache

from nelssa.driver import regs


@cache
def interface_digest() -> str:
    """SHA-256 (64 hex digits) of this software's device interface."""
    from nelssa.driver.iface_sv import dev_pkg_digest

    return dev_pkg_digest()


def interface_hash32() -> int:
    """What IFACE_HASH reads on a device built from this software's interface."""
    return int(interface_digest()[:8], 16)


def version_major(version: int = regs.DEVICE_VERSION) -> int:
    """Major number of a VERSION register value (a major change breaks compatibility)."""
    return version >> 16
