"""Pilot tests of the TUI on real DuckDB files: the run list, opening a run, live updates,
navigation between screens, literal display of item text, help and keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.widgets import DataTable

from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import CompareScreen, DashboardScreen, HelpScreen, HomeScreen, ItemScreen
from llmscope.tui.widgets import ItemList
from tests.helpers.tui import (
    TRICKY,
    add_suite,
    create_run,
    expected_accuracy,
    make_db,
    screen_text,
    settle,
    toy_items,
    toy_result,
    wait_until,
)
from tests.helpers.tui_pilot import home_screen, on_dashboard, press_settled, started


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_db(tmp_path / "t.duckdb", runs=(("run-a", "model-A", 0), ("run-b", "model-B", 13)))


async def test_home_lists_runs(db: Path) -> None:
    app = LlmscopeApp(db)
    async with started(app):
        t = home_screen(app).query_one("#runs", DataTable)
        assert t.row_count == 2
        row = [str(c) for c in t.get_row_at(0)]
        assert row[1:4] == ["run-a", "toy", "model-A"]
        assert row[4] == f"{expected_accuracy(12):.3f}"
        assert row[5:7] == ["24/24 100%", "completed"]
        assert row[7] == "2025-01-02 03:04:05"
        row_b = [str(c) for c in t.get_row_at(1)]
        assert row_b[4] == f"{expected_accuracy(12, shift=13):.3f}"
        # the suites shipped with llmscope are listed
        s = app.screen.query_one("#suites", DataTable)
        names = [str(s.get_row_at(i)[0]) for i in range(s.row_count)]
        assert "commonsense-sample" in names and "minimal-pairs" in names


async def test_open_run_shows_accuracy_and_back(db: Path) -> None:
    app = LlmscopeApp(db)
    async with on_dashboard(app) as pilot:
        text = screen_text(app)
        assert "24/24 results" in text
        assert f"accuracy {expected_accuracy(12):.3f}" in text
        assert isinstance(await press_settled(pilot, "escape"), HomeScreen)


async def test_dashboard_updates_while_rows_arrive(tmp_path: Path) -> None:
    path = tmp_path / "live.duckdb"
    with Store(path) as s:
        add_suite(s, 12)
        create_run(s, "run-live", 12, status="running")
    items = toy_items(12)
    app = LlmscopeApp(path, refresh_s=0.1)
    async with on_dashboard(app) as pilot:
        screen = app.screen
        assert "0/12 results" in screen_text(app)
        # rows written by this process's store (as an in-process run's writer thread does)
        store = app.handle.open_writer()  # as an in-process run does
        assert store is not None
        store.write_results(
            "run-live", [toy_result(it, i) for i, it in enumerate(items[:5])], start_seq=0
        )
        assert await wait_until(pilot, lambda: "5/12 results" in screen_text(app))
        right5 = sum(
            1
            for i in range(5)
            if (0.05 + (i * 37 % 81) / 100 > 0.85 - (i * 37 % 81) / 100) == (i % 2 == 0)
        )
        assert f"accuracy {right5 / 5:.3f}" in screen_text(app)
        store.write_results(
            "run-live", [toy_result(it, i) for i, it in enumerate(items) if i >= 5], start_seq=5
        )
        store.update_run("run-live", status="completed")
        assert await wait_until(pilot, lambda: "12/12 results" in screen_text(app))
        assert f"accuracy {expected_accuracy(12, ('q1',)):.3f}" in screen_text(app)
        # once completed, polling stops
        assert await wait_until(pilot, lambda: not screen.active)


async def test_item_drilldown_and_next_previous(db: Path) -> None:
    app = LlmscopeApp(db)
    async with on_dashboard(app) as pilot:
        lst = app.screen.query_one(ItemList)
        n_fail = lst.count
        assert n_fail >= 2
        first = lst.current_row()
        assert isinstance(await press_settled(pilot, "enter"), ItemScreen)
        text = screen_text(app)
        assert f"item {first['item_id']}" in text
        assert "prompt (exactly as rendered for the model)" in text
        assert "variant q1" in text and "variant q2" in text
        await press_settled(pilot, "n")
        second = lst.current_row()
        assert (second["item_id"], second["variant"]) != (first["item_id"], first["variant"])
        assert f"item {second['item_id']}" in screen_text(app)
        await press_settled(pilot, "p")
        assert f"item {first['item_id']}" in screen_text(app)
        assert isinstance(await press_settled(pilot, "escape"), DashboardScreen)


async def test_item_text_is_literal(tmp_path: Path) -> None:
    path = tmp_path / "tricky.duckdb"
    with Store(path) as s:
        items = add_suite(s, 6)
        create_run(s, "run-t", 6)
        # item 3 holds markup and an ANSI escape; make it wrong so it is listed
        r = toy_result(items[3], 3)
        r.correct, r.prediction = 0.0, "maybe"
        s.write_results("run-t", [r])
    app = LlmscopeApp(path)
    async with on_dashboard(app) as pilot:
        text = screen_text(app)
        assert "[bold]x[/]" in text  # not interpreted as markup in the list
        assert "\x1b" not in text and "\\x1b[31mred" in text
        assert isinstance(await press_settled(pilot, "enter"), ItemScreen)
        text = screen_text(app)
        assert "Tricky [bold]x[/] and \\x1b[31mred" in text
        assert "\x1b" not in text
        # the rendered cells carry no bold style from the item's markup
        lines = [
            s
            for s in app.screen._compositor.render_strips()
            if TRICKY.replace("\x1b", "\\x1b") in "".join(seg.text for seg in s)
        ]
        assert lines
        assert not any(seg.style and seg.style.bold for s in lines for seg in s)
        assert not any(
            seg.style and seg.style.color and seg.style.color.name == "red"
            for s in lines
            for seg in s
        )


async def test_help_and_mouse(db: Path) -> None:
    app = LlmscopeApp(db)
    async with started(app) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert re.search(r"space\s+mark a run for comparison", screen_text(app))
        await pilot.click("#help-close")
        await pilot.pause()
        assert isinstance(app.screen, HomeScreen)
        # footer lists the screen's keys
        assert "Compare" in screen_text(app) and "Help" in screen_text(app)
        # open the second run with the mouse: click selects, a second click opens
        await pilot.click("#runs", offset=(10, 2))
        await pilot.click("#runs", offset=(10, 2))
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        assert app.screen.run_id == "run-b"


async def test_compare_two_runs(db: Path) -> None:
    from llmscope.analysis.compare import mcnemar

    app = LlmscopeApp(db)
    async with started(app) as pilot:
        assert isinstance(await press_settled(pilot, "space", "down", "space", "c"), CompareScreen)

        # disagreements recomputed by hand from the generating rule
        def pred(i: int, shift: int) -> str:
            py = 0.05 + ((i * 37 + shift) % 81) / 100
            return "yes" if py > 0.9 - py else "no"

        gold = ["yes" if i % 2 == 0 else "no" for i in range(12)]
        a_right = [pred(i, 0) == gold[i] for i in range(12)]
        b_right = [pred(i, 13) == gold[i] for i in range(12)]
        b = sum(x and not y for x, y in zip(a_right, b_right, strict=True)) * 2  # two variants
        c = sum(y and not x for x, y in zip(a_right, b_right, strict=True)) * 2
        lst = app.screen.query_one("#dis", ItemList)
        assert lst.count == b + c
        text = screen_text(app)
        # Two prompt variants per item are dependent pairs: McNemar (which assumes independent
        # pairs) is not applied; the difference is (c - b) / 24 with a paired cluster bootstrap.
        assert f"Δacc {(c - b) / 24:+.3f}" in text
        assert f"McNemar b={b} c={c} p=- (not applicable" in text
        assert mcnemar(b, c).pvalue < 1  # the counts are the discordant pairs
        assert isinstance(await press_settled(pilot, "enter"), ItemScreen)
        text = screen_text(app)
        assert "run run-a" in text and "run run-b" in text


async def test_dashboard_sort_and_filters(db: Path) -> None:
    app = LlmscopeApp(db)
    async with started(app) as pilot:
        await press_settled(pilot, "down", "enter")  # run-b has more failing items
        lst = app.screen.query_one(ItemList)
        n = lst.count
        assert n > 2
        await pilot.press("s")  # confidence, highest first
        confs = [lst.row(i)["confidence"] for i in range(lst.count)]
        assert confs == sorted(confs, reverse=True)
        await pilot.press("s")  # distance to humans
        d = [lst.row(i)["distance"] for i in range(lst.count)]
        assert d == sorted(d, reverse=True)
        await pilot.press("g")  # first group
        g = lst.group_filter
        assert g is not None and all(lst.row(i)["group"] == g for i in range(lst.count))
        await pilot.press("g", "g", "g")  # back to all
        assert lst.group_filter is None and lst.count == n
        await pilot.press("f")
        assert all(lst.row(i)["confidence"] >= 0.5 for i in range(lst.count))
        assert f"Failing items {lst.count}" in screen_text(app)


async def test_view_with_run_argument_opens_it(db: Path) -> None:
    app = LlmscopeApp(db, run="run-b", watch=True)  # `llmscope view --run run-b`
    async with started(app):
        assert isinstance(app.screen, DashboardScreen) and app.screen.run_id == "run-b"
        assert f"accuracy {expected_accuracy(12, shift=13):.3f}" in screen_text(app)
