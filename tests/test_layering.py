"""No import runs upward against the layering of DESIGN.md ("Layering, bottom to top").

Every ``import`` and ``from ... import`` (relative ones resolved, those inside functions too) of
every module under the package folders is parsed with ``ast`` and ranked. Placement of the two
modules DESIGN.md leaves open:

- ``emu/launcher`` (process start-up, endpoint and socket-file checks) uses only the standard
  library and knows nothing of devices or LLMs, like the transport: rank 1, beside ``emu/link``,
  so the PNM node (rank 5) may start and check its endpoints with it.
- ``emu/files`` (the bounded reader of every input file) uses only the standard library: rank 1,
  so every layer reads its files through it.

``host/gpu`` ranks just above ``host/pnm_node``: it is a client of the node, never the reverse.
A module that no rank names fails the test, so a new folder must be placed before it is used.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TOP = 7
"""The ``nelssa`` command line and build steps (``nelssa.cli*``, ``nelssa.gen``, ...)."""
RANKS: dict[str, float] = {
    "nelssa.emu.link": 1, "nelssa.emu.launcher": 1, "nelssa.emu.files": 1,
    "nelssa.driver": 2,
    "nelssa.hw": 3,
    "nelssa.emu.latency": 4, "nelssa.emu.policy": 4,
    "nelssa.emu.energy": 4.5,  # priced from the hardware description; co-sim and serving use it
    "nelssa.host.pnm_node": 5, "nelssa.host.gpu": 5.5,
    "nelssa.emu.serving": 6,
    # building for a board (resource plans from the hardware description's boards, the open
    # place-and-route flow and its arithmetic-unit runs, the vendor project): tools over the
    # device, like the command line
    "nelssa.hw.fpga.plan": TOP, "nelssa.hw.fpga.pnr": TOP,
    "nelssa.hw.fpga.vivado": TOP, "nelssa.hw.fpga.units": TOP, "nelssa.hw.fpga.lanes_model": TOP,
}
"""Rank of each package prefix, bottom (1) to top; longest prefix wins."""
SUBPACKAGE_ROOTS = ("nelssa.emu", "nelssa.host", "nelssa.hw", "nelssa.driver")
"""Packages whose every module must be named by RANKS (anything else under ``nelssa`` is TOP)."""


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported} ({self.why})"


def rank(module: str, ranks: dict[str, float] = RANKS) -> float | None:
    """Rank of a ``nelssa`` module; None for one no rank names; 0 for the root package and the
    folders that only group subpackages (``nelssa.emu``, ``nelssa.host``), which import nothing."""
    if module == "nelssa" or (module in SUBPACKAGE_ROOTS and module not in ranks):
        return 0
    best = max((p for p in ranks if module == p or module.startswith(p + ".")), key=len,
               default=None)
    if best is not None:
        return ranks[best]
    if any(module == r or module.startswith(r + ".") for r in SUBPACKAGE_ROOTS):
        return None
    return TOP


def package_dirs(root: Path) -> dict[str, Path]:
    """Package name -> folder, from pyproject's setuptools package-dir."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    return {pkg: root / d for pkg, d in cfg["tool"]["setuptools"]["package-dir"].items()}


def modules(dirs: dict[str, Path]) -> dict[str, Path]:
    """Every module name of the distribution -> its file (packages by their ``__init__``)."""
    out = {}
    for pkg, folder in dirs.items():
        for f in sorted(folder.rglob("*.py")):
            parts = f.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([pkg, *parts])
            # a subpackage mapped to a folder of its own is named by that mapping, not this one
            out.setdefault(name, f)
    return out


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported nelssa module) for every import statement of one module."""
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((node.lineno, sub if sub in known else base))
    unique = dict.fromkeys(found)  # `from m import a, b` names m once
    return [(line, m) for line, m in unique if m == "nelssa" or m.startswith("nelssa.")]


def violations(root: Path, ranks: dict[str, float] = RANKS) -> list[Violation]:
    """Every import of a module by one ranked lower than it, and every unranked module."""
    known = modules(package_dirs(root))
    out = []
    for name, path in known.items():
        own = rank(name, ranks)
        rel = path.relative_to(root)
        if own is None:
            out.append(Violation(rel, 1, name, name, "no rank in tests/test_layering.RANKS"))
            continue
        for line, target in imports(name, path, known):
            theirs = rank(target, ranks)
            if theirs is None:
                out.append(Violation(rel, line, name, target, "no rank for the imported module"))
            elif theirs > own:
                out.append(Violation(rel, line, name, target,
                                     f"rank {theirs:g} above the importer's {own:g}"))
    return out


def test_no_import_runs_upward():
    found = violations(ROOT)
    assert not found, "imports against DESIGN.md's layering:\n" + "\n".join(map(str, found))


def test_the_package_imports_no_test_helpers():
    """The fuzzers (tests/fuzz) and other helpers of the tests are not installed: no module of
    the distribution may import them."""
    found = []
    for name, path in modules(package_dirs(ROOT)).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            found += [f"{name}:{node.lineno}: {n}" for n in names
                      if n == "tests" or n.startswith("tests.")]
    assert not found, found
    assert not any(n.startswith("nelssa.emu.fuzz") for n in modules(package_dirs(ROOT)))


def test_every_package_folder_is_seen():
    """The check reads the real tree: each layer's folder holds modules it ranks."""
    names = modules(package_dirs(ROOT))
    for prefix in ("nelssa.emu.link", "nelssa.driver", "nelssa.hw.model", "nelssa.emu.latency",
                   "nelssa.host.pnm_node", "nelssa.host.gpu", "nelssa.emu.serving", "nelssa.cli"):
        assert any(n.startswith(prefix) for n in names), prefix
    assert len(names) > 50


PYPROJECT = """
[tool.setuptools.package-dir]
"nelssa" = "nelssa"
"nelssa.driver" = "driver"
"nelssa.hw" = "hw"
"nelssa.emu" = "emu"
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    base = {"nelssa/__init__.py": "", "nelssa/cli.py": "from nelssa.hw import model\n",
            "driver/__init__.py": "", "driver/regs.py": "import struct\n",
            "hw/__init__.py": "", "hw/model/__init__.py": "", "emu/__init__.py": "",
            "emu/link/__init__.py": "", "emu/link/model.py": "", "hw/model/device.py":
            "from nelssa.driver import regs\nfrom nelssa.emu.link.model import x\n"}
    for rel, text in {**base, **files}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_a_clean_synthetic_tree_passes(tmp_path):
    assert violations(_tree(tmp_path, {})) == []


@pytest.mark.parametrize("rel, text, imported", [
    ("driver/bad.py", "from nelssa.hw.model import device\n", "nelssa.hw.model.device"),
    ("driver/bad.py", "def f():\n    import nelssa.hw.model.device\n", "nelssa.hw.model.device"),
    ("driver/bad.py", "from ..hw.model import device\n", "nelssa.hw.model.device"),
    ("emu/link/bad.py", "from nelssa.driver import regs\n", "nelssa.driver.regs"),
    ("hw/model/bad.py", "from nelssa import cli\n", "nelssa.cli"),
])
def test_a_planted_upward_import_fails(tmp_path, rel, text, imported):
    found = violations(_tree(tmp_path, {rel: text}))
    assert [(str(v.path), v.imported) for v in found] == [(rel, imported)], found
    assert "above the importer" in found[0].why


def test_an_unranked_module_fails(tmp_path):
    found = violations(_tree(tmp_path, {"emu/newthing/__init__.py": ""}))
    assert [(v.importer, v.why) for v in found] == [
        ("nelssa.emu.newthing", "no rank in tests/test_layering.RANKS")]
