"""Typed readers for the numbers users hand the emulator, in files (hardware descriptions,
traces) and on the command line: one ``Num`` says what a field accepts, and every reader of
that field (JSON, argparse, a dataclass's own check) refuses the same values with the same words.

JSON gives Python ``bool`` for ``true`` (an ``int`` subclass), ``float('nan')`` and
``float('inf')`` for ``NaN`` and ``Infinity``, ``8.0`` as a float, and integers of any size;
a ``Num`` refuses each of these where it does not belong. Files are parsed with
``load_json``, which also refuses duplicate keys and turns the parser's other failures
(nesting too deep, numbers of too many digits, bytes that are not UTF-8) into one message.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldError", "Num", "check_numbers", "load_json"]


class FieldError(ValueError):
    """A value a field does not accept; the message says what the field accepts."""


@dataclass(frozen=True)
class Num:
    """What a numeric field accepts.

    ``what`` names the kind of value (``"a positive integer"``); values of the wrong type,
    NaN, infinities and values outside ``lo``/``hi`` are refused with it. ``least`` and
    ``most`` are practical limits within that kind (a bandwidth so small or a count so large
    that the emulator's arithmetic or memory would fail) and are named on their own.
    """

    what: str
    integer: bool = False
    lo: float = -math.inf
    lo_open: bool = False
    """Whether ``lo`` itself is refused."""
    hi: float = math.inf
    least: float | None = None
    most: float | None = None

    def check(self, value: object, name: str = "") -> int | float:
        """``value`` as an int (integer fields) or a float, or FieldError naming ``name``
        (an option's error leaves the name to argparse)."""
        name = f"{name} " if name else ""
        bad = FieldError(f"{name}must be {self.what}, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        if self.integer and not isinstance(value, int):
            raise bad
        if isinstance(value, float) and not math.isfinite(value):
            raise bad
        if value < self.lo or (self.lo_open and value == self.lo) or value > self.hi:
            raise bad
        if self.least is not None and value < self.least:
            raise FieldError(f"{name}must be at least {self.least:g}, got {value!r}")
        if self.most is not None and value > self.most:
            raise FieldError(f"{name}must be at most {self.most:g}, got {value!r}")
        if self.integer:
            return value
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float
            raise bad from None

    def parse(self, text: str, name: str = "") -> int | float:
        """A command-line word read as this field (``int`` or ``float`` syntax)."""
        try:  # ASCII only: int() and float() also read other scripts' digits ('\u0663' is 3)
            if not text.isascii():
                raise ValueError(text)
            value: int | float = int(text) if self.integer else float(text)
        except ValueError:
            name = f"{name} " if name else ""
            raise FieldError(f"{name}must be {self.what}, got {text!r}") from None
        return self.check(value, name)


def check_numbers(obj: Any) -> None:
    """Every field of a dataclass that has a ``Num`` (metadata "num") checked by it, naming
    the field; a field whose default is None may be None. The options made from those fields
    (config_args) take the same values."""
    for f in dataclasses.fields(obj):
        spec = f.metadata.get("num")
        if spec is not None and not (f.default is None and getattr(obj, f.name) is None):
            spec.check(getattr(obj, f.name), f.name)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise FieldError(f"duplicate key {key!r}")
        out[key] = value
    return out


def load_json(data: bytes | str) -> Any:
    """Parse one JSON document; FieldError (with the parser's reason) for anything that is not
    one, including duplicate keys, nesting too deep and integers of too many digits."""
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise FieldError(f"not UTF-8 text (byte {e.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates)
    except FieldError:
        raise
    except json.JSONDecodeError as e:
        raise FieldError(f"not valid JSON: {e}") from None
    except RecursionError:
        raise FieldError("not valid JSON: nested too deeply") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise FieldError(f"not valid JSON: {e}") from None
