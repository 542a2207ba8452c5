"""Waveforms through the device library's C ABI: on for a stretch of traffic, then off."""

from __future__ import annotations

import pytest
from device_builds import SMALL_PIPELINED

from nelssa.driver.device import Device

pytestmark = pytest.mark.rtl


def test_waveform_of_a_stretch_of_traffic(tmp_path):
    from nelssa.hw.sim.device import RtlDevice
    from nelssa.hw.sim.verilator import LZ4_HEADER

    # memory traffic only: the smallest build, shared with test_rtl_device_latency.py
    port = RtlDevice(**SMALL_PIPELINED)
    try:
        dev = Device(port)
        dev.mem_write(0x1000, b"before")
        path = tmp_path / ("device.fst" if LZ4_HEADER.exists() else "device.vcd")
        port.trace_start(path)
        dev.mem_write(0x2000, bytes(range(64)))
        assert dev.mem_read(0x2000, 64) == bytes(range(64))
        port.trace_stop()
        dev.mem_write(0x3000, b"after")
        data = path.read_bytes()
        assert len(data) > 10_000
        if path.suffix == ".fst":  # an FST header block: type 0, 329 bytes long
            assert data[0] == 0 and int.from_bytes(data[1:9], "big") == 329
        else:
            text = data.decode(errors="replace")
            assert "$enddefinitions" in text and "rwd_valid_i" in text
            assert text.count("\n#") > 20  # time steps: the traced stretch only
    finally:
        port.close()
