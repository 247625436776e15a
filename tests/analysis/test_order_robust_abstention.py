"""Order-robust accuracy (analysis/design_effects.py) with abstaining orders, on a real DuckDB
file written through `Store`; expected values by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscope.report import build_report
from llmscope.store.db import Store
from tests.helpers.bulk import finished_run


def test_order_robust_accuracy_scores_an_item_whose_every_order_abstained_as_wrong(
    tmp_path: Path,
) -> None:
    """Order-robust accuracy averages an item's answer distributions over its counterbalanced
    orders: an abstaining order (no mass on yes or no) has none to average, and an item whose every
    order abstained has no prediction (scored 0 like `accuracy`), not the argmax of zeros: the
    first answer, "yes", which was the gold and counted right."""
    from llmscope.engine.types import Item, Result

    db = tmp_path / "design.duckdb"
    items = [Item(item_id=k, fields={}, gold="yes", text=f"s {k}") for k in ("i0", "i1", "i2")]
    abst = {"abstained": True, "abstain_reason": "no probability mass on any answer"}
    res = []
    for it in items:
        for var, order in (("v", "as_written"), ("v@swap", "swapped")):
            design = {"design": {"answer_order": order}}
            if it.item_id == "i1" or (
                it.item_id == "i2" and var == "v@swap"
            ):  # i1: both orders abstain
                res.append(
                    Result(
                        item_id=it.item_id,
                        variant=var,
                        prompt="p",
                        probs={"yes": 0.0, "no": 0.0},
                        gold="yes",
                        correct=0.0,
                        extra={**design, **abst},
                    )
                )
            else:  # i0 right in both orders; i2 wrong in the one it answered
                py = 0.3 if it.item_id == "i2" else 0.8
                res.append(
                    Result(
                        item_id=it.item_id,
                        variant=var,
                        prompt="p",
                        probs={"yes": py, "no": 1 - py},
                        prediction="yes" if py > 0.5 else "no",
                        gold="yes",
                        correct=float(py > 0.5),
                        confidence=max(py, 1 - py),
                        extra=design,
                    )
                )
    with Store(db) as st:
        st.add_suite("s-d", "d", "yesno", {"task": "yesno"}, "", items)
        finished_run(st, "d1", "s-d", "d", 6)
        st.write_results("d1", res)
    with Store(db, read_only=True) as st:
        run = st.find_run("d1")
        assert run is not None
        rob = [r for r in build_report(st, run) if r["metric"] == "order_robust_accuracy"]
    # i0 right, i1 no prediction (0), i2 its one answered order: P(yes) 0.3 -> "no", wrong
    assert [(r["value"], r["n"]) for r in rob] == [(pytest.approx(1 / 3), 3)]
