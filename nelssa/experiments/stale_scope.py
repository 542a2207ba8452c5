"""What a results page measures, precisely enough that a page goes stale only when that code
changed: the Python files its script imports (transitively, inside the page's declared paths)
and the declared non-Python sources; and whether a file's change is one of code at all (a Python
file whose syntax tree, docstrings aside, is the same, or a source whose text outside comments
and blank space is the same, did not change what runs)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

PACKAGES = {"nelssa.hw": "hw", "nelssa.driver": "driver", "nelssa.host": "host",
            "nelssa.emu": "emu", "nelssa": "nelssa"}
"""The distribution's packages and their folders (pyproject.toml's package-dir), longest
first where one prefixes another."""

_MODULE_NAME = re.compile(r"nelssa(\.[a-z_][a-z0-9_]*)+")
_C_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_HASH_COMMENTS = re.compile(r"(?m)^\s*#(?!\s*(?:include|define|if|endif|else|pragma)).*$")
_C_LIKE = {".sv", ".svh", ".v", ".cpp", ".cc", ".h", ".hpp", ".c"}


def module_file(repo: Path, module: str) -> Path | None:
    """The repository file of a ``nelssa`` module (a package's ``__init__.py``), or None."""
    for pkg, folder in PACKAGES.items():
        if module == pkg or module.startswith(pkg + "."):
            base = repo / folder / Path(*module[len(pkg):].lstrip(".").split(".")) \
                if module != pkg else repo / folder
            for cand in (base.with_suffix(".py"), base / "__init__.py"):
                if cand.is_file():
                    return cand
            return None
    return None


def _module_of(repo: Path, path: Path) -> str | None:
    rel = path.relative_to(repo)
    for pkg, folder in PACKAGES.items():
        if rel.parts[0] == folder:
            parts = [*rel.with_suffix("").parts[1:]]
            if parts and parts[-1] == "__init__":
                parts.pop()
            return ".".join([pkg, *parts])
    return None


@functools.lru_cache(maxsize=4096)
def _imports(repo: Path, path: Path) -> frozenset[str]:
    """The ``nelssa`` modules a file imports anywhere in it (function bodies too); for
    ``from X import y`` both X and X.y (y may be a submodule); and a string that is a module's
    name (``"-m", "nelssa.cli"``: the code a process it starts runs)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return set()
    here = _module_of(repo, path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and here:
                parent = here.split(".")
                drop = node.level - (1 if is_pkg else 0)
                parent = parent[:len(parent) - drop] if drop else parent
                base = ".".join([*parent, base] if base else parent)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _MODULE_NAME.fullmatch(node.value)):
            out.add(node.value)  # a process it starts: [sys.executable, "-m", "nelssa.cli"]
    return frozenset(m for m in out if m == "nelssa" or m.startswith("nelssa."))


def import_closure(repo: Path, script: str) -> set[str]:
    """Repository paths of the Python files ``script`` imports, transitively (with the parent
    packages' ``__init__.py`` Python runs on the way)."""
    seen: set[Path] = set()
    todo = [repo / script]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for module in _imports(repo, path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):
                found = module_file(repo, ".".join(parts[:i]))
                if found is not None and found not in seen:
                    todo.append(found)
    return {str(p.relative_to(repo)) for p in seen}


def scope(repo: Path, script: str, declared: tuple[str, ...], files: list[str]) -> list[str]:
    """Of ``files`` (repository paths under the script or ``declared``), those the page
    measures: the script; a file ``declared`` names itself; under a declared folder, a
    non-Python file, a Python file outside the package, or a package module the script
    imports."""
    closure = import_closure(repo, script)
    out = []
    for f in files:
        if f == script or f in declared:
            out.append(f)
        elif not f.endswith(".py") or f in closure or _module_of(repo, repo / f) is None:
            out.append(f)  # a Python file outside the package (tests/) runs as a whole
    return out


def normalized(path: str, text: str | None) -> object:
    """What of a source file's text can change what runs: a Python file's syntax tree without
    docstrings; a C-like or other source's text without comments and with blank space folded.
    None for a file that is not there."""
    if text is None:
        return None
    if path.endswith(".py"):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return text
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list):
                node.body = [s for s in body if not (
                    isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                    and isinstance(s.value.value, str))] or [ast.Pass()]
        return ast.dump(tree, annotate_fields=False)
    if Path(path).suffix in _C_LIKE:
        text = _C_COMMENTS.sub(" ", text)
    elif Path(path).suffix in {".py", ".sh", ".mk", ".toml", ".yaml", ".yml", ""}:
        text = _HASH_COMMENTS.sub("", text)
    return " ".join(text.split())
