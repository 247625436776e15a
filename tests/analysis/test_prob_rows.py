"""The vectorised per-row probability scores equal the per-row functions bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscope.analysis.prob_rows import brier_items, flatten, raw_confidences, tie_flags
from llmscope.analysis.producers import calibration as M
from llmscope.store.db import Store
from tests.helpers.mixed import write_labels_db, write_mixed_db, write_yesno_db


def _reference(probs, gold, preds, scored):
    brier = [
        M.brier_item(p, g) if s else math.nan for p, g, s in zip(probs, gold, scored, strict=True)
    ]
    ties = [
        float(M._is_tie(p)) if p and s else math.nan for p, s in zip(probs, scored, strict=True)
    ]
    raw = [M.raw_confidence(p, x) for p, x in zip(probs, preds, strict=True)]
    return np.array(brier), np.array(ties), np.array(raw)


def _check(probs, gold, preds, scored):
    fp = flatten(probs)
    got = (
        brier_items(fp, gold, scored, M.brier_item, probs),
        tie_flags(fp, scored, M._is_tie, probs),
        raw_confidences(fp, preds, M.raw_confidence, probs),
    )
    for g, want in zip(got, _reference(probs, gold, preds, scored), strict=True):
        # identical bits, NaN where the reference has NaN
        assert g.tobytes() == want.tobytes() or np.array_equal(g, want, equal_nan=True)
        assert np.array_equal(np.isnan(g), np.isnan(want))
        assert (g[~np.isnan(g)] == want[~np.isnan(want)]).all()


TRICKY = [
    ({"yes": 0.3, "no": 0.6}, "yes", "no"),
    ({"Yes": 0.3, "no": 0.3}, " YES ", "Yes"),  # keys and gold compared stripped, lowercased; a tie
    ({"yes": None, "no": 0.6}, "no", "no"),  # a null value: Brier NaN, tie over the rest
    ({"A": 0.2, "B": 0.2, "C": 0.6}, "D", "C"),  # gold not listed: +1
    ({"A": 0.5, "B": 0.5}, None, "A"),  # no gold
    (None, "A", "A"),
    ({"a": 1, "b": 0}, "a", "a"),  # integers
    ({"a": "0.25", "b": 0.75}, "b", "a"),  # a number as text: the per-row path
    ({"a": True, "b": 0.5}, "b", "b"),  # a bool: the per-row path
    ({"x": float("nan"), "y": 0.2, "z": 0.2}, "y", "y"),  # NaN among tied values
    ({"only": 0.9}, "only", "only"),
    (
        {
            "yes": 0.1,
            "no": 0.2,
            "maybe": 0.2,
            "x": 0.1,
            "y": 0.05,
            "z": 0.05,
            "u": 0.1,
            "v": 0.1,
            "w": 0.1,
        },
        "maybe",
        None,
    ),  # nine answers: a sum in answer order
    ({"yes": 0.7, "no": 0.2}, "yes", float("nan")),
]


def test_tricky_rows_match_the_per_row_functions():
    probs = [p for p, _, _ in TRICKY]
    gold = [g for _, g, _ in TRICKY]
    preds = [x for _, _, x in TRICKY]
    _check(probs, gold, preds, np.ones(len(TRICKY), dtype=bool))
    scored = np.arange(len(TRICKY)) % 3 != 1  # unscored rows are NaN (Brier, ties)
    _check(probs, gold, preds, scored)


def test_random_rows_bit_for_bit():
    # values where Python's x ** 2 and numpy's x * x differ in the last bit (~0.1% of them)
    rng = np.random.default_rng(7)
    probs, gold, preds = [], [], []
    for i in range(20_000):
        k = int(rng.integers(2, 6))
        keys = ["yes", "no", "a", "b", "c"][:k]
        v = rng.random(k)
        probs.append(dict(zip(keys, v.tolist(), strict=True)))
        gold.append(keys[i % k] if i % 11 else "zz")
        preds.append(keys[int(np.argmax(v))])
    _check(probs, gold, preds, rng.random(len(probs)) < 0.9)


@pytest.mark.parametrize("writer", [write_mixed_db, write_labels_db, write_yesno_db])
def test_stored_runs_match(tmp_path, writer):
    db = writer(tmp_path / "m.duckdb")
    with Store(db, read_only=True) as st:
        for (rid,) in st.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall():
            df = st.results_frame(rid)
            probs = M._prob_rows(df)
            corr = np.asarray(df["correct"].to_numpy(dtype=float, na_value=np.nan))
            _check(probs, df["gold"].tolist(), df["prediction"].tolist(), np.isfinite(corr))
