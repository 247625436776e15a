"""Text from a server made safe to store: lone surrogates repaired, the API key redacted.

A JSON reply may carry `"\\ud83d"` (half of a UTF-16 pair: a tokenizer that split an emoji
across tokens, or a broken proxy). Python accepts it in a `str`, but UTF-8 cannot encode it,
so the live channel and the Arrow writer would fail the whole batch. Every result row goes
through `repair_result` before it is shown, stored or written to the live channel: each lone
surrogate becomes U+FFFD (valid pairs are joined) and the row's `extra.text_repaired` says how
many strings were changed, so the repair is never silent.

A server that echoes the request's key in a 200 reply (a logging proxy, a hostile endpoint)
would put it in the store, the exports and the response cache. The OpenAI backend passes every
reply through `redact_tree` with its key before anything reads it, replacing the key (and its
base64 forms) with `REDACTED`; `repair_result` then sets `extra.key_redacted` on rows that
carry the marker, for replies read back from the cache as for fresh ones.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

REDACTED = "[redacted: API key]"
MIN_SECRET_LEN = (
    8  # shorter "keys" (EMPTY, none, x) guard nothing; replacing them would mangle text
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def repair_text(s: str) -> str:
    """`s` with each lone surrogate replaced by U+FFFD (a valid high+low pair becomes its character)."""
    if not _SURROGATE.search(s):
        return s
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def map_strings(obj: Any, fix: Callable[[str], str]) -> tuple[Any, int]:
    """`obj` (JSON-like: dicts, lists, tuples, strings) with `fix` applied to every string,
    dictionary keys included; the count of strings that changed. Unchanged parts are returned
    as they are (no copy)."""
    if isinstance(obj, str):
        new = fix(obj)
        return new, int(new != obj)
    if isinstance(obj, dict):
        n = 0
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            k2, a = map_strings(k, fix) if isinstance(k, str) else (k, 0)
            v2, b = map_strings(v, fix)
            out[k2] = v2
            n += a + b
        return (out, n) if n else (obj, 0)
    if isinstance(obj, list | tuple):
        pairs = [map_strings(v, fix) for v in obj]
        n = sum(c for _, c in pairs)
        if not n:
            return obj, 0
        items = [v for v, _ in pairs]
        return (items if isinstance(obj, list) else tuple(items)), n
    return obj, 0


def key_redactor(forms: list[str]) -> Callable[[str], str]:
    """A `fix` for `map_strings` replacing each form of the key (longest first) with REDACTED."""
    forms = sorted({f for f in forms if len(f) >= MIN_SECRET_LEN}, key=len, reverse=True)

    def fix(s: str) -> str:
        for f in forms:
            if f in s:
                s = s.replace(f, REDACTED)
        return s

    return fix


def _has_marker(obj: Any) -> bool:
    found = False

    def look(s: str) -> str:
        nonlocal found
        found = found or REDACTED in s
        return s

    map_strings(obj, look)
    return found


def repair_result(res: Any) -> None:
    """Repair every string field of a result row in place and record what was done in `extra`."""
    changed = 0
    for f in dataclasses.fields(res):
        if f.name == "extra":
            continue
        v = getattr(res, f.name)
        new, n = map_strings(v, repair_text)
        if n:
            setattr(res, f.name, new)
            changed += n
    extra, n = map_strings(res.extra, repair_text)
    changed += n
    if changed:
        extra = {**extra, "text_repaired": changed}
    if _has_marker(
        [res.prompt, res.top_tokens, res.prediction, res.error, res.option_scores, extra]
    ):
        extra = {**extra, "key_redacted": True}
    res.extra = extra


# Bidirectional controls: embeddings/overrides (U+202A-202E), isolates (U+2066-2069), the
# LRM/RLM/ALM marks. A bidi terminal or a browser reorders text around them ("\u202egnp.exe"
# reads "exe.png"), so what a reader sees would not be what is stored. The TUI draws them the
# same way (tui/widgets.py, `clean`).
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def show_bidi(s: str) -> str:
    """`s` with each bidi control written as a visible `<U+202E>` (for a page or a terminal)."""
    return BIDI_CONTROLS.sub(lambda m: f"<U+{ord(m.group()):04X}>", s)


def for_terminal(s: str) -> str:
    """Text printed for a person to read: bidi controls as `<U+202E>`, other control characters
    (ANSI escapes included) as `\\x1b`, so stored text can neither reorder nor drive the screen.
    Newlines and tabs stay."""
    s = _TERMINAL_CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", s)
    return show_bidi(s)


_JSON_RAW = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\x7f-\x9f]")


def json_escape_bidi(text: str) -> str:
    """JSON text with each raw bidi control (and DEL and the C1 controls, which `json.dumps`
    leaves raw) written as its `\\u202e` escape: the same data once parsed, but a terminal or
    editor showing the line can neither reorder it nor be driven by it. Only valid for JSON
    produced by `json.dumps`, where such characters occur inside strings alone."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
