"""Test configuration: RTL tests import helpers from tests/rtl."""

import json
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "rtl"))

# One OpenMP thread for PyTorch in each test process and the processes it starts (decode and
# PNM nodes), set before anything imports torch: `make test` keeps both cores busy, where a
# second thread only spins on the tests' small tensors (tests/test_cosim_vllm.py's scheduler
# replay: 17 CPU seconds with it, 0.8 without); the figures do not depend on it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


SHOWN_LOGS = ("nelssa.hw.sim.verilator", "cocotb_runner")
"""Loggers whose INFO lines reach the terminal while tests run (between pytest's dots): what a
Verilator build is building and for how long, where a run's waves are."""


class _TerminalLines(logging.Handler):
    """Log lines written to the terminal past pytest's capture (as its live logging does)."""

    def __init__(self, reporter, capture) -> None:
        super().__init__(logging.INFO)
        self.reporter, self.capture = reporter, capture

    def emit(self, record: logging.LogRecord) -> None:
        with self.capture.global_and_fixture_disabled():
            self.reporter.write_line(f"[{record.name}] {self.format(record)}")


def pytest_configure(config):
    config.addinivalue_line("markers", "rtl: builds and simulates RTL with Verilator")
    config.addinivalue_line("markers", "shared_build: builds a Verilated model that other test "
                            "files reuse (its file runs first: see pytest_collection_modifyitems)")


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """Show SHOWN_LOGS on the terminal (not on a pytest-xdist worker, which has none: run a
    first RTL test with -n 0 to see its build)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    capture = session.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or hasattr(session.config, "workerinput"):
        return
    handler = _TerminalLines(reporter, capture)
    for name in SHOWN_LOGS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


CPU_LOG_ENV = "NELSSA_TEST_CPU_LOG"
"""Where each test's CPU seconds go, a JSON line per test phase (scripts/test_time.py sets it):
its own process's and its children's (the Verilator and compiler runs it waited for), which,
unlike --durations' wall time, another pytest worker's load does not inflate."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get(CPU_LOG_ENV)
    if not path:
        yield
        return
    own0, kids0 = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    start = time.time()
    t0 = time.monotonic()
    yield
    own1, kids1 = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    row = {"test": item.nodeid, "wall": time.monotonic() - t0,
           "own": own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime,
           "children": kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime,
           # when and on which pytest-xdist worker: the workers' timelines (their idle gaps)
           "start": start, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(path, "a") as fh:  # one short append per test: whole lines from both workers
        fh.write(json.dumps(row) + "\n")


def pytest_collection_modifyitems(session, config, items):
    """Files with RTL tests first (they build the large Verilated models and take the longest),
    each file's tests in their own order: with `--dist loadfile --no-loadscope-reorder` the
    pytest-xdist workers then start on the long files and end on short ones, instead of meeting
    a long file last while the other worker idles. Among them, in this order: the files with a
    ``shared_build`` test (each starts a build that later files reuse), tests/rtl's (cocotb
    benches with builds of their own: the other worker's work while the shared builds compile),
    then the rest, most of which reuse a shared build: a file that needs a build another
    worker is still compiling waits on its lock, a core idle (the default device, 217 s of CPU
    at c3e2f3a, had test_cli.py wait 202 s)."""
    rtl_files = {item.path for item in items if item.get_closest_marker("rtl") is not None}
    builders = {item.path for item in items if item.get_closest_marker("shared_build")}
    benches = Path(__file__).resolve().parent / "rtl"

    def rank(item: pytest.Item) -> int:
        if item.path in builders:
            return 0
        if item.path in rtl_files:
            return 1 if benches in item.path.parents else 2
        return 3

    items.sort(key=rank)  # stable: keeps the order within


@pytest.fixture
def fuzz_quiet():
    """A fuzz test's inputs without the log lines every refused input writes."""
    from tests.fuzz.targets import quiet

    with quiet():
        yield


@pytest.fixture(scope="module")
def rtl_built():
    """The Verilated device built before a fuzzer's first input (its deadline is not a
    build's)."""
    from tests.fuzz.bench import build_rtl

    build_rtl()


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder (outputs with default names land here) and the temporary folder of
    this process and its children, both checked to hold nothing new after a refusal."""
    monkeypatch.chdir(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp_path


@pytest.fixture(scope="module")
def cat():
    """The hardware catalog (the fleet tests' GPUs, PNM devices, models and links)."""
    from nelssa.emu.latency.hardware import HardwareCatalog

    return HardwareCatalog.load()


@pytest.fixture(scope="module")
def lm(cat):
    """The fleet tests' latency model: llama-3-8b on an H100 NVL, prototype PNM devices,
    RoCE 400G (a test file's own ``lm`` takes its place)."""
    from nelssa.emu.latency.model import LatencyModel

    return LatencyModel(cat.get("gpus", "h100-nvl"), cat.get("pnm", "prototype"),
                        cat.get("models", "llama-3-8b"), link=cat.get("links", "roce-400g"))
