"""Build a Verilated top through cocotb_tools.runner (cached by source hash) and run its tests."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path

from cocotb_tools.check_results import get_results
from cocotb_tools.runner import Verilator

from nelssa.hw.sim.rtl_sources import VERILATOR_CONFIG, unit_sources
from nelssa.hw.sim.verilator import (
    ASSERT_ARGS,
    announce_build,
    build_lock,
    build_root,
    cached_build_dir,
    fst_available,
    setup_environment,
    source_hash,
)

TESTS_RTL = Path(__file__).resolve().parent
ERROR_LIMIT = 1000
"""$errors a rule-breaking run may print before Verilator stops it (the default, 1, stops at the
first: every other run fails on its first assertion)"""
ASSERT_FIRED = re.compile(r"\[ASSERT FAILED\] \[(\S+)\] (\w+)")
log = logging.getLogger(__name__)


UNOPTIMIZED_MAKEFLAGS = "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
"""verilated.mk's optimization levels (-Os by default), overridden from MAKEFLAGS"""
SINGLE_COMPILE_MAKEFLAGS = "VM_PARALLEL_BUILDS=0"
"""verilated.mk compiles the model's C++ files as one (Vtop__ALL.cpp), as Verilator chooses for a
small model, instead of one by one behind two precompiled headers"""


@contextlib.contextmanager
def _make_flags(flags: str) -> Iterator[None]:
    """Add ``flags`` to MAKEFLAGS while the model builds (the runner runs make)."""
    old = os.environ.get("MAKEFLAGS")
    if flags:
        os.environ["MAKEFLAGS"] = f"{old or ''} {flags}".strip()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = old


RUNTIME_OBJECTS = ("verilated", "verilated_dpi", "verilated_threads", "verilated_vpi")
"""Verilator's run-time library, compiled into every model alike (three quarters of a small
unit's build): compiled once per optimization level, shared by the builds"""


def _share_runtime(runtime: Path, build_dir: Path, into_build: bool) -> bool:
    """Copy the run-time objects (and make's .d files) from the shared folder into a new
    build folder, or, after a build, from it into the shared folder if that lacks them.
    Returns whether the build folder holds them all now (make is then told to keep them:
    :class:`_KeepRuntime`)."""
    runtime.mkdir(parents=True, exist_ok=True)
    files = [f"{n}{ext}" for n in RUNTIME_OBJECTS for ext in (".o", ".d")]
    with build_lock(runtime):
        src, dst = (runtime, build_dir) if into_build else (build_dir, runtime)
        if all((src / f).exists() for f in files) and not all((dst / f).exists() for f in files):
            for f in files:
                tmp = dst / f"{f}.tmp"
                shutil.copy2(src / f, tmp)
                tmp.replace(dst / f)
    return all((build_dir / f"{n}.o").exists() for n in RUNTIME_OBJECTS)


PUBLIC_FLAT_RW = "--public-flat-rw"
"""What cocotb's runner makes of every signal of the design: public, readable and writable
through VPI. Verilator must then keep each one as it is: the attention engine with
pipelined units was 76 MB of C++ (30 without), the FPGA top 34 (14). The tests drive and
sample the top's ports and read its parameters, so the runner makes just those public
(:func:`_public_top`)."""
PUBLIC_TOP = "public-top"
"""The cache key's word for a build whose top alone is public."""


def _public_top(build_dir: Path, top: str) -> list[str]:
    """Verilator arguments that make ``top``'s own signals and every parameter public (a
    control file in ``build_dir``), instead of every signal of the design."""
    vlt = build_dir / "public_top.vlt"
    text = f'`verilator_config\npublic_flat_rw -module "{top}" -var "*"\n'
    if not vlt.exists() or vlt.read_text() != text:  # (a new time would verilate again)
        vlt.write_text(text)
    return [str(vlt), "--public-params"]


class _KeepRuntime(Verilator):
    """cocotb's Verilator runner whose make keeps the run-time objects already in the build
    folder (make -o): verilated.mk makes each depend on the Vtop.mk that Verilator has just
    written, so make would compile the copies again (about 10 s of CPU a build); and whose
    Verilator makes only the top's signals public (PUBLIC_FLAT_RW) unless ``public_all``."""

    keep: Sequence[str] = ()
    public_all = False

    def _build_command(self) -> list[list[str]]:
        *verilate, make = super()._build_command()
        if not self.public_all:
            verilate = [[a for a in cmd if a != PUBLIC_FLAT_RW] for cmd in verilate]
        return [*verilate, [*make, *(a for f in self.keep for a in ("-o", f))]]


WAVES_ON = ("NELSSA_WAVES", "WAVES")
"""Environment variables that ask for waveforms (ours, and cocotb's own), each 1/true/yes/on."""


def waves_requested(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in WAVES_ON)


def wave_file(build_dir: Path, fst: bool) -> Path:
    """Where cocotb's Verilator main writes the waves of a run in ``build_dir``."""
    return build_dir / ("dump.fst" if fst else "dump.vcd")


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
    expect_assertion: str | Collection[str] | None = None,
    unoptimized: bool = False,
    single_compile: bool | None = None,
    public_all: bool = False,
) -> None:
    """Build ``top`` (reusing a cached build) and run the cocotb tests in ``test_module``.

    Fails the calling pytest test unless at least one cocotb test ran and none failed.
    Waveforms: ``waves=True``, NELSSA_WAVES=1 or cocotb's WAVES=1 writes them into the build
    folder, and the run logs the file's path. The build is announced (its name, a "still
    building" line while it lasts, its time: ``verilator.announce_build``).
    ``build_extra``: more Verilator arguments, e.g. the C++ files of DPI-C functions.
    An assertion that fails stops the simulation with exit status 1 (its $error), which fails
    the calling test. ``expect_assertion``: the opposite, for a test that breaks a rule on
    purpose: the assertions that fire (rtl/include/nelssa_assert.svh prints "[ASSERT FAILED]
    [<instance>] <name>") must be exactly this one (or this set), none missing, none more.
    ``unoptimized``: compile the C++ at -O0 (a quarter less build time; for a unit whose
    simulation is short, where the build is most of the cost).
    ``single_compile``: compile the model as one C++ file, without precompiled headers
    (Verilator splits a model of some size); by default with ``unoptimized``, where it costs
    less: a third of the C++ compile's CPU for the small attention engine, cold CPU of
    test_ddr5_mem 7 s instead of 19, of test_ddr5_system 36 instead of 50.
    ``public_all``: every signal public through VPI (cocotb's own way), not only the top's
    (PUBLIC_FLAT_RW): for a design whose C++ grows when Verilator may optimize its insides.
    """
    setup_environment()
    waves = waves or waves_requested()
    srcs = list(sources) if sources is not None else unit_sources(top)
    params = dict(parameters or {})
    build_args = [str(VERILATOR_CONFIG), "--x-assign", "fast", "--x-initial", "fast", "-O3",
                  *ASSERT_ARGS, *build_extra]
    fst = waves and fst_available()
    if waves:
        build_args += wave_args()
    hashed = [*srcs, VERILATOR_CONFIG, *(Path(x) for x in build_extra if Path(x).is_file())]
    make_flags = UNOPTIMIZED_MAKEFLAGS if unoptimized else ""
    if single_compile is None:
        single_compile = unoptimized
    model_flags = f"{make_flags} {SINGLE_COMPILE_MAKEFLAGS}".strip() if single_compile else (
        make_flags)
    build_dir = cached_build_dir(f"cocotb-{top}", hashed, params,
                                 [*build_args, model_flags, *([] if public_all else [PUBLIC_TOP])])
    runner = _KeepRuntime()
    runner.public_all = public_all
    env = {"PYTHONPATH": os.pathsep.join([str(TESTS_RTL), os.environ.get("PYTHONPATH", "")])}
    env.update(extra_env or {})
    # one build folder holds the model and the run's results: one process at a time
    # the run-time objects depend on these options only (VM_TRACE, VM_COVERAGE, VM_TIMING,
    # CFLAGS; the optimization level is in the folder's name)
    shared = not waves and not any(a in build_args for a in ("--trace", "--trace-fst",
                                                             "--coverage", "--timing", "-CFLAGS"))
    # (not on VM_PARALLEL_BUILDS either: the run-time objects are compiled alike both ways)
    runtime = build_root() / f"cocotb-runtime-{source_hash([], None, [make_flags])}"
    with build_lock(build_dir), _make_flags(model_flags):
        if shared and _share_runtime(runtime, build_dir, into_build=True):
            runner.keep = [f"{n}.o" for n in RUNTIME_OBJECTS]
        built = (build_dir / top).exists()  # the folder is the design's: its model is cached
        with contextlib.nullcontext() if built else announce_build(f"cocotb-{top}", build_dir):
            runner.build(
                sources=srcs,
                hdl_toplevel=top,
                parameters=params,
                build_dir=build_dir,
                build_args=[*build_args, *([] if public_all else _public_top(build_dir, top))],
                waves=waves,
            )
        if shared:
            _share_runtime(runtime, build_dir, into_build=False)
        if expect_assertion is not None:
            log_file = build_dir / f"{test_filter or test_module}.log"
            with contextlib.suppress(RuntimeError, SystemExit):  # a failed run: read its log
                runner.test(hdl_toplevel=top, test_module=test_module, build_dir=build_dir,
                            test_dir=build_dir, extra_env=env, waves=waves,
                            test_filter=test_filter, log_file=log_file,
                            plusargs=[f"+verilator+error+limit+{ERROR_LIMIT}"])
            text = log_file.read_text(errors="replace")
            fired = {name for _, name in ASSERT_FIRED.findall(text)}
            expected = {expect_assertion} if isinstance(expect_assertion, str) else set(
                expect_assertion)
            assert fired == expected, (
                f"{test_filter}: expected {sorted(expected)} to fire, got {sorted(fired)} "
                f"(see {log_file})")
            return
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
        if waves:
            log.info("waves of %s: %s", test_module, wave_file(build_dir, fst))
    assert num_tests > 0, f"{test_module}: no cocotb test ran"
    assert num_failed == 0, f"{test_module}: {num_failed} of {num_tests} cocotb tests failed"
