"""The failing-items list of a finished stored run pages from DuckDB (tui/pages.py,
Store.failing_*): same rows, order and filters as the in-memory list, checked against
orderings computed here from the generating rule."""

from __future__ import annotations

import math
from pathlib import Path

from llmscope.analysis.yesno import HUMAN_DISTANCE_SQL
from llmscope.engine.types import Result
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.pages import FailingSource
from llmscope.tui.widgets import ItemList
from tests.helpers.tui import (
    add_suite,
    create_run,
    p_yes_for,
    screen_text,
    settle,
    toy_items,
    toy_result,
)
from tests.helpers.tui_pilot import on_dashboard

N = 450  # more failing rows than one page (200), so paging is exercised


def _db(path: Path) -> Path:
    with Store(path) as s:
        items = add_suite(s, N)
        create_run(s, "big", N + 2)
        rows = [toy_result(it, i) for i, it in enumerate(items)]
        rows.append(Result(item_id=items[0].item_id, variant="q2", error="timeout"))
        rows.append(Result(item_id=items[1].item_id, variant="q2", error="bad response"))
        s.write_results("big", rows)
    return path


def _expected() -> list[dict]:
    """Failing rows in arrival order, from the generating rule of toy_result."""
    out = []
    items = toy_items(N)
    for i, it in enumerate(items):
        py = p_yes_for(i)
        pn = round(0.9 - py, 6)
        pred = "yes" if py > pn else "no"
        if pred != it.gold:
            human = 1 if it.gold == "yes" else 0
            out.append(
                {
                    "item_id": it.item_id,
                    "variant": "q1",
                    "group": it.fields["category"],
                    # |m-h|: P(yes) renormalised over yes/no (docs/METRICS.md human_distance)
                    "confidence": max(py, pn) / (py + pn),
                    "distance": abs(py / (py + pn) - human),
                    "seq": i,
                }
            )
    for k, it in enumerate(items[:2]):
        out.append(
            {
                "item_id": it.item_id,
                "variant": "q2",
                "group": it.fields["category"],
                "confidence": math.nan,
                "distance": math.nan,
                "seq": N + k,
            }
        )
    return out


def _key(r: dict) -> tuple[str, str]:
    return (r["item_id"], r["variant"])


def _desc(col: str):
    return lambda r: (-(r[col] if not math.isnan(r[col]) else -1.0), r["seq"])


def test_store_pages_match_rule(tmp_path: Path) -> None:
    path = _db(tmp_path / "p.duckdb")
    exp = _expected()
    with Store(path) as s:
        assert s.failing_count("big", group_field="category") == len(exp)
        for sort, key in (
            ("arrival", lambda r: r["seq"]),
            ("confidence", _desc("confidence")),
            ("distance", _desc("distance")),
            ("group", lambda r: (r["group"], r["seq"])),
        ):
            want = [_key(r) for r in sorted(exp, key=key)]
            got: list[tuple[str, str]] = []
            for off in range(0, len(exp) + 100, 100):
                page = s.failing_page(
                    "big", off, 100, sort=sort, group_field="category", distance=HUMAN_DISTANCE_SQL
                )
                got += list(zip(page["item_id"], page["variant"], strict=True))
            assert got == want, sort
            k = want[len(want) // 2]
            assert (
                s.failing_position(
                    "big", *k, sort=sort, group_field="category", distance=HUMAN_DISTANCE_SQL
                )
                == len(want) // 2
            )
        sub = [
            r
            for r in exp
            if r["group"] == "food"
            and (r["confidence"] if not math.isnan(r["confidence"]) else -1) >= 0.7
        ]
        assert s.failing_count("big", group_field="category", group="food", min_conf=0.7) == len(
            sub
        )
        page = s.failing_page("big", 0, 1000, group_field="category", group="food", min_conf=0.7)
        assert list(zip(page["item_id"], page["variant"], strict=True)) == [_key(r) for r in sub]
        err = s.failing_page("big", len(exp) - 2, 10, group_field="category")
        assert err["error"] == ["timeout", "bad response"] and err["confidence"] == [None, None]


async def test_dashboard_list_pages_from_duckdb(tmp_path: Path) -> None:
    path = _db(tmp_path / "d.duckdb")
    exp = _expected()
    app = LlmscopeApp(path)
    async with on_dashboard(app) as pilot:
        lst = app.screen.query_one(ItemList)
        assert isinstance(lst.source, FailingSource)  # a finished run: paged, not in memory
        assert lst.count == lst.n_total == len(exp)
        assert f"Failing items {len(exp)}" in screen_text(app)
        assert [_key(lst.row(i) or {}) for i in range(lst.count)] == [_key(r) for r in exp]
        assert len(lst._pages) <= ItemList.MAX_PAGES
        row = lst.row(0) or {}
        assert math.isclose(row["confidence"], exp[0]["confidence"], rel_tol=1e-12)
        # after a sort change the list is back at its top, not where the cursor was
        await pilot.press("end")
        await settle(pilot)  # pages drawn at the end were fetched by a worker
        last = _key(lst.current_row() or {})
        assert last == _key(exp[-1])
        shown = screen_text(app)
        assert exp[-3]["item_id"] in shown and " …" not in shown
        await pilot.press("s")  # confidence, highest first; the error rows (no value) last
        want = [_key(r) for r in sorted(exp, key=_desc("confidence"))]
        assert (
            lst.cursor == 0
            and lst.scroll_offset.y == 0
            and _key(lst.current_row() or {}) == want[0]
        )
        assert [_key(lst.row(i) or {}) for i in range(lst.count)] == want
        await pilot.press("f")  # confidence >= 0.5
        assert lst.count == sum(
            1 for r in exp if not math.isnan(r["confidence"]) and r["confidence"] >= 0.5
        )
        assert f"Failing items {lst.count} of {len(exp)}" in screen_text(app)
