"""constrained task: loglik mode, generation with reprompt, response cleaning."""

from __future__ import annotations

import math

import pytest

from llmscope.engine.tasks.constrained import ConstrainedTask, clean_response, match_allowed
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend

OPTS = ["TRUE", "FALSE"]
P = "Is it so? Answer TRUE or FALSE."
RETRY = P + "\n\nOnly respond with one of these options: [TRUE, FALSE]"


def work(gold="FALSE"):
    return Work(
        item=Item(item_id="w1", fields={}, options=OPTS),
        variant="v",
        prompt=P,
        gold=gold,
        options=OPTS,
    )


@pytest.mark.parametrize(
    "raw,clean",
    [
        (' "TRUE". ', "TRUE"),
        ("(1)", "1"),
        ("\u201cPossible.\u201d", "Possible"),
        ("TRUE\n", "TRUE"),
        ("'FALSE'", "FALSE"),
        ("[2].", "2"),
        ("TRUE, because", "TRUE, because"),
        ("", ""),
    ],
)
def test_clean_response(raw, clean):
    assert clean_response(raw) == clean


def test_match_allowed():
    assert match_allowed("true.", OPTS) == "TRUE"
    assert match_allowed("true.", OPTS, case_sensitive=True) is None
    assert match_allowed("It is TRUE", OPTS) is None


async def test_loglik_mode_for_hf_backends():
    lp = math.log
    be = TableBackend(
        {(P, " TRUE"): [(" TRUE", lp(0.2))], (P, " FALSE"): [(" F", lp(0.6)), ("ALSE", lp(0.9))]},
        kind="hf",
    )
    r = await ConstrainedTask({}).score(work(), be)
    assert be.calls[0][0] == "loglik" and r.extra["mode"] == "loglik"
    assert r.prediction == "FALSE" and r.correct == 1.0
    assert r.probs == pytest.approx({"TRUE": 0.2 / 0.74, "FALSE": 0.54 / 0.74})
    assert r.option_scores["FALSE"]["logprob"] == pytest.approx(lp(0.54))


async def test_generate_valid_first_time():
    be = TableBackend(gen_table={P: [[" false."]]})
    r = await ConstrainedTask({}).score(work(), be)
    assert r.prediction == "FALSE" and r.correct == 1.0 and r.extra["reprompted"] is False
    assert r.extra["raw_responses"] == [" false."]
    assert be.calls[0][1][1].temperature == 0.0


async def test_generate_reprompt_then_valid_and_invalid():
    be = TableBackend(gen_table={P: [["I think it is true"]], RETRY: [["TRUE"]]})
    r = await ConstrainedTask({}).score(work(), be)
    assert [c[1][0] for c in be.calls] == [P, RETRY]
    assert r.prediction == "TRUE" and r.correct == 0.0 and r.extra["reprompted"] is True
    assert r.extra["raw_responses"] == ["I think it is true", "TRUE"] and r.extra["valid"] is True
    be2 = TableBackend(gen_table={P: [["maybe"]], RETRY: [["still maybe"]]})
    r2 = await ConstrainedTask({}).score(work(), be2)
    assert r2.prediction == "" and r2.correct == 0.0 and r2.extra["valid"] is False
    assert r2.extra["raw_responses"] == ["maybe", "still maybe"]


async def test_fallback_to_generate_when_loglik_fails():
    be = TableBackend(gen_table={P: [["FALSE"]]}, kind="hf", can_loglik=False)
    r = await ConstrainedTask({}).score(work(), be)
    assert (
        r.extra["mode"] == "generate"
        and r.extra["loglik_error"] == "no loglik"
        and r.correct == 1.0
    )
    be2 = TableBackend(gen_table={P: [["TRUE"]]}, kind="hf")
    r2 = await ConstrainedTask({"mode": "generate"}).score(work(gold=None), be2)
    assert r2.extra["mode"] == "generate" and r2.correct is None and r2.prediction == "TRUE"


async def test_answer_classes_score_worldsense_style():
    # WorldSense: responses "1" and "2" are both KNOW, so answering 1 to a gold 2 is right;
    # "3" (UNKNOWN) is wrong, and an invalid reply ("") stays wrong.
    opts = ["1", "2", "3"]
    eq = {"1": "KNOW", "2": "KNOW", "3": "UNKNOWN"}

    def w():
        return Work(
            item=Item(item_id="k", fields={}, options=opts),
            variant="v",
            prompt=P,
            gold="2",
            options=opts,
        )

    for reply, want in (("(1)", 1.0), ("2", 1.0), ("3", 0.0)):
        be = TableBackend(gen_table={P: [[reply]]})
        r = await ConstrainedTask({"mode": "generate", "equivalent": eq}).score(w(), be)
        assert r.correct == want, reply
        assert r.extra["exact_correct"] == float(r.prediction == "2")
    retry = P + "\n\nOnly respond with one of these options: [1, 2, 3]"
    be = TableBackend(gen_table={P: [["maybe"]], retry: [["no idea"]]})
    r = await ConstrainedTask({"mode": "generate", "equivalent": eq}).score(w(), be)
    assert r.prediction == "" and r.correct == 0.0
