"""Missing stored text read back through pandas (3.x: a VARCHAR column with some values is the
`str` dtype, and its missing values are NaN, not None): runs that mix rows or items with and
without a value (a cluster label, a gold answer, a prediction) must give the numbers the
definitions say, never crash and never count NaN as a value.

The database is a real DuckDB file written through `Store` (tests/helpers/mixed.py); the
expected numbers are worked out by hand in the comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscope.analysis.metrics import run_metrics
from llmscope.store.db import Store
from tests.helpers.bulk import finished_run
from tests.helpers.mixed import write_mixed_db


@pytest.fixture()
def mixed_db(tmp_path: Path) -> Path:
    return write_mixed_db(tmp_path / "mixed.duckdb")


def test_items_without_a_cluster_label_are_each_their_own_cluster(mixed_db: Path) -> None:
    """An item without the suite's cluster label is its own independent unit (as every item is
    in a suite without a cluster field): the report, the abstention rows and the paired
    comparison all run, and count clusters alike."""
    from llmscope.compare import compare_runs

    with Store(mixed_db, read_only=True) as st:
        r1, r2 = st.find_run("r1"), st.find_run("r2")
        assert r1 is not None and r2 is not None
        rm = run_metrics(st, r1, cache=False)
        # scored rows i0..i4 (i5 has no gold, i6 is an error): 1, 0, 1, 1, 0 -> 3/5;
        # clusters c0 (i0, i1), c1 (i2), i3, i4 -> 4
        acc = rm.get("accuracy")
        assert acc is not None and acc.value == pytest.approx(0.6)
        assert (acc.n, acc.n_clusters) == (5, 4)
        # r2 abstains on i3: 1 of the 6 rows without an error
        ab = run_metrics(st, r2, cache=False).get("abstain_rate")
        assert ab is not None and ab.value == pytest.approx(1 / 6) and ab.n == 6
        out = compare_runs(st, ["r1", "r2"])
    # pairs: i0..i4 (both scored); clusters c0, c1, i3, i4; r1 1 0 1 1 0, r2 1 1 1 0 0
    c = out["comparisons"][0]
    assert (c["n"], c["n_clusters"]) == (5, 4)
    assert (c["acc_base"], c["acc_run"], c["diff"]) == (
        pytest.approx(0.6),
        pytest.approx(0.6),
        pytest.approx(0.0),
    )


def test_plan_hypothesis_keeps_items_without_a_cluster_label(mixed_db: Path) -> None:
    """A pre-registered hypothesis is tested over the same units: the rows of items without a
    cluster label are not dropped from it."""
    from llmscope.report import results_with_fields
    from llmscope.runs.plan import evaluate, parse_hypothesis

    with Store(mixed_db, read_only=True) as st:
        df = results_with_fields(st, "r1")
    ev = evaluate(parse_hypothesis("accuracy(v0) > 0.5"), df, "cl", 0.05)
    # per-unit accuracy of r1: c0 (1, 0) 0.5, c1 1, i3 1, i4 0 (i5 unscored, i6 an error)
    assert ev["n_clusters"] == 4
    assert ev["estimate"] == pytest.approx((0.5 + 1 + 1 + 0) / 4 - 0.5)


def test_compare_disagreements_have_none_for_a_missing_prediction(mixed_db: Path) -> None:
    """`llmscope compare --json`: r2 abstains on i3 (no prediction) where r1 was right; the
    disagreement shows null there, never NaN (not JSON)."""
    import json

    from llmscope.compare import compare_runs

    with Store(mixed_db, read_only=True) as st:
        out = compare_runs(st, ["r1", "r2"])
    dis = {d["item_id"]: d for d in out["comparisons"][0]["disagreements"]}
    # r1 1 0 1 1 0, r2 1 1 1 0 0 on i0..i4: i1 and i3 disagree
    assert sorted(dis) == ["i1", "i3"]
    assert (dis["i3"]["prediction_base"], dis["i3"]["prediction_run"], dis["i3"]["gold"]) == (
        "A",
        None,
        "A",
    )
    assert (dis["i1"]["prediction_base"], dis["i1"]["prediction_run"]) == ("B", "A")
    json.dumps(out, allow_nan=False)


def test_gold_rate_leaves_out_items_without_gold(mixed_db: Path) -> None:
    """Position bias: an item without gold has no gold position (not 'gold is not first')."""
    with Store(mixed_db, read_only=True) as st:
        rm = run_metrics(st, st.find_run("r1") or {}, cache=False)
    # rows without an error that have option scores and a prediction: i0..i5; i5 has no gold,
    # i0..i4's gold A is the first listed option (A, B, C): 5/5 first, 0/5 last
    first, last = (
        rm.get("gold_rate", {"position": "first"}),
        rm.get("gold_rate", {"position": "last"}),
    )
    assert first is not None and (first.value, first.n) == (1.0, 5)
    assert last is not None and (last.value, last.n) == (0.0, 5)
    # chosen_rate counts every one of the six predictions: A (i0, i2, i3, i5) first, none last
    chosen = rm.get("chosen_rate", {"position": "first"})
    assert chosen is not None and chosen.value == pytest.approx(4 / 6) and chosen.n == 6


def _yesno_runs(db: Path) -> None:
    """Two yes/no runs of the commonsense sample (human answers `human_q1`) with the same rows;
    in "mixed" one row carries a backend note in `extra` (stored NULL for the other rows)."""
    from llmscope.data.suites import load_suite
    from llmscope.engine.types import Result

    suite = load_suite("commonsense-sample")
    items = suite.items()[:6]
    with Store(db) as st:
        st.add_suite(suite.suite_id, suite.name, suite.task, suite.spec, "", suite.items())
        for rid in ("plain", "mixed"):
            finished_run(st, rid, suite.suite_id, suite.name, 12)
            rows = []
            for i, it in enumerate(items):
                for v in ("q1", "q2"):
                    p = 0.2 + 0.1 * i + (0.05 if v == "q2" else 0.0)
                    pred = "yes" if p > 0.5 else "no"
                    rows.append(
                        Result(
                            item_id=it.item_id,
                            variant=v,
                            probs={"yes": p, "no": 0.95 - p},
                            other=0.05,
                            prediction=pred,
                            gold=it.gold,
                            correct=float(pred == it.gold),
                            confidence=max(p, 0.95 - p) / 0.95,
                            extra={"retries": 1} if rid == "mixed" and i == 2 and v == "q1" else {},
                        )
                    )
            st.write_results(rid, rows)


def test_yesno_report_with_one_row_extra_equals_the_run_without(tmp_path: Path) -> None:
    """A row's `extra` note (a retry count) changes no metric: the human-choice fit read the
    other rows' missing `extra` as NaN (truthy, no `.get`) and the report failed."""
    db = tmp_path / "yn.duckdb"
    _yesno_runs(db)

    def key(rm: object) -> list[tuple[object, ...]]:
        return [(m.name, sorted(m.group.items()), m.value, m.lo, m.hi, m.n) for m in rm.metrics]  # type: ignore[attr-defined]

    with Store(db, read_only=True) as st:
        plain = run_metrics(st, st.find_run("plain") or {}, cache=False)
        mixed = run_metrics(st, st.find_run("mixed") or {}, cache=False)
    assert any(m.name == "fit_alpha" for m in plain.metrics)
    assert key(mixed) == key(plain)


def test_plan_hypothesis_on_extra_with_one_row_extra_equals_the_run_without(tmp_path: Path) -> None:
    """A hypothesis on a measure read from `extra` (per-method accuracy, expected rating) over
    rows most of which have no `extra` (NaN, not None, beside the one that has)."""
    from llmscope.report import results_with_fields
    from llmscope.runs.plan import evaluate, parse_hypothesis

    db = tmp_path / "yn.duckdb"
    _yesno_runs(db)
    with Store(db, read_only=True) as st:
        frames = {rid: results_with_fields(st, rid) for rid in ("plain", "mixed")}
    for text in ("expected(q1) > 0.5", "accuracy(variant=q1, method=raw) > 0.5"):
        h = parse_hypothesis(text)
        assert evaluate(h, frames["mixed"], None, 0.05) == evaluate(h, frames["plain"], None, 0.05)
