"""Test configuration: RTL tests import helpers from tests/rtl."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "rtl"))


def pytest_configure(config):
    config.addinivalue_line("markers", "rtl: builds and simulates RTL with Verilator")
