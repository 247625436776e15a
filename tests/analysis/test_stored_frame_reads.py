"""A stored run's frame holds only what its active producers read, and its numbers equal the
whole stored rows' (every column, every item field expanded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmscope.analysis import metrics as M
from llmscope.analysis.prob_rows import brier_items, flatten, raw_confidences
from llmscope.analysis.producers import calibration as C
from llmscope.analysis.queries import result_profile
from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from tests.helpers.bulk import finished_run


def _yesno_db(path: Path, abstain: bool = False) -> Path:
    """A yes/no suite whose items carry `category` (a pipeline field only the commonsense
    producer reads) and a field no producer reads; three variants, one abstaining row."""
    items = [
        Item(
            item_id=f"i{i}",
            fields={"category": f"c{i % 3}", "note": f"n{i}"},
            gold="yes" if i % 2 else "no",
            text=f"s{i}",
        )
        for i in range(12)
    ]
    with Store(path) as st:
        st.add_suite("s-yn", "yn", "yesno", {"task": "yesno"}, "", items)
        finished_run(st, "r", "s-yn", "yn", 36)
        res = []
        for k, it in enumerate(items):
            for v in ("q1", "q2", "q3"):
                p = ((k * 7 + len(v) * 3 + int(v[1]) * 5) % 10) / 10 * 0.9
                pred = "yes" if p > 0.45 - p / 2 else "no"
                extra = {"abstained": True} if abstain and k == 5 and v == "q2" else None
                res.append(
                    Result(
                        item_id=it.item_id,
                        variant=v,
                        prompt=it.text,
                        probs={"yes": p, "no": 0.9 - p},
                        prediction=pred,
                        gold=str(it.gold),
                        correct=float(pred == it.gold),
                        confidence=max(p, 0.9 - p) / 0.9,
                        extra=extra,
                    )
                )
        st.write_results("r", res)
    return path


def _rows(rm: M.RunMetrics) -> list[tuple]:
    return [
        (m.name, m.group, m.value, m.lo, m.hi, m.interval_method, m.n, m.n_clusters)
        for m in rm.metrics
    ]


def test_yesno_frame_skips_item_fields_no_active_producer_reads(tmp_path: Path) -> None:
    db = _yesno_db(tmp_path / "y.duckdb", abstain=True)
    with Store(db, read_only=True) as st:
        run = st.get_run("r")
        spec = st.suite_spec(run["suite_id"])
        prof = result_profile(st, "r")
        df = M.stored_frame(st, run, spec, [], prof)
        assert "f.category" not in df and "f.note" not in df
        # the columns of the active producers (accuracy, yes/no, calibration, abstention) only
        assert {"probs", "p_yes", "p_no", "other", "confidence", "extra"} <= set(df.columns)
        assert not {"option_scores", "n_tokens", "latency_ms", "prompt", "top_tokens"} & set(
            df.columns
        )
        # grouping by the field still reads it
        assert M.stored_frame(st, run, spec, ["category"], prof)["f.category"].tolist()[:4] == [
            "c0",
            "c0",
            "c0",
            "c1",
        ]
        for by in ([], ["category"]):
            lean = M.run_metrics(st, run, by, cache=False)
            full = M.compute_metrics(M.results_with_fields(st, "r"), run, spec, by, store=st)
            assert _rows(lean) == _rows(full)
        names = {m.name for m in lean.metrics}
        assert {"accuracy", "brier", "ece", "abstain_rate", "accuracy_answered"} <= names
        assert lean.get("accuracy", {"category": "c1"}).n == 12


def test_commonsense_run_still_reads_category(tmp_path: Path) -> None:
    """With human majorities the commonsense producer is active: it reads `category`."""
    items = [
        Item(
            item_id=f"i{i}",
            fields={"category": f"c{i % 2}", "human_q1": i % 2},
            gold="yes" if i % 2 else "no",
            text=f"s{i}",
        )
        for i in range(6)
    ]
    with Store(tmp_path / "h.duckdb") as st:
        st.add_suite("s-h", "h", "yesno", {"task": "yesno"}, "", items)
        finished_run(st, "h", "s-h", "h", 6)
        st.write_results(
            "h",
            [
                Result(
                    item_id=it.item_id,
                    variant="q1",
                    prompt=it.text,
                    probs={"yes": 0.6, "no": 0.3},
                    prediction="yes",
                    gold=str(it.gold),
                    correct=float(it.gold == "yes"),
                    confidence=0.6 / 0.9,
                )
                for it in items
            ],
        )
    with Store(tmp_path / "h.duckdb", read_only=True) as st:
        run = st.get_run("h")
        df = M.stored_frame(st, run, st.suite_spec(run["suite_id"]), [], result_profile(st, "h"))
        assert df["f.category"].tolist() == ["c0", "c1"] * 3


def test_arrow_text_columns_score_as_lists() -> None:
    """Gold and predictions passed as a stored text column (Arrow strings, missing values
    included) give the per-row functions' scores, as lists do."""
    probs = [
        {"yes": 0.3, "no": 0.6},
        {"Yes": 0.5, "no": 0.5},
        None,
        {"yes": "0.2", "no": 0.7},
        {"yes": 0.9, "no": 0.05},
        {"a": 0.2, "b": 0.8},
    ] * 50
    gold = [" yes", "no", "yes", None, "YES", "b"] * 50
    preds = ["no", "Yes", None, "no", "yes", "b"] * 50
    fp = flatten(probs)
    scored = np.arange(len(probs)) % 7 != 3
    g_col, p_col = pd.Series(gold, dtype="str"), pd.Series(preds, dtype="str")
    assert isinstance(g_col.array, pd.arrays.ArrowStringArray)
    want_b = [
        C.brier_item(p, g) if s else np.nan for p, g, s in zip(probs, gold, scored, strict=True)
    ]
    want_r = [C.raw_confidence(p, x) for p, x in zip(probs, preds, strict=True)]
    for got, want in (
        (brier_items(fp, g_col, scored, C.brier_item, probs), want_b),
        (raw_confidences(fp, p_col, C.raw_confidence, probs), want_r),
    ):
        assert np.array_equal(got, np.array(want), equal_nan=True)
