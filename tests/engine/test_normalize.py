"""normalise / EM / F1 / stop sequences: DROP-style cases checked by hand."""

from __future__ import annotations

import pytest

from llmscope.engine.normalize import (
    apply_stop,
    canonical_numbers,
    check_stops,
    exact_match,
    normalise,
    token_f1,
)


def n(t: str) -> str:
    return normalise(t)[0]


def test_trace_records_every_step():
    out, trace = normalise("The  Answer:\tIS 1,000.50!\n")
    assert [s for s, _ in trace] == ["lower", "numbers", "punctuation", "articles", "whitespace"]
    assert trace[0][1] == "the  answer:\tis 1,000.50!\n"
    assert trace[1][1] == "the  answer:\tis 1000.5!\n"
    assert trace[2][1] == "the  answer\tis 1000.5\n"
    assert trace[3][1] == "   answer\tis 1000.5\n"
    assert out == trace[-1][1] == "answer is 1000.5"


@pytest.mark.parametrize(
    "a,b",
    [
        ("10\n", "10"),
        ("10.0", "10"),
        ("10.00", "10"),
        ("1,000", "1000"),
        ("  10 ", "10."),
        ("12.250", "12.25"),
        (".5", "0.5"),
        ("-3.0", "-3"),
        ("\u22123", "-3"),
        ("-0", "0"),
        ("007", "7"),
    ],
)
def test_numbers_agree(a, b):
    assert n(a) == n(b)
    assert exact_match(a, [b]) == 1.0


@pytest.mark.parametrize(
    "a,b", [("12.25", "12"), ("12.25", "1225"), ("-3", "3"), ("1,2", "1.2"), ("0.5", "5")]
)
def test_numbers_differ(a, b):
    assert n(a) != n(b)
    assert exact_match(a, [b]) == 0.0


def test_numbers_kept_exact():
    assert canonical_numbers("1,000,000 and 2,50") == "1000000 and 2,50"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # numbers kept exact
        ("12.25", "12.25"),
        ("It costs $3.14159.", "it costs 3.14159"),
        ("temperature -5 degrees", "temperature -5 degrees"),
        # A mark between two digits separates numbers (SQuAD would merge "3-4" into 34).
        ("pages 3-4", "pages 3 4"),
        # text normalisation
        ("The Eiffel Tower", "eiffel tower"),
        ("an apple\tand\na pear", "apple and pear"),
        ("«Paris»—“France”…", "parisfrance"),
        ("l'été, déjà!", "lété déjà"),
        ("Théâtre", "théâtre"),
        ("a\u00a0b\u2003c", "b c"),
        ("", ""),
        ("the", ""),
    ],
)
def test_normalised_text(text: str, want: str) -> None:
    assert n(text) == want


def test_f1():
    # pred tokens [eiffel, tower, paris], gold [eiffel, tower]: P=2/3 R=1 F1=0.8
    assert token_f1("the Eiffel tower, Paris", ["Eiffel Tower"]) == pytest.approx(0.8)
    assert token_f1("Paris", ["London", "paris"]) == 1.0
    assert token_f1("", ["the"]) == 1.0  # both empty after normalisation
    assert token_f1("x", ["the"]) == 0.0
    assert token_f1("12.25 apples", ["12 apples"]) == pytest.approx(0.5)


def test_stop_sequences():
    assert apply_stop("10\nQ: next", ["\n"]) == "10"
    assert apply_stop("12.25 dollars. Next", ["."]) == "12.25 dollars"
    assert apply_stop("12.25", ["."]) == "12.25"
    assert apply_stop("It is 12.25.", ["."]) == "It is 12.25"
    assert apply_stop("a;b\nc", ["\n", ";"]) == "a"
    assert apply_stop("no stop", []) == "no stop"
    with pytest.warns(UserWarning, match="decimals"):
        msgs = check_stops(["\n", "."])
    assert len(msgs) == 1
