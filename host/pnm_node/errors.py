"""Errors a node client raises, one class per error code of the node and the link."""

from __future__ import annotations

from nelssa.emu.link.frame import LinkErrorCode
from nelssa.emu.link.transport import RemoteError
from nelssa.host.pnm_node.protocol import NodeErrorCode


class NodeError(RemoteError):
    """The node answered a request with an error."""


class BadRequestError(NodeError, ValueError):
    pass


class UnknownSessionError(NodeError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class NotAllocatedError(NodeError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class NodeOutOfMemoryError(NodeError, MemoryError):
    pass


class DeviceDownError(NodeError):
    pass


class NodeLimitError(NodeError):
    """A limit of the node (per client or per request) would be passed; the message names it."""


class DeviceStatusError(NodeError):
    """A device completed a descriptor with an error status."""


class LinkError(NodeError):
    """The link rejected a frame (malformed, corrupted, unknown operation)."""


class ChecksumError(LinkError):
    pass


class NodeBusyError(NodeError):
    """The node's queue was full and this client held its share of it: the request was not
    run; send it again later (requests sent before this one was refused may be refused too,
    so that what runs keeps the order sent)."""


class DeviceQueueFullError(NodeError):
    """This client's work queued or running on a device would pass its share of the device's
    queue (the node's ``max_client_queued_tokens``): the request was not run and nothing
    changed; send it again once earlier requests are answered. Other clients are not held up."""


class ClockDomainError(NodeError):
    """A clock-domain refusal (host/pnm_node/domains.py): a bad ticket, not a member, a stamp
    that goes back, or removed from the domain after a stall; the message says which."""


_BY_CODE: dict[int, type[NodeError]] = {
    NodeErrorCode.BAD_REQUEST: BadRequestError,
    NodeErrorCode.UNKNOWN_SESSION: UnknownSessionError,
    NodeErrorCode.NOT_ALLOCATED: NotAllocatedError,
    NodeErrorCode.OUT_OF_MEMORY: NodeOutOfMemoryError,
    NodeErrorCode.DEVICE_DOWN: DeviceDownError,
    NodeErrorCode.DEVICE_ERROR: DeviceStatusError,
    NodeErrorCode.LIMIT_EXCEEDED: NodeLimitError,
    NodeErrorCode.DEVICE_BUSY: DeviceQueueFullError,
    NodeErrorCode.DOMAIN_REFUSED: ClockDomainError,
    LinkErrorCode.CHECKSUM: ChecksumError,
    LinkErrorCode.MALFORMED_FRAME: LinkError,
    LinkErrorCode.UNKNOWN_OP: LinkError,
    LinkErrorCode.BUSY: NodeBusyError,
    LinkErrorCode.TOO_LARGE: NodeLimitError,
}


def error_for(code: int, text: str) -> NodeError:
    """The exception for an ERROR frame's code."""
    return _BY_CODE.get(code, NodeError)(code, text)
