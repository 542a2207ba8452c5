"""Test configuration: RTL tests import helpers from tests/rtl."""

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "rtl"))


def pytest_configure(config):
    config.addinivalue_line("markers", "rtl: builds and simulates RTL with Verilator")


def pytest_collection_modifyitems(session, config, items):
    """Files with RTL tests first (they build the large Verilated models and take the longest),
    each file's tests in their own order: with `--dist loadfile --no-loadscope-reorder` the
    pytest-xdist workers then start on the long files and end on short ones, instead of meeting
    a long file last while the other worker idles."""
    rtl_files = {item.path for item in items if item.get_closest_marker("rtl") is not None}
    items.sort(key=lambda item: item.path not in rtl_files)  # stable: keeps the order within


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
