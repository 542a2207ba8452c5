"""Device ports open from one spec string (hw/ports.py): every kind by name, the options it
takes, and bad specs refused with the spec and the known forms named (exit 2 at the command
line, no traceback)."""

from __future__ import annotations

import pytest

from nelssa.cli import main
from nelssa.driver.device import Device
from nelssa.driver.port import DevicePort
from nelssa.driver.remote import RemotePort
from nelssa.hw.model.device import ModelDevice
from nelssa.hw.ports import (
    OPENERS,
    PortOptions,
    PortSpecError,
    board_spec,
    known_forms,
    open_port,
    parse_spec,
)


@pytest.mark.parametrize("text, name, argument", [
    ("model", "model", ""),
    ("rtl", "rtl", ""),
    ("fpga:/tmp/boards/board0", "fpga", "/tmp/boards/board0"),
    ("fpga:/sys/x,/dev/h2c,/dev/c2h", "fpga", "/sys/x,/dev/h2c,/dev/c2h"),
    ("tcp://127.0.0.1:5555", "tcp", "tcp://127.0.0.1:5555"),
    ("ipc:///tmp/nelssa-device-0", "ipc", "ipc:///tmp/nelssa-device-0"),
])
def test_every_kind_parses(text, name, argument):
    spec = parse_spec(text)
    assert (spec.name, spec.argument) == (name, argument)
    assert spec.kind is OPENERS[name]


@pytest.mark.parametrize("text, why", [
    ("modle", "unknown"),
    ("", "unknown"),
    ("udp://127.0.0.1:5", "unknown"),
    ("fpga", "fpga is written fpga:BOARD"),
    ("fpga:", "fpga is written fpga:BOARD"),
    ("model:x", "model is written model"),
    ("tcp://", "tcp is written tcp://HOST:PORT"),
    ("tcp:127.0.0.1:5", "tcp is written tcp://HOST:PORT"),
    ("rtl://x", "rtl is written rtl"),
])
def test_a_bad_spec_is_named_with_the_known_forms(text, why):
    with pytest.raises(PortSpecError) as e:
        parse_spec(text)
    assert f"device spec {text!r}" in str(e.value) and why in str(e.value)
    if why == "unknown":
        assert known_forms() in str(e.value)
        assert "model, rtl, fpga:BOARD, tcp://HOST:PORT, ipc://PATH" in str(e.value)


def test_allowed_names_narrow_the_registry():
    assert parse_spec("rtl", ("model", "rtl")).name == "rtl"
    with pytest.raises(PortSpecError, match=r"known: model, rtl$"):
        parse_spec("tcp://127.0.0.1:5", ("model", "rtl"))


def test_open_port_gives_the_backend_with_its_options():
    port = open_port("model", PortOptions(engines=2))
    assert isinstance(port, ModelDevice) and port.config.engines == 2
    assert Device(port).caps["engines"] == 2
    remote = open_port("ipc:///tmp/nelssa-test-ports-never-served",
                       PortOptions(connect_timeout_s=0.2))
    try:
        assert isinstance(remote, RemotePort) and remote.endpoint.endswith("never-served")
    finally:
        remote.close()
    assert board_spec("/tmp/b0") == "fpga:/tmp/b0"


def test_the_port_interface_has_what_its_users_call():
    """The node sets timeouts, aborts and shuts down whatever port it opened: every backend
    answers, those with nothing to do by doing nothing."""
    port = open_port("model")
    for call in (lambda: port.set_timeout(1000), lambda: port.abort("gone"), port.shutdown):
        call()
    assert all(callable(getattr(DevicePort, n)) for n in ("set_timeout", "abort", "shutdown"))


@pytest.mark.parametrize("spec", ["bogus", "tcp://127.0.0.1:5", "fpga:"])
def test_device_serve_refuses_a_bad_spec(spec, capsys):
    with pytest.raises(SystemExit) as e:
        main(["device", "serve", "--backend", spec])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --backend: device spec {spec!r}" in err
    assert "Traceback" not in err
    if spec == "bogus":
        assert "known: model, rtl, fpga:BOARD" in err
