"""Which docs/results/ pages may be stale: each page declares (here) the script that produced it
and the code it measures; a page whose script or measured code changed in a commit after the
one the page ran at is listed, with what changed. Pages written by hand (records of a past
state) are declared as such and never listed. Precisely (stale_scope.py): of a declared folder,
only the package modules the script imports count (and every non-Python source), and a change
to comments, docstrings or blank space only is no change. ``--mark`` writes a note at the top
of each stale page, so a reader of the page sees it.

A page names its commit as ``Code: abc1234``, ``at abc1234`` or ``commit abc1234``; a page
naming none is dated by the last commit that changed the page itself (and says so).
"""

from __future__ import annotations

import argparse
import enum
import functools
import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nelssa.experiments.stale_scope import normalized, scope

log = logging.getLogger(__name__)

RESULTS = Path("docs/results")


@dataclass(frozen=True)
class Measured:
    """What a page's figures come from: its script and the code it measures (repository paths,
    files or folders)."""

    script: str
    modules: tuple[str, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.script, *self.modules)


HAND_WRITTEN = None
"""A page written by hand (a record of a past state, kept as it was): never stale."""

PAGES: dict[str, Measured | None] = {
    "adaptive.md": Measured("scripts/adaptive_eval.py", (
        "nelssa/experiments/adaptive_eval.py", "emu/policy/adaptive.py", "emu/serving")),
    "cosim_agreement.md": Measured("scripts/cosim_agreement.py", (
        "nelssa/experiments/cosim_agreement.py", "nelssa/cosim_agreement.py", "host/gpu",
        "emu/latency")),
    "ddr5.md": Measured("scripts/bench_ddr5.py", (
        "rtl/mem", "hw/model/ddr5_device.py", "hw/model/ddr5_timing.py")),
    "ddr5_energy.md": Measured("scripts/ddr5_energy.py", (
        "nelssa/experiments/ddr5_energy.py", "hw/model/ddr5_energy.py", "hw/model/ddr5_power.py",
        "hw/model/ddr5_replay.cpp", "hw/model/ddr5_sub.hpp")),
    "ddr5_ramulator.md": Measured("scripts/bench_ddr5.py", (
        "hw/model/ddr5_replay.py", "hw/model/ddr5_timing.py")),
    "decode.md": Measured("scripts/needle_report.py", (
        "host/gpu", "host/pnm_node", "nelssa/cli_decode.py", "nelssa/cli_decode_args.py")),
    "device.md": HAND_WRITTEN,  # the two-unit device's figures, kept (it says so); no script
    "device_bench.md": Measured("scripts/bench_device.py", (
        "hw/model/device.py", "hw/model/bandwidth.py")),
    "device_sim_speed.md": Measured("scripts/bench_sim_speed.py", (
        "hw/model", "hw/sim/device.py")),
    "device_timing.md": Measured("scripts/device_timing_check.py", (
        "hw/model/device_timing.py", "hw/model/device_cycle.py")),
    "energy.md": Measured("scripts/energy_results.py", (
        "nelssa/experiments/energy_page.py", "emu/energy.py", "emu/serving",
        "emu/latency/hardware.json", "emu/latency/hardware.py")),
    "engine.md": Measured("scripts/bench_engine.py", (
        "rtl/core", "hw/model/engine.py", "hw/sim/engine.py")),
    "fpga_pnr.md": Measured("scripts/fpga_pnr.py", (
        "hw/fpga/pnr.py", "hw/fpga/plan.py", "hw/fpga/resource_model_ecp5.json", "rtl/core",
        "rtl/cxl", "rtl/mem", "rtl/top")),
    "fpga_units.md": Measured("scripts/fpga_units.py", (
        "hw/fpga/units.py", "hw/fpga/pnr.py", "rtl/core/nelssa_fp_tables_pkg.sv",
        "rtl/core/nelssa_fp_pkg.sv",
        "rtl/core/nelssa_fp32_add.sv", "rtl/core/nelssa_fp32_mul.sv",
        "rtl/core/nelssa_fp32_add_staged.sv", "rtl/core/nelssa_fp32_mul_staged.sv")),
    "fuzz.md": Measured("scripts/fuzz.py", ("tests/fuzz",)),
    "fuzz_before_fixes.md": HAND_WRITTEN,
    "ingest.md": Measured("scripts/bench_ingest.py", (
        "driver/memory.py", "driver/remote.py", "driver/remote_server.py",
        "host/pnm_node/devices.py")),
    "ingest_beside.md": Measured("scripts/ingest_beside.py", (
        "nelssa/experiments/ingest_beside.py", "hw/model", "hw/sim/device.py", "rtl/top",
        "rtl/mem", "rtl/core")),
    "largest_attend.md": Measured("scripts/largest_attend.py", (
        "host/pnm_node", "driver/formats.py")),
    "fleet_cosim.md": Measured("scripts/fleet_cosim_check.py", (
        "nelssa/experiments/fleet_cosim_check.py", "nelssa/cli_gpu_nodes.py", "nelssa/cosim.py",
        "host/gpu", "host/pnm_node", "emu/serving/pnm_nodes.py", "emu/serving/replay.py")),
    "fleet_scale.md": Measured("scripts/fleet_scale.py", (
        "nelssa/experiments/fleet_scale.py", "emu/serving", "emu/policy")),
    "link_faults.md": Measured("scripts/link_faults.py", (
        "nelssa/experiments/link_faults.py", "emu/link")),
    "node.md": Measured("scripts/bench_node.py", ("emu/link", "host/pnm_node")),
    "node_sharing.md": Measured("scripts/node_sharing.py", (
        "nelssa/experiments/node_sharing.py", "emu/link", "host/pnm_node")),
    "orchestrator.md": Measured("scripts/orchestrator_eval.py", (
        "nelssa/experiments/orchestrator_eval.py", "emu/policy/orchestrator.py",
        "emu/policy/adaptive.py", "emu/serving")),
    "paper_hol.md": Measured("scripts/paper_hol.py", (
        "nelssa/experiments/paper_hol.py", "emu/serving", "emu/policy", "emu/latency")),
    "partitioning.md": Measured("scripts/partition_study.py", (
        "nelssa/experiments/partition_study.py", "nelssa/experiments/partition_jobs.py",
        "host/pnm_node/partition.py")),
    "plan.md": Measured("scripts/plan.py", (
        "nelssa/plan", "emu/energy.py", "emu/serving", "emu/latency/hardware.json")),
    "plan_bench.md": Measured("scripts/bench_plan.py", ("nelssa/plan", "emu/serving")),
    "prefill.md": Measured("scripts/bench_prefill.py", (
        "host/gpu/prefill.py", "host/gpu/model.py")),
    "reproduction_before_vllm.md": HAND_WRITTEN,
    "soak.md": Measured("scripts/soak.py", (
        "nelssa/experiments/soak.py", "host/pnm_node", "emu/link")),
    "sweep.md": Measured("scripts/bench_sweep.py", ("nelssa/sweep",)),
    "synthesis.md": Measured("scripts/synth_fpga.py", (
        "scripts/synth_units.py", "hw/sim/synth_blocks.py", "rtl")),
    "synthesis_runs.md": Measured("scripts/synth.py", ("rtl",)),
    "target_runs.md": Measured("scripts/target_runs.py", ("emu/serving", "emu/latency")),
    "test_time.md": Measured("scripts/test_time.py", ("tests",)),
    "vllm_agreement.md": Measured("scripts/bench_vllm.py", (
        "emu/serving/agreement.py", "emu/policy/vllm_scheduler.py", "emu/serving/vllm_env.py")),
}
"""Every page of docs/results/ (tests/test_stale_pages.py holds the two to each other)."""

COMMIT = re.compile(r"(?:\bCode:|\bcommit|\bran at|\bat)\s+`?([0-9a-f]{7,40})\b")


class State(enum.Enum):
    FRESH = "fresh"
    STALE = "stale"
    HAND_WRITTEN = "hand-written"
    MISSING = "missing"
    """The map names the page; docs/results/ has no such file."""
    UNKNOWN = "unknown"
    """The page's commit is not in this repository's history (or git cannot say)."""


@dataclass(frozen=True)
class PageState:
    page: str
    state: State
    commit: str | None = None
    named: bool = True
    """Whether the page names its commit (else: the commit that last changed the page)."""
    changed: tuple[str, ...] = ()
    """Measured files whose code changed since ``commit``."""
    cosmetic: int = 0
    """Measured files changed since ``commit`` in comments, docstrings or blank space only."""
    script: str = ""
    """The script that writes the page (none for a hand-written one)."""

    def line(self) -> str:
        at = f" at {self.commit[:10]}" if self.commit else ""
        how = "" if self.named else " (names no commit: dated by its last edit)"
        if self.state is State.STALE:
            shown = ", ".join(self.changed[:5]) + (" ..." if len(self.changed) > 5 else "")
            return f"{self.page}: stale{at}{how}; changed since: {shown}; rerun {self.script}"
        by = f" (written by {self.script})" if self.script else ""
        return f"{self.page}: {self.state.value}{at}{how}{by}"


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("git %s: %s", " ".join(args), e)
        return None
    return done.stdout if done.returncode == 0 else None


def page_commit(text: str) -> str | None:
    """The commit a page says it ran at (the first one it names)."""
    m = COMMIT.search(text)
    return m.group(1) if m else None


def check_page(repo: Path, page: str, measured: Measured | None) -> PageState:
    if measured is None:
        return PageState(page, State.HAND_WRITTEN)
    path = RESULTS / page
    if not (repo / path).is_file():
        return PageState(page, State.MISSING, script=measured.script)
    commit = page_commit((repo / path).read_text(encoding="utf-8", errors="replace"))
    named = commit is not None
    if commit is None:
        commit = (_git(repo, "log", "-1", "--format=%H", "--", str(path)) or "").strip() or None
    full = commit and _git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if not full:
        return PageState(page, State.UNKNOWN, commit, named, script=measured.script)
    full = full.strip()
    head = (_git(repo, "rev-parse", "HEAD") or "").strip()
    diff = _git(repo, "diff", "--name-only", full, head, "--", *measured.paths) if head else None
    if diff is None:
        return PageState(page, State.UNKNOWN, commit, named, script=measured.script)
    files = scope(repo, measured.script, measured.modules, diff.split())
    changed = tuple(f for f in files if _code_changed(repo, full, head, f))
    return PageState(page, State.STALE if changed else State.FRESH, commit, named, changed,
                     len(files) - len(changed), measured.script)


@functools.lru_cache(maxsize=4096)
def _code_changed(repo: Path, commit: str, head: str, path: str) -> bool:
    """Whether ``path`` runs differently at ``head`` than at ``commit`` (comments, docstrings
    and blank space aside; stale_scope.normalized)."""
    before, after = (_git(repo, "show", f"{rev}:{path}") for rev in (commit, head))
    return normalized(path, before) != normalized(path, after)


def check(repo: Path, pages: dict[str, Measured | None] | None = None) -> list[PageState]:
    """Each page's state, in page order."""
    pages = PAGES if pages is None else pages
    return [check_page(repo, page, pages[page]) for page in sorted(pages)]


def unmapped(repo: Path, pages: dict[str, Measured | None] | None = None) -> list[str]:
    """Pages of docs/results/ the map does not name."""
    pages = PAGES if pages is None else pages
    return sorted(p.name for p in (repo / RESULTS).glob("*.md") if p.name not in pages)


BANNER = re.compile(r"\A<!-- stale -->\n.*?<!-- /stale -->\n\n", re.S)
"""The note ``--mark`` puts at the top of a stale page (the page's script, rewriting the page,
drops it)."""


def banner(state: PageState, measured: Measured) -> str:
    """The note that says on the page itself that it is stale: the commit it was measured at
    (first on the page, so the check keeps reading that commit), what changed, how to rerun."""
    shown = ", ".join(f"`{f}`" for f in state.changed[:6])
    more = f" and {len(state.changed) - 6} more" if len(state.changed) > 6 else ""
    dated = "" if state.named else " (the page named no commit: the last one that changed it)"
    return ("<!-- stale -->\n"
            f"> **Stale.** Measured at `{state.commit[:10]}`{dated}; the code it measures "
            f"changed since: {shown}{more}. Its figures are of that code, not of this one; "
            f"rerun `python {measured.script}` (with the options the page names) to refresh "
            "it. Listed by `python scripts/stale_pages.py`.\n<!-- /stale -->\n\n")


def mark(repo: Path, states: list[PageState],
         pages: dict[str, Measured | None] | None = None) -> list[str]:
    """Put the stale note at the top of each stale page, and take it off a page no longer
    stale; the pages whose text changed."""
    pages = PAGES if pages is None else pages
    touched = []
    for s in states:
        if s.state not in (State.STALE, State.FRESH):
            continue
        path = repo / RESULTS / s.page
        text = path.read_text(encoding="utf-8")
        body = BANNER.sub("", text, count=1)
        new = banner(s, pages[s.page]) + body if s.state is State.STALE else body
        if new != text:
            path.write_text(new, encoding="utf-8")
            touched.append(s.page)
    return touched


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2],
                    help="the repository [default: this one]")
    ap.add_argument("--all", action="store_true", help="list fresh pages too")
    ap.add_argument("--mark", nargs="*", metavar="PAGE",
                    help="write a note at the top of each stale page (and take it off pages "
                         "no longer stale); with names, only those pages")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.mark or ()) - set(PAGES))
    if unknown:
        ap.error(f"--mark: not a results page: {', '.join(unknown)}")
    states = check(args.repo)
    if args.mark is not None:
        stale_now = {s.page for s in states if s.state is State.STALE}
        chosen = [s for s in states if not args.mark or s.page in args.mark]
        for page in mark(args.repo, chosen):
            print(f"{page}: stale note {'written' if page in stale_now else 'taken off'}")
    for s in states:
        if args.all or s.state in (State.STALE, State.UNKNOWN, State.MISSING):
            print(s.line())
    missing = unmapped(args.repo)
    for page in missing:
        print(f"{page}: not in nelssa/experiments/stale.py's map")
    stale = sum(s.state is State.STALE for s in states)
    print(f"{stale} of {len(states)} pages stale")
    return 1 if missing or any(s.state is State.MISSING for s in states) else 0
