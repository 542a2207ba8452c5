"""Serve NelssaHost at an endpoint until its operator's SHUTDOWN (admin.py) or ``stop``; the
endpoint is checked before anything starts (a live node there is never cut off), and an ipc://
socket file and the admin token's file are removed when the node stops."""

from __future__ import annotations

import logging
from collections.abc import Callable

from nelssa.emu.launcher import check_bindable, remove_socket_file
from nelssa.emu.link.model import link_preset
from nelssa.emu.link.security import CurveServerKeys
from nelssa.emu.link.transport import LinkLimits, LinkServer, Reply, ServiceRequest
from nelssa.host.pnm_node.admin import AdminTokenError, remove_token, write_token
from nelssa.host.pnm_node.host import ALWAYS_ADMITTED, NelssaHost, NodeConfig
from nelssa.host.pnm_node.protocol import NODE_HELLO

log = logging.getLogger(__name__)


class NodeService:
    """NelssaHost behind a link server."""

    def __init__(self, config: NodeConfig, endpoint: str,
                 curve: CurveServerKeys | None = None) -> None:
        check_bindable(endpoint)
        self.host = NelssaHost(config)
        try:
            # twice the largest legal request: one somewhat over a limit gets the node's
            # refusal naming it; one far beyond, the client's own (it learns the limit)
            limits = LinkLimits(max_payload=2 * self.host.max_request_bytes(),
                                max_queued=config.max_queued)
            # a client's queue pairs share its part of the queue
            self.server = LinkServer(endpoint, self._handle, link_preset(config.link), curve,
                                     limits=limits, admission_group=self.host.clients.client_id,
                                     always_admitted=ALWAYS_ADMITTED, hello_info=NODE_HELLO.build(
                                         {"max_write_kv_bytes": config.max_write_kv_bytes}))
        except Exception:
            self.host.close()
            raise
        self.endpoint = self.server.endpoint
        self._names = [endpoint, self.endpoint]  # as asked and as bound: `node stop` uses either
        try:  # only the operator, who can read it, may stop the node (admin.py)
            self.host.admin_token = write_token(self._names)
        except AdminTokenError:
            self.server.close()
            self.host.close()
            raise
        self.host.link_counters = lambda: (self.server.frames_bad, self.server.duplicates,
                                           self.server.busy, self.server.queued)

    def _handle(self, request: ServiceRequest) -> Reply:
        reply = self.host.handle(request)
        if self.host.stop_requested:
            self.server.stop()
        return reply

    def stop(self) -> None:
        self.server.stop()

    def _idle(self) -> bool:
        self.host.tick()
        return False

    def serve(self, on_ready: Callable[[str], None] | None = None,
              shutdown_devices: bool = False) -> None:
        """Serve until stopped; then close the devices (asking them to exit if
        ``shutdown_devices``)."""
        if on_ready is not None:
            on_ready(self.endpoint)
        try:
            # the clock domains' time-outs run while nothing arrives too
            self.server.serve(idle=self._idle)
        finally:
            self.server.close()
            remove_socket_file(self.endpoint)
            if self.host.admin_token is not None:
                remove_token(self._names, self.host.admin_token)
            self.host.close(shutdown_devices)
            log.info("node at %s stopped", self.endpoint)
