"""The item list and the drill-down show what each task declares (`Task.item_fields`), and a
contamination run's flags: a flags column, a "flagged" scope, a readable probe block."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from pathlib import Path

import duckdb
import pytest

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen, ItemScreen
from llmscope.tui.widgets import ItemList
from tests.helpers.cli import contamination_db
from tests.helpers.paths import shared_path
from tests.helpers.tinymodel import make_tiny_model
from tests.helpers.tui import screen_text, settle, wait_until
from tests.helpers.tui_pilot import on_dashboard, started

# Between the six items' Min-K% scores of the tiny model with the shared Qwen2.5 tokenizer
# (the trained fallback tokenizer gives other scores, so the test needs the shared one).
MINK_THRESHOLD = -21.8


def _rating_db(path: Path) -> Path:
    """A rating run still writing (the in-memory list): every row wrong, with the rating
    task's own fields (expected rating, absolute error) in `extra`."""
    items = [
        Item(item_id=f"r{i}", text=f"Rate statement {i}.", gold="4", fields={"gold": "4"})
        for i in range(5)
    ]
    with Store(path) as s:
        s.add_suite(
            "rate@1",
            "rate",
            "rating",
            {"name": "rate", "task": "rating", "answers": ["1", "2", "3", "4", "5"]},
            "tests",
            items,
        )
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        s.create_run(
            {
                "run_id": "rate-run",
                "suite_id": "rate@1",
                "suite_name": "rate",
                "task": "rating",
                "model": "m",
                "backend": "test",
                "n_total": 10,
                "status": "running",
                "started_at": now,
                "updated_at": now,
                "options": {},
                "meta": {},
                "versions": {},
                "owner_pid": os.getpid(),
                "owner_host": socket.gethostname(),
                "heartbeat_at": now,
            }
        )
        s.write_results(
            "rate-run",
            [
                Result(
                    item_id=it.item_id,
                    variant="default",
                    prediction="2",
                    gold="4",
                    correct=0.0,
                    confidence=0.6,
                    extra={"expected": 2.0 + i / 4, "abs_error": 2.0 - i / 4},
                )
                for i, it in enumerate(items)
            ],
        )
    return path


async def test_rating_fields_in_list_and_drill_down(tmp_path: Path) -> None:
    app = LlmscopeApp(_rating_db(tmp_path / "r.duckdb"))
    async with started(app, (140, 40)) as pilot:
        await app.push_screen(DashboardScreen("rate-run"))
        await pilot.pause()
        lst = app.screen.query_one(ItemList)
        assert await wait_until(pilot, lambda: lst.count == 5)
        assert lst.source is None  # a running run: the in-memory list
        keys = [c[0] for c in lst.columns]
        assert (
            "extra.expected" in keys and "extra.abs_error" in keys
        )  # the rating task's declared columns
        assert "expected" in screen_text(app) and "|error|" in screen_text(app)
        rows = [lst.row(i) or {} for i in range(5)]
        assert [r["extra.expected"] for r in rows] == ["2.000", "2.250", "2.500", "2.750", "3.000"]
        assert [r["extra.abs_error"] for r in rows] == ["2.000", "1.750", "1.500", "1.250", "1.000"]
        await pilot.press("down", "enter")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, ItemScreen) and "task fields" in screen_text(app)
        )
        text = screen_text(app)
        assert "item r1" in text
        assert "expected" in text and "2.250" in text and "|error|" in text and "1.750" in text


@pytest.mark.slow
async def test_contamination_flags_column_scope_and_drill_down(tmp_path: Path) -> None:
    shared_path("tokenizers", "qwen2.5")  # MINK_THRESHOLD is set for its token scores
    make_tiny_model(tmp_path, save=True)
    db = contamination_db(tmp_path, 6, f"mink_threshold={MINK_THRESHOLD}")
    con = duckdb.connect(str(db), read_only=True)
    stored = {
        i: json.loads(e) for i, e in con.execute("SELECT item_id, extra FROM results").fetchall()
    }
    con.close()
    # the rule, applied here to the stored scores: Min-K% prob >= threshold or recall >= 0.5 (default)
    flagged = {
        i
        for i, e in stored.items()
        if e["min_k_prob"] >= MINK_THRESHOLD or e["ngram_overlap"] >= 0.5
    }
    assert flagged == {i for i, e in stored.items() if e["flagged"]}
    assert 0 < len(flagged) < len(stored), "the threshold should split the six items"
    app = LlmscopeApp(db)
    async with on_dashboard(app, (140, 45)) as pilot:
        lst = app.screen.query_one(ItemList)
        # no row has a correctness score: the list shows every row, with the task's columns
        assert lst.scope == "all" and lst.count == len(stored)
        assert "All items 6" in screen_text(app) and "flags" in screen_text(app)
        for k in range(lst.count):
            row = lst.row(k) or {}
            e = stored[row["item_id"]]
            assert row["extra.min_k_prob"] == f"{e['min_k_prob']:.3f}"
            assert row["extra.flag_reasons"] == ("min_k_prob" if row["item_id"] in flagged else "-")
        await pilot.press("a")  # all -> flagged
        await settle(pilot)
        assert lst.scope == "flagged" and lst.count == len(flagged)
        assert {(lst.row(k) or {})["item_id"] for k in range(lst.count)} == flagged
        assert f"Flagged items {len(flagged)}" in screen_text(app)
        first = (lst.row(0) or {})["item_id"]
        await pilot.press("enter")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, ItemScreen) and "flags" in screen_text(app)
        )
        text = screen_text(app)
        e = stored[first]
        assert "flags FLAGGED" in text
        assert f"Min-K% prob (mink_k {e['mink_k']})" in text and f"{e['min_k_prob']:.3f}" in text
        assert (
            f"≥ {MINK_THRESHOLD}" in text and "≥ 0.5" in text
        )  # the run's threshold, the default recall one
        lines = [
            ln
            for ln in text.splitlines()
            if "Min-K% prob (mink_k" in ln or "completion n-gram recall" in ln
        ]
        assert lines[0].rstrip().endswith("yes") and lines[1].rstrip().endswith("no")
