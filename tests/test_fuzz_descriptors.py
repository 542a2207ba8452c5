"""Short runs of the descriptor and register fuzzers (tests/fuzz/): raw ring entries, cluster
directories, id lists and register sequences past the driver, on ``model`` and on ``rtl``
against the reference and the model. scripts/fuzz.py runs them long."""

from __future__ import annotations

import pytest
from hypothesis import given

from nelssa.driver.formats import DescStatus
from tests.fuzz import descriptors, registers
from tests.fuzz.oracle import Kind, explain
from tests.fuzz.targets import short_settings

pytestmark = pytest.mark.usefixtures("fuzz_quiet")


@short_settings(60)
@given(descriptors.descriptor_cases())
def test_descriptors_past_the_driver_on_model(case: descriptors.DescriptorCase) -> None:
    findings = descriptors.run_descriptor_case(case, "model")
    assert not findings, explain(findings)


@short_settings(80)
@given(registers.register_cases())
def test_register_sequences_on_model(case: registers.RegisterCase) -> None:
    findings = registers.run_register_case(case, "model")
    assert not findings, explain(findings)


@pytest.mark.rtl
@short_settings(30, deadline_s=300)
@given(descriptors.descriptor_cases(max_descriptors=4))
def test_descriptors_on_rtl_match_the_reference_and_the_model(
        rtl_built, case: descriptors.DescriptorCase) -> None:
    findings = descriptors.run_descriptor_case(case, "rtl")
    assert not findings, explain(findings)


@pytest.mark.rtl
@short_settings(20, deadline_s=300)
@given(registers.register_cases(lockstep=True, max_steps=12))
def test_register_sequences_on_rtl_in_lockstep_with_the_model(
        rtl_built, case: registers.RegisterCase) -> None:
    findings = registers.run_register_case(case, "rtl")
    assert not findings, explain(findings)


# -- the oracles themselves: a device that does wrong is caught --------------------------------
def _one_good_case() -> descriptors.DescriptorCase:
    f = {"opcode": 1, "flags": 0, "head_dim": 64, "q_heads": 2, "reserved0": 0, "num_ids": 2,
         "desc_id": 1, "num_clusters": 2, "q_addr": descriptors.Q, "dir_addr": descriptors.DIR,
         "ids_addr": descriptors.IDS, "out_addr": descriptors.OUT, "scale": 0x3E00_0000,
         "reserved1": bytes(12)}
    entries = ((descriptors.KV, 3), (descriptors.KV + descriptors.KV_STRIDE, 5))
    return descriptors.DescriptorCase(7, False, entries, 3,
                                      (descriptors.Desc(f, (1, 0)),))


def test_the_case_is_clean_on_the_model() -> None:
    assert descriptors.run_descriptor_case(_one_good_case(), "model") == []


@pytest.mark.rtl
def test_a_line_only_the_rtl_wrote_is_caught(rtl_built) -> None:
    """On ``rtl`` the memory cannot be listed: the DPI store's line count against the model's
    is what finds a stray write."""
    from tests.fuzz.bench import Bench

    bench = Bench("rtl")
    try:
        found: list = []
        descriptors._run(bench, _one_good_case(), found)
        assert found == [] and bench.rtl.line_count() == bench.model.line_count()
        bench.rtl.dev.mem_write(0x5000_0000, b"x" * 64)  # behind the model's back
        bench.compare_backends(found)
        assert [f.kind for f in found] == [Kind.OUTSIDE]
    finally:
        bench.close()


def test_an_output_written_outside_the_region_is_caught(monkeypatch) -> None:
    import nelssa.hw.model.device as device

    real = device.run_descriptor

    def stray(d, mem, region, config):
        status, writes, lines = real(d, mem, region, config)
        return status, [(region[1], data) for _, data in writes], lines
    monkeypatch.setattr(device, "run_descriptor", stray)
    kinds = {f.kind for f in descriptors.run_descriptor_case(_one_good_case(), "model")}
    assert kinds == {Kind.OUTSIDE, Kind.WRONG}


def test_a_wrong_status_and_a_crash_are_caught(monkeypatch) -> None:
    import nelssa.hw.model.device as device

    real = device.run_descriptor
    monkeypatch.setattr(device, "run_descriptor", lambda d, mem, region, config: (
        DescStatus.ERR_REGION, [], real(d, mem, region, config)[2]))
    found = descriptors.run_descriptor_case(_one_good_case(), "model")
    assert {f.kind for f in found} == {Kind.WRONG}
    assert any("ERR_DESC" in f.what for f in found)

    def boom(*_):
        raise ZeroDivisionError("integer division or modulo by zero")
    monkeypatch.setattr(device, "run_descriptor", boom)
    found = descriptors.run_descriptor_case(_one_good_case(), "model")
    assert [f.kind for f in found] == [Kind.CRASH]
    assert "ZeroDivisionError" in found[0].what
