"""Choice scoring schemes side by side (engine/schemes.py, choice_math additions) on a table backend."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from llmscope.analysis.methods import flipping_items, sensitivity_rows
from llmscope.engine.schemes import check_schemes, lettered, match_free
from llmscope.engine.tasks.choice import ChoiceTask
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend

P = "Q: Sky colour?\nA:"
LABEL = P + "\nA. blue\nB. green\nAnswer with the letter of the correct option.\nAnswer:"


def work():
    item = Item(
        item_id="7",
        fields={"question": "Sky colour?"},
        gold="blue",
        options=["blue", "green"],
        text="Sky colour?",
    )
    return Work(item=item, variant="v1", prompt=P, gold="blue", options=["blue", "green"])


def tables():
    lp = math.log
    ll = {
        (P, " blue"): [(" bl", lp(0.2)), ("ue", lp(0.5))],  # P = 0.1, mean token prob 0.35
        (P, " green"): [(" green", lp(0.3))],
        ("Answer:", " blue"): [(" bl", lp(0.05)), ("ue", lp(0.5))],  # 0.025
        ("Answer:", " green"): [(" green", lp(0.1))],
    }
    rate = "{p} {o}\nHow good is this answer, on a scale from 1 (very bad) to 5 (very good)? Answer with a single number.\nRating:"
    nxt = {
        LABEL: {"A": 0.3, "B": 0.1, "C": 0.05},  # renormalised over A, B: 0.75 / 0.25
        rate.format(p=P, o="blue"): {"1": 0.1, "5": 0.3},  # expected (1·.1 + 5·.3)/.4 = 4.0
        rate.format(p=P, o="green"): {"2": 0.2, "3": 0.2},  # 2.5
    }
    gen = {LABEL: [["B. green"]]}
    return ll, nxt, gen


def fake_embed(texts):
    vecs = {"Sky colour?": [1.0, 0.0], "blue": [0.6, 0.8], "green": [0.8, 0.6]}
    return np.array([vecs[t] for t in texts])


async def test_all_schemes_by_hand(monkeypatch):
    import llmscope.engine.schemes as sch

    monkeypatch.setattr(sch, "_EMBEDDER", [fake_embed])
    ll, nxt, gen = tables()
    be = TableBackend(ll, nxt, gen)
    task = ChoiceTask({"content_free": [], "schemes": ["labels", "free", "rating", "embedding"]})
    r = await task.score(work(), be)
    m, os_ = r.extra["methods"], r.option_scores
    # mean per-token probability: blue (0.2 + 0.5)/2 = 0.35 > green 0.3
    assert os_["blue"]["mean_token_prob"] == pytest.approx(0.35)
    assert m["mean_token_prob"]["prediction"] == "blue"
    # surprisal reduction log P(o|I0)/log P(o|I): blue log .025/log .1 = 1.602 < green log .1/log .3 = 1.913
    assert os_["blue"]["surprisal_ratio"] == pytest.approx(math.log(0.025) / math.log(0.1))
    assert m["surprisal_ratio"]["prediction"] == "green" and m["surprisal_ratio"]["correct"] == 0.0
    # label scoring: letters renormalised
    assert os_["blue"]["label_prob"] == pytest.approx(0.75)
    assert m["labels"] == {
        "prediction": "blue",
        "correct": 1.0,
        "expected_acc": pytest.approx(0.75),
    }
    # free production: "B. green" -> green
    assert m["free"] == {"prediction": "green", "correct": 0.0, "expected_acc": None}
    assert r.extra["schemes"]["free"]["text"] == "B. green"
    # rating: Σ n·P(n) renormalised
    assert os_["blue"]["rating_expected"] == pytest.approx(4.0)
    assert os_["green"]["rating_expected"] == pytest.approx(2.5)
    assert m["rating"]["expected_acc"] == pytest.approx(math.exp(4) / (math.exp(4) + math.exp(2.5)))
    # embedding: cosine(question, option) = 0.6 vs 0.8
    assert os_["green"]["embedding_sim"] == pytest.approx(0.8)
    assert m["embedding"]["prediction"] == "green"


def test_lettered_and_free_matching():
    assert lettered(["x", "y"]) == "A. x\nB. y"
    opts = ["cat", "dog", "big bird"]
    assert [
        match_free(t, opts)
        for t in [
            "B",
            "(C)",
            "Answer: C",
            "C) big bird",
            "I think the dog",
            "a dog",
            "none",
            "b is right",
        ]
    ] == [1, 2, 2, 2, 1, 1, None, None]


def test_scheme_option_validated():
    assert check_schemes("labels,free") == ["labels", "free"]
    with pytest.raises(
        ValueError, match="unknown scheme 'logits'; allowed: labels, free, rating, embedding"
    ):
        check_schemes(["logits"])


def _frame(rows):
    recs = []
    for iid, methods in rows:
        recs.append(
            {
                "item_id": iid,
                "variant": "v",
                "gold": "a",
                "error": None,
                "extra": json.dumps({"methods": methods}),
            }
        )
    return pd.DataFrame(recs)


def test_sensitivity_rates_by_hand():
    def m(a, b):
        return {
            "raw": {"prediction": a, "correct": float(a == "a")},
            "pmi": {"prediction": b, "correct": float(b == "a")},
        }

    df = _frame([("1", m("a", "a")), ("2", m("a", "b")), ("3", m("b", "c")), ("4", m("b", "b"))])
    run = {"run_id": "r", "model": "m", "suite_name": "s"}
    rows = {r["metric"]: r for r in sensitivity_rows(df, run, {})}
    assert rows["scheme_disagreement_rate"]["value"] == pytest.approx(2 / 4)  # items 2 and 3
    assert rows["scheme_flip_rate"]["value"] == pytest.approx(
        1 / 4
    )  # item 2 only: one right, one wrong
    assert rows["scheme_acc_range"]["value"] == pytest.approx(0.5 - 0.25)
    lo, hi = rows["scheme_disagreement_rate"]["ci95"]
    assert lo < 0.5 < hi
    assert [f["item_id"] for f in flipping_items(df)] == ["2", "3"]


def test_softmax_curve_by_hand():
    from llmscope.analysis.methods import softmax_curve_rows

    df = pd.DataFrame(
        [
            {
                "item_id": "1",
                "variant": "v",
                "gold": "b",
                "error": None,
                "option_scores": json.dumps({"a": {"logprob": -2.0}, "b": {"logprob": -1.0}}),
            }
        ]
    )
    run = {"run_id": "r", "model": "m", "suite_name": "s", "task": "choice"}
    rows = {r["group"]["alpha"]: r["value"] for r in softmax_curve_rows(df, run, {})}
    for a in (0.5, 1.0, 2.0, 4.0):
        assert rows[a] == pytest.approx(1 / (1 + math.exp(-a)))  # P(b) = sigmoid(α·(−1 − (−2)))


async def test_yesno_calibration_unavailable_when_an_answer_has_no_content_free_mass():
    """Content-free prompts that give "no" no probability at all (an API's top-k without it):
    p_cf has a 0, so the calibrated answer is undefined. The row keeps its raw answer and says
    why calibration is missing, instead of becoming an error row ("content-free probabilities
    must be positive"). With mass on both answers the calibration is computed by hand."""
    from llmscope.engine.tasks.yesno import YesNoTask

    item = Item(item_id="1", fields={}, gold="yes", text="Fish fly.")
    w = Work(item=item, variant="q1", prompt="Q: Fish fly. Yes or no?", gold="yes")
    cf = "Q: N/A Yes or no?"
    be = TableBackend(next_table={w.prompt: {"yes": 0.3, "no": 0.2}, cf: {"yes": 0.4}})
    r = await YesNoTask({"content_free": ["N/A"]}).score(w, be)
    assert r.error is None and r.prediction == "yes" and r.correct == 1.0
    assert r.extra["calibration"]["source"].startswith("unavailable: an answer has no probability")
    assert r.extra["calibration"]["p_cf"] == [1.0, 0.0]
    assert "calibrated" not in r.extra.get("methods", {})
    be2 = TableBackend(next_table={w.prompt: {"yes": 0.3, "no": 0.2}, cf: {"yes": 0.4, "no": 0.1}})
    r2 = await YesNoTask({"content_free": ["N/A"]}).score(w, be2)
    # p = (0.6, 0.4), p_cf = (0.8, 0.2): p / p_cf = (0.75, 2.0), normalised (0.2727..., 0.7272...)
    cal = r2.extra["calibration"]["calibrated"]
    assert cal["yes"] == pytest.approx(0.75 / 2.75) and cal["no"] == pytest.approx(2.0 / 2.75)
    assert r2.extra["methods"]["calibrated"]["prediction"] == "no"
