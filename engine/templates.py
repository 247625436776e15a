"""Prompt templates: plain `{field}` names filled from an item, nothing else.

Suite files come from anyone, so a template may only name item fields (no attribute
access, indexing, or format specs that could pad a prompt to megabytes). Used by the
suite loader (data/) to check templates and by tasks to render prompts.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable
from typing import Any

MAX_FORMAT_WIDTH = 200  # `{x:>200}` is plausible layout; `{x:>50000000}` is a 50 MB prompt
MAX_FORMAT_PRECISION = 20

# The format specs a template may use: [[fill]align][sign][#][0][width][,_][.precision][type],
# with width/precision checked separately and no nested `{field}` inside the spec.
_SPEC_RE = re.compile(
    r"^(?:[^{}]?[<>=^])?[+\- ]?#?0?(?P<width>\d+)?[,_]?(?:\.(?P<prec>\d+))?[bcdeEfFgGnosxX%]?$"
)
_FORMATTER = string.Formatter()
_CONVERSIONS: dict[str, Callable[[Any], str]] = {"r": repr, "s": str, "a": ascii}


def check_template(template: str) -> list[str]:
    """The field names a template uses; ValueError for anything beyond plain field names.

    Allowed: `{field}`, `{field!r}` (and !s, !a), and simple format specs such as `{n:.2f}` or
    `{label:>10}` with width <= 200 and precision <= 20.
    """
    names = []
    for _, name, spec, conv in _FORMATTER.parse(template):
        if conv is not None and conv not in _CONVERSIONS:
            raise ValueError(f"unknown conversion '!{conv}' (use !r, !s or !a)")
        if name is None:
            continue
        if name == "" or name.isdigit():
            raise ValueError("positional fields ({} or {0}) are not allowed; name an item field")
        if "." in name or "[" in name or "]" in name:
            raise ValueError(
                f"{{{name}}}: attribute access and indexing are not allowed; use a plain field name"
            )
        if spec:
            m = _SPEC_RE.match(spec)
            if m is None:
                raise ValueError(
                    f"{{{name}:{spec}}}: format spec not allowed (use e.g. :>10 or :.2f)"
                )
            if m["width"] and int(m["width"]) > MAX_FORMAT_WIDTH:
                raise ValueError(f"{{{name}:{spec}}}: width over {MAX_FORMAT_WIDTH}")
            if m["prec"] and int(m["prec"]) > MAX_FORMAT_PRECISION:
                raise ValueError(f"{{{name}:{spec}}}: precision over {MAX_FORMAT_PRECISION}")
        names.append(name)
    return names


def render_template(template: str, fields: dict[str, Any]) -> str:
    """Fill a template from item fields by plain key lookup (never getattr/getitem on values).

    A field that is None renders as "". KeyError for a missing field; ValueError when a
    format spec does not suit the value (e.g. `:.2f` on text).
    """
    out: list[str] = []
    for literal, name, spec, conv in _checked_parse(template):
        out.append(literal)
        if name is None:
            continue
        v = fields[name]
        v = "" if v is None else v
        if conv:
            v = _CONVERSIONS[conv](v)
        try:
            out.append(format(v, spec) if spec else str(v))
        except TypeError as e:  # e.g. a width on a list value
            raise ValueError(f"{{{name}:{spec}}}: {e}") from None
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _checked_parse(template: str) -> tuple[tuple[str, str | None, str | None, str | None], ...]:
    check_template(template)
    return tuple(_FORMATTER.parse(template))
