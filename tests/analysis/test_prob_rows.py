"""The vectorised per-row probability scores equal the per-row functions bit for bit."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest

from llmscope.analysis.prob_rows import (
    brier_items,
    flatten,
    flatten_column,
    raw_confidences,
    tie_flags,
)
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


def _texts_case() -> list[str | None]:
    rng = np.random.default_rng(11)
    out: list[str | None] = []
    for i in range(3000):
        a, b = (float(x) for x in rng.random(2))
        if i % 7 == 0:  # 25 digits: more than a double holds, rounded by each parser
            text = f'{{"yes": {a:.25f}, "no": {b:.25f}}}'
        elif i % 2:
            text = orjson.dumps({"yes": a, "no": b}).decode()
        else:
            text = json.dumps({"yes": a, "no": b})
        out.append(text)
    out += [
        '{"yes": 1, "no": 0}',
        '{"yes":1e-05,"no":2.5E+3}',
        '{"yes": 0.1234567890123456789012, "no": 0.5}',
        '{"yes": -0, "no": 0.5}',
        '{"yes": 01, "no": 0.5}',
        '{"no": 0.2, "yes": 0.7}',
        '{"Yes": 0.2, "No": 0.7}',
        '{"yes": 0.2, "no": 0.2}',
        '{"yes": 1e-320, "no": 1e-30}',
        '{"yes": 12345678901234567890, "no": 0}',
        '{"yes": 0.3, "no": 0.3, "x": 0.4}',
        '{"yes": null, "no": 0.5}',
        '{"yes": NaN, "no": 0.5}',
        "not json",
        "{}",
        None,
        '{"yes":  0.5, "no": 0.5}',
        '{"yes": "0.5", "no": 0.5}',
        '{"yes": true, "no": 0.5}',
    ]
    return out


def test_stored_text_column_read_by_arrow_matches_decoding_every_row():
    import pandas as pd

    texts = _texts_case()
    col = pd.Series(texts, dtype="str")  # how a stored `probs` column reads (Arrow text)
    probs_all = M._decoded_prob_rows(col.tolist())
    probs, fp = flatten_column(col, M._decoded_prob_rows)
    assert int(np.asarray(fp.ok).sum()) < len(texts)  # some rows need the per-row functions
    # the yes/no texts were read by Arrow: no dict decoded for them
    assert sum(p is None for p in probs) > 2000
    n = len(texts)
    gold = [("yes", "no", "Yes", None)[i % 4] for i in range(n)]
    preds = [("no", "yes", "Yes", None)[i % 4] for i in range(n)]
    scored = np.arange(n) % 5 != 2
    want = _reference(probs_all, gold, preds, scored)
    got = (
        brier_items(fp, gold, scored, M.brier_item, probs),
        tie_flags(fp, scored, M._is_tie, probs),
        raw_confidences(fp, preds, M.raw_confidence, probs),
    )
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(np.isnan(g), np.isnan(w))
        assert (g[~np.isnan(g)] == w[~np.isnan(w)]).all()
        assert (np.signbit(g) == np.signbit(w)).all()
