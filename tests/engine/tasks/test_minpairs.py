"""minpairs task on a table backend."""

from __future__ import annotations

import math

import pytest

from llmscope.engine.tasks.minpairs import MinPairsTask, align_tokens, token_char_spans
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend

GOOD = "The dog runs."
BAD = "The dog run."


def work(fields):
    item = Item(item_id="p1", fields=fields, text=" / ".join(fields["sentences"]))
    return Work(item=item, variant="default", prompt="", gold=None)


def backend(bad_token=" run"):
    lp = math.log
    return TableBackend(
        {
            ("", GOOD): [("The", lp(0.1)), (" dog", lp(0.01)), (" runs", lp(0.02)), (".", lp(0.5))],
            ("", BAD): [
                ("The", lp(0.1)),
                (" dog", lp(0.01)),
                (bad_token, lp(0.005)),
                (".", lp(0.25)),
            ],
        }
    )


def test_token_char_spans_and_alignment():
    assert token_char_spans(["The", " dog", "."]) == [(0, 3), (3, 7), (7, 8)]
    assert align_tokens("The dog.", ["The", " dog", "."]) == ([(0, 3), (3, 7), (7, 8)], "exact")
    # single-token decode that dropped the word-initial spaces
    assert align_tokens("The dog ran.", ["The", "dog", "r", "an", "."]) == (
        [(0, 3), (3, 7), (7, 9), (9, 11), (11, 12)],
        "whitespace",
    )
    assert align_tokens("The dog.", ["The", "cat", "."]) is None
    assert align_tokens("The dog.", ["The", "dog"]) is None
    assert align_tokens("é", ["\ufffd", "\ufffd"]) is None


async def test_minpairs_scores_and_critical():
    be = backend()
    r = await MinPairsTask().score(
        work({"sentences": [GOOD, BAD], "critical": [[8, 12], [8, 11]]}), be
    )
    assert be.calls == [("loglik", ([("", GOOD), ("", BAD)], False))]
    g = math.log(0.1 * 0.01 * 0.02 * 0.5)
    b = math.log(0.1 * 0.01 * 0.005 * 0.25)
    assert r.option_scores[GOOD]["logprob"] == pytest.approx(g)
    assert r.option_scores[BAD]["mean_token"] == pytest.approx(b / 4)
    assert r.correct == 1.0 and r.prediction == GOOD and r.gold == GOOD
    # P(good) / (P(good)+P(bad)) = 1e-5 / (1e-5 + 1.25e-6)
    assert r.confidence == pytest.approx(1e-5 / 1.125e-5)
    c0, c1 = r.extra["critical"]
    assert c0["text"] == "runs" and c0["tokens"] == [" runs"] and c0["token_indices"] == [2]
    assert c0["surprisal_nats"] == pytest.approx([-math.log(0.02)])
    assert c0["surprisal_bits"] == pytest.approx([-math.log2(0.02)])
    assert c1["text"] == "run" and c1["total_bits"] == pytest.approx(-math.log2(0.005))
    assert r.extra["logprob_diff"] == pytest.approx(g - b)


async def test_minpairs_good_index_shared_span_and_ties():
    be = backend()
    # "good" = 1 (the ungrammatical one is marked acceptable): now wrong
    r = await MinPairsTask().score(
        work({"sentences": [GOOD, BAD], "good": 1, "critical": [4, 12]}), be
    )
    assert r.correct == 0.0 and r.gold == BAD and r.prediction == GOOD
    # shared span [4, 12) covers " dog" (3..7 overlaps) and the verb and, for BAD, "." at 11..12
    assert r.extra["critical"][0]["tokens"] == [" dog", " runs"]
    assert r.extra["critical"][1]["tokens"] == [" dog", " run", "."]
    lp = math.log
    tie = TableBackend({("", "A b."): [("A b.", lp(0.1))], ("", "A c."): [("A c.", lp(0.1))]})
    r2 = await MinPairsTask().score(work({"sentences": ["A b.", "A c."]}), tie)
    assert r2.correct == 0.0  # ties are wrong (strict comparison)
    assert r2.prediction == "A b."  # first maximum
    assert r2.extra["critical"] == [None, None]


async def test_minpairs_unaligned_tokens_and_bad_input():
    be = backend(bad_token=" ru\ufffd")
    r = await MinPairsTask().score(
        work({"sentences": [GOOD, BAD], "critical": [[8, 12], [8, 11]]}), be
    )
    assert (
        r.extra["critical"][1]["aligned"] is False
        and "surprisal_nats" not in r.extra["critical"][1]
    )
    with pytest.raises(ValueError):
        await MinPairsTask().score(work({"sentences": [GOOD, BAD], "good": 2}), backend())
    with pytest.raises(ValueError):
        await MinPairsTask().score(
            work({"sentences": [GOOD, BAD], "critical": [[1, 2, 3]]}), backend()
        )
