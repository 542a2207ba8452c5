"""The fuzz targets by name, each with its strategy, its runner and what it needs running
(a LinkServer, a node): what tests/test_fuzz_*.py and scripts/fuzz.py share, and the hypothesis
settings of both (derandomized short runs in tests, seeded long campaigns in the script)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.fuzz import cxl_mem, descriptors, files, frames, node, registers, rpc
from tests.fuzz.oracle import Finding


@dataclass(frozen=True)
class Target:
    name: str
    unit: str
    """What one input counts as (descriptors, frames, ...)."""
    strategy: Callable[[], st.SearchStrategy[Any]]
    run: Callable[..., list[Finding]]
    """run(case, context) -> findings."""
    context: Callable[[], contextlib.AbstractContextManager[Any]]
    """What the runs share (a server), entered once around many inputs."""
    doc: str


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield None


@contextlib.contextmanager
def _frame_server() -> Iterator[frames.FrameServer]:
    server = frames.FrameServer()
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def _device_server() -> Iterator[rpc.DeviceServer]:
    server = rpc.DeviceServer()
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def _node() -> Iterator[node.NodeUnderTest]:
    n = node.NodeUnderTest()
    try:
        yield n
    finally:
        n.close()


def _device(run: Callable[..., list[Finding]], backend: str) -> Callable[..., list[Finding]]:
    return lambda case, _ctx=None: run(case, backend)


def _plain(run: Callable[..., list[Finding]]) -> Callable[..., list[Finding]]:
    return lambda case, _ctx=None: run(case)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("descriptors-model", "descriptors", descriptors.descriptor_cases,
           _device(descriptors.run_descriptor_case, "model"), _nothing,
           "ring entries, directories and id lists past the driver, model device"),
    Target("descriptors-rtl", "descriptors", descriptors.descriptor_cases,
           _device(descriptors.run_descriptor_case, "rtl"), _nothing,
           "the same on the Verilated device, against the reference and the model"),
    Target("registers-model", "register steps", registers.register_cases,
           _device(registers.run_register_case, "model"), _nothing,
           "raw register sequences between ring entries and cycles, model device"),
    Target("registers-rtl", "register steps", lambda: registers.register_cases(lockstep=True),
           _device(registers.run_register_case, "rtl"), _nothing,
           "the same on the Verilated device in lockstep with the model"),
    Target("cxl-model", "messages", cxl_mem.message_cases,
           _device(cxl_mem.run_message_case, "model"), _nothing,
           "CXL.mem and MMIO port messages, model device"),
    Target("cxl-rtl", "messages", cxl_mem.message_cases,
           _device(cxl_mem.run_message_case, "rtl"), _nothing,
           "the same on the Verilated device, against the reference and the model"),
    Target("frames", "frames", frames.frame_cases, frames.run_frame_case, _frame_server,
           "link frames against a real LinkServer"),
    Target("device-rpc", "calls", rpc.rpc_cases, rpc.run_rpc_case, _device_server,
           "device calls against a real `nelssa device serve` process, against a local model"),
    Target("node", "requests", node.node_cases, node.run_node_case, _node,
           "node requests against a real node (model backend), owner and stranger"),
    Target("traces", "files", files.trace_cases, _plain(files.run_trace_case), _nothing,
           "request traces through load_trace and a replay"),
    Target("hardware", "files", files.hardware_cases, _plain(files.run_hardware_case),
           _nothing, "hardware descriptions through HardwareCatalog.load and the latency model"),
)}


def short_settings(max_examples: int, deadline_s: float = 20.0) -> settings:
    """A short, reproducible run for `make test`: derandomized, no example database, a
    deadline per input; every phase, so a failure is shrunk to a minimal reproducer."""
    return settings(max_examples=max_examples, derandomize=True, database=None,
                    deadline=deadline_s * 1000, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


def campaign_settings(max_examples: int) -> settings:
    """A long campaign: generation only (every input counts, none stops it), no database."""
    return settings(max_examples=max_examples, database=None, deadline=None,
                    phases=[Phase.generate], print_blob=False,
                    suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The code under test logs each refusal it makes (fuzzers make millions): keep only what
    is critical while inside."""
    log = logging.getLogger("nelssa")
    old = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(old)
