"""Device ports by name: one spec string opens any backend behind the port
(driver/port.DevicePort), in one place, for the command line, the PNM node and the tests.

A spec is one of

- ``model``: the transaction-level model (hw/model/device.py), in this process;
- ``rtl``: the Verilated device (hw/sim/device.py), in this process;
- ``fpga:BOARD``: a board behind its PCIe BARs, or a fake board (hw/fpga/port.py): ``BOARD``
  is its PCI device folder, optionally ``,H2C,C2H`` DMA devices;
- ``tcp://HOST:PORT`` or ``ipc://PATH``: a device served by another process
  (``nelssa device serve``, driver/remote.py).

:data:`OPENERS` names each; a spec that names none is refused with :class:`PortSpecError`,
which names the spec and every known form. What a backend needs beyond its name (engines, DDR5
preset, a manifest, timeouts) travels in :class:`PortOptions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nelssa.driver.status import ENGINE_LANES

if TYPE_CHECKING:
    from nelssa.driver.port import DevicePort


class PortSpecError(ValueError):
    """A device spec that names no known port, or lacks (or has) an argument."""


@dataclass(frozen=True)
class PortOptions:
    """What the openers take beyond the spec; each uses the fields its backend has."""

    engines: int = 4
    """``model``, ``rtl``: attention units of the device."""
    preset: str = "ddr5-6400"
    """``model``, ``rtl``: DDR5 timing preset (hw/model/ddr5_timing.PRESETS)."""
    ddr5_overrides: tuple[tuple[str, int], ...] = ()
    """``model``: (field, value) pairs replacing fields of the preset."""
    subchannels: int = 8
    """``model``: DDR5 sub-channels (the RTL device has 8)."""
    fp_latency: tuple[tuple[str, int], ...] = ()
    """``model``, ``rtl``: (kind, cycles) of the engines' arithmetic units (hw/model/engine.
    FpLatency; the kinds not named 0): the model times them, the rtl device is built with
    them."""
    compute_lanes: int = ENGINE_LANES
    """``model``, ``rtl``: the engines' ComputeLanes (hw/model/engine.EngineParams): the model
    times them, the rtl device is built with them."""
    memory_file: Path | None = None
    """``model``: hold device memory in a new sparse file here instead of RAM."""
    manifest: str | None = None
    """``fpga``: the bitstream manifest (default: manifest.json in the board folder)."""
    timeout_s: float = 10.0
    """``fpga``: how long the device may stand still before it counts as not answering."""
    connect_timeout_s: float = 60.0
    """``tcp``, ``ipc``: how long a call waits for the device's answer (a served ``rtl``
    device may still be building when it is first called)."""
    token_file: str | None = None
    """``tcp``, ``ipc``: the device's token file (None: the one the device wrote for its
    endpoint on this host; driver/remote.py)."""


@dataclass(frozen=True)
class PortKind:
    """One entry of the registry: how its specs look and how it opens them."""

    form: str
    """The spec as users write it, for help and errors (``fpga:BOARD``)."""
    opens: Callable[[str, PortOptions], DevicePort]
    """Opens a port from the spec's argument (after ``NAME:``; the whole endpoint for a
    ZeroMQ scheme) and the options."""
    takes_argument: bool
    local: bool
    """The device runs in (or is mapped into) this process; False: served by another."""


@dataclass(frozen=True)
class PortSpec:
    """A parsed spec: the registry's name and its argument ("" when it takes none)."""

    name: str
    argument: str
    text: str

    @property
    def kind(self) -> PortKind:
        return OPENERS[self.name]


def _engine(o: PortOptions):
    from nelssa.hw.model.engine import EngineParams, FpLatency

    return EngineParams(latency=FpLatency(**dict(o.fp_latency)), compute_lanes=o.compute_lanes)


def _open_model(_: str, o: PortOptions) -> DevicePort:
    from nelssa.hw.model.device import DeviceConfig, ModelDevice

    config = DeviceConfig(engines=o.engines, preset=o.preset, ddr5_overrides=o.ddr5_overrides,
                          subchannels=o.subchannels, engine=_engine(o))
    memory = None
    if o.memory_file is not None:
        from nelssa.hw.model.sparse_memory import SparseFileMemory

        memory = SparseFileMemory(config.mem_bytes, o.memory_file)
    return ModelDevice(config, memory=memory)


def _open_rtl(_: str, o: PortOptions) -> DevicePort:
    from nelssa.hw.sim.device import RtlDevice

    if o.ddr5_overrides or o.subchannels != 8:
        raise ValueError("--ddr5-override and --subchannels go with the model backend (the rtl "
                         "device takes a preset and has 8 sub-channels)")
    return RtlDevice(o.preset, units=o.engines, engine=_engine(o))


def _open_fpga(board: str, o: PortOptions) -> DevicePort:
    from nelssa.hw.fpga.port import open_board

    return open_board(board, o.manifest, stall_timeout_s=o.timeout_s)


def _open_remote(endpoint: str, o: PortOptions) -> DevicePort:
    from nelssa.driver.remote import RemotePort

    return RemotePort(endpoint, timeout_ms=int(o.connect_timeout_s * 1000),
                      token_file=o.token_file)


OPENERS: dict[str, PortKind] = {
    "model": PortKind("model", _open_model, takes_argument=False, local=True),
    "rtl": PortKind("rtl", _open_rtl, takes_argument=False, local=True),
    "fpga": PortKind("fpga:BOARD", _open_fpga, takes_argument=True, local=True),
    "tcp": PortKind("tcp://HOST:PORT", _open_remote, takes_argument=True, local=False),
    "ipc": PortKind("ipc://PATH", _open_remote, takes_argument=True, local=False),
}
"""Every kind of port, by the name its specs start with."""
ENDPOINT_SCHEMES = ("tcp", "ipc")
"""Names whose specs are ZeroMQ endpoints (``NAME://...``, the whole spec the argument)."""


def board_spec(board: str) -> str:
    """The spec of a board (a PCI device folder, optionally ``,H2C,C2H``)."""
    return f"fpga:{board}"


def known_forms(names: Iterable[str] | None = None) -> str:
    """The spec forms of ``names`` (default: all), as a help or error text lists them."""
    return ", ".join(OPENERS[n].form for n in (names if names is not None else OPENERS))


def parse_spec(text: str, allowed: Iterable[str] | None = None) -> PortSpec:
    """The spec ``text`` checked against the registry (and ``allowed`` names, when given);
    PortSpecError names the spec and the known forms."""
    names = tuple(allowed) if allowed is not None else tuple(OPENERS)
    scheme, sep, rest = text.partition("://")
    if sep:
        name, argument = scheme, text
        empty = not rest
    else:
        name, colon, argument = text.partition(":")
        empty = bool(colon) and not argument
    if name not in names:
        raise PortSpecError(f"device spec {text!r}: unknown; known: {known_forms(names)}")
    kind = OPENERS[name]
    if (name in ENDPOINT_SCHEMES) != bool(sep) or empty or (
            kind.takes_argument != bool(argument)):
        raise PortSpecError(f"device spec {text!r}: {name} is written {kind.form}")
    return PortSpec(name, argument, text)


def open_port(text: str | PortSpec, options: PortOptions | None = None) -> DevicePort:
    """The port a spec names, opened with ``options``. PortSpecError for a bad spec; the
    backend's own errors (a board that is not there: FpgaError; a memory file that cannot be
    made: OSError) pass through."""
    spec = parse_spec(text) if isinstance(text, str) else text
    return spec.kind.opens(spec.argument, options or PortOptions())
