"""What the README and the guides tell a user holds: every `nelssa` command line they show parses
with today's options, every `make` target they name exists, every file or module they name is
there, and the device guide's Python example runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from nelssa.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _shell_lines(page: Path) -> list[str]:
    """Command lines of the page's ```sh blocks (comments dropped, continuations joined)."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line:
                out.append(line)
    return out


COMMANDS = [(p.name, line) for p in PAGES for line in _shell_lines(p)
            if ".venv/bin/nelssa " in line]


def test_pages_show_commands():
    assert len(COMMANDS) > 20
    assert {name for name, _ in COMMANDS} >= {"README.md", "node.md", "gpu_node.md",
                                              "serving.md", "fpga.md", "device.md"}


@pytest.mark.parametrize("page, line", COMMANDS)
def test_nelssa_command_lines_parse(page, line, monkeypatch, tmp_path):
    """Each shown `nelssa` line is accepted by the parser (placeholders aside)."""
    words = line.split(".venv/bin/nelssa ", 1)[1].split("&&")[0].rstrip("& ")
    words = re.sub(r"\$\(\((\d+) << (\d+)\)\)", lambda m: str(int(m[1]) << int(m[2])), words)
    words = re.sub(r"\[(--[^]]*)\]", r"\1", words)  # an optional part, shown in brackets
    if "..." in words or re.search(r"\b[A-Z][A-Z_]{2,}\b", words):
        pytest.skip("a placeholder in the line")
    monkeypatch.chdir(tmp_path)  # files the line reads are made here, files it writes land here
    argv = shlex.split(words)
    for i, w in enumerate(argv):
        if w.startswith("../shared"):  # beside the checkout where there is one (not on CI)
            there = ROOT / w
            if not there.exists():
                there = tmp_path / w.removeprefix("../")
                there.parent.mkdir(parents=True, exist_ok=True)
                there.touch()
            argv[i] = str(there)
        elif w.startswith("/tmp/boards/") or w.endswith("/") or argv[i - 1] == "--model":
            Path(w if w.startswith("/") else tmp_path / w).mkdir(parents=True, exist_ok=True)
        elif "/" in w and "://" not in w and not w.startswith(("-", "/")):
            (tmp_path / w).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / w).touch()
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code:
            raise AssertionError(f"{page}: `nelssa {words}` does not parse") from None


def test_make_targets_named_exist():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    for page in PAGES:
        for name in re.findall(r"`make ([a-z][a-z0-9-]*)", page.read_text()):
            assert name in targets, f"{page.name}: make {name}"
    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"`make` targets: (.*?)\. Every", readme, re.S).group(1)
    for name in re.findall(r"`([a-z][a-z0-9-]*)`", listed):
        assert name in targets, f"README: make {name}"


def test_paths_named_exist():
    """Every repository path in backticks (``rtl/...``, ``emu/policy/router.py``) exists."""
    prefixes = ("rtl/", "hw/", "driver/", "host/", "emu/", "nelssa/", "tests/", "scripts/",
                "docs/")
    for page in PAGES:
        if page.name == "registers.md":
            continue
        for ref in re.findall(r"`([a-z_]+/[A-Za-z0-9_./*{},-]+)`", page.read_text()):
            if not ref.startswith(prefixes) or any(c in ref for c in "*{"):
                continue
            module = ref.rsplit(".", 1)[0] + ".py"  # path/module.NAME: a name in a module
            assert (ROOT / ref.rstrip("/")).exists() or (ROOT / module).is_file(), \
                f"{page.name}: {ref}"


def test_paper_concepts_table_names_modules():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("Where each concept of the paper lives:")[1].split("## ")[0]
    rows = re.findall(r"^\| [\d.]+ \| (.*?) \| `([^`]+)`", table, re.M)
    concepts = " ".join(c for c, _ in rows)
    for word in ("partitioner", "dispatcher", "aggregator", "Memory API", "Command API",
                 "centroid meta-info", "split-batch routing", "LSE merge", "migration",
                 "crossover"):
        assert word in concepts, word
    for _, path in rows:
        assert (ROOT / path).is_file(), path


def test_device_guide_example_runs():
    page = (ROOT / "docs" / "device.md").read_text()
    # the blocks run in order, each continuing the one before
    code = "".join(re.findall(r"```python\n(.*?)```", page, re.S))
    from nelssa.hw.sim.demo import bf16_normal

    rng = np.random.default_rng(0)
    env = {"keys": [bf16_normal(rng, (16, 128)) for _ in range(8)],
           "values": [bf16_normal(rng, (16, 128)) for _ in range(8)],
           "q": bf16_normal(rng, (4, 128)), "selected_cluster_ids": [1, 5]}
    exec(compile(code, "docs/device.md", "exec"), env)
    assert env["out"].status.name == "OK" and env["out"].o.shape == (4, 128)
    # the split over the units: the same attention as one descriptor, to the merge's rounding
    np.testing.assert_allclose(env["o"], env["out"].o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(env["lse"], env["out"].lse, rtol=1e-6, atol=1e-6)
