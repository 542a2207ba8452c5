"""Results pages from templates: a page's prose lives in a markdown file under ``templates/``
(package data), cut into named sections by ``<!-- section NAME -->`` lines, with ``$name``
fields (``string.Template``) that the study fills with its figures and tables."""

from __future__ import annotations

import re
from importlib import resources
from string import Template

_MARK = re.compile(r"^<!-- section (\w+) -->\n", re.MULTILINE)


def sections(name: str) -> dict[str, Template]:
    """The sections of ``templates/NAME``: each the text from its marker line to the next
    marker's (the newline before that marker, and the file's last, not included)."""
    text = resources.files(__package__).joinpath("templates", name).read_text()
    parts = _MARK.split(text)
    return {key: Template(body.removesuffix("\n"))
            for key, body in zip(parts[1::2], parts[2::2], strict=True)}


def render(name: str, section: str, **fields: object) -> str:
    """One section of ``templates/NAME`` with its fields filled (every one must be given)."""
    return sections(name)[section].substitute(fields)
