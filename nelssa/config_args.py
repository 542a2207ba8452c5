"""Command-line options derived from a config dataclass, as vLLM's ``EngineArgs`` derives
them: each option's name, default and help text come from the field (its name, its default
and the docstring under it), so a default and its explanation live in one place.

    add_config_options(parser, NodeConfig, ["max_sessions", "max_queued"])
    NodeConfig(devices, **config_values(args, NodeConfig, ["max_sessions", "max_queued"]))
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import itertools
import re
import textwrap
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from nelssa.emu.latency.fields import Num
from nelssa.options import SECONDS, number

COUNT = number(Num("a positive integer", integer=True, lo=1, most=(1 << 62) - 1))
"""Counts and sizes of a config (bytes included: beyond 2**31)."""
_TYPES: dict[str, Callable[[str], Any]] = {"int": COUNT, "int | None": COUNT,
                                           "float": SECONDS}


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


_SOURCE_REFS = ((re.compile(r"\s*[:;,]\s*[\w/]+\.py(?:\s+[A-Z_]+)?(?=\))"), ""),
                (re.compile(r"\s*\(\s*[\w/]+\.py(?:\s+[A-Za-z_.]+)?\s*\)"), ""),
                (re.compile(r",?\s*a preset of [\w/]+\.py"), ""),
                (re.compile(r"``([^`]+)``"), r"\1"))
"""What a field's docstring says for the code's readers that its option's help leaves out:
references into the source (``(driver/split.py)``, ``: driver/remote.py HEARTBEAT_S``) and
reST literals."""


def user_help(doc: str) -> str:
    """A docstring as an option's help: without the pointers into source files."""
    for pattern, repl in _SOURCE_REFS:
        doc = pattern.sub(repl, doc)
    return doc


def option_name(field: str) -> str:
    return "--" + field.removesuffix("_s").replace("_", "-")


def _member_of(kind: type[enum.Enum]):
    """An option's value as a member of ``kind``, by its value; argparse's error lists them."""
    def convert(text: str) -> enum.Enum:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose from {', '.join(str(m.value) for m in kind)}") from None
    return convert


def add_config_options(parser: argparse.ArgumentParser, cls: type,
                       names: Sequence[str]) -> None:
    """An option per field in ``names``: its type from the field's ``Num`` (metadata "num")
    or else its annotation, its default the field's default, its help the field's
    docstring."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    docs = {k: user_help(v) for k, v in field_docs(cls).items()}
    for name in names:
        f = fields[name]
        if str(f.type) == "bool":
            parser.add_argument(option_name(name), dest=name, default=f.default,
                                action=argparse.BooleanOptionalAction,
                                help=f"{docs.get(name, '')} [default: {f.default}]"
                                .replace("%", "%%"))
            continue
        if isinstance(f.default, enum.Enum):  # its members by their values
            kind_of = type(f.default)
            parser.add_argument(option_name(name), dest=name, default=f.default,
                                type=_member_of(kind_of), choices=list(kind_of),
                                metavar="{" + ",".join(str(m.value) for m in kind_of) + "}",
                                help=f"{docs.get(name, '')} [default: {f.default.value}]"
                                .replace("%", "%%"))
            continue
        spec = f.metadata.get("num")
        kind = number(spec) if spec is not None else _TYPES.get(str(f.type))
        if kind is None or f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{name}: no option for a {f.type} field without "
                            "a default")
        shown = "none" if f.default is None else f"{f.default:g}" if isinstance(
            f.default, float) else str(f.default)
        unit = " (seconds)" if spec is None and str(f.type) == "float" else ""
        parser.add_argument(option_name(name), dest=name, type=kind, default=f.default,
                            metavar="N", help=f"{docs.get(name, '')}{unit} [default: {shown}]"
                            .replace("%", "%%"))


def config_values(args: argparse.Namespace, cls: type, names: Sequence[str]) -> dict[str, Any]:
    """The values of those options, as keyword arguments of ``cls``."""
    return {name: getattr(args, name) for name in names}
