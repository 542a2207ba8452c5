"""The hardware options every command reads the same way: ``--hardware FILE`` (JSON, YAML or
TOML; repeatable, later files override earlier ones) and the entry names ``--gpu``, ``--pnm``,
``--model`` and ``--link``. An option names an entry; without it, the files' ``use`` section
picks one; without that, the project's default. Each option's help lists the preset names."""

from __future__ import annotations

import argparse
from functools import cache
from pathlib import Path
from typing import Any

from nelssa.emu.latency.description import read_config
from nelssa.emu.latency.hardware import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    DEFAULT_PNM,
    HardwareCatalog,
    HardwareError,
    model_of_shape,
)
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK
from nelssa.options import UsageError, input_file

OPTIONS = {"gpus": ("--gpu", DEFAULT_GPU), "pnm": ("--pnm", DEFAULT_PNM),
           "models": ("--model", DEFAULT_MODEL), "links": ("--link", DEFAULT_GPU_PNM_LINK)}
"""Each section's option and its default (when neither an option nor ``use`` names one)."""
WHAT = {"gpus": "GPU", "pnm": "PNM tier (its device: units, DDR5 grade, sub-channels)",
        "models": "model", "links": "GPU node <-> PNM node link"}


@cache
def presets() -> HardwareCatalog:
    """The presets alone (no user file)."""
    return HardwareCatalog.load()


def names(section: str) -> str:
    return ", ".join(getattr(presets(), section))


def add_hardware_file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hardware", action="append", default=[], type=input_file, metavar="FILE",
                   help="a hardware description (JSON, YAML or TOML: gpus, pnm, models, links, "
                        "use; docs/serving.md) adding to or overriding the presets; repeatable")


def add_entry_arg(p: argparse.ArgumentParser, section: str, help_more: str = "") -> None:
    option, default = OPTIONS[section]
    also = " or a config.json (a file or folder)" if section == "models" else ""
    p.add_argument(option, default=None, metavar="NAME",
                   help=f"{WHAT[section]}: a preset ({names(section)}), an entry of "
                        f"--hardware{also} [default: the files' use.{option[2:]}, else "
                        f"{default}]{help_more}")


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """--hardware, --gpu, --pnm, --model and --link."""
    add_hardware_file_arg(p)
    for section in OPTIONS:
        add_entry_arg(p, section)


def load_catalog(files: list[str]) -> HardwareCatalog:
    try:
        return HardwareCatalog.load(*files)
    except HardwareError as e:
        raise UsageError(str(e)) from None


def chosen(cat: HardwareCatalog, section: str, name: str | None) -> Any:
    """The entry of ``section`` an option names, else the one ``use`` picks, else the
    default (UsageError naming the option)."""
    option, default = OPTIONS[section]
    try:
        if section == "models" and name is not None and Path(name).exists():
            return model_of_shape(Path(name).stem, read_config(name)[0])  # a config.json
        return cat.chosen(section, name, default)
    except ValueError as e:
        raise UsageError(f"{option}: {e}") from None


def load_hardware(args: argparse.Namespace) -> dict[str, Any]:
    """The descriptions --gpu, --pnm, --model and --link name, from the presets and the
    --hardware files (UsageError naming the file or option)."""
    cat = load_catalog(args.hardware)
    out: dict[str, Any] = {"catalog": cat}
    for section, (option, _) in OPTIONS.items():
        out[section] = chosen(cat, section, getattr(args, option[2:]))
    return out
