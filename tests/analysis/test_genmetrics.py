"""Generation metrics from sacrebleu / rouge-score / the sentence embedder."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from llmscope.analysis.genmetrics import generation_library_rows, item_metrics


def test_item_metrics_by_hand():
    m = item_metrics("the cat sat on the mat", ["the cat sat on the mat"])
    assert (
        m["bleu"] == pytest.approx(100.0)
        and m["chrf"] == pytest.approx(100.0)
        and m["rougeL"] == 1.0
    )
    # ROUGE-L: LCS("the cat ate" , "the cat sat on the mat") = "the cat" -> P 2/3, R 2/6, F = 2PR/(P+R) = 0.444...
    m = item_metrics("the cat ate", ["the cat sat on the mat", "zebra"])
    p, r = 2 / 3, 2 / 6
    assert m["rougeL"] == pytest.approx(2 * p * r / (p + r))
    assert item_metrics("x", []) == {}


def test_embedding_cosine_uses_best_reference():
    vecs = {"a": np.array([1.0, 0.0]), "b": np.array([0.6, 0.8]), "c": np.array([0.0, 1.0])}

    def embed(texts):
        return np.stack([vecs[t] for t in texts])

    assert item_metrics("a", ["c", "b"], embed)["embed_cos"] == pytest.approx(0.6)


def test_rows_are_item_means_with_corpus_scores():
    extras = [
        {"samples": [{"text": "Paris"}], "golds": [{"text": "Paris"}]},
        {"samples": [{"text": "the red one"}], "golds": [{"text": "red"}, {"text": "the red car"}]},
    ]
    df = pd.DataFrame(
        {"item_id": ["a", "b"], "error": [None, None], "extra": [json.dumps(e) for e in extras]}
    )
    rows = generation_library_rows(
        df, {"run_id": "r", "model": "m", "task": "generation"}, {}, embed=None
    )
    got = {r["metric"]: r["value"] for r in rows}
    per = [item_metrics("Paris", ["Paris"]), item_metrics("the red one", ["red", "the red car"])]
    assert got["rougeL_mean"] == pytest.approx((per[0]["rougeL"] + per[1]["rougeL"]) / 2)
    assert got["chrf_mean"] == pytest.approx((per[0]["chrf"] + per[1]["chrf"]) / 2)
    assert "embed_cos_mean" not in got and "corpus_bleu" in got
    assert generation_library_rows(df, {"run_id": "r", "task": "yesno"}, {}) == []
