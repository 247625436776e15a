"""Human vs model numbers of the pipeline (analysis/human.py): per-row choice distributions,
rating histograms and their metrics, each checked against values computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from llmscope.analysis.human import choice_frame, rating_frame
from llmscope.analysis.metrics import compute_metrics


def test_choice_frame_shares_distance_and_majority() -> None:
    spec = {"human_counts_field": "hc", "options_field": "options"}
    df = pd.DataFrame(
        {
            "item_id": ["a"],
            "variant": ["v1"],
            "options": [json.dumps(["x", "y", "z"])],
            "fields": [json.dumps({"hc": "[4, 1, 15]"})],
            "probs": [json.dumps({"x": 0.5, "y": 0.25, "z": 0.25})],
        }
    )
    r = choice_frame(df, spec).iloc[0]
    assert r["human"] == pytest.approx([0.2, 0.05, 0.75])
    assert r["model"] == pytest.approx([0.5, 0.25, 0.25])
    # TV = ½(|0.2−0.5| + |0.05−0.25| + |0.75−0.25|) = ½(0.3 + 0.2 + 0.5)
    assert r["tv"] == pytest.approx(0.5)
    assert not r["agree"]  # humans: z; model: x


def test_rating_frame_rounds_mean_human_ratings_to_labels() -> None:
    df = pd.DataFrame(
        {
            "item_id": ["a", "a", "b", "c"],
            "gold": ["3.4", "3.4", "5", "1.6"],
            "prediction": ["3", "4", "5", "x"],
        }
    )
    h = rating_frame(df, ["1", "2", "3", "4", "5"])
    assert h["human"].tolist() == [0, 1, 1, 0, 1]  # 3.4 -> 3, 5 -> 5, 1.6 -> 2 (one per item)
    assert h["model"].tolist() == [0, 0, 1, 1, 1]


def _choice_rows() -> pd.DataFrame:
    # three items, two variants each; human counts per item, model probabilities per row
    counts = {"a": [4, 1, 15], "b": [10, 5, 5], "c": [1, 1, 8]}
    probs = {
        ("a", "v1"): [0.5, 0.25, 0.25],
        ("a", "v2"): [0.1, 0.1, 0.8],
        ("b", "v1"): [0.6, 0.2, 0.2],
        ("b", "v2"): [0.2, 0.6, 0.2],
        ("c", "v1"): [0.0, 0.5, 0.5],
        ("c", "v2"): [0.2, 0.2, 0.6],
    }
    recs = []
    for (iid, var), p in probs.items():
        recs.append(
            {
                "item_id": iid,
                "variant": var,
                "options": json.dumps(["x", "y", "z"]),
                "fields": json.dumps({"hc": counts[iid]}),
                "probs": json.dumps(dict(zip("xyz", p, strict=True))),
                "correct": 1.0,
                "error": None,
                "gold": "x",
                "prediction": "x",
            }
        )
    return pd.DataFrame(recs)


def test_human_choice_metrics_by_hand_with_item_clusters() -> None:
    df = _choice_rows()
    rm = compute_metrics(
        df, {"run_id": "r", "model": "m", "task": "choice"}, {"human_counts_field": "hc"}
    )
    # TV per row by hand (human shares a: .2 .05 .75; b: .5 .25 .25; c: .1 .1 .8)
    tv = {"a": [0.5, 0.1], "b": [0.1, 0.35], "c": [0.4, 0.2]}
    # agreement: a v2, b v1, c v2 (c v1: model tie y/z -> first listed y; humans z)
    m = rm.get("human_tv_distance")
    assert m is not None and m.value == pytest.approx(np.mean(sum(tv.values(), [])))
    assert m.n == 6 and m.n_clusters == 3
    # cluster-t by hand: per-item sums y_g, sizes m_g = 2, G = 3, t(0.975, 2) = 4.302653
    y = np.array([sum(v) for v in tv.values()])
    p = y.sum() / 6
    var = 3 / 2 * float(np.sum((y - p * 2) ** 2)) / 36
    half = 4.302652729911275 * math.sqrt(var)
    assert m.lo == pytest.approx(max(0.0, p - half)) and m.hi == pytest.approx(min(1.0, p + half))
    a = rm.get("human_majority_agreement")
    assert a is not None and a.value == pytest.approx(3 / 6) and a.n_clusters == 3


def test_human_choice_needs_the_spec_counts_field() -> None:
    rm = compute_metrics(_choice_rows(), {"run_id": "r", "model": "m", "task": "choice"}, {})
    assert rm.get("human_tv_distance") is None and rm.get("human_majority_agreement") is None


def test_rating_shares_for_the_rating_task_only() -> None:
    df = pd.DataFrame(
        {
            "item_id": ["a", "a", "b", "c"],
            "variant": ["v1", "v2", "v1", "v1"],
            "gold": ["3.4", "3.4", "5", "1.6"],
            "prediction": ["3", "4", "5", "x"],
            "correct": [0.0, 0.0, 1.0, 0.0],
            "error": [None] * 4,
        }
    )
    spec = {"answers": ["1", "2", "3", "4", "5"]}
    rm = compute_metrics(df, {"run_id": "r", "model": "m", "task": "rating"}, spec)
    human = {m.group["rating"]: m.value for m in rm.by_group("human_rating_share", "rating")}
    model = {m.group["rating"]: m.value for m in rm.by_group("model_rating_share", "rating")}
    assert human == pytest.approx(
        {"1": 0, "2": 1 / 3, "3": 1 / 3, "4": 0, "5": 1 / 3}
    )  # three items
    assert model == pytest.approx(
        {"1": 0, "2": 0, "3": 1 / 4, "4": 1 / 4, "5": 1 / 4}
    )  # four rows, "x" none
    other = compute_metrics(df, {"run_id": "r", "model": "m", "task": "yesno"}, spec)
    assert not other.by_group("human_rating_share", "rating")
