"""What every `nelssa` option accepts, in one place: argparse types for numbers (the ``Num``
of the file readers), paths, endpoints and --burst, and a parser whose refusals are one line.

A type refuses a word with ``argparse.ArgumentTypeError``; argparse names the option
(``argument --limit: must be a positive integer, got 0``) and exits with status 2. Checks
that need the other options or a file's contents raise ``UsageError`` from the command, which
``main`` prints as one line with status 2.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from nelssa.driver.regs import CAPS_MAX_ENGINES
from nelssa.emu.files import not_a_file
from nelssa.emu.latency.fields import FieldError, Num
from nelssa.emu.serving.workload import ARRIVAL_S, BURST_COUNT, TOKENS
from nelssa.host.pnm_node.config import TIMEOUT_S
from nelssa.hw.model.device import DeviceConfig
from nelssa.hw.sim.device import RTL_MAX_UNITS

IPC_PATH_BYTES = 107
"""Longest socket path Linux takes (sun_path less its terminating NUL)."""


class UsageError(Exception):
    """A refusal found while a command runs; its message names the option or file."""


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help states it already (a
    configuration class's field, config_args) or there is none to state."""

    @staticmethod
    def _shows(action: argparse.Action) -> bool:
        return bool(action.option_strings) and action.help != argparse.SUPPRESS and \
            action.default not in (None, False, argparse.SUPPRESS, [])

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not self._shows(action) or "default" in text:
            return text
        return f"{text} [default: %(default)s]".lstrip()

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._shows(action):  # argparse prints no help line without help
            action = copy.copy(action)
            action.help = "[default: %(default)s]"
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """argparse with one-line refusals (``--help`` still shows the usage) and every option's
    default in its help (subcommands' parsers are made by this class too)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def number(spec: Num) -> Callable[[str], int | float]:
    """An argparse type reading one word as ``spec``."""

    def read(text: str) -> int | float:
        try:
            return spec.parse(text)
        except FieldError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    read.__name__ = spec.what  # argparse names the type in some messages
    return read


def key_values(action: argparse.Action, words: list[str], specs: dict[str, Num],
               unit: str = "VALUE") -> dict[str, int | float]:
    """Words ``KEY:VALUE`` (``--goodput ttft:MS``, ``--slo goodput:PCT``): each key one of
    ``specs`` and given once, its value read by its ``Num`` (ArgumentError naming the word)."""
    out: dict[str, int | float] = {}
    for word in words:
        key, colon, text = word.partition(":")
        if not colon or key not in specs:
            raise argparse.ArgumentError(action, f"{word!r}: give KEY:{unit} with KEY one of "
                                                 f"{', '.join(specs)}")
        if key in out:
            raise argparse.ArgumentError(action, f"{key} given twice")
        try:
            out[key] = specs[key].parse(text, key)
        except FieldError as e:
            raise argparse.ArgumentError(action, str(e)) from None
    return out


def int_range(lo: int, hi: int) -> Callable[[str], int | float]:
    return number(Num(f"an integer in {lo}..{hi}", integer=True, lo=lo, hi=hi))


POSITIVE_INT = number(Num("a positive integer", integer=True, lo=1, most=(1 << 31) - 1))
NON_NEGATIVE_INT = number(Num("an integer >= 0", integer=True, lo=0, most=(1 << 31) - 1))
SEED = number(Num("an integer >= 0", integer=True, lo=0, most=(1 << 63) - 1))
SHARE = number(Num("in (0, 1]", lo=0, lo_open=True, hi=1))
PROBABILITY = number(Num("in [0, 1]", lo=0, hi=1))
POSITIVE_FLOAT = number(Num("a finite number > 0", lo=0, lo_open=True))
SECONDS = number(TIMEOUT_S)
"""A wait, at least a millisecond (what the node's timeouts take)."""
PID = number(Num("a positive integer", integer=True, lo=1, most=(1 << 22)))
ENGINES = int_range(1, CAPS_MAX_ENGINES)
"""Attention engines of one device: what CAPS can report (the model device, a board)."""


def add_engines(parser: argparse.ArgumentParser, what: str = "attention engines per device",
                rtl: bool = True, default: int | None = DeviceConfig.engines) -> None:
    """``--engines``, its limits from the register map and (``rtl``) the RTL device."""
    limits = f"1..{CAPS_MAX_ENGINES}" + (f"; rtl: 1..{RTL_MAX_UNITS}" if rtl else "")
    parser.add_argument("--engines", type=ENGINES, default=default,
                        help=f"{what} ({limits})")


def ddr5_override(text: str) -> tuple[str, int]:
    """``FIELD=N``: one field of the DDR5 preset replaced (tCK), as Ramulator 2 takes them."""
    from nelssa.hw.model.ddr5_timing import DDR5_6400_MICRON, with_overrides

    name, eq, value = text.partition("=")
    if not eq or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be FIELD=N (e.g. nRRD_S=16), got {text!r}")
    try:
        with_overrides(DDR5_6400_MICRON, {name.strip(): int(value)})
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name.strip(), int(value)


def fp_latency_option(text: str) -> tuple[tuple[str, int], ...]:
    """``KIND=N[,KIND=N...]``: cycles of kinds of the engines' arithmetic units (the others 0),
    as a description's ``fp_latency`` gives them; sorted (kind, cycles) pairs."""
    from nelssa.emu.latency.description import fp_latency

    pairs = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        kind, eq, value = item.partition("=")
        if not eq or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"must be KIND=N[,KIND=N...] (e.g. add=3,mul=2), "
                                             f"got {text!r}")
        if kind.strip() in pairs:
            raise argparse.ArgumentTypeError(f"{kind.strip()} given twice in {text!r}")
        pairs[kind.strip()] = int(value)
    try:
        fp_latency(pairs)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return tuple(sorted(pairs.items()))


def compute_lanes_option(text: str) -> int:
    """``N``: the engines' ComputeLanes, one of hw/model/engine.COMPUTE_LANES."""
    from nelssa.hw.model.engine import COMPUTE_LANES

    if text.strip().isdigit() and int(text) in COMPUTE_LANES:
        return int(text)
    raise argparse.ArgumentTypeError(f"must be one of {', '.join(map(str, COMPUTE_LANES))}, "
                                     f"got {text!r}")


def add_datapath_args(parser: argparse.ArgumentParser) -> None:
    """``--fp-latency`` and ``--compute-lanes``, the engines' datapath, their help the PNM
    device description's fields' (``fp_latency``, ``compute_lanes``)."""
    from nelssa.config_args import user_help
    from nelssa.driver.status import ENGINE_LANES
    from nelssa.emu.latency.pnm_device_docs import PNM_DEVICE_DOCS

    # (user_help: the description's pointer into the source is for the code's readers)
    parser.add_argument("--fp-latency", type=fp_latency_option, default=None,
                        metavar="KIND=N[,KIND=N...]",
                        help=f"{user_help(PNM_DEVICE_DOCS['fp_latency'])}; e.g. add=3,mul=2 "
                             "[default: all 0]")
    parser.add_argument("--compute-lanes", type=compute_lanes_option, default=None,
                        metavar="N",
                        help=f"{user_help(PNM_DEVICE_DOCS['compute_lanes'])} "
                             f"[default: {ENGINE_LANES}]")


def add_ddr5_args(parser: argparse.ArgumentParser, default_preset: str | None) -> None:
    """``--preset`` (a DDR5 speed grade), ``--ddr5-override`` and ``--subchannels``, their help
    the PNM device description's fields' (``PnmDevice``, its docs in pnm_device_docs.py)."""
    from nelssa.config_args import user_help
    from nelssa.emu.latency.pnm_device_docs import PNM_DEVICE_DOCS
    from nelssa.hw.model.ddr5_timing import PRESETS as DDR5_PRESETS

    doc = PNM_DEVICE_DOCS
    parser.add_argument("--preset", default=default_preset, choices=list(DDR5_PRESETS),
                        help=user_help(doc["ddr5"])
                        + (f" [default: {default_preset}]" if default_preset else ""))
    parser.add_argument("--ddr5-override", type=ddr5_override, action="append", default=None,
                        metavar="FIELD=N", help=f"{doc['ddr5_overrides']}; FIELD=N, repeatable")
    parser.add_argument("--subchannels", type=int, choices=(1, 2, 4, 8), default=None,
                        help=f"{doc['subchannels']} [default: {DeviceConfig.subchannels}]")


def check_rtl_engines(parser: argparse.ArgumentParser, engines: int) -> None:
    """Refuse more engines than the RTL device is built with."""
    if engines > RTL_MAX_UNITS:
        parser.error(f"argument --engines: the rtl device takes 1..{RTL_MAX_UNITS}, got "
                     f"{engines}")


def _reason(p: Path) -> str | None:
    try:
        p.stat()
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    return None


def input_file(text: str) -> str:
    """A file to read: it exists and is a regular file (not a device, FIFO or folder) that can
    be read; the reader (emu/files.py) bounds its size."""
    why = not_a_file(text)
    if why:
        raise argparse.ArgumentTypeError(f"{text} {why}")
    return text


def input_dir(text: str) -> str:
    """A folder to read from."""
    p = Path(text)
    why = _reason(p) or (None if p.is_dir() else "is not a folder")
    if why:
        raise argparse.ArgumentTypeError(f"{text} {why}")
    return text


def _writable_folder(folder: Path, what: str) -> None:
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{what}: folder {folder} does not exist"
                                         if not folder.exists() else
                                         f"{what}: {folder} is not a folder")
    try:  # a file made and removed: os.access says yes to root, and in /proc or a read-only mount
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".nelssa-probe-")
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{what}: cannot write in {folder} ({e.strerror})"
                                         ) from None
    os.close(fd)
    os.unlink(probe)


def output_file(text: str) -> str:
    """A file to write: not a folder, in a folder that exists and can be written."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    _writable_folder(p.parent, text)
    return text


def output_dir(text: str) -> str:
    """A folder to write into, made (with its parents) when the command writes."""
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    top = p
    while not top.exists():
        top = top.parent
    _writable_folder(top, text)
    return text


def plain_name(text: str) -> str:
    """A file name without a folder (key names)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(f"must be a plain name (letters, digits, '.', '_', "
                                         f"'-'), got {text!r}")
    return text


def endpoint(text: str) -> str:
    """A ZeroMQ endpoint another process can reach: ipc://PATH or tcp://HOST:PORT."""
    scheme, sep, rest = text.partition("://")
    usage = f"{text!r} is not an endpoint: use ipc://PATH or tcp://HOST:PORT"
    if not sep or not rest:
        raise argparse.ArgumentTypeError(usage)
    if scheme == "ipc":
        if "\0" in rest:
            raise argparse.ArgumentTypeError(f"{text!r}: a socket path cannot hold a NUL")
        if len(rest.encode()) > IPC_PATH_BYTES:
            raise argparse.ArgumentTypeError(f"{text!r}: the socket path is longer than "
                                             f"{IPC_PATH_BYTES} bytes, the system's limit")
        return text
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not host:
            raise argparse.ArgumentTypeError(usage)
        if port != "*" and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise argparse.ArgumentTypeError(f"{text!r}: the port must be 1..65535 (or * to "
                                             f"bind any), got {port!r}")
        return text
    raise argparse.ArgumentTypeError(usage)


class BurstAction(argparse.Action):
    """``--burst AT_S COUNT INPUT OUTPUT``, each word checked as its own field."""

    FIELDS = (("AT_S", ARRIVAL_S), ("COUNT", BURST_COUNT), ("INPUT", TOKENS),
              ("OUTPUT", TOKENS))

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=4,
                         metavar=tuple(n for n, _ in self.FIELDS), **kwargs)  # type: ignore

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        out = []
        for (label, spec), text in zip(self.FIELDS, values, strict=True):  # type: ignore
            try:
                out.append(spec.parse(text, label))
            except FieldError as e:
                raise argparse.ArgumentError(self, str(e)) from None
        setattr(namespace, self.dest, tuple(out))


def fail(message: str) -> NoReturn:
    """Refuse from inside a command (``main`` prints it; status 2)."""
    raise UsageError(message)
