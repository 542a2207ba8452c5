"""Fuzzer of raw register sequences: ring bases and sizes, the region, CONTROL, doorbells and
CQ_HEAD written with any value in any order (read-only and unmapped offsets too), between
descriptors put on the ring and device cycles run, with no driver in between.

Oracles: no exception from the device (crash), the device idle within a cycle bound once the
host stops (hang), no device write outside the queue's region of that moment or outside device
memory; on ``rtl`` the model's registers and memory bit for bit. For ``rtl`` every step runs
both devices until idle first, so that what they do does not depend on how long each takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

from nelssa.driver import regs
from nelssa.driver.formats import DESC_BYTES
from tests.fuzz import descriptors as d
from tests.fuzz.bench import Bench, on_fresh_bench, outside_writes
from tests.fuzz.oracle import Finding, guarded
from tests.fuzz.values import address, uint

WIDE = ("SQ_BASE", "CQ_BASE", "REGION_BASE", "REGION_LIMIT")
"""64-bit registers, written as a LO/HI pair by one step."""
UNMAPPED = (0x01C, 0x028, 0x0FC, 0x200, 0xFFC, 0x002, 0x1000, 0xFFFF_FFFC)

_ANCHORS = {
    "SQ_BASE": (d.SQ, d.REGION_BASE, d.REGION_LIMIT, d.REGION_LIMIT - RING_BYTES
                if (RING_BYTES := d.RING * DESC_BYTES) else 0, 0, d.MEM_TOP, 1 << 64),
    "CQ_BASE": (d.CQ, d.REGION_BASE, d.REGION_LIMIT, d.REGION_LIMIT - 16 * d.RING, 0,
                d.MEM_TOP, d.MEM_TOP - 16, 1 << 64),
    "REGION_BASE": (d.REGION_BASE, d.CQ, d.CQ + 16, 0, d.MEM_TOP, 1 << 64),
    "REGION_LIMIT": (d.REGION_LIMIT, d.CQ, d.CQ + 16 * d.RING, d.KV, 0, d.MEM_TOP,
                     d.MEM_TOP + 64, 1 << 64),
}
_SIZES = (0, 1, 2, 3, 4, 8, 15, 16, 17, 32, 64, 65535, 65536, 65537, 1 << 31)
_HAZARDS = {"SQ_BASE": ((d.CQ, d.KV),), "CQ_BASE": ((d.SQ, d.CQ), (d.CQ + 16, d.REGION_LIMIT))}
"""Where a ring base would put a ring over memory the other ring or an output writes while
descriptors are read from it: what the device reads then depends on timing, so the ``rtl``
lockstep leaves these out."""


@dataclass(frozen=True)
class RegisterCase:
    base: d.DescriptorCase
    """Memory contents and the descriptors the steps may put on the ring."""
    steps: tuple[tuple, ...]
    """("reg", name or offset, value), ("reg64", name, value), ("desc", slot, index),
    ("run", cycles); and two that a host does as a sequence: ("ring", name, value) disables
    the device, writes one ring register (64-bit ones whole) and enables it again; ("burst", n)
    puts the first n descriptors in slots 0..n-1 and rings for them."""

    @property
    def units(self) -> int:
        return len(self.steps)


@cache
def _reg_step(lockstep: bool) -> st.SearchStrategy[tuple]:
    wide = st.sampled_from(WIDE).flatmap(
        lambda n: st.tuples(st.just("reg64"), st.just(n), address(_ANCHORS[n])))
    if lockstep:
        wide = wide.filter(lambda s: not any(lo <= s[2] < hi for lo, hi in
                                             _HAZARDS.get(s[1], ())))
    sizes = st.tuples(st.just("reg"), st.sampled_from(["SQ_SIZE", "CQ_SIZE"]),
                      uint(32, _SIZES))
    pointers = st.tuples(st.just("reg"), st.sampled_from(["SQ_TAIL", "CQ_HEAD"]),
                         uint(32, range(18)))
    control = st.tuples(st.just("reg"), st.just("CONTROL"),
                        st.sampled_from([0, 1, 1, 2, 3, 0xFFFF_FFFF]))
    others = st.tuples(st.just("reg"),
                       st.one_of(st.sampled_from([r.name for r in regs.REGISTERS]),
                                 st.sampled_from(UNMAPPED)), uint(32))
    return st.one_of(control, control, wide, sizes, pointers, others)


@st.composite
def register_cases(draw, lockstep: bool = False, max_steps: int = 24) -> RegisterCase:
    """One input: a case's memory, then up to ``max_steps`` steps on a device whose rings were
    set up well (so the steps start from a working queue)."""
    base = draw(d.descriptor_cases(max_descriptors=4))
    steps = draw(_steps(lockstep, len(base.descriptors), max_steps))
    return RegisterCase(base, tuple(steps))


@cache
def _steps(lockstep: bool, n_desc: int, max_steps: int) -> st.SearchStrategy[list[tuple]]:
    desc = st.tuples(st.just("desc"), st.integers(0, d.RING - 1), st.integers(0, n_desc - 1))
    run = st.tuples(st.just("run"), st.sampled_from([0, 1, 10, 100, 1000, 100_000]))
    ring = _reg_step(lockstep).filter(lambda s: s[1] in (*WIDE, "SQ_SIZE", "CQ_SIZE")).map(
        lambda s: ("ring", s[1], s[2]))
    burst = st.tuples(st.just("burst"), st.integers(1, n_desc))
    return st.lists(st.one_of(_reg_step(lockstep), ring, ring, burst, desc, run), min_size=1,
                    max_size=max_steps)


def run_register_case(case: RegisterCase, backend: str = "model") -> list[Finding]:
    return on_fresh_bench(backend, d.WALL_S, lambda bench, found: _run(bench, case, found))


def _run(bench: Bench, case: RegisterCase, findings: list[Finding]) -> None:
    lockstep = bench.rtl is not None
    with guarded(findings, d.WALL_S, "loading the case") as g:
        d.load_case(bench, case.base)
        d.setup_rings(bench)
    if not g.passed:
        return
    for i, step in enumerate(case.steps):
        with guarded(findings, d.WALL_S, f"step {i} {step!r}") as g:
            if lockstep:
                bench.run_until_idle(d.RUN_CYCLES)
            kind = step[0]
            if kind == "reg":
                bench.reg_write(step[1], step[2])
            elif kind == "reg64":
                bench.reg_write64(step[1], step[2])
            elif kind == "desc":
                bench.host_write(d.SQ + step[1] * DESC_BYTES, case.base.descriptors[step[2]].raw())
            elif kind == "ring":
                bench.reg_write("CONTROL", 0)
                if lockstep:
                    bench.run_until_idle(d.RUN_CYCLES)
                if step[1] in WIDE:
                    bench.reg_write64(step[1], step[2])
                else:
                    bench.reg_write(step[1], step[2])
                bench.reg_write("CONTROL", 1)
            elif kind == "burst":
                raws = [x.raw() for x in case.base.descriptors[:step[1]]]
                bench.host_write(d.SQ, b"".join(raws))
                bench.reg_write("SQ_TAIL", step[1])
            elif not lockstep:  # run: only where timing may differ freely
                for b in bench.units:
                    b.port.advance(step[1])
        if not g.passed:
            return
    with guarded(findings, d.WALL_S, "running until idle") as g:
        bench.run_until_idle(d.RUN_CYCLES)
    if not g.passed:
        return
    findings.extend(outside_writes(bench.model.mem))
    with guarded(findings, d.WALL_S, "comparing the backends"):
        bench.compare_backends(findings)
