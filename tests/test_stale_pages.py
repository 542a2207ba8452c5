"""Stale results pages (issue 44, item 10): every docs/results/ page is in the map of
nelssa/experiments/stale.py, the map's paths exist, and a change to a page's measured code after
the commit it ran at makes it stale."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nelssa.experiments.stale import (
    PAGES,
    Measured,
    State,
    check,
    main,
    mark,
    page_commit,
    unmapped,
)

ROOT = Path(__file__).resolve().parents[1]


def test_every_results_page_is_mapped_or_hand_written():
    assert unmapped(ROOT) == []
    assert not set(PAGES) - {p.name for p in (ROOT / "docs/results").glob("*.md")}


def test_the_map_names_paths_that_exist():
    missing = [p for m in PAGES.values() if m is not None for p in m.paths
               if not (ROOT / p).exists()]
    assert missing == []


def test_it_runs_on_this_repository(capsys):
    assert main(["--repo", str(ROOT), "--all"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":", 1)[0] for line in out[:-1]] == sorted(PAGES)  # one line a page
    assert out[-1].endswith(f"of {len(PAGES)} pages stale")


def test_commits_are_read_from_the_page():
    assert page_commit("Code: 5909c4e, 2026-12-01") == "5909c4e"
    assert page_commit("Measured at 957cbdd on ...") == "957cbdd"
    assert page_commit("No commit here, 2026-12-01.") is None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                          "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                                          "HOME": str(repo), "PATH": "/usr/bin:/bin"}
                          ).stdout.strip()


def _commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    """Write ``files`` (repository path: text) and commit them; the commit's short id."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "--short", "HEAD")


def test_a_change_to_measured_code_makes_a_page_stale(tmp_path):
    repo = tmp_path
    _git(repo, "init", "-q")
    ran = _commit_files(repo, {"scripts/run.py": "print(1)\n", "lib/a.py": "A = 1\n",
                               "lib/b.py": "B = 1\n"}, "code")
    _commit_files(repo, {"docs/results/named.md": f"# Named\n\nCode: {ran}, 2026-12-06\n",
                         "docs/results/dated.md": "# Dated by its last edit\n",
                         "docs/results/old.md": "# A record\n"}, "pages")
    pages = {"named.md": Measured("scripts/run.py", ("lib/a.py",)),
             "dated.md": Measured("scripts/run.py", ("lib",)), "old.md": None}
    assert {s.page: s.state for s in check(repo, pages)} == {
        "named.md": State.FRESH, "dated.md": State.FRESH, "old.md": State.HAND_WRITTEN}

    (repo / "lib/b.py").write_text("B = 2\n")  # measured by dated.md only
    _git(repo, "commit", "-qam", "change b")
    states = {s.page: s for s in check(repo, pages)}
    assert states["named.md"].state is State.FRESH
    assert states["dated.md"].state is State.STALE
    assert states["dated.md"].changed == ("lib/b.py",) and not states["dated.md"].named
    assert "names no commit" in states["dated.md"].line()

    (repo / "lib/a.py").write_text("A = 2\n")
    _git(repo, "commit", "-qam", "change a")
    named = {s.page: s for s in check(repo, pages)}["named.md"]
    assert named.state is State.STALE and named.changed == ("lib/a.py",) and named.named
    assert named.line().startswith(f"named.md: stale at {ran}")

    (repo / "docs/results/named.md").write_text("# Named\n\nCode: 0123456789, 2026-12-06\n")
    assert {s.page: s for s in check(repo, pages)}["named.md"].state is State.UNKNOWN
    assert unmapped(repo, {"named.md": None}) == ["dated.md", "old.md"]


def test_only_code_the_script_runs_and_only_code_changes_count(tmp_path):
    """Within a declared folder a package module the script never imports does not date the
    page; a change to comments, docstrings or blank space does not either; a change to what
    runs does. --mark puts the note on the stale page (naming its commit first, so the check
    still reads that one) and takes it off once the page is fresh again."""
    repo = tmp_path
    _git(repo, "init", "-q")
    ran = _commit_files(repo, {
        "nelssa/__init__.py": "", "nelssa/used.py": '"""Doc."""\n\nX = 1  # why\n',
        "nelssa/unused.py": "Y = 1\n", "rtl/unit.sv": "module unit; // a unit\nendmodule\n",
        "scripts/run.py": "def main():\n    from nelssa import used\n"}, "code")
    _commit_files(repo, {"docs/results/p.md": f"# P\n\nCode: {ran}\n"}, "page")
    pages = {"p.md": Measured("scripts/run.py", ("nelssa", "rtl"))}

    def state():
        return {s.page: s for s in check(repo, pages)}["p.md"]

    (repo / "nelssa/unused.py").write_text("Y = 2\n")
    (repo / "nelssa/used.py").write_text('"""Another doc."""\n\n\nX = 1  # and why not\n')
    (repo / "rtl/unit.sv").write_text("module unit;   /* the unit */\n\nendmodule\n")
    _git(repo, "commit", "-qam", "cosmetic")
    s = state()
    assert s.state is State.FRESH and s.cosmetic == 2 and s.changed == ()
    assert mark(repo, [s], pages) == []

    (repo / "rtl/unit.sv").write_text("module unit; logic a; endmodule\n")
    (repo / "nelssa/used.py").write_text('"""Another doc."""\n\nX = 2\n')
    _git(repo, "commit", "-qam", "code changes")
    s = state()
    assert s.state is State.STALE and s.changed == ("nelssa/used.py", "rtl/unit.sv")
    assert mark(repo, [s], pages) == ["p.md"]
    text = (repo / "docs/results/p.md").read_text()
    assert text.startswith("<!-- stale -->\n> **Stale.** Measured at `" + ran)
    assert text.endswith(f"# P\n\nCode: {ran}\n")
    _git(repo, "commit", "-qam", "marked")
    assert state().commit == ran and state().state is State.STALE
    assert mark(repo, [state()], pages) == []  # marking again changes nothing

    (repo / "nelssa/used.py").write_text('"""Doc."""\n\nX = 1\n')
    (repo / "rtl/unit.sv").write_text("module unit; endmodule\n")
    _git(repo, "commit", "-qam", "back")
    s = state()
    assert s.state is State.FRESH
    assert mark(repo, [s], pages) == ["p.md"]
    assert (repo / "docs/results/p.md").read_text() == f"# P\n\nCode: {ran}\n"


def test_import_closure_follows_the_package(tmp_path):
    from nelssa.experiments.stale_scope import import_closure

    closure = import_closure(ROOT, "scripts/reproduce_paper.py")
    assert {"scripts/reproduce_paper.py", "emu/serving/sim.py", "emu/latency/model.py",
            "emu/serving/__init__.py", "nelssa/__init__.py"} <= closure
    assert "host/gpu/decode.py" not in closure


def test_a_page_the_map_names_but_docs_lack_is_missing(tmp_path, capsys):
    _git(tmp_path, "init", "-q")
    _commit_files(tmp_path, {"scripts/run.py": "print(1)\n", "docs/results/a.md": "# A\n"}, "c")
    states = check(tmp_path, {"a.md": Measured("scripts/run.py", ()),
                              "gone.md": Measured("scripts/run.py", ())})
    assert [(s.page, s.state) for s in states] == [("a.md", State.FRESH),
                                                    ("gone.md", State.MISSING)]
    with pytest.raises(SystemExit) as e:
        main(["--repo", str(tmp_path), "--mark", "nope.md"])
    assert e.value.code == 2 and "not a results page: nope.md" in capsys.readouterr().err


def test_a_process_the_script_starts_counts_as_imported(tmp_path):
    """Code a script runs in a process it starts (``-m nelssa.x``) is code it measures."""
    from nelssa.experiments.stale_scope import import_closure

    for name, text in {"nelssa/__init__.py": "", "nelssa/served.py": "from nelssa import deep\n",
                       "nelssa/deep.py": "", "nelssa/other.py": "",
                       "scripts/run.py": 'CMD = ["python", "-m", "nelssa.served"]\n'}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert import_closure(tmp_path, "scripts/run.py") == {
        "scripts/run.py", "nelssa/__init__.py", "nelssa/served.py", "nelssa/deep.py"}
