"""The answer-token rule shared by every backend.

A token counts as an answer variant when its decoded text, lower-cased and
stripped of every character outside the answer's own alphabet, equals the
answer. For alphabetic answers ("yes", "no") the alphabet is a-z, so "Yes",
" yes", "\"Yes" and "YES" all count as "yes". Numeric labels ("1".."7") keep
0-9; mixed labels keep a-z and 0-9.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_ALPHA = re.compile(r"[^a-z]")
_DIGIT = re.compile(r"[^0-9]")
_ALNUM = re.compile(r"[^a-z0-9]")


def _pattern(answer: str) -> re.Pattern[str]:
    a = answer.lower()
    if a.isalpha() and a.isascii():
        return _ALPHA
    if a.isdigit() and a.isascii():
        return _DIGIT
    return _ALNUM


def canonical(answer: str) -> str:
    """The canonical (comparison) form of an answer label."""
    return _pattern(answer).sub("", answer.lower())


def normalise_token(text: str, answer: str) -> str:
    """Token text reduced with the answer's alphabet, for comparison with `canonical(answer)`."""
    return _pattern(answer).sub("", text.lower())


def match_answer(text: str, answers: Sequence[str]) -> str | None:
    """The answer a token's text is a variant of, or None. First match wins."""
    for a in answers:
        c = canonical(a)
        if c and normalise_token(text, a) == c:
            return a
    return None


def answer_ids(vocab: Iterable[tuple[int, str]], answers: Sequence[str]) -> dict[str, list[int]]:
    """Group vocabulary ids (id, decoded text) by the answer they are a variant of."""
    out: dict[str, list[int]] = {a: [] for a in answers}
    for i, text in vocab:
        a = match_answer(text, answers)
        if a is not None:
            out[a].append(i)
    return out
