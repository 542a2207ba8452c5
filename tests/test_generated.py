"""One source of truth: the committed SV packages equal what the Python definitions render."""

from __future__ import annotations

from nelssa import gen
from nelssa.driver.status import AttnStatus
from nelssa.hw.model import fp_tables


def test_generated_sv_is_current():
    for path, text in gen.outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: run python -m nelssa.gen"


def test_status_codes_in_sv_package():
    text = gen.ENGINE_PKG_PATH.read_text()
    for s in AttnStatus:
        assert f"STATUS_{s.name} = 4'd{s.value}" in text


def test_tables_interpolate_breakpoints():
    """Each quadratic passes through g at the start of its interval (to coefficient precision)."""
    c0, _, _ = fp_tables.TABLES["exp2"]
    for i in (0, 64, 127):
        assert abs(c0[i] / 2**30 - 2 ** (i / 128)) < 2**-30
    assert fp_tables.TABLES["log2"][0][0] == 0
    assert fp_tables.TABLES["recip"][0][0] == 2**30
