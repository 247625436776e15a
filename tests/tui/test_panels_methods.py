"""The TUI methods panel (tui/panels/methods.py) on a real DuckDB file: schemes side by side, the
human-vs-model fit and the items that flip, against values computed by hand."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.panels.methods import MethodsScreen
from llmscope.tui.screens import DashboardScreen
from tests.helpers.tui import screen_text, settle, wait_until
from tests.helpers.tui_pilot import on_dashboard

T0 = dt.datetime(2026, 1, 1, 12, 0, 0)


def make_db(path: Path) -> Path:
    spec = {"name": "hc", "task": "choice", "human_counts_field": "human_counts"}
    items = [
        Item(
            item_id=f"i{k}",
            fields={"id": f"i{k}", "q": "?", "options": ["a", "b"], "human_counts": [3, 7]},
            gold="b",
            options=["a", "b"],
            text="?",
        )
        for k in range(2)
    ]
    with Store(path) as store:
        store.add_suite("hc@1", "hc", "choice", spec, "tests", items)
        store.create_run(
            {
                "run_id": "run-h",
                "suite_id": "hc@1",
                "suite_name": "hc",
                "task": "choice",
                "model": "m",
                "backend": "test",
                "n_total": 2,
                "status": "completed",
                "started_at": T0,
                "updated_at": T0,
                "options": {},
                "meta": {},
                "versions": {},
            }
        )
        res = []
        for k, it in enumerate(items):
            # raw scores differ by 2 nats in favour of "b"; the pmi scheme prefers "a" on item i1 only
            pmi = [0.5, 0.0] if k == 1 else [0.0, 0.5]
            res.append(
                Result(
                    item_id=it.item_id,
                    variant="v",
                    prompt="?",
                    gold="b",
                    prediction="b",
                    correct=1.0,
                    confidence=0.88,
                    probs={"a": 0.12, "b": 0.88},
                    option_scores={
                        "a": {"logprob": -3.0, "pmi": pmi[0]},
                        "b": {"logprob": -1.0, "pmi": pmi[1]},
                    },
                    extra={
                        "methods": {
                            "raw": {"prediction": "b", "correct": 1.0, "expected_acc": 0.88},
                            "pmi": {
                                "prediction": "a" if k == 1 else "b",
                                "correct": 0.0 if k == 1 else 1.0,
                                "expected_acc": 0.5,
                            },
                        }
                    },
                )
            )
        store.write_results("run-h", res)
    return path


async def test_methods_panel_shows_fit_and_flips(tmp_path: Path) -> None:
    app = LlmscopeApp(db=str(make_db(tmp_path / "m.duckdb")))
    async with on_dashboard(app, (160, 60)) as pilot:
        await pilot.press("m")
        await settle(pilot)
        assert isinstance(app.screen, MethodsScreen)
        assert await wait_until(pilot, lambda: "Scoring schemes side by side" in screen_text(app))
        text = screen_text(app)
        # both items: P(b) = sigmoid(2α) must be 0.7 -> α = logit(0.7) / 2 = 0.424
        assert f"{math.log(7 / 3) / 2:.3f}" in text
        # the pmi scheme is right on i0 and wrong on i1: accuracy 0.500; one item flips
        assert "Items on which schemes disagree (1)" in text and "i1 v" in text
        assert "0.500" in text
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)


def test_flipping_items_have_none_for_missing_gold_and_prediction(tmp_path: Path) -> None:
    """A run where one scheme matched no option on an item (prediction None) and an item has no
    gold: the flips hold None there, not NaN (pandas' string dtype), and the panel shows "-",
    never "nan" or "None" (nor fails slicing a float)."""
    from rich.console import Console

    from llmscope.analysis.methods import flipping_items
    from llmscope.report import results_with_fields
    from llmscope.tui.panels.methods import render_methods
    from tests.helpers.mixed import write_mixed_db

    db = write_mixed_db(tmp_path / "mixed.duckdb")
    with Store(db, read_only=True) as st:
        df = results_with_fields(st, "r1")
    flips = {f["item_id"]: f for f in flipping_items(df)}
    # loglik vs free: i0 A/B, i2 A/(no match), i5 A/C (i5 has no gold); i6 is an error row
    assert sorted(flips) == ["i0", "i2", "i5"]
    assert flips["i2"]["schemes"]["free"] == {"prediction": None, "correct": 0.0}
    assert flips["i5"]["gold"] is None and flips["i0"]["gold"] == "A"
    console = Console(record=True, width=120)
    console.print(render_methods([], list(flips.values()), None))
    text = console.export_text()
    assert "nan" not in text.lower() and "None" not in text
    assert "free:-" in text and "free:C" in text
