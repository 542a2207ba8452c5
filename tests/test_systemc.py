"""The device as a SystemC TLM-2.0 model (hw/systemc, docs/systemc.md): the testbench's host
runs the driver's own operations (a KV region, a command queue, attention descriptors, bad ones)
through the target socket, and the answers, the memory image and the completion records are the
model backend's bit for bit, the cycles the Verilated device's behind its C ABI; the guide's
example platform builds and runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from node_helpers import bf16

from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import DESCRIPTOR, DescStatus
from nelssa.driver.memory import MemoryApi
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.sim.systemc import (
    BENCH_CPP,
    BENCH_UNITS,
    EXAMPLE_CPP,
    BenchForm,
    OpKind,
    RecordingPort,
    SystemC,
    build_program,
    run_bench,
    run_on_port,
)
from nelssa.hw.sim.systemc import (
    main as systemc_main,
)

pytestmark = pytest.mark.rtl


def host_program() -> tuple[RecordingPort, ModelDevice, list]:
    """A driver's session on the model, written down: rings set up, KV written, two attention
    descriptors (one doorbell), then a NOP and a bad descriptor (a second), each batch's
    completions polled after the interrupt and its outputs read; then the whole memory image
    read back."""
    model = ModelDevice(DeviceConfig(engines=BENCH_UNITS))
    rec = RecordingPort(model)
    dev = Device(rec, bulk=False)
    mem = MemoryApi(dev, 1 << 20, 1 << 24)
    cq = CommandQueue(mem, entries=4)
    rng = np.random.default_rng(47)
    region = mem.alloc_kv(0, 0, 0, 64, 4, 32)
    tokens = [5, 8, 3, 7]
    mem.write_clusters(region, [bf16(rng, (t, 64)) for t in tokens],
                       [bf16(rng, (t, 64)) for t in tokens])
    rec.advance(100)  # the host does something else a while
    rec.mark()
    ids = cq.submit([AttnRequest(region, bf16(rng, (2, 64)), [0, 2, 3]),
                     AttnRequest(region, bf16(rng, (1, 64)), [1])])
    rec.irq()
    rec.mark()
    outs = cq.poll()
    raw = [DESCRIPTOR.build({
        "opcode": op, "flags": 0, "head_dim": 64, "q_heads": 1, "reserved0": 0, "num_ids": 1,
        "desc_id": 100 + op, "num_clusters": 0, "q_addr": 0, "dir_addr": 0, "ids_addr": 0,
        "out_addr": 0, "scale": 0x3E000000, "reserved1": bytes(12)}) for op in (0, 7)]
    cq.submit_raw(raw)
    rec.irq()
    rec.mark()
    outs += cq.poll()
    rec.read_image(model.mem.image())
    rec.mark()
    assert sorted(o.desc_id for o in outs) == [*ids, 100, 107]
    statuses = {o.desc_id: o.status for o in outs}
    assert statuses[100] == DescStatus.OK and statuses[107] == DescStatus.ERR_OPCODE
    assert all(statuses[i] == DescStatus.OK for i in ids)
    return rec, model, outs


@pytest.fixture(scope="module")
def bench():
    try:
        SystemC.locate()
    except RuntimeError as e:
        pytest.fail(str(e))
    return build_program("nelssa_sc_bench", BENCH_CPP)


def test_the_tlm_device_runs_the_drivers_program_as_the_other_backends(bench, tmp_path):
    from nelssa.hw.sim.device import RtlDevice

    rec, model, _ = host_program()
    program = rec.program
    kinds = {op.kind for op in program.ops}
    assert kinds == set(OpKind) - {OpKind.PIPE}, kinds
    rtl = RtlDevice(units=BENCH_UNITS)
    try:
        rtl_marks = run_on_port(program, rtl)
        rtl_image = rtl.image()
        geometry = rtl.geometry
    finally:
        rtl.close()
    got = run_bench(bench, BenchForm.RTL, program, tmp_path, geometry)
    # every load answered as the model answered (the bench checks them: 0 mismatches)
    assert re.search(r" 2 interrupts, 0 violations, 0 mismatches", got.summary), got.summary
    # the memory image (descriptors, completion records, outputs, KV) is the model's, bit for
    # bit, and the Verilated device's behind its C ABI
    assert got.image == model.mem.image() == rtl_image
    # cycle for cycle the device behind its C ABI, driven by the same rules
    assert got.marks == rtl_marks and len(got.marks) == len(program.marks)
    assert rtl_marks[-1] > rtl_marks[0] > 0
    # and the same device loosely timed: its annotated delays land on the same cycles
    loose = run_bench(bench, BenchForm.RTL_LOOSE, program, tmp_path, geometry)
    assert re.search(r" 2 interrupts, 0 violations, 0 mismatches", loose.summary)
    assert loose.image == rtl_image and loose.marks == rtl_marks


def test_the_loosely_timed_model_form_annotates_the_cycle_models_time(bench, tmp_path):
    """The model form (LooseDevice around the model device, its time the compiled cycle model)
    answers as the model does, and its annotated delays put each mark at the model's cycle."""
    rec, model, _ = host_program()
    want = run_on_port(rec.program, ModelDevice(DeviceConfig(engines=BENCH_UNITS)))
    got = run_bench(bench, BenchForm.MODEL, rec.program, tmp_path, model.geometry)
    assert re.search(r" 2 interrupts, 0 violations, 0 mismatches", got.summary), got.summary
    assert got.image == model.mem.image()
    assert got.marks == want and want[-1] > want[1] > want[0]


def test_pipelined_loads_keep_many_requests_in_flight(bench, tmp_path):
    """The clocked form's native nb_transport: the image read back 16 lines in flight at a
    time answers the same, in fewer device cycles than one line at a time."""
    rec, model, _ = host_program()
    one = run_bench(bench, BenchForm.RTL, rec.program, tmp_path, model.geometry)
    readback_from = rec.program.marks[-2]  # (read_image follows the mark before the last)
    many = run_bench(bench, BenchForm.RTL, rec.program.pipelined(16, readback_from), tmp_path,
                     model.geometry)
    assert re.search(r" 0 mismatches", many.summary), many.summary
    assert many.image == one.image == model.mem.image()
    assert many.marks[:-1] == one.marks[:-1]  # the same until the read-back
    readback = (one.marks[-1] - one.marks[-2], many.marks[-1] - many.marks[-2])
    assert readback[1] < readback[0] / 2, readback


def test_a_changed_answer_is_a_mismatch(bench, tmp_path):
    """The bench's checks can fail: a completion record the device did not write is named."""
    rec, model, _ = host_program()
    ops = rec.program.ops
    last = max(i for i, op in enumerate(ops) if op.kind is OpKind.RL)
    ops[last].expect = bytes(64)
    with pytest.raises(AssertionError, match=r"mismatch line \d+ \(RL "):
        run_bench(bench, BenchForm.RTL, rec.program, tmp_path, model.geometry)


def test_a_bad_program_is_refused_with_its_line(bench, tmp_path):
    prog = tmp_path / "bad.txt"
    prog.write_text("CLOCK_PS 4e2\nW32 10 1\nRL 40 00\n")
    out = subprocess.run([str(bench), "rtl", str(prog), str(tmp_path / "d"), "1"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and f"{prog}:3: not an operation: RL 40 00" in out.stderr


@pytest.fixture(scope="module")
def example():
    """The guide's example, built by the guide's command (docs/systemc.md)."""
    out = subprocess.run([sys.executable, "-m", "nelssa.hw.sim.systemc", str(EXAMPLE_CPP)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("form", ["rtl", "model"])
def test_the_guides_example_platform_builds_and_runs(example, form):
    out = subprocess.run([example, form], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NELSSA_PYTHON": sys.executable})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "MAGIC 4e454c53" in out.stdout
    assert "completion desc_id 1 status 0 phase 1" in out.stdout
    assert re.search(r"^done at cycle [1-9]", out.stdout, re.M), out.stdout


def test_the_build_command_refuses_bad_input(capsys):
    for argv, why in ((["nothere.cpp"], "source nothere.cpp: no such file"),
                      ([str(EXAMPLE_CPP), "--units", "9"], "--units 9: the device has 1..6")):
        with pytest.raises(SystemExit) as e:
            systemc_main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err
