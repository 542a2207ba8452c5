"""What a run keeps of how it was made: its fully resolved configuration (hardware values, not
only preset names; the input files' paths and SHA-256; every setting), the project's version
and git commit, written as ``config.json`` beside the run's results; and the rule that a run
never silently replaces another's results (``check_fresh``).

    doc = run_config("serve-sim", argv, {"trace": file_record(path), ...})
    check_fresh(out, overwrite)          # before the run: refuse a folder holding a run
    write_config(out / CONFIG_FILE, doc, outputs=[...])

``config_hash`` is a hash of the configuration alone (not of when or by whom it ran), so two
runs of the same inputs have the same hash and a changed hardware value gives another.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import logging
import math
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from nelssa import __version__
from nelssa.emu.files import TRACE_BYTES, InputFileError, open_bounded
from nelssa.options import UsageError

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
"""The resolved configuration a run writes beside its results."""
UNKNOWN = "unknown"
"""The commit (and whether the tree was modified) outside a git checkout."""
VOLATILE = ("created", "argv", "outputs", "config_hash", "nelssa")
"""Fields of the document that say when, how and by which code it ran, not what it ran: left
out of ``config_hash``."""


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values: dataclasses and pydantic models as objects, enums by
    value, paths as strings, tuples and sets as lists, non-finite floats as null."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "model_dump"):  # a pydantic model (fleet descriptions)
        return jsonable(obj.model_dump())
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return str(obj)


def config_hash(doc: dict[str, Any]) -> str:
    """SHA-256 (hex) of the configuration in ``doc``, without its volatile fields."""
    text = json.dumps(jsonable({k: v for k, v in doc.items() if k not in VOLATILE}),
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@cache
def file_sha256(path: str) -> str:
    """SHA-256 (hex) of a file the run reads (bounded as a trace is)."""
    h = hashlib.sha256()
    try:
        with open_bounded(path, "file", TRACE_BYTES) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (InputFileError, OSError) as e:
        log.debug("cannot hash %s: %s", path, e)
        return UNKNOWN
    return h.hexdigest()


def file_record(path: str | Path) -> dict[str, str]:
    """An input file as the configuration names it: its absolute path and SHA-256."""
    p = Path(path)
    return {"path": str(p.resolve()), "sha256": file_sha256(str(p.resolve()))}


def _git(*args: str) -> str | None:
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@cache
def code_version() -> dict[str, Any]:
    """The project's version, and its git commit and whether tracked files differ from it
    (``unknown`` where the code is not in a git checkout)."""
    top = _git("rev-parse", "--show-toplevel")
    here = Path(__file__).resolve().parent / "__init__.py"
    ours = top is not None and (Path(top) / "nelssa" / "__init__.py").resolve() == here
    commit = _git("rev-parse", "HEAD") if ours else None  # not another repository's
    if not commit:
        return {"version": __version__, "commit": UNKNOWN, "modified": UNKNOWN}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"version": __version__, "commit": commit,
            "modified": UNKNOWN if status is None else bool(status)}


def commit_label() -> str:
    """The code's commit as a results page names it: ``abc1234``, ``abc1234 (modified)`` where
    tracked files outside docs/ differ from it, or ``unknown`` (nelssa/experiments/stale.py
    reads it back from the page's ``Code:`` or ``at`` line)."""
    code = code_version()
    if code["commit"] == UNKNOWN:
        return UNKNOWN
    # pages a run writes (docs/) are not the code: a rerun of several pages in a row is not
    # "modified" by the page the one before it wrote
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs")
    return str(code["commit"])[:7] + (" (modified)" if status else "")


def run_config(command: str, argv: list[str] | None, body: dict[str, Any]) -> dict[str, Any]:
    """The document of one run: ``body`` (its resolved configuration), the command and its
    arguments, when it ran, the code's version, and ``config_hash`` over ``body``."""
    doc: dict[str, Any] = {"command": command, **jsonable(body)}
    doc["config_hash"] = config_hash(doc)
    doc["nelssa"] = code_version()
    doc["created"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    doc["argv"] = list(argv or [])
    return doc


def write_config(path: Path, doc: dict[str, Any], outputs: list[str] | None = None) -> None:
    """``doc`` (with the names of the files the run wrote) as JSON at ``path``."""
    if outputs is not None:
        doc = {**doc, "outputs": sorted(outputs)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(jsonable(doc), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def earlier_run(folder: Path, marks: tuple[str, ...] = (CONFIG_FILE, "results.json")
                ) -> Path | None:
    """The file that shows ``folder`` holds an earlier run's results, or None."""
    for name in marks:
        if (folder / name).exists():
            return folder / name
    return None


def check_fresh(folder: Path, overwrite: bool, option: str = "--out",
                marks: tuple[str, ...] = (CONFIG_FILE, "results.json")) -> None:
    """Refuse (UsageError naming ``option``) to write into a folder that holds an earlier run,
    unless ``overwrite``: then the files that run listed as its outputs are removed, so none of
    them is left to pass as the new run's."""
    found = earlier_run(folder, marks)
    if found is None:
        return
    if not overwrite:
        what = _describe(folder / CONFIG_FILE)
        raise UsageError(f"{option} {folder}: holds an earlier run's results ({found.name}"
                         f"{what}); give another {option} folder, or --overwrite to replace "
                         "them")
    for name in _outputs(folder / CONFIG_FILE) + list(marks):
        p = folder / name
        if p.is_file() and p.parent.resolve() == folder.resolve():
            p.unlink()


def _read_doc(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _describe(path: Path) -> str:
    doc = _read_doc(path)
    if not doc:
        return ""
    return f", {doc.get('command', 'a run')} of {doc.get('created', 'an unknown time')}"


def _outputs(path: Path) -> list[str]:
    outs = _read_doc(path).get("outputs", [])
    return [o for o in outs if isinstance(o, str) and "/" not in o and o not in ("", ".", "..")]


def config_beside(*results: str | None) -> Path | None:
    """Where a run whose results are the files ``results`` writes its configuration: beside
    the first that is a file path (``NAME.config.json`` for ``NAME.json`` or ``NAME.png``);
    None when each is discarded (``/dev/null``) or not given."""
    for r in results:
        if r is None:
            continue
        p = Path(r)
        if p.exists() and not p.is_file():  # a device such as /dev/null: kept nowhere
            continue
        return p.with_name(p.stem + ".config.json")
    return None


def check_fresh_files(config: Path | None, overwrite: bool, options: str) -> None:
    """Refuse (UsageError) a run whose configuration file exists already, an earlier run's
    beside its results, unless ``overwrite``."""
    if config is None or overwrite or not config.exists():
        return
    raise UsageError(f"{config} holds an earlier run's configuration{_describe(config)}, its "
                     f"results beside it: give other {options} paths, or --overwrite to "
                     "replace them")
