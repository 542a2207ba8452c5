"""One co-simulation session, the one place that boots a PNM node, builds the engine on it and
runs its steps: `nelssa decode`, the co-simulation agreement check (``cosim_agreement.py``) and
the link-fault campaign (``scripts/link_faults.py``) all run through it.

A session either boots a node of its own (``nelssa node up`` as a child process, on an ipc://
endpoint in a private folder) or joins one that runs (``NodeSpec.endpoint``); it connects a
``NodeClient`` (or the caller's, e.g. one that injects link faults), builds a ``DecodeEngine``
and closes all of it, in order, when it ends.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from nelssa.emu.launcher import NodeLauncher, private_folder
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK
from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
from nelssa.emu.policy.adaptive import AdaptiveThreshold
from nelssa.emu.policy.router import Router
from nelssa.host.gpu.engine import DecodeConfig, DecodeEngine
from nelssa.host.gpu.model import Llama
from nelssa.host.gpu.report import StepReport
from nelssa.host.pnm_node.client import NodeClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeSpec:
    """The PNM node of a session: one to boot, or one running at ``endpoint``."""

    devices: int = 4
    backend: str = "model"
    link: str = DEFAULT_GPU_PNM_LINK
    """The GPU node <-> PNM node link preset."""
    endpoint: str | None = None
    """A running node's endpoint (nothing is booted)."""
    node_args: list[str] = field(default_factory=list)
    """More `nelssa node up` options for a node booted here (boards, sampling, memory)."""
    ready_timeout_s: float = 900.0


class CosimSession:
    """A node (booted or joined), a client of it and an engine on them; a context manager
    that closes them in order."""

    def __init__(self, model: Llama, cfg: DecodeConfig, node: NodeSpec,
                 router: Router | None = None, scheduler: str = "ours",
                 adaptive: AdaptiveThreshold | None = None, timeout_s: float = 300.0,
                 client: Callable[[str], NodeClient] | None = None,
                 domain_ticket: bytes | None = None) -> None:
        """``client``: how to connect to the node's endpoint (default: a ``NodeClient`` on
        ``node.link`` with ``timeout_s`` per request); ``domain_ticket``: join the node's clock
        domain it names (host/pnm_node/domains.py), left when the session closes."""
        self.node = node
        self._folder: Path | None = None
        self.launcher: NodeLauncher | None = None
        self.endpoint = node.endpoint
        try:
            if self.endpoint is None:
                self._folder = private_folder("nelssa-cosim-")
                self.endpoint = f"ipc://{self._folder}/node"
                self.launcher = NodeLauncher(self.endpoint, node.devices, node.backend,
                                             node.link, node.ready_timeout_s,
                                             extra=node.node_args)
            connect = client or (lambda ep: NodeClient(ep, node.link, timeout_s=timeout_s))
            self.client = connect(self.endpoint)
            self.in_domain = False
            try:
                if domain_ticket is not None:
                    self.client.domain_join(domain_ticket)
                    self.in_domain = True
                self.engine = DecodeEngine(model, cfg, self.client, router=router,
                                           adaptive=adaptive, scheduler=scheduler)
            except BaseException:
                self.leave_domain()
                self.client.close()
                raise
        except BaseException:
            self._stop_node()
            raise

    def run(self, prompts: list[list[int]], max_new: int, steps: int,
            each_prefill: Callable[[], None] | None = None) -> Iterator[StepReport]:
        """Add ``prompts``, prefill them, then up to ``steps`` decode steps, each report as it
        comes (fewer if every request finishes)."""
        for p in prompts:
            self.engine.add(p, max_new)
        self.engine.prefill(each_prefill)
        for _ in range(steps):
            if not self.engine.unfinished():
                return
            yield self.engine.step()

    def _stop_node(self) -> None:
        if self.launcher is not None:
            self.launcher.stop()
            self.launcher = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def leave_domain(self) -> None:
        """Stop holding the domain's other members (nothing more will be attended)."""
        if self.in_domain:
            self.in_domain = False
            try:
                self.client.domain_leave()
            except (LinkTimeoutError, RemoteError) as e:  # the node times a silent one out
                log.warning("leaving the clock domain: %s", e)

    def close(self) -> None:
        try:
            try:
                self.leave_domain()
                self.engine.close()
            finally:
                self.client.close()
        finally:
            self._stop_node()

    def __enter__(self) -> CosimSession:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
