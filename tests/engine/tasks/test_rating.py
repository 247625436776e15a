"""rating task on a table backend."""

from __future__ import annotations

import pytest

from llmscope.engine.tasks.rating import RatingTask, label_values
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend


def work(gold, prompt="Rate: water is wet."):
    return Work(item=Item(item_id="r1", fields={}), variant="v", prompt=prompt, gold=gold)


NUM = {"Rate: water is wet.": {"1": 0.05, "2": 0.05, "3": 0.1, "4": 0.2, "5": 0.4, "maybe": 0.2}}


async def test_rating_numeric_labels():
    be = TableBackend(next_table=NUM)
    t = RatingTask({"answers": ["1", "2", "3", "4", "5"], "chat": True})
    r = await t.score(work("4"), be)
    assert be.calls == [("next_token", ("Rate: water is wet.", ("1", "2", "3", "4", "5"), True))]
    assert r.prompt == "<user>Rate: water is wet.</user>"
    assert r.extra["label_mass"] == pytest.approx(0.8)
    assert r.other == pytest.approx(0.2)
    assert r.probs == pytest.approx({"1": 0.0625, "2": 0.0625, "3": 0.125, "4": 0.25, "5": 0.5})
    # expected = (1*.05 + 2*.05 + 3*.1 + 4*.2 + 5*.4) / .8 = 3.25 / .8
    assert r.extra["expected"] == pytest.approx(3.25 / 0.8)
    assert r.prediction == "5" and r.confidence == pytest.approx(0.5)
    assert r.correct == 0.0 and r.extra["abs_error"] == pytest.approx(3.25 / 0.8 - 4)
    r2 = await t.score(work("5.0"), TableBackend(next_table=NUM))
    assert r2.correct == 1.0
    r3 = await t.score(work("3.4"), TableBackend(next_table=NUM))
    assert r3.correct is None and r3.extra["abs_error"] == pytest.approx(abs(3.4 - 3.25 / 0.8))
    r4 = await t.score(work(None), TableBackend(next_table=NUM))
    assert r4.correct is None and "abs_error" not in r4.extra


async def test_rating_word_labels_and_ties():
    labels = ["never", "sometimes", "always"]
    be = TableBackend(next_table={"p": {"never": 0.3, "sometimes": 0.3, "always": 0.1}})
    r = await RatingTask({"answers": labels}).score(work("sometimes", "p"), be)
    assert r.prediction == "never"  # tie: first label
    assert r.correct == 0.0
    # values 1,2,3: (0.3 + 0.6 + 0.3) / 0.7
    assert r.extra["expected"] == pytest.approx(1.2 / 0.7)
    assert r.extra["abs_error"] == pytest.approx(abs(1.2 / 0.7 - 2))
    assert label_values(labels) == [1.0, 2.0, 3.0] and label_values(["0", "5", "10"]) == [
        0.0,
        5.0,
        10.0,
    ]


async def test_rating_no_mass():
    be = TableBackend(next_table={"p": {"x": 1.0}})
    r = await RatingTask({"answers": ["1", "2"]}).score(work("1", "p"), be)
    # no mass on any label is an abstention (engine/abstain.py): no prediction, counted wrong
    assert r.error is None and r.probs is None and r.prediction is None and r.correct == 0.0
    assert r.extra["abstained"] is True
