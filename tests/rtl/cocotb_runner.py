"""Build a Verilated top through cocotb_tools.runner (cached by source hash) and run its tests."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cocotb_tools.check_results import get_results

from nelssa.hw.sim.rtl_sources import VERILATOR_CONFIG, unit_sources
from nelssa.hw.sim.verilator import (
    build_lock,
    cached_build_dir,
    fst_available,
    setup_environment,
)

TESTS_RTL = Path(__file__).resolve().parent
log = logging.getLogger(__name__)


def wave_args() -> list[str]:
    """FST where the lz4 headers allow it, VCD otherwise."""
    return ["--trace-fst", "--trace-structs"] if fst_available() else ["--trace-structs"]


def run_cocotb(
    top: str,
    test_module: str,
    parameters: Mapping[str, object] | None = None,
    sources: Sequence[Path] | None = None,
    waves: bool = False,
    extra_env: Mapping[str, str] | None = None,
    test_filter: str | None = None,
    build_extra: Sequence[str] = (),
) -> None:
    """Build ``top`` (reusing a cached build) and run the cocotb tests in ``test_module``.

    Fails the calling pytest test unless at least one cocotb test ran and none failed.
    Waveforms: ``waves=True`` or NELSSA_WAVES=1 writes them into the build folder.
    ``build_extra``: more Verilator arguments, e.g. the C++ files of DPI-C functions.
    """
    setup_environment()
    waves = waves or os.environ.get("NELSSA_WAVES") == "1"
    from cocotb_tools.runner import get_runner

    srcs = list(sources) if sources is not None else unit_sources(top)
    params = dict(parameters or {})
    build_args = [str(VERILATOR_CONFIG), "--x-assign", "fast", "--x-initial", "fast", "-O3",
                  *build_extra]
    if waves:
        build_args += wave_args()
    hashed = [*srcs, VERILATOR_CONFIG, *(Path(x) for x in build_extra if Path(x).is_file())]
    build_dir = cached_build_dir(f"cocotb-{top}", hashed, params, build_args)
    runner = get_runner("verilator")
    env = {"PYTHONPATH": os.pathsep.join([str(TESTS_RTL), os.environ.get("PYTHONPATH", "")])}
    env.update(extra_env or {})
    # one build folder holds the model and the run's results: one process at a time
    with build_lock(build_dir):
        runner.build(
            sources=srcs,
            hdl_toplevel=top,
            parameters=params,
            build_dir=build_dir,
            build_args=build_args,
            waves=waves,
        )
        results = runner.test(
            hdl_toplevel=top,
            test_module=test_module,
            build_dir=build_dir,
            test_dir=build_dir,
            extra_env=env,
            waves=waves,
            test_filter=test_filter,
        )
        num_tests, num_failed = get_results(Path(results))
    assert num_tests > 0, f"{test_module}: no cocotb test ran"
    assert num_failed == 0, f"{test_module}: {num_failed} of {num_tests} cocotb tests failed"
