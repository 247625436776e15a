"""choice task on a table backend: plumbing and stored values against hand arithmetic."""

from __future__ import annotations

import asyncio
import math

import pytest

from llmscope.engine.tasks.base import TASKS
from llmscope.engine.tasks.choice import ChoiceTask
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend

TPL = "Q: {question}\nA:"


def make_work(variant="v1"):
    item = Item(
        item_id="7",
        fields={"question": "Sky colour?", "id": 7},
        gold="blue",
        options=["blue", "green"],
        text="Sky colour?",
    )
    return Work(
        item=item,
        variant=variant,
        prompt="Q: Sky colour?\nA:",
        gold="blue",
        options=["blue", "green"],
    )


def table():
    lp = math.log
    t = {
        ("Q: Sky colour?\nA:", " blue"): [(" bl", lp(0.2)), ("ue", lp(0.5))],  # 0.1
        ("Q: Sky colour?\nA:", " green"): [(" green", lp(0.3))],
        ("Answer:", " blue"): [(" bl", lp(0.05)), ("ue", lp(0.5))],  # 0.025
        ("Answer:", " green"): [(" green", lp(0.1))],
    }
    # content-free inputs: option probabilities (after normalising) 0.5/0.5, 0.2/0.8, 0.2/0.8
    for cf, (a, b) in {"N/A": (0.1, 0.1), "": (0.02, 0.08), "[MASK]": (0.05, 0.2)}.items():
        t[(f"Q: {cf}\nA:", " blue")] = [(" blue", lp(a))]
        t[(f"Q: {cf}\nA:", " green")] = [(" green", lp(b))]
    return t


async def test_choice_all_methods():
    assert TASKS["choice"] is ChoiceTask
    be = TableBackend(table())
    task = ChoiceTask({"templates": {"v1": TPL}, "text_field": "question"})
    r = await task.score(make_work(), be)
    # one loglik call with both options for the item
    assert be.calls[0] == (
        "loglik",
        ([("Q: Sky colour?\nA:", " blue"), ("Q: Sky colour?\nA:", " green")], False),
    )
    assert r.prompt == "Q: Sky colour?\nA:"
    os_ = r.option_scores
    assert os_["blue"]["logprob"] == pytest.approx(math.log(0.1))
    assert (
        os_["blue"]["n_tokens"] == 2 and os_["blue"]["n_chars"] == 5 and os_["blue"]["n_bytes"] == 5
    )
    assert os_["blue"]["mean_token"] == pytest.approx(math.log(0.1) / 2)
    assert os_["green"]["per_char"] == pytest.approx(math.log(0.3) / 6)
    # raw: 0.1 vs 0.3 -> green; probs normalised 0.25 / 0.75
    assert r.prediction == "green" and r.correct == 0.0
    assert r.probs == pytest.approx({"blue": 0.25, "green": 0.75})
    assert r.confidence == pytest.approx(0.75)
    # p_cf = mean([.5,.5],[.2,.8],[.2,.8]) = [.3,.7]; cal ∝ [.25/.3, .75/.7]
    cb, cg = 0.25 / 0.3, 0.75 / 0.7
    assert os_["blue"]["calibrated"] == pytest.approx(cb / (cb + cg))
    assert r.extra["calibration"]["p_cf"] == pytest.approx([0.3, 0.7])
    assert r.extra["calibration"]["source"] == "template"
    # pmi: log(.1/.025)=log 4 vs log(.3/.1)=log 3 -> blue
    assert os_["blue"]["pmi"] == pytest.approx(math.log(4))
    m = r.extra["methods"]
    assert m["pmi"] == {"prediction": "blue", "correct": 1.0, "expected_acc": pytest.approx(4 / 7)}
    assert m["raw"]["expected_acc"] == pytest.approx(0.25)


async def test_choice_mean_token_and_caches():
    be = TableBackend(table())
    task = ChoiceTask({"templates": {"v1": TPL}, "text_field": "question", "alpha": 2.0})
    r = await task.score(make_work(), be)
    assert r.extra["methods"]["mean_token"]["prediction"] == "blue"  # -1.151 > -1.204
    assert r.extra["methods"]["raw"]["expected_acc"] == pytest.approx(0.01 / (0.01 + 0.09))
    n_calls = len(be.calls)
    assert n_calls == 1 + 3 + 1  # item, 3 content-free prompts, domain prompt
    await task.score(make_work(), be)
    assert len(be.calls) == n_calls + 1  # content-free and domain passes are cached


async def test_choice_fallbacks():
    be = TableBackend(table())
    # no templates: content-free prompts by replacing the item text in the prompt
    r = await ChoiceTask({"domain_prompt": None}).score(make_work(), be)
    assert r.extra["calibration"]["source"] == "replace"
    assert r.extra["calibration"]["content_free_prompts"] == [
        "Q: N/A\nA:",
        "Q: \nA:",
        "Q: [MASK]\nA:",
    ]
    assert "pmi" not in r.extra["methods"] and "pmi" not in r.option_scores["blue"]
    r2 = await ChoiceTask({"content_free": [], "domain_prompt": ""}).score(make_work(), be)
    assert set(r2.extra["methods"]) == {
        "raw",
        "mean_token",
        "per_char",
        "per_byte",
        "mean_token_prob",
    }
    # chat: the stored prompt is the rendered one
    be2 = TableBackend(table())
    r3 = await ChoiceTask({"chat": True, "content_free": [], "domain_prompt": ""}).score(
        make_work(), be2
    )
    assert r3.prompt == "<user>Q: Sky colour?\nA:</user>" and be2.calls[0][1][1] is True


async def test_choice_gold_not_an_option():
    w = make_work()
    w.gold = "red"
    with pytest.raises(ValueError, match="not one of the options"):
        await ChoiceTask({"content_free": [], "domain_prompt": ""}).score(w, TableBackend(table()))
    w.gold = None
    r = await ChoiceTask({"content_free": [], "domain_prompt": ""}).score(w, TableBackend(table()))
    assert r.correct is None and r.extra["methods"]["raw"]["expected_acc"] is None


async def test_choice_permuted_variant_and_concurrent_items_share_passes():
    be = TableBackend(table())
    task = ChoiceTask({"templates": {"v1": TPL}, "text_field": "question"})
    w = make_work("v1@p1")
    w.options = ["green", "blue"]
    r1, r2 = await asyncio.gather(task.score(make_work(), be), task.score(w, be))
    assert r2.extra["calibration"]["source"] == "template"
    # 2 item calls + 3 content-free prompts + 1 domain prompt, each once
    assert len(be.calls) == 6
    assert r2.option_scores["blue"]["calibrated"] == pytest.approx(
        r1.option_scores["blue"]["calibrated"]
    )
    assert r2.extra["methods"]["pmi"]["prediction"] == "blue"
    assert (
        ChoiceTask({"templates": {"v": TPL}, "text_field": "question"}).content_free_prompts(
            make_work("v1x")
        )[1]
        == "replace"
    )  # "v1x" is not derived from "v" (an alphanumeric follows): text replacement


async def test_choice_failed_pass_is_not_cached():
    t = table()
    be = TableBackend(t)
    be.can_loglik = True
    task = ChoiceTask({"content_free": [], "domain_prompt": "Nope:"})
    with pytest.raises(KeyError):
        await task.score(make_work(), be)
    t[("Nope:", " blue")] = [(" blue", math.log(0.5))]
    t[("Nope:", " green")] = [(" green", math.log(0.5))]
    r = await task.score(make_work(), be)
    assert r.option_scores["blue"]["pmi"] == pytest.approx(math.log(0.2))
