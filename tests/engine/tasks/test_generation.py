"""generation task on a table backend: stops, EM/F1, samples."""

from __future__ import annotations

import pytest

from llmscope.engine.tasks.generation import GenerationTask, gold_answers
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend


def work(prompt="Q?", gold="12.25", answers=None):
    fields = {"q": prompt}
    if answers is not None:
        fields["answers"] = answers
    return Work(item=Item(item_id="g1", fields=fields), variant="v", prompt=prompt, gold=gold)


async def test_generation_decimal_answer_newline_stop():
    be = TableBackend(gen_table={"Q?": [["12.25\nQ: what next?"]]})
    t = GenerationTask({})
    r = await t.score(work(), be)
    params = be.calls[0][1][1]
    assert params.stop == ["\n"] and params.temperature == 0.0 and params.n == 1
    assert r.prediction == "12.25" and r.correct == 1.0 and r.extra["f1"] == 1.0
    assert r.extra["raw"] == ["12.25\nQ: what next?"]
    assert r.extra["samples"][0]["trace"][-1] == ("whitespace", "12.25")
    assert r.prompt == "<user>Q?</user>"


async def test_generation_truncated_number_is_wrong():
    be = TableBackend(gen_table={"Q?": [["12"]]})
    r = await GenerationTask({}).score(work(), be)
    assert r.correct == 0.0 and r.extra["f1"] == 0.0


async def test_generation_dot_stop_warns_and_keeps_decimals():
    with pytest.warns(UserWarning, match="decimals"):
        t = GenerationTask({"stop": ["."], "chat": False})
    be = TableBackend(gen_table={"Q?": [["12.25. Then more"]]})
    r = await t.score(work(), be)
    assert be.calls[0][1][1].stop == []  # the "." stop is not sent to the backend
    assert r.prediction == "12.25" and r.correct == 1.0 and r.extra["stop_warnings"]
    assert r.prompt == "Q?"


async def test_generation_samples_answers_and_majority():
    be = TableBackend(
        gen_table={"Q?": [["\nThe Eiffel Tower", "eiffel tower.", "Paris", "Eiffel\ttower\n"]]}
    )
    t = GenerationTask({"n": 4, "temperature": 0.7, "top_p": 0.9, "seed": 3})
    r = await t.score(work(gold=None, answers=["Eiffel Tower", "the tower"]), be)
    p = be.calls[0][1][1]
    assert (p.n, p.temperature, p.top_p, p.seed) == (4, 0.7, 0.9, 3)
    assert r.prediction == "The Eiffel Tower"  # leading newline removed before the stop
    assert [s["em"] for s in r.extra["samples"]] == [1.0, 1.0, 0.0, 1.0]
    assert r.correct == 1.0 and r.confidence == pytest.approx(0.75)
    assert r.extra["em_majority"] == 1.0 and r.extra["em_mean"] == pytest.approx(0.75)
    assert r.gold == "Eiffel Tower"
    # "Paris" vs "eiffel tower": no overlap; vs "tower": none -> F1 0
    assert r.extra["samples"][2]["f1"] == 0.0


async def test_generation_unscored_and_gold_lists():
    assert gold_answers(work(gold="4", answers="four|4")) == ["four", "4"]
    assert gold_answers(work(gold="x", answers=["y"])) == ["y", "x"]
    be = TableBackend(gen_table={"Q?": [["anything"]]})
    r = await GenerationTask({}).score(work(gold=None), be)
    assert r.correct is None and r.prediction == "anything" and r.extra["em"] is None
