"""No two public classes of the package share a name: a name says what a thing does, and one
that means two things (four ``Request`` classes once) sends a reader to the wrong one.

Every module of the distribution (pyproject's package-dir folders) is parsed with ``ast``; a
public class is a top-level ``class`` whose name does not start with ``_``.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ALLOWED: dict[str, set[str]] = {}
"""Name -> the files whose class of that name may stand beside one other (an allow-list to
empty, not to grow)."""


def public_classes(root: Path) -> dict[str, list[str]]:
    """Public class name -> the files (relative to ``root``) that define one."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    folders = sorted({root / d for d in cfg["tool"]["setuptools"]["package-dir"].values()})
    found: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    found[node.name].append(str(path.relative_to(root)))
    return found


def shared(found: dict[str, list[str]],
           allowed: dict[str, set[str]] = ALLOWED) -> dict[str, list[str]]:
    """The names more than one file defines, less the allowed files."""
    out = {}
    for name, files in found.items():
        rest = [f for f in files if f not in allowed.get(name, set())]
        if len(files) > 1 and len(rest) != 1:
            out[name] = files
    return out


def test_no_two_public_classes_share_a_name():
    found = public_classes(ROOT)
    assert len(found) > 100  # the real tree was read
    clash = shared(found)
    assert not clash, "public classes sharing a name:\n" + "\n".join(
        f"{name}: {', '.join(files)}" for name, files in sorted(clash.items()))


def test_a_planted_clash_fails(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"nelssa.a" = "a"\n"nelssa.b" = "b"\n')
    for folder, text in (("a", "class Plan:\n    pass\nclass _Own:\n    pass\n"),
                         ("b", "class Plan:\n    pass\nclass _Own:\n    pass\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text(text)
    assert shared(public_classes(tmp_path)) == {"Plan": ["a/m.py", "b/m.py"]}
    assert shared(public_classes(tmp_path), {"Plan": {"a/m.py"}}) == {}
