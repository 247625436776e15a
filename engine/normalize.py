"""Answer normalisation for exact match and token F1 (SQuAD/DROP style), with a trace.

`normalise(text)` applies, in order, and records the text after each step:

1. ``lower``: `str.lower()`.
2. ``numbers``: every number is rewritten canonically: a leading minus (ASCII
   "-" or U+2212 "−") kept when directly before the digits and not preceded by a
   letter or digit; thousands separators removed when the groups are exactly
   three digits ("1,000" → "1000", "1,2" is left alone); leading zeros of the
   integer part removed; a fractional part keeps its digits but loses trailing
   zeros, and the point goes when nothing is left ("10.00" → "10", "12.250" →
   "12.25", ".5" → "0.5"); "-0" → "0". Numbers are never rounded or truncated.
3. ``punctuation``: every Unicode punctuation or symbol character (categories
   P* and S*) is removed, except a "." with a digit on both sides (a decimal
   point) and a "-" directly before a digit that is not preceded by a letter or
   digit (a minus sign). As in SQuAD, characters are deleted, not replaced by
   spaces ("well-known" → "wellknown"), except between two digits, where the
   mark becomes a space so two numbers never merge ("3,4" → "3 4", "1,0000" →
   "1 0000", "3/4" → "3 4"; a real thousands separator was already removed in
   step 2, "1,000" → "1000").
4. ``articles``: the words "a", "an", "the" are replaced by a space.
5. ``whitespace``: runs of any Unicode whitespace (spaces, tabs, newlines, NBSP)
   become one space; leading and trailing whitespace is removed.

`apply_stop(text, stops)` cuts generated text at the earliest stop sequence,
except that a stop made only of "." or "," is skipped where it has a digit on
both sides, so decimals are never cut; `check_stops` warns about such stops.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence

Trace = list[tuple[str, str]]

_NUM = re.compile(
    r"(?<![\w.])(?<!\d,)(?P<sign>[-\u2212]?)(?:(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?|\.(?P<bare>\d+))(?![\w])"
)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def _canon_number(m: re.Match[str]) -> str:
    sign = "-" if m.group("sign") else ""
    whole = (m.group("int") or "0").replace(",", "").lstrip("0") or "0"
    frac = (m.group("frac") if m.group("int") is not None else m.group("bare")) or ""
    frac = frac.rstrip("0")
    out = whole + ("." + frac if frac else "")
    if out == "0":
        sign = ""
    return sign + out


def canonical_numbers(text: str) -> str:
    """Rewrite every number in `text` canonically (see module docstring, step 2)."""
    return _NUM.sub(_canon_number, text)


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def remove_punctuation(text: str) -> str:
    """Drop punctuation and symbols, keeping decimal points and minus signs of numbers."""
    out = []
    n = len(text)
    for i, ch in enumerate(text):
        if not _is_punct(ch):
            out.append(ch)
            continue
        prev = text[i - 1] if i > 0 else ""
        nxt = text[i + 1] if i + 1 < n else ""
        if ch == "." and prev.isdigit() and nxt.isdigit():
            out.append(ch)
        elif prev.isdigit() and nxt.isdigit():
            # Thousands separators are gone after the numbers step, so a comma (or any other
            # mark) left between two digits separates numbers: "3,4" is 3 and 4, never 34.
            out.append(" ")
        elif ch in "-\u2212" and nxt.isdigit() and not (prev.isalnum()):
            out.append("-")
        # everything else is dropped
    return "".join(out)


def normalise(text: str) -> tuple[str, Trace]:
    """Normalised text and the trace [(step, text after step), ...]."""
    trace: Trace = []
    t = text.lower()
    trace.append(("lower", t))
    t = canonical_numbers(t)
    trace.append(("numbers", t))
    t = remove_punctuation(t)
    trace.append(("punctuation", t))
    t = _ARTICLES.sub(" ", t)
    trace.append(("articles", t))
    t = " ".join(t.split())
    trace.append(("whitespace", t))
    return t, trace


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold."""
    p = normalise(prediction)[0]
    return 1.0 if any(p == normalise(g)[0] for g in golds) else 0.0


def token_f1_normalised(pred_norm: str, gold_norm: str) -> float:
    """SQuAD token F1 between two already-normalised strings (both empty → 1.0)."""
    pt, gt = pred_norm.split(), gold_norm.split()
    if not pt or not gt:
        return float(pt == gt)
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Iterable[str]) -> float:
    """Max over golds of SQuAD token F1 after normalisation."""
    p = normalise(prediction)[0]
    return max((token_f1_normalised(p, normalise(g)[0]) for g in golds), default=0.0)


def decimal_unsafe_stop(stop: str) -> bool:
    """True for stop sequences made only of "." and "," (they could cut a number)."""
    return bool(stop) and set(stop) <= {".", ","}


def check_stops(stops: Sequence[str]) -> list[str]:
    """Warn (and return messages) for stop sequences that could cut numbers."""
    msgs = []
    for s in stops:
        if decimal_unsafe_stop(s):
            msgs.append(
                f"stop sequence {s!r} would cut decimals such as 12.25; it is applied only where it does not "
                "sit between two digits (use a newline stop instead)"
            )
        if s == "":
            msgs.append("empty stop sequence ignored")
    for m in msgs:
        warnings.warn(m, stacklevel=2)
    return msgs


def apply_stop(text: str, stops: Sequence[str]) -> str:
    """`text` up to the earliest stop sequence; "."/","-only stops never cut between digits."""
    cut = len(text)
    for s in stops:
        if not s:
            continue
        start = 0
        while True:
            i = text.find(s, start)
            if i < 0 or i >= cut:
                break
            if decimal_unsafe_stop(s):
                before = text[i - 1] if i > 0 else ""
                after = text[i + len(s)] if i + len(s) < len(text) else ""
                if before.isdigit() and after.isdigit():
                    start = i + 1
                    continue
            cut = i
            break
    return text[:cut]
